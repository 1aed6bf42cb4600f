"""The learning-rate schedule of pretraining: linear warmup (a share of the budget or a number of
steps), then linear or cosine decay to 0 over the budget; with --long-schedule own, the short phase
decays to 0 at the switch and BERT's long phase has its own warmup and decay (NVIDIA's phase 2).
Also where the long phase starts, and the share of the budget a run has reached."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: no import at run time
    from korbert.pretrain_config import PretrainConfig


def lr_at(step: int, progress: float, cfg: PretrainConfig, steps_hint: int | None, warm_end: float | None = None, end: float = 1.0) -> float:
    """Peak lr x warmup/decay factor before optimizer step `step` at `progress` in [0, 1] of the budget;
    the decay reaches 0 at `end` (the budget's end, or the switch to an own-schedule long phase).

    Warmup in steps (--warmup >= 1) counts steps, whatever the budget; the decay then runs from
    where warmup ended to 0: warmup / steps when the budget says how many steps it holds, else the
    progress at the step warmup ended (`warm_end`, which the loop records; None: this is that step).
    So the peak is reached and the decay starts from it, with no drop at the end of warmup."""
    if cfg.warmup >= 1:
        warm = step / cfg.warmup
        w = min(cfg.warmup / steps_hint, 0.5) if steps_hint else (progress if warm_end is None else warm_end)
    else:
        warm = progress / cfg.warmup if cfg.warmup > 0 else 1.0
        w = cfg.warmup
    if warm < 1:
        return cfg.lr * warm
    return cfg.lr * _decay((progress - w) / max(1e-9, end - w), cfg.schedule)


def _decay(p: float, schedule: str) -> float:
    p = min(1.0, max(0.0, p))
    return (1 - p) if schedule == "linear" else 0.5 * (1 + math.cos(math.pi * p))


def short_end(cfg: PretrainConfig) -> float:
    """The share of the budget where the long phase starts: exact in steps under a step budget, else 1 - --long-phase."""
    if cfg.max_steps > 0:
        return (cfg.max_steps - long_phase_steps(cfg.max_steps, cfg.long_phase)) / cfg.max_steps
    return 1 - cfg.long_phase


def lr_for(step: int, progress: float, cfg: PretrainConfig, steps_hint: int | None, warm_end: float | None, long_start: float | None) -> float:
    """The lr before optimizer step `step`. `long_start`: the share of the budget where this stretch of the long
    phase began (None: the short phase). --long-schedule shared: `lr_at` over the whole budget. own: the short
    phase decays to 0 at the switch; the long phase warms up over --long-warmup of itself to --long-lr (0: --lr),
    then decays to 0 at the budget's end, by its progress (progress - long_start) / (1 - long_start)."""
    if not (cfg.long_shards and cfg.long_schedule == "own"):
        return lr_at(step, progress, cfg, steps_hint, warm_end)
    if long_start is None:
        return lr_at(step, progress, cfg, steps_hint, warm_end, end=short_end(cfg))
    p = max(0.0, (progress - long_start) / max(1e-9, 1 - long_start))
    peak, w = cfg.long_lr or cfg.lr, cfg.long_warmup
    if p < w:
        return peak * p / w
    return peak * _decay((p - w) / max(1e-9, 1 - w), cfg.schedule)


def progress(cfg: PretrainConfig, step: int, tokens: int, seconds: float) -> float:
    """The share of the budget reached: the largest of the steps', tokens' and minutes' shares."""
    fr = []
    if cfg.max_steps > 0:
        fr.append(step / cfg.max_steps)
    if cfg.max_tokens > 0:
        fr.append(tokens / cfg.max_tokens)
    if cfg.max_minutes > 0:
        fr.append(seconds / 60 / cfg.max_minutes)
    return max(fr)


def long_phase_steps(max_steps: int, long_phase: float) -> int:
    """Optimizer steps of a --max-steps budget that the long phase gets: the whole steps in share x steps
    (0.29 x 100 is 28.999999999999996 in floating point: 29)."""
    return math.floor(max_steps * long_phase + 1e-9)


def long_phase_due(step: int, tokens: int, seconds: float, cfg: PretrainConfig) -> bool:
    """Whether the step after `step` steps, `tokens` tokens and `seconds` of training belongs to the long
    phase: the last --long-phase of whichever budget is nearest its end. Steps and tokens compare as
    integers (a float share of a step count can fall a hair short of the step it names)."""
    if cfg.max_steps > 0 and step >= cfg.max_steps - long_phase_steps(cfg.max_steps, cfg.long_phase):
        return True
    if cfg.max_tokens > 0 and tokens >= cfg.max_tokens - round(cfg.max_tokens * cfg.long_phase):
        return True
    return cfg.max_minutes > 0 and seconds >= 60 * cfg.max_minutes * (1 - cfg.long_phase)
