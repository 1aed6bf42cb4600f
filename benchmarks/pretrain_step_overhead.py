"""The pretraining loop's own cost per optimizer step: `korbert pretrain` with a model that does
almost no arithmetic (1 layer, hidden 8), so what is left per step is the loop: reading the
batch from the DataLoader, counts and normalizers, the Python of the forward/backward/optimizer
calls, logging. Run side by side for several checkouts of korbert (e.g. before and after a
change; `git worktree add /tmp/old <commit>`) on the same shards, in the same run.

    python benchmarks/pretrain_step_overhead.py --shards /tmp/shards-v1 --checkouts /tmp/old .
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402

NULL_MODEL = ["num_hidden_layers=1", "hidden_size=8", "num_attention_heads=1", "intermediate_size=8"]


def ms_per_step(checkout: str, shards: str, steps: int, batch: int, out: Path) -> float:
    args = [
        sys.executable, "-m", "korbert.pretrain", "--shards", shards, "--out", str(out), "--model-size", "tiny", "--override", *NULL_MODEL,
        "--batch-size", str(batch), "--max-steps", str(steps), "--log-every", str(steps // 6), "--eval-every", "0",
        "--eval-instances", "16", "--save-every", str(10**9), "--num-workers", "1",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}
    p = subprocess.run(args, cwd=checkout, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{checkout}: {p.stderr[-2000:]}")
    lines = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    first, last = lines[0], lines[-1]  # the first interval holds the start-up: left out
    return 1000 * (last["seconds"] - first["seconds"]) / (last["step"] - first["step"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="shards every checkout can read (format 1 for checkouts before format 2)")
    ap.add_argument("--checkouts", nargs="+", required=True, help="korbert source folders; the first is the baseline")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/pretrain-step-overhead.json")
    a = ap.parse_args()
    load = os.getloadavg()
    res = {c: [] for c in a.checkouts}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for i, c in enumerate(a.checkouts):
                res[c].append(round(ms_per_step(c, a.shards, a.steps, a.batch_size, Path(tmp, f"{r}-{i}")), 3))
                print(f"round {r}: {c}: {res[c][-1]:.2f} ms per step", flush=True)
    best = {c: min(v) for c, v in res.items()}
    base = a.checkouts[0]
    out = {
        "stage": "pretrain", "what": "loop overhead per optimizer step (null model, batch of rows, 1 DataLoader worker, CPU)",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "load_average_start": load, "load_average_end": os.getloadavg(),
        "batch_size": a.batch_size, "steps": a.steps, "ms_per_step_by_round": res, "ms_per_step_best": best,
        **{f"ratio_overhead_{Path(c).resolve().name}_vs_{Path(base).resolve().name}": round(best[c] / best[base], 3) for c in a.checkouts[1:]},
    }
    atomic_write_json(a.out, out)
    print(json.dumps(best), f"-> {a.out}")


if __name__ == "__main__":
    main()
