"""What the long phase costs: `korbert pretrain` tokens/s on shards of 512-token instances against the
same text at 128, the same model and tokens per step (packed rows: 4x fewer rows of 4x the length),
so the difference is attention's length-squared work and nothing else. Rounds alternate the two;
the median of each is reported, with the ratio 512 / 128 (1.0: free; 0.85: the 15% the issue allows).

    korbert shards --inputs TEXT --max-seq-len 128 --out runs/bench/long128
    korbert shards --inputs TEXT --max-seq-len 512 --out runs/bench/long512
    python benchmarks/long_phase_cost.py --shards runs/bench/long128 --long-shards runs/bench/long512
    python benchmarks/long_phase_cost.py ... --device cuda --compile --tokens-per-batch 65536 --steps 40 --rounds 2   # on a GPU
    python benchmarks/long_phase_cost.py ... --override attention_probs_dropout_prob=0   # without attention dropout
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch._dynamo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402
from korbert.pretrain import main as pretrain  # noqa: E402
from korbert.pretrain_config import PretrainConfig  # noqa: E402


def run(a, shards: str, out: Path) -> dict:
    """a.steps steps; the steady state is the last half (log intervals after the first)."""
    half = max(1, a.steps // 2)
    torch._dynamo.reset()  # with --compile each run compiles afresh (no recompile limit across runs)
    pretrain(PretrainConfig(
        shards=shards, out=str(out), model_size=a.model_size, tokens_per_batch=a.tokens_per_batch, pack=True, max_steps=2 * half,
        log_every=half, eval_every=0, eval_instances=64, save_every=10**9, force=True, lr=1e-4, seed=0, device=a.device, compile=a.compile,
        override=a.override,
    ))
    last = json.loads((out / "log.jsonl").read_text().splitlines()[-1])
    return {"tokens_per_s": last["tokens_per_s"], "tflops": last["tflops"], "padding": last["padding"], "mfu": last.get("mfu")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="shards at the short length (128)")
    ap.add_argument("--long-shards", required=True, help="the same text at the long length (512)")
    ap.add_argument("--model-size", default="small")
    ap.add_argument("--tokens-per-batch", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=12, help="steps per run; the last half is timed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--compile", action="store_true", help="torch.compile (fixed shapes: one graph per length)")
    ap.add_argument("--override", nargs="*", default=[], help="BertConfig fields for both runs, e.g. attention_probs_dropout_prob=0")
    ap.add_argument("--out", default="benchmarks/results/pretrain-long-phase-cost.json")
    a = ap.parse_args()
    load = [os.getloadavg()[0]]
    runs: dict[str, list[dict]] = {"short": [], "long": []}
    lens = {k: json.loads((Path(p) / "manifest.json").read_text())["config"]["max_seq_len"] for k, p in (("short", a.shards), ("long", a.long_shards))}

    def write(partial: bool) -> dict:  # after every run: a run cut short keeps what it measured
        med = {k: round(statistics.median(x["tokens_per_s"] for x in v)) for k, v in runs.items() if v}
        out = {
            "stage": "pretrain", "what": f"tokens/s of BERT-{a.model_size} pretraining on {lens['long']}-token packed rows vs {lens['short']} (same tokens per step)",
            "command": "python " + " ".join(sys.argv), "machine": machine(), "load_average_1min_before_after": load + [os.getloadavg()[0]],
            "device": torch.cuda.get_device_name() if a.device != "cpu" and torch.cuda.is_available() else "cpu", "compile": a.compile,
            "model_size": a.model_size, "override": a.override, "shards": a.shards, "long_shards": a.long_shards, "max_seq_len": lens, "tokens_per_batch": a.tokens_per_batch,
            "runs": runs, "median_tokens_per_s": med, "partial": partial,
        }
        if len(med) == 2:
            out[f"ratio_{lens['long']}_vs_{lens['short']}"] = round(med["long"] / med["short"], 3)
        atomic_write_json(a.out, out)
        return med

    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name in (("short", "long") if r % 2 == 0 else ("long", "short")):
                runs[name].append(run(a, a.shards if name == "short" else a.long_shards, Path(tmp) / f"{name}{r}"))
                print(f"  round {r + 1} {name}: {runs[name][-1]['tokens_per_s']:,.0f} tokens/s", flush=True)
                write(partial=True)
    med = write(partial=False)
    print(f"{lens['short']}: {med['short']:,} tokens/s, {lens['long']}: {med['long']:,} tokens/s "
          f"(ratio {med['long'] / med['short']:.3f}), load {load + [os.getloadavg()[0]]} -> {a.out}")


if __name__ == "__main__":
    main()
