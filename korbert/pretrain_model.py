"""The model and optimizer a pretraining run trains (korbert/pretrain.py's setup): BERT for pretraining,
seeded, from --init-from's weights or a checkpoint's, its NSP parts frozen under --objective mlm, AdamW
without decay on biases and LayerNorm weights, wrapped for the loop (korbert.runtime: DDP, compile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from korbert.checkpoint import load_init_weights
from korbert.runtime import wrap_for_training

if TYPE_CHECKING:  # annotations only: no import at run time
    from korbert.pretrain_config import PretrainConfig

UNTRAINED_WITHOUT_NSP = ("bert.pooler.", "cls.seq_relationship.")  # --objective mlm: exported as initialized


def build_model(cfg: PretrainConfig, mcfg, state: dict | None, init: dict | None, tok, id_map, precision: str, fixed: bool, dist, dev):
    """-> (model, the module the loop calls, optimizer). `state`: a checkpoint to resume (its weights and
    optimizer); `init`: korbert.checkpoint.init_source's record of --init-from (its "fresh" list is set here)."""
    import torch

    from korbert.model import KorBertForPreTraining, bf16_residual_stream

    cuda = dev.type == "cuda"
    torch.manual_seed(cfg.seed)
    if cfg.objective == "electra":  # the generator and the discriminator (korbert/electra.py)
        from korbert.electra import KorElectraForPreTraining, generator_config

        model = KorElectraForPreTraining(mcfg, generator_config(mcfg, cfg.generator_size), cfg.disc_weight)
    else:
        model = KorBertForPreTraining(mcfg)
    model.attention = cfg.attention
    if precision == "bf16-stream":
        bf16_residual_stream(model)
    if state is None and init is not None:  # every weight the folder has; its missing heads start fresh (seeded)
        init["fresh"] = load_init_weights(model, init["folder"])
        if id_map is not None:  # its vocabulary rows in the shards' order (the export moves them back)
            from korbert.foreign import own_ids, reorder_vocab

            reorder_vocab(model, own_ids(tok, mcfg.vocab_size))
    if cfg.objective == "mlm":  # MLM only: the pooler and the NSP head get no gradient and stay as initialized
        for n, p in model.named_parameters():
            if n.startswith(UNTRAINED_WITHOUT_NSP):
                p.requires_grad_(False)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in params if p.dim() >= 2 and "LayerNorm" not in n]
    no_decay = [p for n, p in params if not (p.dim() >= 2 and "LayerNorm" not in n)]
    model.to(dev)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6, fused=cuda or None,
    )
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    wrapped = wrap_for_training(model, cfg, fixed, dist, dev)
    return model, wrapped, opt

