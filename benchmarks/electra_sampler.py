"""Issue 61: the generator's sampler alone, on logits of the `cpu` preset's shape, against the Gumbel-max trick
(ELECTRA's reference implementation, and korbert's before korbert.electra.sample_from) and torch.multinomial.

    python benchmarks/electra_sampler.py                       # (M, V) = (1091, 16000): one cpu-preset batch's masked positions
    python benchmarks/electra_sampler.py --rows 1091 --vocab 32000

Each sampler draws one index per row of the same seeded logits (log-softmax given, as the loss computes it),
--repeats times after one warm-up, on torch's threads as set; the median is kept. Writes
benchmarks/results/electra-sampler-cpu.json with the machine, the command, the load average and
`ratio_<sampler>_vs_gumbel` (time over Gumbel-max's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def gumbel(log_probs: torch.Tensor) -> torch.Tensor:
    """The Gumbel-max trick, as korbert's generator sampled before: an exponential draw per entry."""
    e = torch.empty_like(log_probs).exponential_().clamp_(min=torch.finfo(log_probs.dtype).tiny)
    return e.log_().neg_().add_(log_probs).argmax(-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1091, help="masked positions per step")
    ap.add_argument("--vocab", type=int, default=16000)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "electra-sampler-cpu.json"))
    a = ap.parse_args()

    from corpus_tools.artifacts import atomic_write_json, machine
    from korbert.electra import sample_from

    torch.manual_seed(0)
    log_probs = (torch.randn(a.rows, a.vocab) * 3).log_softmax(-1)
    samplers = {
        "gumbel": gumbel,
        "multinomial": lambda lp: torch.multinomial(lp.exp(), 1).squeeze(1),
        "multinomial_replacement": lambda lp: torch.multinomial(lp.exp(), 1, replacement=True).squeeze(1),
        "inverse_cdf": sample_from,
    }
    load = {"start": os.getloadavg()}
    ms = {}
    for name, f in samplers.items():
        f(log_probs)
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            f(log_probs)
            times.append(time.perf_counter() - t)
        ms[name] = statistics.median(times) * 1000
        print(f"{name}: {ms[name]:.1f} ms (median of {a.repeats})", flush=True)
    load["end"] = os.getloadavg()
    result = {
        "what": "the ELECTRA generator's sampler alone: one index per row of (rows, vocab) log-probabilities (issue 61)",
        "command": " ".join(["python", "benchmarks/electra_sampler.py", *sys.argv[1:]]), "machine": machine(),
        "threads": torch.get_num_threads(), "rows": a.rows, "vocab": a.vocab, "median_ms": {k: round(v, 2) for k, v in ms.items()},
        "load_average": load, **{f"ratio_{k}_vs_gumbel": round(v / ms["gumbel"], 4) for k, v in ms.items() if k != "gumbel"},
    }
    atomic_write_json(Path(a.out), result)
    for k, v in result.items():
        if k.startswith("ratio_"):
            print(f"{k} {v:.3f}")
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
