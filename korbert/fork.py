"""--fork-from: start a run from another run's checkpoint at its switch to the long phase (its out/switch.pt),
when the two runs differ only in what the long phase alone reads: --long-shards, --long-init, --long-warmup,
--long-lr, --long-nsp. Up to the switch they are then the same training (weights, optimizer, data position and random
streams), so the fork continues exactly as a resume would, and trying another long phase costs the long
phase alone. The check is by key: switch.pt holds its run's `short_key` (korbert.checkpoint.run_key with
the long-phase-only settings neutral and the long shards' length), which must be this run's;
and the budgets it trained under, which must be this run's one budget."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from corpus_tools import config as C
from corpus_tools.artifacts import read_manifest
from corpus_tools.text import InputError
from korbert.checkpoint import NOT_WEIGHTS, SWITCH, run_budget

if TYPE_CHECKING:  # annotations only: no import at run time
    from korbert.pretrain_config import PretrainConfig

LONG_ONLY = ("long_shards", "long_init", "long_warmup", "long_lr", "long_nsp", "long_other_inputs")  # read by the long phase alone


def switch_file(fork_from: str) -> Path:
    """The checkpoint --fork-from names: the file, or a run's out folder's switch.pt."""
    path = Path(fork_from)
    return path / SWITCH if path.is_dir() else path


def short_key(cfg: PretrainConfig, key_of: Callable[[PretrainConfig, str], str], long_len: int) -> str:
    """The key of a run's training up to its switch: its run key with the long-phase-only settings neutral (their
    defaults, long_init keep) and its long shards' length in place of their content (`key_of(config, long_key)`)."""
    neutral = {f.name: f.default for f in dataclasses.fields(cfg) if f.name in LONG_ONLY}
    neutral["long_init"] = "keep"  # (the default when switch.pt files were first keyed: theirs still match)
    return key_of(dataclasses.replace(cfg, **{**neutral, "long_shards": "-"}), f"max_seq_len {long_len}")


def fork_state(cfg: PretrainConfig, key_of: Callable[[PretrainConfig, str | None], str], precision: str, world: int, long_len: int) -> dict:
    """The checkpoint --fork-from names (a file, or a run's out folder: its switch.pt), checked to be this run's
    state at the switch. `key_of(config, long_key)`: a run key on this run's shards, starting weights and
    machine (long_key None: this run's long shards); `precision`, `world`, `long_len`: this run's. Refused with
    one line otherwise."""
    import torch

    from korbert.pretrain_config import PretrainConfig

    path = switch_file(cfg.fork_from)
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
    if s.get("long_from") is not None or s["phase_pos"][1] or s.get("positions_copied"):
        raise InputError(f"{where}: step {s['step']} comes after long-phase steps of its run; fork from the {SWITCH} written at its first switch")
    budgets = s.get("budgets") or [run_budget(src)]  # (written before switch.pt recorded them: its config.json's)
    if budgets != [run_budget(cfg)]:
        raise InputError(f"{where}: trained under the budget(s) {budgets}, this run has {run_budget(cfg)}: the schedule up to the switch differs")
    if src_run.get("precision_used") != precision or s.get("world", 1) != world:
        raise InputError(f"{where}: trained in {src_run.get('precision_used')} on {s.get('world', 1)} process(es), this run {precision} on {world}")
    mine = short_key(cfg, key_of, long_len)
    if "short_key" in s:
        same = s["short_key"] == mine
    else:  # written before switch.pt held its short key: rebuilt from the config.json beside it and its long shards
        try:
            src_long = read_manifest(src.long_shards, "shards")
        except (FileNotFoundError, ValueError) as e:
            raise InputError(f"{where}: its long shards cannot be read, so its run key cannot be checked ({e})") from None
        if key_of(src, src_long["key"]) != s["run_key"]:
            raise InputError(f"{where}: the config.json beside it, on this run's shards, tokenizer and starting weights, does not give its run key")
        same = short_key(src, key_of, src_long["config"]["max_seq_len"]) == mine
    if not same:
        ours = C.to_dict(cfg)
        differ = sorted(k for k in names - set(NOT_WEIGHTS) - set(LONG_ONLY) if ours.get(k) != getattr(src, k))
        differ += ["compile"] * (cfg.compile != src.compile)  # (it cuts other batches of a --tokens-per-batch run without --pack)
        raise InputError(f"{where}: another run, not only another long phase (they differ in "
                         f"{', '.join(differ) or 'their shards, tokenizer, starting weights, long shards length or device'}); "
                         f"forking keeps everything but {', '.join('--' + k.replace('_', '-') for k in LONG_ONLY)}")
    return state

