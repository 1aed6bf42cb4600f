"""Why attention dropout decides what 512-token rows cost on a CPU: torch's scaled_dot_product_attention,
forward + backward, over 8,192 tokens of BERT-small's attention (8 heads of 64, bf16, the packing mask),
at 128 and 512 tokens per row, with dropout 0.1 (BERT's) and without. With dropout, CPU SDPA leaves its
flash kernel for the math path, which materializes every score matrix. Median of --reps after a warm-up.

    python benchmarks/attention_cpu.py      # -> benchmarks/results/pretrain-attention-cpu.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402


def ms(t: int, dropout: float, tokens: int, heads: int, dim: int, reps: int) -> float:
    torch.manual_seed(0)
    rows = tokens // t
    q, k, v = (torch.randn(rows, heads, t, dim, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.ones(rows, 1, t, t, dtype=torch.bool)  # the model's packed-row mask with one instance per row

    def once() -> float:
        s = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout).sum().backward()
        return time.perf_counter() - s

    once()
    return round(1000 * statistics.median(once() for _ in range(reps)), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/pretrain-attention-cpu.json")
    a = ap.parse_args()
    load = [os.getloadavg()[0]]
    res = {f"{t}_dropout_{d}": ms(t, d, a.tokens, a.heads, a.head_dim, a.reps) for t in (128, 512) for d in (0.1, 0.0)}
    load.append(os.getloadavg()[0])
    out = {
        "stage": "pretrain", "what": "CPU SDPA forward + backward ms over the same tokens, with and without attention dropout",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "load_average_1min_before_after": load, "tokens": a.tokens, "heads": a.heads, "head_dim": a.head_dim, "ms": res,
        "ratio_no_dropout_vs_dropout_speed_at_128": round(res["128_dropout_0.1"] / res["128_dropout_0.0"], 3),
        "ratio_no_dropout_vs_dropout_speed_at_512": round(res["512_dropout_0.1"] / res["512_dropout_0.0"], 3),
    }
    atomic_write_json(a.out, out)
    print(res, {k: v for k, v in out.items() if k.startswith("ratio")}, f"load {load} -> {a.out}")


if __name__ == "__main__":
    main()
