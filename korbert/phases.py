"""What a pretraining run reads: its phases, each a shards folder with its reader, batch plan, row
length and fixed shapes. The first phase is --shards; BERT's second phase (--long-shards, the last
--long-phase of the budget) reads longer instances of the same corpus with the same tokens per step.
Also the checks a long-shards folder must pass, the corpus record the model card lists, and the copy
of the trained positions into the long phase's new ones (--long-init copy)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from corpus_tools.artifacts import read_manifest
from corpus_tools.text import InputError
from korbert.pretrain_config import PretrainConfig
from korbert.schedule import long_phase_steps

# shards settings both phases share: the objective's inputs and how a one-sentence chunk is paired. How instances
# are made may differ: --instances packed long shards fill every row after document instances at the short length
SAME_IN_BOTH = ("nsp", "masking", "mask_prob", "mask_unit", "single_sentence")


@dataclass
class Phase:
    """A stretch of pretraining on one shards folder: its reader, batch plan, row length, fixed counts."""

    reader: object
    plan: object
    max_len: int
    fixed: tuple[int, int] | None


def input_ids(manifest: dict) -> list:
    """A shards folder's inputs by content (or a model card's corpus record's): (sha256, first_documents)
    of each file, sorted."""
    return sorted((i["sha256"], i.get("first_documents") or 0) for i in manifest["inputs"])


def describe_inputs(manifest: dict) -> str:
    return ", ".join(Path(i["path"]).name + (f"@{i['first_documents']}" if i.get("first_documents") else "") for i in manifest["inputs"])


def corpus_record(manifest: dict) -> dict:
    """What a model card says one shards folder trained on: its input files and counts."""
    return {
        "inputs": [{"file": Path(i["path"]).name, "bytes": i["bytes"], "sha256": i["sha256"],
                    **({"first_documents": i["first_documents"]} if i.get("first_documents") else {})} for i in manifest["inputs"]],
        "documents": manifest["counts"].get("documents_used"), "train_instances": manifest["counts"]["train"]["instances"],
        "train_tokens": manifest["counts"]["train"]["tokens"], "max_seq_len": manifest["config"]["max_seq_len"],
        "instances": manifest["config"].get("instances", "document"),
        **({"eval_guard": manifest["eval_guard"], "eval_text": manifest["counts"].get("eval_text", {})} if manifest.get("eval_guard") else {}),
    }


def long_shards_manifest(cfg: PretrainConfig, sm: dict) -> dict:
    """--long-shards' manifest, checked against --shards' (`sm`): one tokenizer, longer rows, the same
    input files (unless --long-other-inputs) and the same instance settings; a long phase of >= 1 step."""
    where = f"--long-shards {cfg.long_shards}"
    try:
        lm = read_manifest(cfg.long_shards, "shards")
    except (FileNotFoundError, ValueError) as e:
        raise InputError(f"{where}: {e}") from None
    if lm["tokenizer_hash"] != sm["tokenizer_hash"]:
        raise InputError(f"{where}: made with tokenizer {lm['tokenizer_hash'][:12]}, --shards with {sm['tokenizer_hash'][:12]}: build both with one tokenizer")
    if lm["config"]["max_seq_len"] <= sm["config"]["max_seq_len"]:
        raise InputError(f"{where}: max_seq_len {lm['config']['max_seq_len']} is not longer than --shards' {sm['config']['max_seq_len']}")
    if not 0 < cfg.long_phase < 1:
        raise InputError(f"--long-phase must be in (0, 1), got {cfg.long_phase}")
    if not 0 <= cfg.long_warmup < 1:
        raise InputError(f"--long-warmup must be in [0, 1) (a share of the long phase), got {cfg.long_warmup}")
    if not cfg.long_nsp and cfg.objective != "mlm+nsp":
        raise InputError(f"--no-long-nsp: --objective {cfg.objective} trains no NSP to turn off")
    if cfg.long_lr < 0:
        raise InputError(f"--long-lr must be >= 0 (0: --lr), got {cfg.long_lr}")
    if cfg.max_steps > 0 and long_phase_steps(cfg.max_steps, cfg.long_phase) == 0:
        raise InputError(f"--long-phase {cfg.long_phase} of --max-steps {cfg.max_steps} is less than one step: the long phase would never start")
    if not cfg.long_other_inputs and input_ids(lm) != input_ids(sm):
        raise InputError(
            f"{where}: built from other input files than --shards ({describe_inputs(lm)} against {describe_inputs(sm)}); "
            "build both from one corpus, or pass --long-other-inputs"
        )
    long_guard, short_guard = lm.get("eval_guard"), sm.get("eval_guard")
    if None not in (long_guard, short_guard) and long_guard != short_guard:  # (shards built before korbert recorded it: not compared)
        def said(g: dict) -> str:
            files = [k for k in ("nsmc_test", "korquad", "klue") if g.get(k)]
            return f"{g.get('policy', '?')} the text of {'+'.join(files) or 'no evaluation file'}"

        raise InputError(f"{where}: its evaluation-text guard ({said(long_guard)}) is not --shards' ({said(short_guard)}): "
                         "build both with the same evaluation files and --keep-eval-text setting")
    differ = [k for k in SAME_IN_BOTH if lm["config"].get(k) != sm["config"].get(k)]
    if differ:
        raise InputError(f"{where}: built with other {', '.join('--' + k.replace('_', '-') for k in differ)} than --shards")
    return lm


def open_readers(cfg: PretrainConfig, sm: dict, lm: dict | None, dist) -> tuple:
    """(train, valid, long_train, long_valid) readers (the long ones None without --long-shards); every
    rank hashes 1/world of the training files (one rank hashing them all can outlast NCCL's timeout)."""
    from corpus_tools.shard_format import open_shards, verify_shards

    readers = []
    for folder, flag in ((cfg.shards, "--shards"), (cfg.long_shards, "--long-shards")):
        try:
            readers += [open_shards(folder, sm["tokenizer_hash"], split, verify=False) if folder else None for split in ("train", "valid")]
        except ValueError as e:
            raise InputError(f"{flag} {folder}: {e}") from None
    mine = verify_shards(cfg.shards, sm, "train", dist.rank, dist.world)
    if lm is not None:
        mine += verify_shards(cfg.long_shards, lm, "train", dist.rank, dist.world)
    bad = sum(dist.gather(mine), [])
    if bad:
        raise InputError(f"--shards: {bad[0]}{f' (and {len(bad) - 1} more)' if len(bad) > 1 else ''}")
    for reader in readers:
        if reader is not None and cfg.mask_prob:
            reader.mask_config = dataclasses.replace(reader.mask_config, mask_prob=cfg.mask_prob)
    return tuple(readers)


def build_phases(cfg: PretrainConfig, readers: list[tuple], parts: int, fixed: bool) -> list[Phase]:
    """One phase per (reader, max_len, where) given. The long phase keeps the real tokens per step: a token
    budget holds for it as it is; under a row budget it takes as many rows as carry the short phase's mean
    real tokens per step (fewer, longer rows)."""
    from korbert.data import BatchPlan, fixed_counts, instance_lengths, row_tokens

    phases, short_tokens = [], 0.0
    for reader, max_len, where in readers:
        lengths = instance_lengths(reader)
        rows = cfg.batch_size * parts
        if not cfg.tokens_per_batch:
            per_row = row_tokens(lengths, max_len, cfg.pack, cfg.seed)
            if short_tokens:
                rows = max(parts, round(short_tokens / per_row / parts) * parts)
            else:
                short_tokens = rows * per_row
        budget = {"tokens_per_step": cfg.tokens_per_batch} if cfg.tokens_per_batch else {"rows_per_step": rows}
        try:
            # one plan for the sampler (which runs ahead: prefetch) and the loop (token counts); it keeps two epochs
            plan = BatchPlan(lengths, cfg.seed, max_len, pack=cfg.pack, parts=parts, buckets=cfg.compile or fixed, **budget)
        except ValueError as e:
            raise InputError(f"{where}: {e}") from None
        # (predicted tokens, [CLS]) entries per micro-batch under fixed shapes: from the plan, the same on every rank
        counts = fixed_counts(plan, reader.mask_config.mask_prob, parts) if fixed else None
        phases.append(Phase(reader, plan, max_len, counts))
    return phases


def tile_positions(model, short_len: int, long_len: int) -> None:
    """--long-init copy, at the switch: position rows short_len..long_len-1 become the trained rows 0..short_len-1,
    tiled (row i gets row i % short_len), as Longformer started its new positions. Rows below short_len, and so
    any input of at most short_len tokens, are unchanged."""
    import torch

    rows = model.embeddings.position_embeddings.weight  # (ELECTRA's: the one module both encoders share)
    with torch.no_grad():
        for start in range(short_len, min(long_len, rows.shape[0]), short_len):
            n = min(short_len, long_len - start, rows.shape[0] - start)
            rows[start:start + n] = rows[:n]


def long_phase_record(cfg: PretrainConfig, short_len: int, lr_at_switch: float | None) -> dict:
    """What final/manifest.json and the card say of the long phase's settings (`lr_at_switch`: the shared
    schedule's lr where the phase began, None if it has not)."""
    if cfg.long_schedule == "own":
        lr = {"warmup": cfg.long_warmup, "peak_lr": cfg.long_lr or cfg.lr}
    else:
        lr = {} if lr_at_switch is None else {"lr_at_switch": lr_at_switch}
    return {"schedule": cfg.long_schedule, **lr, "positions": cfg.long_init, "short_len": short_len, **({} if cfg.long_nsp else {"nsp": False})}
