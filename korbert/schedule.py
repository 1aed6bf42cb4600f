"""The learning-rate schedule of pretraining: linear warmup (a share of the budget or a number of
steps), then linear or cosine decay to 0 over the budget."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: no import at run time
    from korbert.pretrain_config import PretrainConfig


def lr_at(step: int, progress: float, cfg: PretrainConfig, steps_hint: int | None, warm_end: float | None = None) -> float:
    """Peak lr x warmup/decay factor before optimizer step `step` at `progress` in [0, 1] of the budget.

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
    p = min(1.0, max(0.0, (progress - w) / max(1e-9, 1 - w)))
    return cfg.lr * ((1 - p) if cfg.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * p)))


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
