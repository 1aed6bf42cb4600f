"""What one DataLoader worker of `korbert pretrain` supplies: tokens per second of finished
global batches (read from the shards, masked, packed, collated), for several checkouts of korbert
side by side on the same shards (e.g. before and after a change; `git worktree add /tmp/old <commit>`),
for packed rows (`--pack`) and for one document instance per row.

On a GPU the loop needs (tokens/s of the GPU) / (this number) workers; an H100 ran BERT-small at
~1.1M tokens/s with 6 workers (benchmarks/results/recipe-gpu-small-h100.json). Rounds alternate the
checkouts; the median round is reported, and each checkout's ratio to the first one.

    python benchmarks/loader_throughput.py --shards runs/gpu/shards --checkouts /tmp/old . --names old new
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402

WORKER = r"""
import json, sys, time
from corpus_tools.shard_format import open_shards
from korbert.data import BatchPlan, PretrainingDataset, StepSampler, instance_lengths
shards, tokens, pack, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
r = open_shards(shards, verify=False)
plan = BatchPlan(instance_lengths(r), 0, r.manifest["config"]["max_seq_len"], tokens_per_step=tokens, pack=pack, buckets=True)
ds = PretrainingDataset(r, 0, pack=pack, nsp=True)
it = iter(StepSampler(plan, 0, 10**12, 1, 0, 1))
reqs = [next(it) for _ in range(steps + 1)]
ds[reqs[0]]  # opens the shard files
t, cpu, real = time.perf_counter(), time.process_time(), 0
for q in reqs[1:]:
    real += ds[q]["counts"][2]
print(json.dumps({"tokens": real, "seconds": time.perf_counter() - t, "cpu_seconds": time.process_time() - cpu}))
"""


def one(checkout: str, a, pack: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve()), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", WORKER, str(Path(a.shards).resolve()), str(a.tokens_per_batch), "1" if pack else "0", str(a.steps)],
                       cwd=checkout, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{checkout}: {p.stderr[-2000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return {"tokens_per_s": r["tokens"] / r["seconds"], "tokens_per_cpu_s": r["tokens"] / r["cpu_seconds"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--checkouts", nargs="+", default=["."], help="korbert checkouts; the first is the baseline")
    ap.add_argument("--names", nargs="+", help="a name per checkout for the ratio fields (default: the folder names)")
    ap.add_argument("--tokens-per-batch", type=int, default=65536)
    ap.add_argument("--modes", nargs="+", default=["packed", "document"], choices=["packed", "document"],
                    help="packed: instances packed into rows of max_seq_len; document: one instance per row (length-sorted)")
    ap.add_argument("--steps", type=int, default=20, help="batches timed per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/pretrain-loader-throughput.json")
    a = ap.parse_args()
    names = a.names or [Path(c).resolve().name for c in a.checkouts]
    load = [os.getloadavg()[0]]
    med, ratios = {}, {}
    for mode in a.modes:
        runs: dict[str, list[dict]] = {c: [] for c in a.checkouts}
        for r in range(a.rounds):
            for c in (a.checkouts if r % 2 == 0 else a.checkouts[::-1]):
                runs[c].append(one(c, a, mode == "packed"))
                print(f"  {mode} round {r + 1} {c}: {runs[c][-1]['tokens_per_s']:,.0f} tokens/s", flush=True)
        med[mode] = {n: {k: round(statistics.median(x[k] for x in runs[c])) for k in ("tokens_per_s", "tokens_per_cpu_s")} for n, c in zip(names, a.checkouts)}
        for n in names[1:]:
            ratios[f"ratio_{n}_vs_{names[0]}_{mode}"] = round(med[mode][n]["tokens_per_s"] / med[mode][names[0]]["tokens_per_s"], 3)
        for n in names:
            print(f"{mode} {n}: {med[mode][n]['tokens_per_s']:,} tokens/s per worker ({med[mode][n]['tokens_per_cpu_s']:,} per CPU-s)")
    load.append(os.getloadavg()[0])
    out = {
        "stage": "pretrain", "what": "tokens/s one DataLoader worker supplies: shards -> masked, collated micro-batches of a token budget",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "load_average_1min_before_after": load,
        "shards": a.shards, "checkouts": dict(zip(names, a.checkouts)), "tokens_per_batch": a.tokens_per_batch,
        "steps_per_round": a.steps, "rounds": a.rounds, "median": med, **ratios,
    }
    atomic_write_json(a.out, out)
    print(json.dumps(ratios), f"load {load}", f"-> {a.out}")


if __name__ == "__main__":
    main()
