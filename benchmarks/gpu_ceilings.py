"""The card's two ceilings, measured as METHOD.md asks, so that each kernel of a profile can be read against
them: device-to-device copy bandwidth (bytes read plus bytes written) and a large bf16 matrix product's rate,
both on random data, rotated among three buffers (sets), the median of 5 rounds of back-to-back calls after a warm-up. Beside
them, the elementwise kernels BERT's step runs, alone at the step's sizes (65,536 tokens by 3,072 and 768):
GELU forward and backward, and the residual add with LayerNorm, so the profile's fused kernels can be
compared with what the same bytes cost in isolation.

    python benchmarks/gpu_ceilings.py --out $OUT/gpu-ceilings.json
    python benchmarks/gpu_ceilings.py --device cpu --small --out /tmp/c.json   # smoke test of the code path
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def timer(device: str):
    """run(fn, reps): seconds per call, the median over 5 rounds of `reps` calls back to back between one
    pair of CUDA events (so the launches queue ahead of the GPU and a call's host-side dispatch is not
    timed; the fifth lease timed each call alone between its own events, which counted it)."""
    import torch

    def run(fn, reps: int) -> float:
        rounds = []
        for _ in range(5):
            if device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(reps):
                    fn()
                b.record()
                b.synchronize()
                rounds.append(a.elapsed_time(b) / 1e3 / reps)
            else:
                t = time.perf_counter()
                for _ in range(reps):
                    fn()
                rounds.append((time.perf_counter() - t) / reps)
        return statistics.median(rounds)
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="small sizes (a CPU smoke test)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F

    dev = torch.device(a.device)
    run = timer(a.device)
    res: dict = {"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "torch": torch.__version__}
    g = torch.Generator(device=dev).manual_seed(0)

    # copy: several 1 GiB buffers (far past the L2), rotated
    n = (1 << 20) if a.small else (1 << 29)  # bf16 elements: 1 GiB each on the GPU
    src = [torch.randn(n, device=dev, generator=g, dtype=torch.bfloat16) for _ in range(3)]
    dst = torch.empty_like(src[0])
    k = [0]

    def copy():
        dst.copy_(src[k[0] % 3])
        k[0] += 1
    for _ in range(3):
        copy()
    t = run(copy, a.reps)
    res["copy"] = {"bytes": 2 * n * 2, "seconds": t, "tb_per_s": round(2 * n * 2 / t / 1e12, 3)}

    # matmul: 8192^3 bf16 on random operands, rotated among three pairs
    m = 512 if a.small else 8192
    dt = torch.bfloat16 if a.device == "cuda" else torch.float32
    xs = [(torch.randn(m, m, device=dev, generator=g, dtype=dt), torch.randn(m, m, device=dev, generator=g, dtype=dt)) for _ in range(3)]
    out = torch.empty(m, m, device=dev, dtype=dt)

    def mm():
        x, y = xs[k[0] % 3]
        torch.mm(x, y, out=out)
        k[0] += 1
    for _ in range(3):
        mm()
    t = run(mm, a.reps)
    res["matmul"] = {"shape": [m, m, m], "dtype": str(dt), "seconds": t, "tflops": round(2 * m ** 3 / t / 1e12, 1)}

    # BERT-base's elementwise work at one step's sizes, eager and compiled (inductor's fused kernels)
    tokens, hidden, inter = (1024, 64, 256) if a.small else (65536, 768, 3072)
    def sets(rows: int, cols: int) -> list:  # three input sets, rotated: a set is far past the L2
        return [torch.randn(rows, cols, device=dev, generator=g, dtype=dt) for _ in range(3)]
    pre, grad, x, r = sets(tokens, inter), sets(tokens, inter), sets(tokens, hidden), sets(tokens, hidden)
    w = torch.randn(hidden, device=dev, generator=g, dtype=torch.float32)
    b = torch.randn(hidden, device=dev, generator=g, dtype=torch.float32)

    def gelu_fwd(p):
        return F.gelu(p)

    def gelu_bwd(gr, p):
        return torch.ops.aten.gelu_backward(gr, p)

    def add_ln(x, r):  # the lean stream's residual add + LayerNorm in fp32, bf16 out
        return F.layer_norm((x + r).float(), (hidden,), w, b, 1e-12).to(x.dtype)

    E = pre[0].element_size()
    kernels = {
        "gelu_forward": (gelu_fwd, (pre,), 2 * tokens * inter * E),
        "gelu_backward": (gelu_bwd, (grad, pre), 3 * tokens * inter * E),
        "add_layernorm": (add_ln, (x, r), 3 * tokens * hidden * E),
    }
    res["elementwise"] = {}
    for name, (fn, args, nbytes) in kernels.items():
        row = {"bytes": nbytes}
        for mode, f in (("eager", fn), ("compiled", torch.compile(fn, dynamic=False))):
            for i in range(3):
                f(*(arg[i] for arg in args))

            def call(f=f):
                f(*(arg[k[0] % 3] for arg in args))
                k[0] += 1
            t = run(call, a.reps)
            row[mode] = {"seconds": t, "tb_per_s": round(nbytes / t / 1e12, 3)}
        res["elementwise"][name] = row
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(f"copy {res['copy']['tb_per_s']} TB/s; matmul {res['matmul']['tflops']} TFLOP/s; " + "; ".join(
        f"{k} {v['compiled']['seconds'] * 1e3:.3f} ms ({v['compiled']['tb_per_s']} TB/s compiled, {v['eager']['tb_per_s']} eager)"
        for k, v in res["elementwise"].items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
