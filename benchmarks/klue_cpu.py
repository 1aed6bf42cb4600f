"""Issue 60: KLUE scores of a pretrained model against its random-init control, side by side.

    python benchmarks/klue_cpu.py --model runs/cpu/pretrain/final --kind morpheme --seeds 42 43 \
        --data ../shared/data --work runs/klue-cpu

For each KLUE task whose dev file the data folder holds (NLI, STS, NER here; YNAT when present), and each
fine-tuning seed: `korbert eval <task>` on the model and on its control (the same config, randomly
initialized, the same fine-tuning), with the `cpu` preset's KLUE settings (korbert/recipe.py) unless
--set changes them. The protocol is the one the files allow: the published one with a train file, else
the KLUE dev-split (named in every row). Runs are cached by their results.json (same config: not run
again), so a killed benchmark resumes; rows are merged into --result by (kind, model folder, model or
control, seed, task), and a model retrained in its folder drops its earlier rows (each row holds the model's
key). Each row: kind, model or control, seed, task, protocol, the metrics, their 95% interval, seconds;
each pair a `ratio_<metric>` (model / control) and a gain in points.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _id(row: dict) -> tuple:
    return row["kind"], row["model"], row["row"], row["seed"], row["task"]


def merge_rows(before: dict, rows: list[dict], command: str, load: list) -> list[dict]:
    """The result file's rows after this run: the earlier file's rows this run did not redo (less those of a model
    since retrained: another `model_key`), then this run's. Each row names the command and the load it ran under;
    a row whose result was reused from an earlier run (`fresh` false) keeps that run's, where the file holds that
    same result (else, a run killed before it wrote the file: this run's)."""
    keys = {(r["kind"], r["model"]): r["model_key"] for r in rows}
    kept = [r for r in before["rows"]  # (a row from before rows held their model's key: kept, and matched by its result)
            if (r["kind"], r["model"]) not in keys or r.get("model_key", keys[r["kind"], r["model"]]) == keys[r["kind"], r["model"]]]
    for r in kept:  # (a file from before rows named their command: the file's)
        r.setdefault("command", before.get("command")), r.setdefault("load_average_start_end", before.get("load_average_start_end"))
    ran = {_id(r): r for r in kept}
    new = {}
    for r in rows:
        r = dict(r)
        old = None if r.pop("fresh") else ran.get(_id(r))
        if old is not None and (old["metrics"], old.get("seconds")) != (r["metrics"], r.get("seconds")):
            old = None
        new[_id(r)] = {**r, "command": old["command"] if old else command, "load_average_start_end": old["load_average_start_end"] if old else load}
    # a row redone takes its old place (the file's order stays); rows this run did not redo stay as they were
    return [new.pop(_id(r), r) for r in kept] + list(new.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the pretrained model folder (a korbert final/ or any local encoder)")
    ap.add_argument("--kind", default="morpheme", help="the row's tokenizer kind label (morpheme, morpheme-attached, plain)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    ap.add_argument("--data", default="", help="the data folder with klue/ (default: $KORBERT_DATA)")
    ap.add_argument("--tasks", nargs="+", default=["nli", "sts", "ner", "ynat"], help="those whose dev file is there run")
    ap.add_argument("--set", nargs="*", default=[], help="KlueConfig fields as field=value, over the cpu preset's")
    ap.add_argument("--work", default="runs/klue-cpu")
    ap.add_argument("--result", default=str(ROOT / "benchmarks" / "results" / "klue-cpu.json"))
    a = ap.parse_args()

    from corpus_tools.artifacts import atomic_write_json, machine
    from evals.klue import KlueConfig, main as run_task
    from evals.klue_data import dev_files, file_name
    from korbert.recipe import PRESETS, _coerce, _folder_key, eval_key, klue_upstream
    from korbert.recipe_klue import TASKS

    if not (a.data or os.environ.get("KORBERT_DATA")):
        sys.exit("klue_cpu.py: pass --data DIR (a data folder with klue/), or set $KORBERT_DATA")
    data = Path(a.data or os.environ["KORBERT_DATA"])
    found = dev_files(data)
    if not found:
        sys.exit(f"klue_cpu.py: {data}/klue/ holds no KLUE dev file (`korbert data get klue --out {data}`)")
    settings = {**PRESETS["cpu"]["klue"], **{k: _coerce(KlueConfig, k, v) for k, v in (x.split("=", 1) for x in a.set)}}
    work = Path(a.work) / a.kind
    rows, load = [], [list(os.getloadavg())]
    # what each row is keyed on: the model's files (weights too: retrained, its rows are redone) and the control's (no weights)
    folder_key = {"model": _folder_key(a.model), "control": _folder_key(a.model, weights=False)}
    for t in [t for t in a.tasks if t in found]:
        train = data / "klue" / file_name(t, "train")
        for seed in a.seeds:
            pair = {}
            for who in ("model", "control"):
                cfg = KlueConfig(**settings, model=a.model, dev_file=str(found[t]), train_file=str(train) if train.is_file() else "",
                                 out=str(work / t / f"{who}-{seed}"), features=str(work / t / "features"), seed=seed)
                cfg = replace(cfg, control=who == "control")
                done, marker = Path(cfg.out) / "results.json", Path(cfg.out) / "bench-key.json"
                # the recipe's key: the config, the model (retrained weights: run again), the files' content, the readers' version
                key = {"key": eval_key(cfg, klue_upstream(folder_key[who]))}
                old, fresh = json.loads(done.read_text(encoding="utf-8")) if done.is_file() else None, False
                if old is None or not marker.is_file() or json.loads(marker.read_text(encoding="utf-8")) != key:
                    t0, fresh = time.time(), True
                    old = run_task(TASKS[t], cfg)
                    atomic_write_json(marker, key)
                    print(f"{TASKS[t]} {who} seed {seed}: {old['metrics']} in {time.time() - t0:.0f} s", flush=True)
                pair[who] = old
                rows.append({"kind": a.kind, "model": a.model, "model_key": folder_key["model"], "row": who, "seed": seed, "task": TASKS[t], "protocol": old["protocol"]["name"],
                             "metrics": old["metrics"], "ci95": old.get("ci95", {}), "n": old["n"], "seconds": old["seconds"]["total"], "fresh": fresh})
            ctl = pair["control"]["metrics"]  # (a metric may be None: Pearson r of constant predictions)
            rows[-2]["gain_over_control"] = {k: round(v - ctl[k], 4) if None not in (v, ctl[k]) else None for k, v in pair["model"]["metrics"].items()}
            rows[-2].update({f"ratio_{k}": round(v / ctl[k], 4) if v is not None and ctl[k] else None for k, v in pair["model"]["metrics"].items()})
    load.append(list(os.getloadavg()))
    result_path = Path(a.result)
    command = " ".join(["python", "benchmarks/klue_cpu.py", *sys.argv[1:]])
    before = json.loads(result_path.read_text(encoding="utf-8")) if result_path.is_file() else {"rows": []}
    kept = merge_rows(before, rows, command, load)
    summary = {}
    for r in kept:
        if r["row"] == "model":
            for k, v in r["gain_over_control"].items():
                if v is not None:
                    summary.setdefault(f"{r['kind']} {r['task']} {k}", []).append(v)
    result = {
        "what": "KLUE scores of pretrained models against their random-init controls (issue 60)",
        "commands": list(dict.fromkeys(r["command"] for r in kept)),
        "machine": machine(), "settings": settings, "rows": kept,
        "mean_gain_over_control": {k: round(sum(v) / len(v), 4) for k, v in sorted(summary.items())},
    }
    atomic_write_json(result_path, result)
    for k, v in result["mean_gain_over_control"].items():
        print(f"{k}: gain over the control {v:+.2f} points (mean of {len(summary[k])} seeds)")
    print(f"-> {result_path}")


if __name__ == "__main__":
    main()
