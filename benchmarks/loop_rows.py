"""Sum up a `korbert pretrain` log.jsonl: the training loop's own throughput beside the share of it spent
waiting for the loader (`data_wait`), row by row and as medians over the rows at one sequence length.

    python benchmarks/loop_rows.py runs/x/pretrain/log.jsonl [--json OUT]

The first logged interval holds the loader's start-up (its workers' first batches) and the first compile,
so the medians leave it out when there are more rows. Evaluations and checkpoints are outside every
interval; a later compile (a new batch shape) is inside its interval (the log's `compiled_graphs` says
which), and the median keeps such a row from moving it far.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def summarize(rows: list[dict]) -> dict:
    out = {}
    for length in sorted({r.get("seq_len", 0) for r in rows}):
        rs = [r for r in rows if r.get("seq_len", 0) == length]
        steady = rs[1:] if len(rs) > 1 else rs
        med = lambda k: statistics.median(r[k] for r in steady) if all(k in r for r in steady) else None  # noqa: E731
        out[str(length)] = {
            "rows": len(rs), "rows_in_medians": len(steady), "median_tokens_per_s": med("tokens_per_s"), "median_mfu": med("mfu"),
            "median_data_wait": med("data_wait"), "max_data_wait": max((r["data_wait"] for r in steady if "data_wait" in r), default=None),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="a pretraining run's log.jsonl")
    ap.add_argument("--json", help="also write the medians here")
    a = ap.parse_args()
    try:
        rows = [json.loads(line) for line in Path(a.log).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        sys.exit(f"cannot read {a.log}: {e}")
    if not rows:
        sys.exit(f"{a.log} holds no logged steps")
    print(f"{'step':>6} {'len':>4} {'tokens/s':>12} {'mfu':>6} {'data_wait':>9}")
    for r in rows:
        mfu = f"{r['mfu']:.3f}" if "mfu" in r else "-"
        wait = f"{r['data_wait']:.3f}" if "data_wait" in r else "-"
        print(f"{r['step']:>6} {r.get('seq_len', 0):>4} {r['tokens_per_s']:>12,.0f} {mfu:>6} {wait:>9}")
    s = summarize(rows)
    for length, m in s.items():
        print(f"seq {length}: {m['rows_in_medians']} rows: median {m['median_tokens_per_s']:,.0f} tokens/s, MFU {m['median_mfu']}, "
              f"data_wait median {m['median_data_wait']} (max {m['max_data_wait']})")
    if a.json:
        Path(a.json).write_text(json.dumps({"log": a.log, "by_seq_len": s}, indent=1))


if __name__ == "__main__":
    main()
