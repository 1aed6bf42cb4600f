"""Pretraining-only probes: held-out MLM loss over tokens and seconds, several shard layouts side by side.

Each probe is one `korbert pretrain` of BERT-mini with the same token budget, tokens per step, lr
and seed, evaluated on its own held-out instances every --eval-every steps; no fine-tuning. It
answers "which layout leaves the unigram plateau (held-out MLM loss ~6.2 at 16k) sooner", in
tokens and in wall seconds, for a few minutes each instead of the ablation's ~20.

    python benchmarks/pretrain_probe.py \\
        --probe doc=runs/probe/shards-doc \\
        --probe p128=runs/probe/shards-packed-128:--objective,mlm \\
        --probe p64=runs/probe/shards-packed-64:--objective,mlm

A probe is NAME=SHARDS[:extra,pretrain,flags]. Probes run one after another with every core (they
are timed); a probe whose run folder is finished is read, not rerun. Writes --out (JSON) with each
probe's curve and settings and the machine; the logs stay in --work/p-NAME/.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--probe", action="append", required=True, help="NAME=SHARDS[:extra,flags] (repeat)")
    ap.add_argument("--tokens", type=int, default=1_500_000)
    ap.add_argument("--tokens-per-batch", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--model-size", default="mini")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="runs/probe")
    ap.add_argument("--out", default="benchmarks/results/pretrain-seqlen-probe.json")
    ap.add_argument("--base", default="", help="the probe the tokens/s ratios compare with (default: the first)")
    ap.add_argument("--note", default="", help="a remark kept in the JSON (e.g. how the machine was loaded)")
    a = ap.parse_args()
    rows = []
    for spec in a.probe:
        name, _, rest = spec.partition("=")
        shards, _, extra = rest.partition(":")
        out = Path(a.work) / f"p-{name}"
        cmd = [sys.executable, "-m", "korbert.cli", "pretrain", "--shards", shards, "--out", str(out), "--model-size", a.model_size,
               "--max-steps", "0", "--max-tokens", str(a.tokens), "--tokens-per-batch", str(a.tokens_per_batch), "--lr", str(a.lr),
               "--eval-every", str(a.eval_every), "--eval-instances", "1000", "--log-every", "50", "--save-every", "100000",
               "--seed", str(a.seed), *[x for x in extra.split(",") if x]]
        done_before = (out / "final" / "manifest.json").is_file()
        load = None if done_before else round(os.getloadavg()[0], 2)
        subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "TQDM_DISABLE": "1"})
        log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
        conf = json.loads((out / "config.json").read_text())["run"]
        sm = json.loads((Path(shards) / "manifest.json").read_text())
        tr = sm["counts"]["train"]
        curve = [{"step": d["step"], "tokens": d["tokens"], "seconds": d["seconds"], "held_out_mlm_loss": round(d["eval_mlm_loss"], 4),
                  "held_out_mlm_acc": round(100 * d["eval_mlm_acc"], 2)} for d in log if "eval_mlm_loss" in d]
        last = curve[-1]
        rows.append({
            "probe": name, "shards": shards, "instances": sm["config"].get("instances", "document"), "nsp": sm["config"].get("nsp", True),
            "max_seq_len": sm["config"]["max_seq_len"], "tokens_per_instance": round(tr["tokens"] / tr["instances"], 2),
            "extra": extra.split(",") if extra else [], "precision": conf.get("precision_used", "fp32"),
            "tokens_per_s": round(last["tokens"] / last["seconds"]), "load_average_1min_at_start": load,  # None: an earlier invocation ran it (see --note)
            "final_held_out_mlm_loss": last["held_out_mlm_loss"], "final_held_out_mlm_acc": last["held_out_mlm_acc"], "curve": curve,
        })
        print(f"{name}: held-out MLM loss {last['held_out_mlm_loss']} ({last['held_out_mlm_acc']}%) after {last['tokens']:,} tokens, "
              f"{rows[-1]['tokens_per_s']:,} tokens/s")
    base = next(r for r in rows if r["probe"] == (a.base or rows[0]["probe"]))
    result = {
        "stage": "pretrain",
        "what": "held-out MLM loss over tokens and seconds, one pretraining run per shard layout (benchmarks/pretrain_probe.py)",
        "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
        "machine": machine(),
        "settings": {k: v for k, v in vars(a).items() if k not in ("out", "note")},
        "note": a.note,
        "rows": rows,
        **{f"ratio_{r['probe']}_tokens_per_s_vs_{base['probe']}": round(r["tokens_per_s"] / base["tokens_per_s"], 3) for r in rows if r is not base},
    }
    atomic_write_json(ROOT / a.out, result)
    print(f"-> {a.out}")
    return result


if __name__ == "__main__":
    main()
