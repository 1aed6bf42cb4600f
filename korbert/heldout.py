"""The held-out evaluation during pretraining: MLM loss and accuracy and NSP accuracy over fixed
batches of the shards' valid split, and the batch keys the model takes (`MODEL_INPUTS`)."""

from __future__ import annotations

MODEL_INPUTS = (
    "input_ids", "token_type_ids", "position_ids", "segments", "mlm_positions", "mlm_labels", "nsp_positions", "nsp_labels", "cu_seqlens",
)


def evaluate(model, batches: list[dict], device, autocast, nsp: bool = True) -> dict:
    """Held-out MLM loss (per predicted token), MLM accuracy and NSP accuracy over fixed batches."""
    import torch

    if not batches:
        return {}
    was_training = model.training
    model.eval()
    tot = torch.zeros(6, dtype=torch.float64, device=device)
    with torch.no_grad(), autocast():
        for b in batches:
            o = model(**{k: b[k].to(device, non_blocking=True) for k in MODEL_INPUTS}, packed=b["packed"], sparse=True)
            tot += o.totals()
    model.train(was_training)
    ml, mc, mn, nl, nc, nn_ = tot.tolist()
    out = {"mlm_loss": ml / max(mn, 1), "mlm_acc": mc / max(mn, 1), "instances": sum(len(b["nsp_positions"]) for b in batches)}
    if nsp:
        out.update(nsp_loss=nl / max(nn_, 1), nsp_acc=nc / max(nn_, 1))
    return out
