"""Issue 61: ELECTRA against masked-LM pretraining at equal compute, each scored against its own random-init control.

    python benchmarks/electra_vs_mlm.py --steps 1634 --seeds 42 43 --data ../shared/data
    python benchmarks/electra_vs_mlm.py --time-only --data ../shared/data      # the step-time ratio alone

Both arms read the same shards: the `cpu` preset's corpus, vocabulary and long phase, with MLM-only instances
(`shards.nsp=false`: ELECTRA has no use for random B segments; packed, since the shards stage builds no
document instances without NSP), and the preset's model size, rows per step, lr and schedule. The MLM arm
is `--objective mlm` for --steps optimizer steps; the ELECTRA arm (`--objective electra`, generator at --generator-size) gets the steps that cost the same time: --steps / (its step time / MLM's), the
two step times measured first, one after the other, each alone (--time-steps steps after --time-skip, from
the loop's own clock, which leaves out start-up and evaluation), with the load average recorded. Then NSMC-R
and KorQuAD (the preset's settings and 128-token windows; KLUE tasks with --klue) fine-tune each pretrained
model and its control (the same architecture, randomly initialized: a BERT for MLM, an ELECTRA discriminator
for ELECTRA) over every --seed. Every stage is cached by content (the recipe's keys): a killed run resumes.

Writes benchmarks/results/electra-vs-mlm-cpu.json: one row per (objective, model or control, seed) with the
scores, the pretraining tokens and steps; per objective the mean gain over its control with its range;
`ratio_step_time_electra_vs_mlm` and `ratio_korquad_f1_gain_electra_vs_mlm`.
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
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    first = next(r for r in rows if r["step"] >= skip)
    last = rows[-1]
    return (last["seconds"] - first["seconds"]) / max(last["step"] - first["step"], 1)


def arms_plan(preset: str, work: Path, data: str, workers: int, klue: list[str], extra: list[str]) -> dict:
    """The recipe's stage settings both arms share: the preset's, with MLM-only shards. Without NSP pairs the
    shards stage takes packed instances only (a document's instances are A/B pairs), so both phases' shards are
    packed: rows of up to the preset's lengths, the preset's rows per step (more tokens a step than its document
    instances hold at the same lr)."""
    from corpus_tools import config as C
    from korbert.recipe import RecipeConfig, stage_configs

    recipe = C.parse(RecipeConfig, ["--preset", preset, "--out", str(work / "shared"), *(["--data", data] if data else []), "--workers", str(workers),
                                    "--klue", *(klue or ["none"]), "--set", "shards.nsp=false", "shards.instances=packed", *extra], prog="electra_vs_mlm")
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
    from korbert.recipe import _cached, _folder_key, eval_key

    data = a.data or os.environ.get("KORBERT_DATA", "")
    work = Path(a.work)
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
    old = json.loads(timed.read_text(encoding="utf-8")) if timed.is_file() and not a.time_only else {}
    times = old.get("times", {}) if old.get("what") == what and set(old.get("times", {})) == {"mlm", "electra"} else {}
    if times:
        load.update(old.get("load", {}))
        print(f"step times from {timed}, measured on {(old.get('machine') or {}).get('cpu')}: {times}", flush=True)
        if old.get("machine") != machine():
            print(f"note: this machine is {machine()}; delete {timed} to time the arms here", file=sys.stderr, flush=True)
    for objective in [] if times else ("mlm", "electra"):
        c = replace(arm(objective, a.time_skip + a.time_steps, f"time-{objective}"), long_shards="", log_every=10 if a.time_steps >= 50 else 1, eval_every=0, save_every=10**6,
                    force=True)  # (timed from nothing every time: a resumed log would mix two runs)
        load[f"before_time_{objective}"] = os.getloadavg()
        pretrain_stage.main(c)
        times[objective] = step_seconds(Path(c.out) / "log.jsonl", a.time_skip)
        print(f"{objective}: {times[objective] * 1000:.1f} ms per step", flush=True)
    timed_on = old.get("machine") if old.get("times") == times else machine()
    if not a.time_only and old.get("times") != times:
        atomic_write_json(timed, {"what": what, "times": times, "machine": timed_on, "load": {k: v for k, v in load.items() if k.startswith("before_time")}})
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
    steps = {"mlm": a.steps, "electra": max(1, round(a.steps / ratio))}
    rows = []
    from evals.klue import main as klue_main
    from korbert.recipe import klue_upstream
    from korbert.recipe_klue import TASKS

    pretrained = {}
    for objective in ("mlm", "electra"):  # both pretrainings first (the costly, resumable part), then every fine-tuning
        load[f"before_{objective}"] = os.getloadavg()
        pretrained[objective] = pretrain_stage.main(arm(objective, steps[objective], objective))
    for objective in ("mlm", "electra"):
        pm = pretrained[objective]
        final = str(work / objective / "final")
        upstreams = {row: _folder_key(final, weights=row == "model") for row in ("model", "control")}  # (hashed once, not per seed)
        for seed in a.seeds:
            for row in ("model", "control"):
                upstream = upstreams[row]
                scores = {}
                for task, module, c in (("nsmc", nsmc_stage, cfgs["nsmc"]), ("korquad", korquad_stage, cfgs["korquad"])):
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
                rows.append({"objective": objective, "row": row, "seed": seed, "steps": pm["step"], "tokens": pm["tokens"],
                             "pretrain_seconds": pm["seconds"], "held_out": pm.get("eval"), "scores": scores})
                print(objective, row, seed, json.dumps(scores), flush=True)
    load["end"] = os.getloadavg()

    def gains(objective: str, task: str, metric: str) -> list[float]:
        by = {(r["row"], r["seed"]): r["scores"][task][metric] for r in rows if r["objective"] == objective and task in r["scores"]}
        scale = 100 if task == "nsmc" else 1  # (NSMC's accuracy is a fraction, KorQuAD's EM and F1 are points)
        return [round(scale * (by[("model", s)] - by[("control", s)]), 2) for s in a.seeds if ("model", s) in by and ("control", s) in by
                and None not in (by[("model", s)], by[("control", s)])]

    summary = {}
    for objective in ("mlm", "electra"):
        for task, metric in (("nsmc", "accuracy"), ("korquad", "f1"), ("korquad", "exact_match")):
            g = gains(objective, task, metric)
            if g:
                summary[f"{objective} {task} {metric} gain"] = {"per_seed": g, "mean": round(sum(g) / len(g), 2), "range": round(max(g) - min(g), 2)}
    kq = [summary.get(f"{o} korquad f1 gain", {}).get("mean") for o in ("electra", "mlm")]
    result.update(steps=steps, settings={"pretrain": C.to_dict(cfgs["pretrain"]), "nsmc": C.to_dict(cfgs["nsmc"]), "korquad": C.to_dict(cfgs["korquad"])},
                  rows=rows, gains=summary, load_average=load,
                  ratio_korquad_f1_gain_electra_vs_mlm=round(kq[0] / kq[1], 4) if None not in kq and kq[1] else None)
    atomic_write_json(Path(a.out), result)
    for k, v in summary.items():
        print(f"{k}: {v['mean']:+.2f} (range {v['range']:.2f}; {v['per_seed']})")
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
