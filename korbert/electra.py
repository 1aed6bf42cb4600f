"""ELECTRA pretraining (`korbert pretrain --objective electra`; Clark et al., 2020): replaced-token detection.

A small generator (a masked LM, `--generator-size` of the discriminator's hidden size, heads and FFN, the
same depth) fills the positions the shards' masking chose, whole-word and morpheme units included, by
sampling from its softmax (one uniform draw per position, the cumulative sum inverted: SAMPLER). The
discriminator reads the text with those samples in place and scores every real token, [CLS] and [SEP] and
padding left out: replaced (1) or original (0). A token the generator sampled right counts as original.
Loss = generator MLM + `--disc-weight` x discriminator loss, each a mean over the global batch's tokens, as
the loop normalizes BERT's.

The two are transformers' `ElectraForPreTraining` and `ElectraForMaskedLM` modules, so the export is
`save_pretrained` of each (korbert/checkpoint.py: final/ and final/generator/). They share one embeddings
module (token, position and type embeddings and their LayerNorm) of ELECTRA's `embedding_size` (the
discriminator's hidden size); the generator projects it to its own width (`embeddings_project`), as
`ElectraModel` does, and its output layer is the word embeddings, tied. The training forward runs the
layers itself (korbert.model.run_layers: attention within each packed instance, sdpa / varlen / flex).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from transformers import BertConfig, ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining

from corpus_tools.shard_format import special_mask_of
from korbert.model import IGNORE, PretrainingOutput, encoder_macs, run_layers


def discriminator_config(bert: BertConfig) -> ElectraConfig:
    """The discriminator's ElectraConfig: the shape of `bert` (from the size preset and --override)."""
    fields = {k: v for k, v in bert.to_dict().items() if k in ElectraConfig().to_dict() and k not in ("architectures", "model_type", "transformers_version")}
    return _electra(fields, bert.hidden_size, "ElectraForPreTraining")


def generator_config(disc: ElectraConfig, generator_size: float) -> ElectraConfig:
    """The generator's config for a discriminator's: `generator_size` x its hidden size, heads (at least one)
    and FFN, the same layers and embeddings (`embedding_size` = the discriminator's hidden size)."""
    heads = max(1, round(disc.num_attention_heads * generator_size))
    hidden = max(heads, round(disc.hidden_size * generator_size / heads) * heads)  # a multiple of its heads
    fields = {k: v for k, v in disc.to_dict().items() if k not in ("architectures", "model_type", "transformers_version")}
    return _electra({**fields, "hidden_size": hidden, "num_attention_heads": heads,
                     "intermediate_size": max(1, round(disc.intermediate_size * hidden / disc.hidden_size))}, disc.hidden_size, "ElectraForMaskedLM")


def _electra(fields: dict, embedding_size: int, arch: str) -> ElectraConfig:
    c = ElectraConfig(**{**fields, "embedding_size": embedding_size})
    c._attn_implementation = "sdpa"
    c.architectures = [arch]
    return c


class KorElectraForPreTraining(torch.nn.Module):
    """The generator and the discriminator of one ELECTRA run, one embeddings module between them.
    `forward(..., sparse=True)` takes a batch of korbert.data.make_batch (its NSP fields are ignored) and
    returns a korbert.model.PretrainingOutput: the generator's MLM in the mlm_* fields, the discriminator's
    replaced-token detection in the nsp_* fields (loss sum, correct, scored tokens)."""

    attention = "sdpa"
    fused_qkv = False

    def __init__(self, disc: ElectraConfig, gen: ElectraConfig, disc_weight: float):
        super().__init__()
        self.config = disc  # (what the loop reads: the discriminator's shape)
        self.discriminator = ElectraForPreTraining(disc)
        self.generator = ElectraForMaskedLM(gen)
        self.generator.electra.embeddings = self.discriminator.electra.embeddings  # one module: both losses train it
        self.generator.generator_lm_head.weight = self.embeddings.word_embeddings.weight  # tied, as ElectraForMaskedLM ties it
        self.disc_weight = disc_weight

    @property
    def embeddings(self):
        return self.discriminator.electra.embeddings

    def _encode(self, electra, input_ids, token_type_ids, position_ids, segments, cu_seqlens, packed) -> torch.Tensor:
        x = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids)
        if hasattr(electra, "embeddings_project"):
            x = electra.embeddings_project(x)
        return run_layers(self, electra.encoder.layer, electra.config.num_attention_heads, x, segments, cu_seqlens, packed)

    def forward(
        self, input_ids, token_type_ids, position_ids, segments, mlm_positions, mlm_labels, nsp_positions=None, nsp_labels=None,
        cu_seqlens=None, mlm_norm=None, nsp_norm=None, packed: bool = True, sparse: bool = True,
    ) -> PretrainingOutput:
        """`nsp_norm`: the discriminator's normalizer (the global batch's scored tokens, `counts[3]` of each
        make_batch; default: this batch's)."""
        r, t = input_ids.shape
        # the generator: its MLM at the masked positions
        g = self._encode(self.generator.electra, input_ids, token_type_ids, position_ids, segments, cu_seqlens, packed)
        g = g.reshape(r * t, -1).index_select(0, mlm_positions)
        logits = self.generator.generator_lm_head(self.generator.generator_predictions(g)).float()  # (M, V)
        log_probs = logits.log_softmax(-1)  # (cross-entropy's own first step, kept: the sample reads it too)
        mlm_sum = F.nll_loss(log_probs, mlm_labels, ignore_index=IGNORE, reduction="sum")
        m_valid = mlm_labels != IGNORE
        m = m_valid.sum().float()
        # a sample from its softmax at each of them, put in place of the masked token
        with torch.no_grad():
            sampled = sample_from(log_probs.detach())
            flat = input_ids.reshape(-1)
            original = flat.scatter(0, mlm_positions, torch.where(m_valid, mlm_labels, flat.index_select(0, mlm_positions)))
            corrupt = original.scatter(0, mlm_positions, torch.where(m_valid, sampled, original.index_select(0, mlm_positions)))
            labels = (corrupt != original).float()
            scored = ~special_mask_of(original)  # ([PAD] too: the padding; the collate counts the same: korbert.data.make_batch)
        # the discriminator: replaced or original, at every scored token
        d = self._encode(self.discriminator.electra, corrupt.view(r, t), token_type_ids, position_ids, segments, cu_seqlens, packed)
        d_logits = self.discriminator.discriminator_predictions(d.reshape(r * t, -1)).float()  # (R*T,)
        per_token = F.binary_cross_entropy_with_logits(d_logits, labels, reduction="none")
        d_sum = torch.where(scored, per_token, torch.zeros_like(per_token)).sum()
        n = scored.sum().float()
        loss = mlm_sum / (m.clamp(min=1) if mlm_norm is None else mlm_norm) + self.disc_weight * d_sum / (n.clamp(min=1) if nsp_norm is None else nsp_norm)
        with torch.no_grad():
            mlm_correct = ((logits.argmax(-1) == mlm_labels) & m_valid).sum()
            d_correct = (((d_logits > 0).float() == labels) & scored).sum()
        # held out, the logits and labels too (the AUC: korbert/heldout.py); not every training step
        auc_inputs = () if self.training else (d_logits.detach(), torch.where(scored, labels, torch.full_like(labels, -1.0)))
        return PretrainingOutput(loss, mlm_sum.detach(), mlm_correct, m, d_sum.detach(), d_correct, n, *auc_inputs)

    def parameters_of(self, part: str) -> int:
        """The parameters of the discriminator or the generator as exported (the shared embeddings in each)."""
        from korbert.model import count_parameters

        return count_parameters(getattr(self, part))

    def step_flops(self, disc: ElectraConfig, tokens: float, attended: float, predicted: float, second: float) -> float:
        """Training FLOPs of one step (forward + backward = 3 x forward, 2 per multiply-add), as korbert.model.step_flops
        counts BERT's: both encoders (korbert.model.encoder_macs), the generator's projection from the shared
        embeddings (E x h) on every token and its head (h x E + E x V) at the predicted positions, the discriminator's
        head (H x H + H) on every token (so `second`, the tokens it scores, does not enter: the head runs on all)."""
        gen = self.generator.config
        e, g, h = gen.embedding_size, gen.hidden_size, disc.hidden_size
        heads = (e * g if e != g else 0) * tokens + (g * e + e * gen.vocab_size) * predicted + (h * h + h) * tokens
        return 6 * (encoder_macs(disc, tokens, attended) + encoder_macs(gen, tokens, attended) + heads)

    def exported(self) -> tuple[ElectraForPreTraining, ElectraForMaskedLM]:
        """Standalone copies of the two (each with its own embeddings), for save_pretrained."""
        disc = ElectraForPreTraining(copy.deepcopy(self.discriminator.config))
        disc.load_state_dict(self.discriminator.state_dict())
        gen = ElectraForMaskedLM(copy.deepcopy(self.generator.config))
        gen.load_state_dict(self.generator.state_dict())
        gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
        return disc, gen


SAMPLER = "inverse-cdf"  # how sample_from draws (a record for what timed or trained with it: benchmarks/electra_vs_mlm.py)


def sample_from(log_probs: torch.Tensor) -> torch.Tensor:
    """One index per row of (M, V) log-probabilities, drawn from their softmax: each row's cumulative sum
    inverted at a uniform draw in (0, the row's total], so an entry whose probability underflows to 0 is
    never drawn (exactly so where the sum is monotone, as on the CPU; a GPU's parallel scan may be off by a
    rounding step). One uniform per row: the Gumbel-max trick and torch.multinomial draw one per entry,
    several passes over (M, V) more (docs/results.md)."""
    cdf = log_probs.exp().cumsum_(-1)
    u = (1 - torch.rand(cdf.shape[0], 1, dtype=cdf.dtype, device=cdf.device)).mul_(cdf[:, -1:])
    return torch.searchsorted(cdf, u).squeeze(1)


def check_settings(cfg, mapped_ids: bool) -> None:
    """What an ELECTRA run refuses, in one line each (korbert/pretrain.py, and the recipe before its stages)."""
    from corpus_tools.text import InputError

    if cfg.init_from:
        raise InputError(f"--init-from {cfg.init_from}: continued pretraining is BERT's (--objective mlm or mlm+nsp); ELECTRA starts from scratch")
    if mapped_ids:
        raise InputError("--objective electra: the shards' tokenizer keeps its specials at other ids than korbert's (an id map); "
                         "ELECTRA trains with korbert's own tokenizers (korbert vocab)")
    if not 0 < cfg.generator_size <= 1 or cfg.disc_weight < 0:
        raise InputError(f"--generator-size {cfg.generator_size:g} must be in (0, 1] and --disc-weight {cfg.disc_weight:g} >= 0")


def auc(logits: torch.Tensor, labels: torch.Tensor) -> float | None:
    """ROC AUC of the discriminator's logits for replaced (1) against original (0) tokens (-1: not scored),
    the Mann-Whitney statistic with ties counted half; None without both classes."""
    keep = labels >= 0
    x, y = logits[keep].double(), labels[keep]
    pos, neg = int((y == 1).sum()), int((y == 0).sum())
    if not pos or not neg:
        return None
    order = torch.argsort(x)
    xs = x[order]
    ranks = torch.empty_like(xs)
    _, inverse, counts = torch.unique_consecutive(xs, return_inverse=True, return_counts=True)  # ties: their mean rank
    ends = torch.cumsum(counts, 0).double()
    ranks[order] = (ends - (counts.double() - 1) / 2)[inverse]
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))
