"""What the hardware and torch give a pretraining run: the precision it trains in (bf16 where the
device multiplies it natively), the device's bf16 peak (for MFU), torch.compile's graph count, and
the message for running out of GPU memory."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from corpus_tools.artifacts import cpuinfo
from corpus_tools.text import InputError

if TYPE_CHECKING:  # annotations only: no import at run time
    from korbert.pretrain import PretrainConfig

# bf16 dense peak, FLOP/s, by a substring of torch.cuda.get_device_name(); the first match wins
PEAK_BF16_FLOPS = [
    ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12), ("GH200", 989e12),
    ("A100", 312e12), ("L40S", 362e12), ("A10", 125e12), ("4090", 165e12),
]


def peak_flops(device_name: str) -> float | None:
    """bf16 dense peak of a CUDA device by its name (None: unknown)."""
    return next((v for k, v in PEAK_BF16_FLOPS if k in device_name), None)


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX-BF16, read from /proc/cpuinfo).
    Elsewhere torch emulates bf16 matmuls, slower than fp32."""
    return bool(set((cpuinfo("flags") or "").split()) & {"avx512_bf16", "amx_bf16"})


def resolve_precision(want: str, cuda: bool) -> str:
    """--precision auto|bf16|fp32 on this device -> "bf16" or "fp32"."""
    if want != "auto":
        return want
    return "bf16" if cuda or cpu_has_bf16() else "fp32"


@contextlib.contextmanager
def oom_guard(cfg: PretrainConfig):
    import torch

    try:
        yield
    except torch.OutOfMemoryError:
        batch = f"--tokens-per-batch {cfg.tokens_per_batch}" if cfg.tokens_per_batch else f"--batch-size {cfg.batch_size}"
        raise InputError(
            f"out of GPU memory with {batch}, --grad-accum {cfg.grad_accum} and --model-size {cfg.model_size}: raise "
            f"--grad-accum (same global batch, smaller micro-batches), lower the batch, or pick a smaller --model-size"
        ) from None


def compiled_graphs() -> int:
    """Graphs torch.compile has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
