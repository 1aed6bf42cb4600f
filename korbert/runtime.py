"""What the hardware and torch give a pretraining run: the precision it trains in (bf16 where the
device multiplies it natively), the device's bf16 peak (for MFU), torch.compile's graph count, the
message for running out of GPU memory, the model wrapped for the loop (DDP, torch.compile), and
`--profile`: where a few steps' device time goes."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

from corpus_tools.artifacts import atomic_write_bytes, atomic_write_json, cpu_has_bf16
from corpus_tools.text import InputError

if TYPE_CHECKING:  # annotations only: no import at run time
    from korbert.pretrain_config import PretrainConfig

# bf16 dense peak, FLOP/s, by a substring of torch.cuda.get_device_name(); the first match wins
PEAK_BF16_FLOPS = [
    ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12), ("GH200", 989e12),
    ("A100", 312e12), ("L40S", 362e12), ("A10", 125e12), ("4090", 165e12),
]


def peak_flops(device_name: str) -> float | None:
    """bf16 dense peak of a CUDA device by its name (None: unknown)."""
    return next((v for k, v in PEAK_BF16_FLOPS if k in device_name), None)


def resolve_precision(want: str, cuda: bool) -> str:
    """--precision auto|bf16|bf16-stream|fp32 on this device -> that, auto resolved to "bf16" or "fp32"."""
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


def wrap_for_training(model, cfg: PretrainConfig, fixed: bool, dist, dev):
    """The module the loop calls: the model, under DistributedDataParallel with several ranks, and
    torch.compile'd with --compile (one whole graph under fixed shapes on one rank; DDP splits it at its
    buckets; else a few graphs for the bucketed shapes)."""
    import torch

    wrapped = model
    if dist.world > 1:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if dev.type == "cuda" else None)
    mode = None if cfg.compile_mode == "default" else cfg.compile_mode
    if cfg.compile and fixed:
        import torch._dynamo

        # a micro-batch that outgrows the fixed counts (rare), and the long phase, add a shape each
        torch._dynamo.config.recompile_limit = max(16, torch._dynamo.config.recompile_limit)
        wrapped = torch.compile(wrapped, fullgraph=dist.world == 1, dynamic=False, mode=mode)
    elif cfg.compile:
        import torch._dynamo

        # rows x length come in a few buckets (korbert.data) and the index lists are marked dynamic
        torch._dynamo.config.recompile_limit = max(32, torch._dynamo.config.recompile_limit)
        wrapped = torch.compile(wrapped, mode=mode)
    return wrapped


def compiled_graphs() -> int:
    """Graphs torch.compile has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


PROFILE_STEPS = 5  # --profile N profiles the 5 steps after step N: steps N+1 .. N+5 as the log numbers them

# kernel (CUDA) or operator (CPU) names -> what they do; the first match wins, so attention's CUTLASS
# kernels (fmha_cutlass*) are attention, not matmul
PROFILE_KINDS = [
    ("attention", ("fmha", "flash", "attention", "sdpa", "scaled_dot_product", "cudnn")),
    ("matmul", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul")),
    ("optimizer", ("multi_tensor", "adam", "optimizer")),
    ("fused (inductor)", ("triton_", "cpp_fused")),
    ("copy / fill", ("memcpy", "memset", "copy", "fill")),
]


def profile_kind(name: str) -> str:
    low = name.lower()
    return next((kind for kind, keys in PROFILE_KINDS if any(k in low for k in keys)), "other")


def start_profile(cuda: bool):
    """A running torch.profiler over CPU operators and, on a GPU, its kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if cuda:
        torch.cuda.synchronize()
    prof = profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])])
    prof.start()
    return prof


def device_rows(avgs, cuda: bool) -> list[tuple[str, float, int]]:
    """(name, microseconds, calls) of the profiler's averages: on a GPU each kernel's device time, leaving
    out the GPU-side copies of user annotations (`Optimizer.step#AdamW.step`, `record_function` ranges),
    whose time is that of the kernels inside them, counted already; on a CPU each operator's self time."""
    from torch.autograd import DeviceType

    if cuda:
        return [(e.key, e.self_device_time_total, e.count) for e in avgs
                if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    return [(e.key, e.self_cpu_time_total, e.count) for e in avgs]


def write_profile(prof, out: Path, first: int, last: int, started: float, cuda: bool) -> dict:
    """Waits for the device, stops `prof` (started at time.time() `started`, before step `first`; steps
    as the log numbers them, `last` included) and writes out/profile.json (device time by kind and the top kernels, the device's
    busy share of the wall time) and out/profile.txt (torch's own table). On a GPU the time is each
    kernel's; on a CPU each operator's self time (which, summed, is the busy time of the calling thread)."""
    import torch

    if cuda:
        torch.cuda.synchronize()
    wall_seconds = time.time() - started
    prof.stop()
    avgs = prof.key_averages()
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    rows = [(name, t, c, profile_kind(name)) for name, t, c in device_rows(avgs, cuda)]
    busy = sum(r[1] for r in rows) / 1e6 or 1e-9
    by_kind: dict[str, float] = {}
    for _, t, _, kind in rows:
        by_kind[kind] = by_kind.get(kind, 0.0) + t / 1e6
    rows.sort(key=lambda r: -r[1])
    result = {
        "steps": [first, last], "device": "cuda kernels" if cuda else "cpu operators (self time)",
        "wall_seconds": round(wall_seconds, 4), "busy_seconds": round(busy, 4), "busy_share_of_wall": round(busy / max(wall_seconds, 1e-9), 4),
        "by_kind": {k: {"seconds": round(v, 4), "share": round(v / busy, 4)} for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top": [{"name": n[:200], "kind": kind, "seconds": round(t / 1e6, 5), "share": round(t / 1e6 / busy, 4), "calls": c} for n, t, c, kind in rows[:30]],
    }
    atomic_write_json(out / "profile.json", result)  # (makes out/ if needed)
    atomic_write_bytes(out / "profile.txt", (avgs.table(sort_by=sort, row_limit=40, max_name_column_width=90) + "\n").encode())
    return result
