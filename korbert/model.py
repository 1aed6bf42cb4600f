"""The model: transformers' BERT with pretraining heads, MLM logits computed at masked positions only.

`KorBertForPreTraining` *is* a `BertForPreTraining` (same modules, same parameter names, tied
embeddings), so export is `save_pretrained` and plain transformers loads the result. Only the
training forward differs: the vocabulary projection (H x V per position: most of a small BERT's
work at V = 32k) runs on the ~15% of positions that carry an MLM label, not on every position.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForPreTraining

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
    mlm_loss_sum: torch.Tensor  # summed over the masked positions (fp32 scalar)
    mlm_correct: torch.Tensor  # masked positions predicted right
    mlm_count: torch.Tensor  # masked positions
    nsp_loss_sum: torch.Tensor
    nsp_correct: torch.Tensor
    nsp_count: torch.Tensor


class KorBertForPreTraining(BertForPreTraining):
    """BertForPreTraining whose `pretraining_forward` predicts masked positions only.

    `forward` is the parent's (dense logits, for inspection and for the equivalence checks);
    the training loop calls `pretraining_forward` through `__call__` with `sparse=True`."""

    def forward(self, *args, sparse: bool = False, mlm_norm=None, nsp_norm=None, **kw):
        if not sparse:
            return super().forward(*args, **kw)
        return self.pretraining_forward(mlm_norm=mlm_norm, nsp_norm=nsp_norm, **kw)

    def pretraining_forward(
        self,
        input_ids: torch.Tensor,  # (B, T) int64
        attention_mask: torch.Tensor,  # (B, T) 1 = token, 0 = padding
        token_type_ids: torch.Tensor,  # (B, T) 0 = segment A, 1 = segment B
        labels: torch.Tensor,  # (B, T) original id at masked positions, -100 elsewhere
        next_sentence_label: torch.Tensor,  # (B,) 0 = IsNext, 1 = random B
        mlm_norm: float | torch.Tensor | None = None,  # divide the summed MLM loss by this (default: masked count)
        nsp_norm: float | torch.Tensor | None = None,
    ) -> PretrainingOutput:
        out = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True)
        seq, pooled = out.last_hidden_state, out.pooler_output  # (B, T, H), (B, H)
        flat = labels.view(-1)
        where = (flat != IGNORE).nonzero().squeeze(1)  # (M,) masked positions of the flattened batch
        h = seq.reshape(-1, seq.size(-1)).index_select(0, where)  # (M, H)
        target = flat.index_select(0, where)  # (M,)
        logits = self.cls.predictions(h).float()  # (M, V): transform + tied decoder + bias
        mlm_sum = F.cross_entropy(logits, target, reduction="sum")
        nsp_logits = self.cls.seq_relationship(pooled).float()  # (B, 2)
        nsp_sum = F.cross_entropy(nsp_logits, next_sentence_label, reduction="sum")
        m = torch.tensor(float(target.numel()), device=h.device)
        b = torch.tensor(float(next_sentence_label.numel()), device=h.device)
        loss = mlm_sum / (m.clamp(min=1) if mlm_norm is None else mlm_norm) + nsp_sum / (b if nsp_norm is None else nsp_norm)
        with torch.no_grad():
            mlm_correct = (logits.argmax(-1) == target).sum()
            nsp_correct = (nsp_logits.argmax(-1) == next_sentence_label).sum()
        return PretrainingOutput(loss, mlm_sum.detach(), mlm_correct, m, nsp_sum.detach(), nsp_correct, b)


def count_parameters(model: torch.nn.Module, embeddings: bool = True) -> int:
    """Parameters counted once (tied decoder weight shared with the word embeddings)."""
    seen, n = set(), 0
    for name, p in model.named_parameters():
        if id(p) in seen or (not embeddings and "embeddings" in name):
            continue
        seen.add(id(p))
        n += p.numel()
    return n


def flops_per_token(cfg: BertConfig, seq_len: float, n_params: int) -> float:
    """Training FLOPs per token: 6 N (forward + backward matmuls) + 12 L H T (attention scores)."""
    return 6 * n_params + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len
