"""--fork-from: start a run from another run's checkpoint taken before its long phase (its out/switch.pt,
written at the switch), when the two runs differ only in what the long phase alone reads: --long-shards,
--long-init, --long-warmup, --long-lr. Their short phases are then one run (the same weights, optimizer,
data position and random streams at the switch), so the fork continues exactly as a resume would, and
trying another long phase costs the long phase alone. The check is by run key (korbert.checkpoint.run_key):
the source's own key must match its checkpoint, and with this run's long-phase settings it must be this
run's key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, read_manifest
from corpus_tools.text import InputError
from korbert.checkpoint import NOT_WEIGHTS, run_budget

if TYPE_CHECKING:  # annotations only: no import at run time
    from korbert.pretrain_config import PretrainConfig

LONG_ONLY = ("long_shards", "long_init", "long_warmup", "long_lr", "long_other_inputs")  # read by the long phase alone
SWITCH = "switch.pt"


def fork_state(cfg: PretrainConfig, key_of: Callable[[PretrainConfig, str], str], precision: str, world: int) -> dict:
    """The checkpoint --fork-from names (a file, or a run's out folder: its switch.pt), checked to be this run's
    state before its long phase. `key_of(config, long_shards_key)`: a run key with this run's shards and
    machine; `precision`, `world`: what this run uses. Refused with one line otherwise."""
    import torch

    from korbert.pretrain_config import PretrainConfig

    path = Path(cfg.fork_from)
    path = path / SWITCH if path.is_dir() else path
    where = f"--fork-from {path}"
    if not cfg.long_shards:
        raise InputError("--fork-from starts another long phase from a run's switch: it needs --long-shards")
    if not path.is_file():
        raise InputError(f"{where}: no such checkpoint (a run with --long-shards writes {SWITCH} in its out folder at the switch)")
    try:
        src_run = json.loads((path.parent / "config.json").read_text(encoding="utf-8"))["run"]
    except (OSError, ValueError, KeyError):
        raise InputError(f"{where}: no readable config.json beside it (the run's out folder holds both)") from None
    names = {f.name for f in dataclasses.fields(PretrainConfig)}
    src = PretrainConfig(**{k: v for k, v in src_run.items() if k in names})
    state = torch.load(path, map_location="cpu", weights_only=False)
    s = state["state"]
    if s.get("long_from") is not None:
        raise InputError(f"{where}: taken in the long phase (step {s['step']}, the switch at {s['long_from']}); fork from its {SWITCH}")
    if not src.long_shards:
        raise InputError(f"{where}: a run without --long-shards (its schedule has no switch): fork from a run with a long phase")
    if run_budget(src) != run_budget(cfg):
        raise InputError(f"{where}: a run with budget {run_budget(src)}, this one {run_budget(cfg)}: the schedule up to the switch differs")
    if src_run.get("precision_used") != precision or s.get("world", 1) != world:
        raise InputError(f"{where}: trained in {src_run.get('precision_used')} on {s.get('world', 1)} process(es), this run {precision} on {world}")
    try:
        src_long = read_manifest(src.long_shards, "shards")
    except (FileNotFoundError, ValueError) as e:
        raise InputError(f"{where}: its long shards cannot be read, so its run key cannot be checked ({e})") from None
    src_long_key, src_len = src_long["key"], src_long["config"]["max_seq_len"]
    if src_len != read_manifest(cfg.long_shards, "shards")["config"]["max_seq_len"]:
        raise InputError(f"{where}: its long shards are {src_len} tokens long and --long-shards' are not: the model's positions differ")
    if key_of(src, src_long_key) != s["run_key"]:
        raise InputError(f"{where}: the config.json beside it is not the run that wrote it (other shards, tokenizer or settings)")
    as_this = dataclasses.replace(src, **{k: getattr(cfg, k) for k in LONG_ONLY})
    if key_of(as_this, None) != key_of(cfg, None):
        ignore = {*NOT_WEIGHTS, *LONG_ONLY}
        mine = C.to_dict(cfg)
        differ = sorted(k for k in names - ignore if mine.get(k) != getattr(src, k))
        raise InputError(f"{where}: another run, not only another long phase (they differ in {', '.join(differ) or 'their shards or tokenizer'}); "
                         f"forking keeps everything but {', '.join('--' + k.replace('_', '-') for k in LONG_ONLY)}")
    return state


def copy_log(src: Path, dst: Path, step: int) -> None:
    """The source's log lines up to the fork's step, as this run's (its steps are this run's steps)."""
    lines = src.read_text(encoding="utf-8").splitlines() if src.exists() else []
    keep = [line for line in lines if line and json.loads(line).get("step", 0) <= step]
    atomic_write_bytes(dst, "".join(line + "\n" for line in keep).encode("utf-8"))
