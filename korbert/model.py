"""The model: transformers' BERT with pretraining heads, MLM logits computed at masked positions only.

`KorBertForPreTraining` *is* a `BertForPreTraining` (same modules, same parameter names, tied
embeddings), so export is `save_pretrained` and plain transformers loads the result. Only the
training forward differs: the vocabulary projection (H x V per position: most of a small BERT's
work at V = 32k) runs on the ~15% of positions that carry an MLM label, not on every position.
"""

from __future__ import annotations

import dataclasses
import json

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForPreTraining

from corpus_tools.text import InputError

IGNORE = -100

# name: (layers, hidden, heads); intermediate = 4 * hidden, as in BERT and Turc et al.'s small BERTs
PRESETS = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}


def parse_overrides(items: list[str]) -> dict:
    """--override key=value ... -> {key: value}; values are JSON where they parse (4, 0.1, true), else strings."""
    out = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"--override {item!r}: expected key=value")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def bert_config(size: str, vocab_size: int, max_seq_len: int = 128, overrides: dict | None = None) -> BertConfig:
    """A BertConfig for a size preset; `overrides` sets any BertConfig field (e.g. hidden_dropout_prob=0)."""
    if size not in PRESETS:
        raise ValueError(f"unknown model size {size!r}: choose one of {', '.join(PRESETS)}")
    layers, hidden, heads = PRESETS[size]
    fields = dict(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=4 * hidden, max_position_embeddings=max(512, max_seq_len), type_vocab_size=2,
        pad_token_id=0,
    )
    for k, v in (overrides or {}).items():
        if k not in BertConfig().to_dict() and k not in fields:
            raise ValueError(f"--override {k}: not a BertConfig field")
        fields[k] = v
    cfg = BertConfig(**fields)
    cfg._attn_implementation = "sdpa"  # torch's fused attention (flash / memory-efficient kernels on GPU)
    cfg.architectures = ["BertForPreTraining"]
    return cfg


@dataclasses.dataclass
class PretrainingOutput:
    loss: torch.Tensor  # the loss to backpropagate: (mlm_sum / mlm_norm) + (nsp_sum / nsp_norm)
    mlm_loss_sum: torch.Tensor  # summed over the predicted positions (fp32 scalar)
    mlm_correct: torch.Tensor  # predicted positions predicted right
    mlm_count: torch.Tensor  # predicted positions
    nsp_loss_sum: torch.Tensor
    nsp_correct: torch.Tensor
    nsp_count: torch.Tensor

    def totals(self) -> torch.Tensor:
        """float64 [6]: mlm loss sum/correct/count, nsp loss sum/correct/count (summed over batches for logs and evals)."""
        return torch.stack([self.mlm_loss_sum, self.mlm_correct, self.mlm_count, self.nsp_loss_sum, self.nsp_correct, self.nsp_count]).double()


class KorBertForPreTraining(BertForPreTraining):
    """BertForPreTraining whose `pretraining_forward` predicts the masked positions only.

    `forward` is the parent's (dense logits, for inspection and for the equivalence checks);
    the training loop calls `pretraining_forward` through `__call__` with `sparse=True` and a batch
    from `korbert.data.make_batch`."""

    def forward(self, *args, sparse: bool = False, **kw):
        if not sparse:
            return super().forward(*args, **kw)
        return self.pretraining_forward(*args, **kw)

    def pretraining_forward(
        self,
        input_ids: torch.Tensor,  # (R, T) int64
        token_type_ids: torch.Tensor,  # (R, T) 0 = segment A, 1 = segment B
        position_ids: torch.Tensor,  # (R, T) position within each instance (packed rows restart at 0)
        segments: torch.Tensor,  # (R, T) 1, 2, ... = instance within the row, 0 = padding
        mlm_positions: torch.Tensor,  # (M,) flat positions r*T+t to predict
        mlm_labels: torch.Tensor,  # (M,) their original ids; -100 = a padding entry
        nsp_positions: torch.Tensor,  # (N,) flat positions of each instance's [CLS]
        nsp_labels: torch.Tensor,  # (N,) 0 = IsNext, 1 = random B; -100 = a padding entry
        mlm_norm: torch.Tensor | None = None,  # divide the summed MLM loss by this (default: its count)
        nsp_norm: torch.Tensor | None = None,
        packed: bool = True,  # rows may hold several instances (False: one per row, a cheaper mask)
    ) -> PretrainingOutput:
        if packed:  # each token attends to its own instance (padding to padding: no empty attention row)
            attend = segments[:, None, :, None] == segments[:, None, None, :]  # (R, 1, T, T) block-diagonal
        else:  # one instance per row: the key padding mask, broadcast over the queries
            attend = (segments > 0)[:, None, None, :]  # (R, 1, 1, T)
        out = self.bert(
            input_ids, attention_mask=attend, token_type_ids=token_type_ids, position_ids=position_ids, return_dict=True
        )
        seq = out.last_hidden_state.reshape(-1, out.last_hidden_state.size(-1))  # (R*T, H)
        logits = self.cls.predictions(seq.index_select(0, mlm_positions)).float()  # (M, V): transform + tied decoder
        mlm_sum = F.cross_entropy(logits, mlm_labels, ignore_index=IGNORE, reduction="sum")
        pooler = self.bert.pooler
        pooled = pooler.activation(pooler.dense(seq.index_select(0, nsp_positions)))  # BERT's pooler at every [CLS]
        nsp_logits = self.cls.seq_relationship(pooled).float()  # (N, 2)
        nsp_sum = F.cross_entropy(nsp_logits, nsp_labels, ignore_index=IGNORE, reduction="sum")
        m_valid, b_valid = mlm_labels != IGNORE, nsp_labels != IGNORE
        m, b = m_valid.sum().float(), b_valid.sum().float()
        loss = mlm_sum / (m.clamp(min=1) if mlm_norm is None else mlm_norm) + nsp_sum / (b.clamp(min=1) if nsp_norm is None else nsp_norm)
        with torch.no_grad():
            mlm_correct = ((logits.argmax(-1) == mlm_labels) & m_valid).sum()
            nsp_correct = ((nsp_logits.argmax(-1) == nsp_labels) & b_valid).sum()
        return PretrainingOutput(loss, mlm_sum.detach(), mlm_correct, m, nsp_sum.detach(), nsp_correct, b)


class Bf16StreamLayerNorm(torch.nn.LayerNorm):
    """LayerNorm that, under bf16 autocast, returns bf16 (statistics still in fp32 inside the kernel).

    Under autocast BERT's residual stream (each LayerNorm's output, added to the next sub-layer's output)
    stays fp32 between the bf16 matmuls: CUDA's autocast runs layer_norm in fp32 and returns fp32, and
    on any device the embeddings' sum is fp32. So every add, dropout and LayerNorm moves 4 bytes per value
    forward and backward. With this, it moves 2, as in Megatron-style bf16 training. The weights, the
    optimizer and the losses stay fp32 (the LayerNorms' own weight gradients arrive through bf16 before
    they are accumulated in fp32). Same parameters, same state dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_autocast_enabled(x.device.type):
            return super().forward(x)
        dt = torch.get_autocast_dtype(x.device.type)
        with torch.autocast(x.device.type, enabled=False):
            return F.layer_norm(x.to(dt), self.normalized_shape, self.weight.to(dt), self.bias.to(dt), self.eps)


def bf16_residual_stream(model: torch.nn.Module) -> torch.nn.Module:
    """Every LayerNorm of `model` becomes a Bf16StreamLayerNorm (in place; --precision bf16-stream)."""
    for m in model.modules():
        if type(m) is torch.nn.LayerNorm and m.elementwise_affine and m.bias is not None:  # BERT's all are
            m.__class__ = Bf16StreamLayerNorm
    return model


def count_parameters(model: torch.nn.Module, embeddings: bool = True) -> int:
    """Parameters counted once (tied decoder weight shared with the word embeddings)."""
    seen, n = set(), 0
    for name, p in model.named_parameters():
        if id(p) in seen or (not embeddings and "embeddings" in name):
            continue
        seen.add(id(p))
        n += p.numel()
    return n


def step_flops(cfg: BertConfig, tokens: float, attended: float, predicted: float, instances: float) -> float:
    """Training FLOPs (forward + backward = 3 x forward, 2 per multiply-add) of one step: the
    encoder's matmuls on every non-padding token, attention scores over each token's own instance
    (`attended`: the sum over tokens of their instance's length), and the MLM head (transform +
    the tied decoder, H x V) at the predicted positions only, plus the pooler + NSP at each [CLS]."""
    h, l, v = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    layer = 4 * h * h + 2 * h * cfg.intermediate_size  # QKV + output projections, the two FFN matmuls
    return 6 * (l * layer * tokens + 2 * l * h * attended + (h * h + h * v) * predicted + (h * h + 2 * h) * instances)
