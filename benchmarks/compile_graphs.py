"""How many graphs torch.compile makes over a run of `korbert pretrain --compile --pack` (fixed shapes:
packed rows of max_seq_len, the predicted-token and [CLS] lists padded to the plan's counts), read
from the run's log.jsonl (`compiled_graphs`, `batch_shapes`), against the same run with fixed
shapes off (bucketed lengths, dynamic index lists). Batches vary in content: shuffled packed rows of
instances of every length.

    python benchmarks/compile_graphs.py --shards runs/bench/shards --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402
from korbert.pretrain import main as pretrain  # noqa: E402
from korbert.pretrain_config import PretrainConfig  # noqa: E402


def run(a, fixed: str, out: Path) -> dict:
    import torch._dynamo

    torch._dynamo.reset()
    t = time.time()
    pretrain(PretrainConfig(
        shards=a.shards, out=str(out), model_size=a.model_size, tokens_per_batch=a.tokens_per_batch, pack=True, compile=True,
        fixed_shapes=fixed, max_steps=a.steps, log_every=a.steps // 10, eval_every=0, eval_instances=64, save_every=10**9, force=True,
    ))
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return {
        "compiled_graphs": log[-1]["compiled_graphs"], "batch_shapes": log[-1]["batch_shapes"],
        "graphs_by_step": {r["step"]: r["compiled_graphs"] for r in log}, "steps": log[-1]["step"],
        "tokens_per_s_last_interval": log[-1]["tokens_per_s"], "wall_seconds": round(time.time() - t, 1), "log": log,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--model-size", default="tiny")
    ap.add_argument("--tokens-per-batch", type=int, default=4096)
    ap.add_argument("--out", default="benchmarks/results/pretrain-compile-graphs.json")
    a = ap.parse_args()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        fixed = run(a, "on", Path(tmp) / "fixed")
        bucketed = run(a, "off", Path(tmp) / "bucketed")
    load.append(os.getloadavg()[0])
    out = {
        "stage": "pretrain", "what": "graphs torch.compile makes over a packed run (CPU): fixed shapes vs bucketed shapes",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "load_average_1min_before_after": load,
        "shards": a.shards, "model_size": a.model_size, "tokens_per_batch": a.tokens_per_batch,
        "fixed_shapes": fixed, "bucketed_shapes": bucketed,
        "ratio_graphs_fixed_vs_bucketed": round(fixed["compiled_graphs"] / max(1, bucketed["compiled_graphs"]), 3),
    }
    atomic_write_json(a.out, out)
    print(f"fixed shapes: {fixed['compiled_graphs']} graph(s), {fixed['batch_shapes']} shape(s) in {fixed['steps']} steps; "
          f"bucketed: {bucketed['compiled_graphs']} graph(s), {bucketed['batch_shapes']} shape(s) -> {a.out}")


if __name__ == "__main__":
    main()
