"""`korbert shards` in one process (Kiwi on every core) against `--workers N` (a local Dask
cluster, one Kiwi thread per worker), side by side on the same inputs and options: wall time, CPU
time, and whether the two outputs are byte-identical. Each run is its own `korbert shards`
subprocess, in alternating order; CPU seconds are the children's (workers included).

From the pieces' own accounts (the manifest's `run.cpu_seconds`, summed over tasks): the share of a
task's CPU spent on its main thread (reading + JSON + cleaning, the tokenizer's Python side, BERT's
recipe) and the part of that spent reading. Kiwi's threads take the rest.

    python benchmarks/shards_dask.py --tokenizer runs/bench/vocab --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402

SHARED = default_folder() / "corpus"
DEFAULT_INPUTS = [str(SHARED / "reviews.jsonl.gz"), str(SHARED / "petitions.jsonl.gz"), str(SHARED / "kowiki.jsonl.gz") + "@20000"]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def build(a, out: Path, workers: int) -> dict:
    cmd = [sys.executable, "-m", "korbert.cli", "shards", "--tokenizer", a.tokenizer, "--inputs", *a.inputs, "--out", str(out),
           "--force", "--show", "0", *(["--workers", str(workers)] if workers else []), *a.extra]
    cpu0, t = children_cpu(), time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall, cpu = time.time() - t, children_cpu() - cpu0
    log = p.stdout + p.stderr
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}:\n{log[-3000:]}")
    m = json.loads((out / "manifest.json").read_text())
    tasks = m["run"]["cpu_seconds"]
    main = tasks.get("read", 0) + tasks.get("tokenize", 0) + tasks.get("recipe", 0)
    return {
        "command": " ".join(cmd[1:]),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "tasks_cpu_seconds": tasks,
        "share_of_task_cpu_on_main_thread": round(main / tasks["process"], 3),
        "share_of_task_cpu_reading": round(tasks.get("read", 0) / tasks["process"], 3),
        "cpu_outside_tasks_seconds": round(cpu - tasks["process"], 1),  # the driver (gz decompression), Dask, Kiwi loading
        "MB": round(m["counts"]["bytes"] / 1e6, 1),
        "MB_per_s": round(m["counts"]["bytes"] / 1e6 / wall, 3),
        "pieces": m["counts"]["pieces"],
        "documents_in": m["counts"]["documents_in"],
        "train_instances": m["counts"]["train"]["instances"],
        "files": m["files"],
        "tail": log.strip().splitlines()[-4:],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--inputs", nargs="+", default=DEFAULT_INPUTS)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--work", default="runs/bench/shards-dask")
    ap.add_argument("--result", default="benchmarks/results/shards-dask.json")
    ap.add_argument("extra", nargs="*", help="more `korbert shards` options for both runs (after --)")
    a = ap.parse_args()
    work = Path(a.work)
    load = [os.getloadavg()[0]]
    runs: dict[str, list] = {"single": [], f"workers{a.workers}": []}
    for r in range(a.rounds):
        order = [("single", 0), (f"workers{a.workers}", a.workers)]
        for name, n in order if r % 2 == 0 else order[::-1]:
            res = build(a, work / name, n)
            print(f"round {r} {name}: {res['wall_seconds']} s wall, {res['cpu_seconds']} s CPU, {res['MB_per_s']} MB/s, "
                  f"main thread {res['share_of_task_cpu_on_main_thread']} of task CPU (reading {res['share_of_task_cpu_reading']})", flush=True)
            runs[name].append(res)
            load.append(os.getloadavg()[0])
    single, multi = runs["single"], runs[f"workers{a.workers}"]
    identical = all(x["files"] == single[0]["files"] for x in single + multi)
    best = lambda rs: min(x["wall_seconds"] for x in rs)  # noqa: E731
    out = {
        "command": "python " + " ".join(sys.argv),
        "machine": machine(),
        "load_average_1min": load,
        "inputs": a.inputs,
        f"ratio_workers{a.workers}_vs_single": round(best(single) / best(multi), 3),  # speed: > 1 is faster
        "byte_identical_shards_and_manifest_files": identical,
        "runs": {k: [{kk: vv for kk, vv in x.items() if kk != "files"} for x in v] for k, v in runs.items()},
        "files_compared": len(single[0]["files"]),
    }
    atomic_write_json(a.result, out)
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
