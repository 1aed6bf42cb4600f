"""Issue 61: ELECTRA against masked-LM pretraining at equal compute, each scored against its own random-init control.

    python benchmarks/electra_vs_mlm.py --steps 1634 --seeds 42 43 --data ../shared/data
    python benchmarks/electra_vs_mlm.py --time-only --data ../shared/data      # the step-time ratio alone

Both arms read the same shards: the `cpu` preset's corpus, vocabulary and long phase (before issue 58), with MLM-only instances
(`shards.nsp=false`: ELECTRA has no use for random B segments; packed, since the shards stage builds no
document instances without NSP), and the preset's model size, rows per step, lr and schedule. The MLM arm
is `--objective mlm` for --steps optimizer steps; the ELECTRA arm (`--objective electra`, generator at --generator-size) gets the steps that cost the same time: --steps / (its step time / MLM's), the
two step times measured first, one after the other, each alone (--time-steps steps after --time-skip, from
the loop's own clock, which leaves out start-up and evaluation), with the load average recorded. Then NSMC-R
and KorQuAD (the preset's settings and 128-token windows; KLUE tasks with --klue) fine-tune each pretrained
model and its control (the same architecture, randomly initialized: a BERT for MLM, an ELECTRA discriminator
for ELECTRA) over every --seed. Every stage is cached by content (the recipe's keys): a killed run resumes.

Writes benchmarks/results/electra-vs-mlm-cpu.json: one row per (objective, model or control, seed) with the
scores, the pretraining tokens and steps; per objective and metric the mean gain over its control with its range;
`ratio_step_time_electra_vs_mlm` and `ratio_korquad_f1_gain_electra_vs_mlm`.

To add tasks to a finished run on a fresh machine (its pretrained models are not kept), run it again with
--tasks naming the fine-tunings to run (none: only --klue's) and --scores-from the earlier result. That
result's steps and step times are taken (no new timing), its file, rows and settings are checked first, and the
rest of each row's scores come from there, only where each arm's pretraining reproduced that result's exactly
(the same steps, tokens and held-out metrics, and the same logged losses as the pretraining logs kept beside
it, RESULT-STEM/OBJECTIVE-pretrain-log.jsonl) and the fine-tunings it leaves out ran with this run's settings;
otherwise it stops and says what differs.

    python benchmarks/electra_vs_mlm.py --steps 1634 --seeds 42 43 --data ../shared/data --klue nli sts ner --tasks \
        --scores-from benchmarks/results/electra-vs-mlm-cpu.json --set shards_long.max_seq_len=128 pretrain.long_phase=0
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


def step_seconds(log: Path, skip: int) -> float:
    """Seconds per optimizer step after the first `skip` (the loop's clock: training time only)."""
    rows = log_rows(log)
    first = next(r for r in rows if r["step"] >= skip)
    last = rows[-1]
    return (last["seconds"] - first["seconds"]) / max(last["step"] - first["step"], 1)


CLOCK = ("seconds", "tokens_per_s", "data_wait", "tflops")  # a pretraining log's fields that depend on the machine's speed


def log_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def reproduced(objective: str, pm: dict, log: Path, earlier: dict, earlier_logs: Path) -> list[str]:
    """What differs between this run's pretraining of `objective` and the earlier result's (empty: nothing): its
    rows' steps, tokens and held-out metrics, and every logged field but the clock's against the kept log."""
    old = [r for r in earlier["rows"] if r["objective"] == objective]
    if not old:
        return [f"{objective}: the earlier result has no rows"]
    diffs = [f"{objective} {k}: {old[0][k]!r} then, {v!r} now" for k, v in (("steps", pm["step"]), ("tokens", pm["tokens"]), ("held_out", pm.get("eval")))
             if old[0][k] != v]
    kept = earlier_logs / f"{objective}-pretrain-log.jsonl"
    if not kept.is_file():
        return diffs + [f"{objective}: no kept pretraining log at {kept}"]
    then, now = ([{k: v for k, v in r.items() if k not in CLOCK} for r in log_rows(f)] for f in (kept, log))
    if then != now:
        at = next((i for i, (a, b) in enumerate(zip(then, now)) if a != b), min(len(then), len(now)))
        diffs.append(f"{objective}: the pretraining log differs from {kept} at its row {at + 1} "
                     f"({len(then)} rows then, {len(now)} now)")
    return diffs


def gains(rows: list[dict], seeds: list[int]) -> dict:
    """Per objective, task and metric: each seed's model-minus-control gain, their mean and range. NSMC's accuracy is
    a fraction (its gain in points), the other tasks' metrics are points."""
    out = {}
    for objective in ("mlm", "electra"):
        mine = [r for r in rows if r["objective"] == objective]
        tasks = list(dict.fromkeys(t for r in mine for t in r["scores"]))
        for task in tasks:
            metrics = list(dict.fromkeys(m for r in mine for m, v in r["scores"].get(task, {}).items()  # (any row's: one may score None)
                                         if isinstance(v, (int, float)) and not isinstance(v, bool) and m != "valid_accuracy"))
            for metric in metrics:
                by = {(r["row"], r["seed"]): r["scores"].get(task, {}).get(metric) for r in mine}
                scale = 100 if task == "nsmc" else 1
                g = [round(scale * (by[("model", s)] - by[("control", s)]), 2) for s in seeds
                     if None not in (by.get(("model", s)), by.get(("control", s)))]
                if g:
                    out[f"{objective} {task} {metric} gain"] = {"per_seed": g, "mean": round(sum(g) / len(g), 2), "range": round(max(g) - min(g), 2)}
    return out


ROW_FIELDS = ("objective", "row", "seed", "steps", "tokens", "held_out", "scores")
PATHS = ("model", "out", "features", "seed", "control")  # a fine-tuning's settings that name its row or its folders


def read_earlier(path: str, seeds: list[int], steps: int) -> dict:
    """An earlier result of this benchmark whose scores may stand in (--scores-from), checked before any work: one
    line on what is wrong with it, not a traceback after the pretrainings."""
    try:
        earlier = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        sys.exit(f"--scores-from {path}: not readable as JSON ({e})")
    rows = earlier.get("rows") if isinstance(earlier, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(k in r for k in ROW_FIELDS) for r in rows):
        sys.exit(f"--scores-from {path}: not a result of this benchmark (rows with {', '.join(ROW_FIELDS)})")
    if not isinstance(earlier.get("steps"), dict) or set(earlier.get("step_seconds") or {}) != {"mlm", "electra"}:
        sys.exit(f"--scores-from {path}: it records no steps and step times per objective")
    if earlier["steps"].get("mlm") != steps:
        sys.exit(f"--scores-from {path}: its MLM arm ran {earlier['steps'].get('mlm')} steps, not --steps {steps}")
    have = {(r["objective"], r["row"], r["seed"]) for r in rows}
    missing = [f"{o} {row} seed {s}" for o in ("mlm", "electra") for s in seeds for row in ("model", "control") if (o, row, s) not in have]
    if missing:
        sys.exit(f"--scores-from {path}: no row for {', '.join(missing)}")
    return earlier


def settings_differ(then: dict, now: dict) -> list[str]:
    """The settings of a fine-tuning that differ between an earlier run and this one, leaving out those that name
    its row, seed or folders, and its input files' paths (the data folder may sit elsewhere)."""
    def kept(d):
        return {k: v for k, v in d.items() if k not in PATHS and not (isinstance(v, str) and Path(v).suffix in (".txt", ".json", ".tsv", ".jsonl"))}

    a, b = kept(then), kept(now)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def arms_plan(preset: str, work: Path, data: str, workers: int, klue: list[str], extra: list[str]) -> dict:
    """The recipe's stage settings both arms share: the preset's, with MLM-only shards. Without NSP pairs the
    shards stage takes packed instances only (a document's instances are A/B pairs), so both phases' shards are
    packed: rows of up to the preset's lengths, the preset's rows per step (more tokens a step than its document
    instances hold at the same lr)."""
    from corpus_tools import config as C
    from korbert.recipe import LONG_PHASE_BEFORE_58, RecipeConfig, stage_configs

    # (the preset's long phase as this comparison ran it, before issue 58's defaults: a run again reproduces it)
    recipe = C.parse(RecipeConfig, ["--preset", preset, "--out", str(work / "shared"), *(["--data", data] if data else []), "--workers", str(workers),
                                    "--klue", *(klue or ["none"]), "--set", "shards.nsp=false", "shards.instances=packed", *LONG_PHASE_BEFORE_58, *extra], prog="electra_vs_mlm")
    return stage_configs(recipe)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1634,
                    help="the MLM arm's optimizer steps (ELECTRA's: scaled by the step-time ratio); the default: about the KLUE study's tokens at these shards' tokens per step")
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43], help="fine-tuning seeds")
    ap.add_argument("--data", default="", help="the data folder (default: $KORBERT_DATA)")
    ap.add_argument("--work", default="runs/electra-vs-mlm")
    ap.add_argument("--generator-size", type=float, default=0.25)
    ap.add_argument("--workers", type=int, default=2, help="Dask workers for the shards (0: one process)")
    ap.add_argument("--time-steps", type=int, default=120, help="steps timed per objective (after --time-skip)")
    ap.add_argument("--time-skip", type=int, default=20)
    ap.add_argument("--time-only", action="store_true", help="measure the step-time ratio and stop")
    ap.add_argument("--klue", nargs="*", default=[], help="KLUE tasks to score too (nli sts ner ynat), where the data folder has them")
    ap.add_argument("--tasks", nargs="*", default=["nsmc", "korquad"], choices=["nsmc", "korquad"],
                    help="the fine-tunings to run besides --klue's (--tasks alone: none)")
    ap.add_argument("--scores-from", default="", help="an earlier result of this benchmark: the scores of the tasks this run leaves out "
                    "come from its rows, where each arm's pretraining reproduces it exactly")
    ap.add_argument("--set", nargs="*", default=[], help="more `korbert run --set` settings for both arms")
    ap.add_argument("--preset", default="cpu", help="the recipe preset whose corpus, shapes and settings both arms take (demo: a smoke test)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "electra-vs-mlm-cpu.json"))
    a = ap.parse_args()

    from corpus_tools import config as C
    from corpus_tools import shards as shards_stage
    from corpus_tools import vocab as vocab_stage
    from corpus_tools.artifacts import atomic_write_json, machine
    from evals import korquad as korquad_stage
    from evals import nsmc as nsmc_stage
    from korbert import pretrain as pretrain_stage
    from korbert.electra import SAMPLER
    from korbert.recipe import KLUE_PER_ROW, _cached, _folder_key, eval_key

    data = a.data or os.environ.get("KORBERT_DATA", "")
    work = Path(a.work)
    left_out = [t for t in ("nsmc", "korquad") if t not in a.tasks]
    if left_out and not a.scores_from and not a.time_only and Path(a.out).resolve() == (ROOT / "benchmarks" / "results" / "electra-vs-mlm-cpu.json").resolve():
        sys.exit(f"--tasks leaves out {', '.join(left_out)}: the committed result would lose their scores; name --scores-from or another --out")
    plan = arms_plan(a.preset, work, data, a.workers, a.klue, a.set)
    cfgs = plan["cfgs"]
    load = {"start": os.getloadavg()}
    vocab_stage.main(cfgs["vocab"])
    shards_stage.main(cfgs["shards"])
    if "shards_long" in cfgs:
        shards_stage.main(cfgs["shards_long"])

    def arm(objective: str, steps: int, folder: str):
        extra = {"generator_size": a.generator_size} if objective == "electra" else {}
        return replace(cfgs["pretrain"], objective=objective, max_steps=steps, max_minutes=0.0, max_tokens=0,
                       out=str(work / folder), replace=True, **extra)

    # -- the step times, one after the other, each alone (the long phase left out: the same share for both),
    # measured once per work folder and settings (WORK/step-times.json): a resumed run keeps them, and with them the
    # ELECTRA arm's steps. --time-only measures them afresh and leaves that file alone; delete it to re-time a run.
    timed = work / "step-times.json"
    what = {"pretrain": C.to_dict(cfgs["pretrain"]), "generator_size": a.generator_size, "time_steps": a.time_steps, "time_skip": a.time_skip,
            "sampler": SAMPLER}  # (times taken with another sampler, such as the Gumbel-max one before it, are not reused)
    def measured_step_times() -> tuple[dict, dict | None]:
        old = json.loads(timed.read_text(encoding="utf-8")) if timed.is_file() and not a.time_only else {}
        times = old.get("times", {}) if old.get("what") == what and set(old.get("times", {})) == {"mlm", "electra"} else {}
        if times:
            load.update(old.get("load", {}))
            print(f"step times from {timed}, measured on {(old.get('machine') or {}).get('cpu')}: {times}", flush=True)
            if old.get("machine") != machine():
                print(f"note: this machine is {machine()}; delete {timed} to time the arms here", file=sys.stderr, flush=True)
        for objective in [] if times else ("mlm", "electra"):
            c = replace(arm(objective, a.time_skip + a.time_steps, f"time-{objective}"), long_shards="", log_every=10 if a.time_steps >= 50 else 1, eval_every=0,
                        save_every=10**6, force=True)  # (timed from nothing every time: a resumed log would mix two runs)
            load[f"before_time_{objective}"] = os.getloadavg()
            pretrain_stage.main(c)
            times[objective] = step_seconds(Path(c.out) / "log.jsonl", a.time_skip)
            print(f"{objective}: {times[objective] * 1000:.1f} ms per step", flush=True)
        timed_on = old.get("machine") if old.get("times") == times else machine()
        if not a.time_only and old.get("times") != times:
            atomic_write_json(timed, {"what": what, "times": times, "machine": timed_on, "load": {k: v for k, v in load.items() if k.startswith("before_time")}})
        return times, timed_on

    earlier = read_earlier(a.scores_from, a.seeds, a.steps) if a.scores_from and not a.time_only else None
    if earlier:  # (its scores stand only for its arms: the same steps, so its step times, not a new timing's)
        for task in ("nsmc", "korquad"):
            differ = [] if task in a.tasks else settings_differ(earlier.get("settings", {}).get(task, {}), C.to_dict(cfgs[task]))
            if differ:
                sys.exit(f"--scores-from {a.scores_from}: its {task} fine-tuning ran with other settings ({', '.join(differ)})")
        times, timed_on = dict(earlier["step_seconds"]), earlier.get("step_times_machine")
        print(f"step times and steps from {a.scores_from}: {times}", flush=True)
    else:
        times, timed_on = measured_step_times()
    ratio = times["electra"] / times["mlm"]
    result = {
        "what": "ELECTRA against MLM pretraining at equal compute, each against its random-init control (issue 61)",
        "command": " ".join(["python", "benchmarks/electra_vs_mlm.py", *sys.argv[1:]]), "machine": machine(), "step_times_machine": timed_on,
        "step_seconds": times, "ratio_step_time_electra_vs_mlm": round(ratio, 4), "load_average": load,
    }
    if a.time_only:
        atomic_write_json(Path(a.out).with_name(Path(a.out).stem + "-time.json"), result)
        print(f"ratio_step_time_electra_vs_mlm {ratio:.3f}")
        return

    # -- the two arms at equal compute, then their fine-tuning against their controls
    steps = dict(earlier["steps"]) if earlier else {"mlm": a.steps, "electra": max(1, round(a.steps / ratio))}
    rows = []
    from evals.klue import main as klue_main
    from korbert.recipe import klue_upstream
    from korbert.recipe_klue import TASKS

    pretrained = {}
    for objective in ("mlm", "electra"):  # both pretrainings first (the costly, resumable part), then every fine-tuning
        load[f"before_{objective}"] = os.getloadavg()
        pretrained[objective] = pretrain_stage.main(arm(objective, steps[objective], objective))
    if earlier:  # (the earlier run's scores stand for this run's only if its models are this run's)
        logs = Path(a.scores_from).with_suffix("")
        diffs = [d for o in ("mlm", "electra") for d in reproduced(o, pretrained[o], work / o / "log.jsonl", earlier, logs)]
        if diffs:
            sys.exit(f"--scores-from {a.scores_from}: this run's pretraining is not that result's, so its scores do not stand for it:\n  "
                     + "\n  ".join(diffs))
        print(f"both pretrainings reproduce {a.scores_from} (steps, tokens, held-out metrics, logged losses)", flush=True)
    for objective in ("mlm", "electra"):
        pm = pretrained[objective]
        final = str(work / objective / "final")
        upstreams = {row: _folder_key(final, weights=row == "model") for row in ("model", "control")}  # (hashed once, not per seed)
        for seed in a.seeds:
            for row in ("model", "control"):
                upstream = upstreams[row]
                scores = {}
                for task, module, c in [t for t in (("nsmc", nsmc_stage, cfgs["nsmc"]), ("korquad", korquad_stage, cfgs["korquad"])) if t[0] in a.tasks]:
                    c = replace(c, model=final, control=row == "control", seed=seed, out=str(work / objective / task / f"{row}-{seed}"))
                    r, _ = _cached(Path(c.out), eval_key(c, upstream), lambda: module.main(c), False)
                    scores[task] = r["metrics"]
                for k in plan["klue"]:
                    if k["row"] != "model":
                        continue
                    c = replace(k["cfg"], model=final, control=row == "control", seed=seed, out=str(work / objective / "klue" / f"{k['task']}-{row}-{seed}"))
                    key = eval_key(c, klue_upstream(upstream))  # (the recipe's KLUE key)
                    r, _ = _cached(Path(c.out), key, lambda: klue_main(TASKS[k["task"]], c), False)
                    scores[TASKS[k["task"]]] = {"protocol": r["protocol"]["name"], **r["metrics"]}
                taken = {}
                if earlier:
                    then = next(r["scores"] for r in earlier["rows"] if (r["objective"], r["row"], r["seed"]) == (objective, row, seed))
                    taken = {t: v for t, v in then.items() if t not in scores}
                rows.append({"objective": objective, "row": row, "seed": seed, "steps": pm["step"], "tokens": pm["tokens"],
                             "pretrain_seconds": pm["seconds"], "held_out": pm.get("eval"), "scores": {**taken, **scores},
                             **({"scores_from": {"file": a.scores_from, "tasks": list(taken)}} if taken else {})})
                print(objective, row, seed, json.dumps(scores), flush=True)
    load["end"] = os.getloadavg()

    summary = gains(rows, a.seeds)
    kq = [summary.get(f"{o} korquad f1 gain", {}).get("mean") for o in ("electra", "mlm")]
    result.update(steps=steps, settings={"pretrain": C.to_dict(cfgs["pretrain"]), "nsmc": C.to_dict(cfgs["nsmc"]), "korquad": C.to_dict(cfgs["korquad"]),
                                               **({"klue": {k["task"]: {f: v for f, v in C.to_dict(k["cfg"]).items() if f not in KLUE_PER_ROW}
                                                           for k in plan["klue"] if k["row"] == "model"}} if plan["klue"] else {})},
                  **({"scores_from": {"file": a.scores_from, "command": earlier.get("command"), "machine": earlier.get("machine"),
                                      "settings": {t: v for t, v in earlier.get("settings", {}).items() if t in ("nsmc", "korquad") and t not in a.tasks}}}
                     if earlier else {}),
                  rows=rows, gains=summary, load_average=load,
                  ratio_korquad_f1_gain_electra_vs_mlm=round(kq[0] / kq[1], 4) if None not in kq and kq[1] else None)
    atomic_write_json(Path(a.out), result)
    for k, v in summary.items():
        print(f"{k}: {v['mean']:+.2f} (range {v['range']:.2f}; {v['per_seed']})")
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
