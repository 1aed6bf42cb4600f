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
    # ELECTRA (korbert/electra.py): its discriminator fills the nsp_* fields; these are its logit and label at
    # every position of the batch, the label -1 where nothing is scored (padding, [CLS], [SEP]): the held-out AUC
    disc_logits: torch.Tensor | None = None
    disc_labels: torch.Tensor | None = None

    def totals(self) -> torch.Tensor:
        """float64 [6]: mlm loss sum/correct/count, nsp loss sum/correct/count (summed over batches for logs and evals)."""
        return torch.stack([self.mlm_loss_sum, self.mlm_correct, self.mlm_count, self.nsp_loss_sum, self.nsp_correct, self.nsp_count]).double()


ATTENTION = ("sdpa", "varlen", "flex")


def varlen_attention():
    """torch.nn.attention.varlen.varlen_attn (FlashAttention over cumulative sequence lengths, torch >= 2.10), or None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def flex_attention():
    """(flex_attention, create_block_mask) from torch.nn.attention.flex_attention, or None."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    return flex_attention, create_block_mask


def attention_path(want: str, device: torch.device, dtype: torch.dtype, dropout: float, training: bool = True) -> str:
    """`want` if this machine can run it with this attention dropout (see `KorBertForPreTraining`), else a one-line InputError."""
    if want not in ATTENTION:
        raise InputError(f"attention {want!r}: choose one of {', '.join(ATTENTION)}")
    if want != "sdpa" and dropout > 0:
        raise InputError(
            f"--attention {want} has no attention dropout: train with attention_probs_dropout_prob=0 "
            "(--override attention_probs_dropout_prob=0) or --attention sdpa"
        )
    if want == "varlen" and (device.type != "cuda" or varlen_attention() is None or dtype not in (torch.bfloat16, torch.float16)):
        raise InputError(f"--attention varlen needs torch >= 2.10 (torch.nn.attention.varlen), CUDA and bf16 (here: {device.type}, {dtype}, torch {torch.__version__})")
    if want == "flex" and (flex_attention() is None or (training and device.type != "cuda")):
        raise InputError(f"--attention flex needs torch.nn.attention.flex_attention and, to train, CUDA (here: {device.type}, torch {torch.__version__})")
    return want


def cu_seqlens_of(segments: torch.Tensor) -> torch.Tensor:
    """`korbert.data.cu_seqlens` from the segments column alone (for callers without the collate's column;
    eager only: its length depends on the data)."""
    r, t = segments.shape
    flat = segments.reshape(-1)
    start = torch.ones_like(flat, dtype=torch.bool)
    start[1:] = flat[1:] != flat[:-1]
    start[::t] = True  # every row starts a sequence
    idx = torch.nonzero(start).flatten()
    return torch.cat((idx, idx.new_tensor([r * t]))).to(torch.int32)


def run_layers(owner, layers, heads: int, x: torch.Tensor, segments: torch.Tensor, cu_seqlens: torch.Tensor | None, packed: bool) -> torch.Tensor:
    """BERT's post-LayerNorm layers (transformers' BertLayer, or ElectraLayer: the same modules) over `x`
    (R, T, H), each token attending to its own instance only, by `owner.attention` (sdpa, varlen or flex; see
    `KorBertForPreTraining`), with `owner.fused_qkv`; dropout when `owner.training`."""
    r, t, h = x.shape
    d = h // heads
    p_drop = layers[0].attention.self.dropout.p if owner.training and len(layers) else 0.0
    dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
    path = attention_path(owner.attention, x.device, dtype, p_drop, owner.training and torch.is_grad_enabled())
    if path == "varlen":
        cu = cu_seqlens if cu_seqlens is not None else cu_seqlens_of(segments)
    elif path == "flex":
        flex, block_mask = flex_attention()
        seg = segments
        mask = block_mask(lambda b, hd, q, k: seg[b, q] == seg[b, k], r, None, t, t, device=x.device)
    elif packed:  # each token attends to its own instance (padding to padding: no empty attention row)
        mask = segments[:, None, :, None] == segments[:, None, None, :]  # (R, 1, T, T) block-diagonal
    else:  # one instance per row: the key padding mask, broadcast over the queries
        mask = (segments > 0)[:, None, None, :]  # (R, 1, 1, T)
    for layer in layers:
        sa = layer.attention.self
        if owner.fused_qkv:
            w = torch.cat((sa.query.weight, sa.key.weight, sa.value.weight))
            b = torch.cat((sa.query.bias, sa.key.bias, sa.value.bias))
            q, k, v = F.linear(x, w, b).view(r, t, 3, heads, d).unbind(2)  # (R, T, heads, d) each
        else:
            q, k, v = (m(x).view(r, t, heads, d) for m in (sa.query, sa.key, sa.value))
        if path == "varlen":
            ctx = varlen_attention()(q.reshape(r * t, heads, d), k.reshape(r * t, heads, d), v.reshape(r * t, heads, d), cu, cu, t, t)
            ctx = ctx.reshape(r, t, h)
        else:
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (R, heads, T, d)
            if path == "flex":
                ctx = flex(q, k, v, block_mask=mask)
            else:
                ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p_drop)
            ctx = ctx.transpose(1, 2).reshape(r, t, h)
        so = layer.attention.output
        x = so.LayerNorm(so.dropout(so.dense(ctx)) + x)
        out = layer.output
        x = out.LayerNorm(out.dropout(out.dense(layer.intermediate.intermediate_act_fn(layer.intermediate.dense(x)))) + x)
    return x


class KorBertForPreTraining(BertForPreTraining):
    """BertForPreTraining whose `pretraining_forward` predicts the masked positions only.

    `forward` is the parent's (dense logits, for inspection and for the equivalence checks);
    the training loop calls `pretraining_forward` through `__call__` with `sparse=True` and a batch
    from `korbert.data.make_batch`. That forward runs the encoder itself, on the same modules, with
    attention over each instance only, by `attention` (an attribute; `korbert pretrain --attention`):
      sdpa    scaled_dot_product_attention with the dense mask (block-diagonal over packed rows, the key
              padding mask over one instance per row); the default: on an H200 it runs cuDNN's fused
              attention, faster than varlen for the shards' short instances (docs/pretraining.md)
      varlen  FlashAttention over the batch's `cu_seqlens` (torch.nn.attention.varlen, CUDA, bf16):
              the rows' tokens as one list cut into instances, each row's padding a sequence of its own
      flex    FlexAttention with a block mask of the segments (instances attend within themselves)
    Neither varlen nor flex has attention dropout, and flex trains on CUDA only. `fused_qkv` (off by default:
    no gain measured; a benchmark knob) runs Q, K and V as one matmul over the three weights concatenated
    (hidden x 3 hidden); the parameters stay three Linear layers, so the state dict and the export are unchanged."""

    attention = "sdpa"
    fused_qkv = False

    @property
    def embeddings(self):
        return self.bert.embeddings

    def forward(self, *args, sparse: bool = False, **kw):
        if not sparse:
            return super().forward(*args, **kw)
        return self.pretraining_forward(*args, **kw)

    def step_flops(self, cfg: BertConfig, tokens: float, attended: float, predicted: float, second: float) -> float:
        """korbert.model.step_flops (`second`: the NSP pairs, one per instance)."""
        return step_flops(cfg, tokens, attended, predicted, second)

    def encode(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor, position_ids: torch.Tensor, segments: torch.Tensor,
        cu_seqlens: torch.Tensor | None = None, packed: bool = True,
    ) -> torch.Tensor:
        """The encoder's last hidden state (R, T, H), each token attending to its own instance only
        (BERT's post-LayerNorm layers, the modules of `self.bert`; the pooler is the caller's)."""
        x = self.bert.embeddings(input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
        return run_layers(self, self.bert.encoder.layer, self.config.num_attention_heads, x, segments, cu_seqlens, packed)

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
        cu_seqlens: torch.Tensor | None = None,  # (S + 1,) int32: the attention sequences of the flat R x T tokens (korbert.data.cu_seqlens)
        mlm_norm: torch.Tensor | None = None,  # divide the summed MLM loss by this (default: its count)
        nsp_norm: torch.Tensor | None = None,
        packed: bool = True,  # rows may hold several instances (False: one per row, a cheaper mask)
    ) -> PretrainingOutput:
        last = self.encode(input_ids, token_type_ids, position_ids, segments, cu_seqlens, packed)
        seq = last.reshape(-1, last.size(-1))  # (R*T, H)
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


def encoder_macs(cfg, tokens: float, attended: float) -> float:
    """Multiply-adds of one forward pass of an encoder of `cfg`'s shape: its matmuls on every non-padding
    token, and attention scores over each token's own instance (`attended`: the sum over tokens of their
    instance's length)."""
    h, l = cfg.hidden_size, cfg.num_hidden_layers
    layer = 4 * h * h + 2 * h * cfg.intermediate_size  # QKV + output projections, the two FFN matmuls
    return l * layer * tokens + 2 * l * h * attended


def step_flops(cfg: BertConfig, tokens: float, attended: float, predicted: float, instances: float) -> float:
    """Training FLOPs (forward + backward = 3 x forward, 2 per multiply-add) of one step: the encoder
    (encoder_macs), and the MLM head (transform + the tied decoder, H x V) at the predicted positions only,
    plus the pooler + NSP at each [CLS]."""
    h, v = cfg.hidden_size, cfg.vocab_size
    return 6 * (encoder_macs(cfg, tokens, attended) + (h * h + h * v) * predicted + (h * h + 2 * h) * instances)
