"""The held-out evaluation during pretraining: MLM loss and accuracy and NSP (or ELECTRA's discriminator) figures over fixed
batches of the shards' valid split, and the batch keys the model takes (`MODEL_INPUTS`)."""

from __future__ import annotations

MODEL_INPUTS = (
    "input_ids", "token_type_ids", "position_ids", "segments", "mlm_positions", "mlm_labels", "nsp_positions", "nsp_labels", "cu_seqlens",
)


def evaluate(model, batches: list[dict], device, autocast, second: str | None = "nsp") -> dict:
    """Held-out MLM loss (per predicted token) and accuracy over fixed batches, and the second objective's:
    `second` "nsp" (NSP loss and accuracy), "disc" (ELECTRA: the mlm_* figures are its generator's; its
    discriminator's loss per scored token, accuracy, AUC of replaced against original tokens and the share
    replaced) or None."""
    import torch

    if not batches:
        return {}
    was_training = model.training
    model.eval()
    tot = torch.zeros(6, dtype=torch.float64, device=device)
    logits, labels = [], []
    with torch.no_grad(), autocast():
        for b in batches:
            o = model(**{k: b[k].to(device, non_blocking=True) for k in MODEL_INPUTS}, packed=b["packed"], sparse=True)
            tot += o.totals()
            if o.disc_logits is not None:
                logits.append(o.disc_logits.float().cpu()), labels.append(o.disc_labels.cpu())
    model.train(was_training)
    ml, mc, mn, nl, nc, nn_ = tot.tolist()
    out = {"mlm_loss": ml / max(mn, 1), "mlm_acc": mc / max(mn, 1), "instances": sum(len(b["nsp_positions"]) for b in batches)}
    if second and nn_:  # (no labels to score, e.g. the long split under --no-long-nsp: no figure, not a 0)
        out.update({f"{second}_loss": nl / nn_, f"{second}_acc": nc / nn_})
    if second == "disc":
        from korbert.electra import auc

        y = torch.cat(labels)
        out.update(disc_auc=auc(torch.cat(logits), y), replaced=float((y == 1).sum() / max(int((y >= 0).sum()), 1)))
    return out
