"""Issue 58, before and after: do positions past 128 work, and does KorQuAD in 384-token windows hold?

    python benchmarks/long_positions.py --arm before --steps 10000 --seeds 42 43 44
    python benchmarks/long_positions.py --arm after  --steps 10000 --seeds 42 43 44     # --after-set: the change
    python benchmarks/long_positions.py --collect                                       # both arms -> the result file

Each arm is the `cpu` preset as it was before issue 58 (PINNED) on a step budget (the tokenizer study's), run alone:
    korbert run --preset cpu --out WORK/ARM --workers 2 --set pretrain.max_minutes=0 pretrain.max_steps=N
        pretrain.precision=P nsmc.seed=42 korquad.seed=42 [PINNED] [the arm's settings]
(P: --precision, default auto as the preset: bf16 on a CPU with bf16 instructions). An arm after the
first starts from a copy of the `before` arm's vocabulary (the recipe rebuilds it if its inputs or
settings differ), so the arms share their tokenizer and the position texts chosen with it; it reads the
before arm's shards, those its settings leave as they were (reused_shards), instead of building them again.

then, on the model it pretrained and on its control (same architecture, random initialization):
KorQuAD in 128-token windows (stride 32, query 40: the preset's) and in 384-token windows (stride 128,
query 64) with --epoch-window 128/32/40 (the steps of the 128-token run: matched), and NSMC-R, once
per seed (the recipe ran seed 42 at 128, whatever --seeds says; the rest run here, cached like the recipe's evals, so a killed
arm resumes); and, first of the evals and cached too, the position measure (`korbert eval positions`) on
held-out kowiki articles chosen once (`korbert eval positions-texts`, after the preset's first 8,000) and read by both arms.

The model is also fine-tuned at 384 by the preset's epochs alone (`korquad384_epochs`: fewer steps than at 128), so the
fine-tuning budget's share of the 384-token gap is read on the same model. Further arms, one candidate each, with
--positions-only (pretraining and the position measure, no fine-tuning): `--arm schedule --set pretrain.long_schedule=own
pretrain.long_warmup=0.1`, `--arm copy --set pretrain.long_init=copy`, `--arm long-docs --set shards_long.min_chars=1000`.
An arm that differs from a pretrained one only in the long phase's settings starts from that run's switch (`--set
pretrain.fork_from=WORK/ARM/pretrain`: korbert/fork.py checks the key): the long phase alone, the same weights as the whole run.
--collect writes --result (default benchmarks/results/long-positions-cpu.json) with a `before` and an
`after` object: mlm_acc_by_position / mlm_acc_128_reference and their token counts, korquad_f1_128,
korquad_f1_384, korquad_f1_384_epochs and nsmc (means over the seeds), their per-seed values and ranges, the control's, the
seeds, the commands and each arm's ratios (ratio_position_B: bucket B over its 128-token reference;
ratio_korquad_f1_384_to_128), printed side by side. --smoke runs the whole path at a tiny scale on the embedded sample (the demo
preset with a 512-token phase, a few steps, two seeds): a check of the script, not a measurement.
An arm committed beside --stages (NAME-pretrain-manifest.json), before and after too, can be made again on a fresh
machine for more fine-tunings (`--positions-only --tasks korquad384`; --collect --committed joins them to its rows):
it stops before any fine-tuning unless its final/ holds the committed weights, config and tokenizer (so such an arm takes
--positions-only: the whole recipe would fine-tune first; the commands above are for arms not yet committed).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the candidates built for issue 58: the long phase's own warmup and decay, its new positions copied from the trained ones,
# and long shards of long documents only (1,000 characters and up: no review reaches it, so no instance is a one-line review)
AFTER = ["pretrain.long_schedule=own", "pretrain.long_warmup=0.1", "pretrain.long_init=copy", "shards_long.min_chars=1000"]
# the cpu preset's long phase every arm here was measured from (with its document instances): pinned, so `before`
# stays the preset as it was and each arm's --set is its change (the recipe records the same values as then)
from korbert.recipe import LONG_PHASE_BEFORE_58 as PINNED  # noqa: E402
RECIPE_SEED = 42
TASKS = ["nsmc", "nsmc_control", "korquad", "korquad_control", "korquad384", "korquad384_control", "korquad384_epochs"]
WIDE = dict(max_len=384, stride=128, max_query_len=64, epoch_window="128/32/40")
SMOKE = ["pretrain.max_tokens=0", "shards_long.max_seq_len=512", "nsmc.max_train_examples=300", "nsmc.max_eval_examples=200",
         "korquad.max_train_examples=60", "korquad.max_eval_examples=30"]


def command(c, task: str, *, tool: str = "eval") -> str:
    """The `korbert eval TASK` (or `korbert TOOL`, task "") command line of a config: its fields that differ from the defaults."""
    from corpus_tools import config as C

    default = C.to_dict(type(c)())
    flags = []
    for k, v in C.to_dict(c).items():
        if v != default.get(k):
            flag = "--" + k.replace("_", "-")
            flags += ([flag] if v is True else [f"--no-{k.replace('_', '-')}"] if v is False
                      else [flag, *map(str, v)] if isinstance(v, list) else [flag, str(v)])
    return shlex.join(["korbert", tool, *([task] if task else []), *flags])


def arm_paths(work: Path, arm: str) -> Path:
    return work / arm


def recipe_command(args, run: Path, sets: list[str]) -> list[str]:
    preset = "demo" if args.smoke else "cpu"
    # the recipe's fine-tuning seed is the first default one whatever --seeds says: its results are that seed's
    # (eval_configs), so `--seeds 43 44` on an arm must not rerun the recipe's folder under 43 over 42's
    base = ["pretrain.max_minutes=0", f"pretrain.max_steps={args.steps}", f"pretrain.precision={args.precision}", f"nsmc.seed={RECIPE_SEED}",
            f"korquad.seed={RECIPE_SEED}", *PINNED, *(SMOKE if args.smoke else ["shards_long.instances=document"])]
    return [sys.executable, "-m", "korbert.cli", "run", "--preset", preset, "--out", str(run), *(["--data", args.data] if args.data else []),
            *(["--workers", str(args.workers)] if args.workers else []), "--set", *base, *sets]


def reused_shards(work: Path, arm: str, sets: list[str], run: Path) -> list[str]:
    """--set items by which an arm after `before` reads the before arm's shards instead of building the same
    again (a quarter of an hour each on 2 cores): the 128-token ones unless the arm sets shards.*, the long ones
    too unless it sets shards_long.*. The folder and tokenizer path are the strings the before arm's recipe
    recorded, so the recipe finds them up to date; replace=false makes any difference an error instead of a
    rebuild of the before arm's folder. An arm started before keeps the choice its recipe-config.json records
    (the other choice is another run key: its pretraining would start over)."""
    b = arm_paths(work, "before")
    if arm == "before" or any(s.startswith("shards.") for s in sets) or not (ROOT / b / "recipe-config.json").is_file():
        return []
    before = json.loads((ROOT / b / "recipe-config.json").read_text(encoding="utf-8"))
    mine = json.loads((ROOT / run / "recipe-config.json").read_text(encoding="utf-8")) if (ROOT / run / "recipe-config.json").is_file() else None
    finished = (ROOT / before["shards"]["out"] / "manifest.json").is_file()
    if mine is not None:
        short = mine["shards"]["out"] == before["shards"]["out"]
        long_ = short and "shards_long" in mine and mine["shards_long"]["out"] == before.get("shards_long", {}).get("out")
    else:
        short = finished
        long_ = short and "shards_long" in before and (ROOT / before["shards_long"]["out"] / "manifest.json").is_file() \
            and not any(s.startswith("shards_long.") for s in sets)
    if not short:
        return []
    if not finished:
        raise SystemExit(f"{run} reads {before['shards']['out']}, which holds no finished shards now: restore the before arm's shards")
    out = [f"shards.out={before['shards']['out']}", f"shards.tokenizer={before['shards']['tokenizer']}", "shards.replace=false",
           f"pretrain.shards={before['shards']['out']}"]
    if long_:
        out.append(f"shards_long.out={before['shards_long']['out']}")
    elif not any(s.startswith("shards_long.out=") for s in sets):  # its own long shards: keyed on its own vocabulary
        out += [f"shards_long.tokenizer={run / 'vocab'}", "shards_long.replace=true"]  # folder, rebuilt when their settings change
    # (else another arm's long shards, named by --set shards_long.out= .tokenizer= .replace=false: its strings, as it recorded them)
    return out


def eval_configs(run: Path, seed: int, saved: dict | None = None) -> dict:
    """{name: config} of one seed: korquad at 128 and at 384 (matched steps) and NSMC-R, model and control, and the
    model's korquad at 384 by epochs (korquad384_epochs). `saved`: the run's recipe-config.json (default: read it)."""
    from evals import features as F
    from evals.korquad import KorquadConfig
    from evals.nsmc import NsmcConfig

    saved = saved or json.loads((run / "recipe-config.json").read_text(encoding="utf-8"))
    out = {}
    for task, cls in (("nsmc", NsmcConfig), ("korquad", KorquadConfig)):
        for side in ("", "_control"):
            c = cls(**saved[task + side])
            where = "control" if side else "model"
            shared = replace(c, seed=seed, features=c.features or str(F.default_dir(c.out)))  # (every seed reads one feature cache)
            first = seed == saved[task]["seed"]
            # the recipe's seed: its own config, so that its cached result is found (another `features` is another key)
            out[f"{task}{side}"] = c if first else replace(shared, out=str(run / f"seed-{seed}" / task / where))
            if task == "korquad":
                out[f"korquad384{side}"] = replace(shared, out=str(run / f"seed-{seed}" / "korquad384" / where), **WIDE)
                if not side:  # the budget by epochs alone at 384: fewer steps (the model only)
                    out["korquad384_epochs"] = replace(out["korquad384"], out=str(run / f"seed-{seed}" / "korquad384-epochs" / where), epoch_window="")
    return out


def run_evals(run: Path, seeds: list[int], force: bool, tasks: list[str] | None = None, stages: Path | None = None, final: Path | None = None) -> dict:
    from evals import korquad, nsmc
    from korbert.recipe import _cached, _folder_key, eval_key

    done = {}
    for seed in seeds:
        for name, c in eval_configs(run, seed).items():
            if tasks is not None and name not in tasks:
                continue
            module = nsmc if name.startswith("nsmc") else korquad
            print(f"\n== {run.name}: {name} (seed {seed}) ==", flush=True)
            r, skipped = _cached(Path(c.out), eval_key(c, _folder_key(c.model, weights=not c.control)), lambda: module.main(c), force)
            done[(name, seed)] = (r, command(c, "nsmc" if name.startswith("nsmc") else "korquad"))
            if skipped:
                print(f"up to date ({c.out})")
            if stages is not None:  # (kept as each ends: a killed arm keeps its finished fine-tunings)
                keep_stages(run, {(name, seed): done[(name, seed)]}, stages, final)
    return done


STAGES = ROOT / "benchmarks" / "results" / "long-positions-cpu" / "stages"  # committed eval markers, by arm and folder
CONTROL_TASKS = [t for t in TASKS if t.endswith("_control")]
STAND_IN = "control-stand-in"  # the manifest kind of a final/ that holds what a control reads, and no weights


def keep_stages(run: Path, done: dict, stages: Path, final: Path | None = None) -> list[str]:
    """Copy each eval's marker (recipe-stage.json: its key and result) under stages/ARM/, by its folder's path
    within the run: a session on a fresh machine restores them (restore_stages) and reruns none whose key still
    holds; first, given the arm's `final` (arm(): the model it checked), NAME-pretrain-manifest.json beside stages/ (a copy
    of its manifest, if none is there), which a rerun's same_as_committed checks its model against. Returns the markers written."""
    from corpus_tools.artifacts import atomic_write_bytes

    out, manifest = [], stages.parent / f"{run.name}-pretrain-manifest.json"
    if done:  # (the manifest, never a stand-in's; the config --collect --committed rebuilds the folders and commands from)
        if final is not None and final_kind(final) == "model" and not manifest.is_file():
            atomic_write_bytes(manifest, (final / "manifest.json").read_bytes())
        atomic_write_bytes(stages / run.name / "recipe-config.json", (run / "recipe-config.json").read_bytes())
    configs = {seed: eval_configs(run, seed) for seed in sorted({seed for _, seed in done})}  # (read once per seed)
    for (name, seed), (_, _) in sorted(done.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        c = configs[seed][name]
        rel = Path(c.out).relative_to(run)
        target = stages / run.name / rel / "recipe-stage.json"
        atomic_write_bytes(target, (Path(c.out) / "recipe-stage.json").read_bytes())
        out.append(str(target))
    return out


def restore_stages(run: Path, stages: Path) -> int:
    """Put the committed markers of this arm back into its run folder (never over one the run holds). `_cached` then
    reuses a result only where the key it computes now (config, model folder's files, input files) is the marker's."""
    from corpus_tools.artifacts import atomic_write_bytes

    n = 0
    for marker in sorted((stages / run.name).rglob("recipe-stage.json")) if (stages / run.name).is_dir() else []:
        target = run / marker.relative_to(stages / run.name)
        if not target.is_file():
            atomic_write_bytes(target, marker.read_bytes())
            n += 1
    return n


def stand_in_final(saved: dict, manifest: Path) -> Path:
    """The arm's final/ as a control reads it, without pretraining: config.json and the tokenizer files, made as the
    export makes them (korbert.checkpoint.model_config and export) and checked against `manifest`, the committed
    final/manifest.json of the arm's pretraining (byte for byte, config.json's transformers_version stamp aside). No
    weights: open_folder refuses it for a pretrained model's eval; its manifest's kind is no model's, so a pretraining here still replaces it."""
    from corpus_tools.artifacts import atomic_write_json, sha256_file
    from korbert import foreign
    from korbert.checkpoint import export, model_config
    from korbert.folders import file_sha256_as_written_by
    from korbert.model import KorBertForPreTraining
    from korbert.pretrain_config import PretrainConfig

    pc = PretrainConfig(**saved["pretrain"])
    final = Path(pc.out) / "final"
    def refuse_a_model():  # (checked again before the swap: a pretraining may export there meanwhile)
        if final_kind(final) not in (None, STAND_IN) or (final / "model.safetensors").exists():
            raise SystemExit(f"{final} holds a pretrained model now (manifest kind {final_kind(final)!r}, weights: "
                             f"{(final / 'model.safetensors').exists()}): not replaced by a stand-in")

    refuse_a_model()
    want = json.loads(manifest.read_text(encoding="utf-8"))
    tok = foreign.load(saved["vocab"]["out"], saved["vocab"]["out"])
    length = max(saved["shards"]["max_seq_len"], saved.get("shards_long", {}).get("max_seq_len", 0))
    tmp = final.with_name("final.stand-in")
    shutil.rmtree(tmp, ignore_errors=True)
    export(KorBertForPreTraining(model_config(pc, None, None, False, len(tok), length)), tok, tmp, {"trained_seq_len": want["trained_seq_len"]})
    for name in ("model.safetensors", "manifest.json", "README.md"):
        (tmp / name).unlink(missing_ok=True)
    files = sorted(p.name for p in tmp.iterdir() if p.is_file())
    got = {n: sha256_file(tmp / n) for n in files}
    wanted = set(want["files"]) - {"model.safetensors"}
    differ = sorted({n for n in files if file_sha256_as_written_by(tmp / n, want.get("versions", {}).get("transformers")) != want["files"].get(n)}
                    | (wanted ^ set(files)))
    if differ:
        raise SystemExit(f"{tmp} is not {manifest}'s final/: {', '.join(differ)} differ, are missing or are extra, "
                         "so its controls would not be that run's")
    atomic_write_json(tmp / "manifest.json", {"kind": STAND_IN, "format_version": 1, "matches": str(manifest), "files": got})
    refuse_a_model()
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def final_kind(final: Path) -> str | None:
    """The kind final/manifest.json records (model, or STAND_IN), None where there is none to read."""
    try:
        return json.loads((final / "manifest.json").read_text(encoding="utf-8")).get("kind")
    except (FileNotFoundError, ValueError):
        return None


def controls_only(args) -> dict:
    """The arm's controls alone (same architecture, random init: no shards, no pretraining), for a session too
    short for the whole arm: the recipe's config and vocabulary, a stand-in final/ checked against
    --final-manifest (stand_in_final), the control fine-tunings of every seed, their markers kept under --stages."""
    from corpus_tools import config as C
    from corpus_tools import vocab as vocab_stage
    from corpus_tools.artifacts import atomic_write_json
    from korbert.recipe import RecipeConfig, stage_configs

    work = Path(args.work)
    run = arm_paths(work, args.arm)
    sets = (args.after_set if args.arm == "after" else []) + args.set
    cmd = recipe_command(args, run, sets + reused_shards(work, args.arm, sets, run))  # (the command arm() runs)
    cfg = C.parse(RecipeConfig, cmd[cmd.index("run") + 1:], prog="korbert run")
    cfgs = stage_configs(cfg)["cfgs"]
    saved = {"recipe": C.to_dict(cfg), **{k: C.to_dict(v) for k, v in cfgs.items()}}
    if (run / "recipe-config.json").is_file():  # (one the recipe wrote, with --preprocess-only or without)
        def stages(d):
            return {**d, "recipe": {k: v for k, v in d["recipe"].items() if k not in ("preprocess_only", "set")}}  # (the stages hold --set)

        if stages(json.loads((run / "recipe-config.json").read_text(encoding="utf-8"))) != stages(saved):
            raise SystemExit(f"{run / 'recipe-config.json'} holds another configuration than {shlex.join(cmd[3:])}: use another --work")
    else:
        run.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run / "recipe-config.json", saved)  # (what the recipe writes first: eval_configs reads it)
    restored = restore_stages(run, Path(args.stages))
    if restored:
        print(f"{run}: {restored} eval markers restored from {args.stages} (each reused only if its key holds)", flush=True)
    vocab_stage.main(cfgs["vocab"])
    final = Path(cfgs["pretrain"].out) / "final"
    made = final_kind(final) != "model"
    if made:
        print(f"{stand_in_final(saved, Path(args.final_manifest))}: a stand-in for the controls (config and tokenizer "
              f"files equal to {args.final_manifest}'s)", flush=True)
    try:
        done = run_evals(run, args.seeds, args.force, CONTROL_TASKS, Path(args.stages))
    finally:
        if made and final_kind(final) == STAND_IN:  # (never a model a pretraining exported there meanwhile)
            shutil.rmtree(final, ignore_errors=True)
    print(f"controls: {len(done)} markers under {args.stages}/{run.name}", flush=True)
    return {f"{name}-seed{seed}": r["metrics"] for (name, seed), (r, _) in done.items()}


def positions(args, run: Path, work: Path) -> tuple[dict, list[str]]:
    """The texts (chosen once, from the first arm's tokenizer) and the position measure of this arm's model."""
    from corpus_tools import SAMPLE_DATA
    from korbert.recipe import _cached, _folder_key, eval_key
    from evals.positions import PositionsConfig, TextsConfig, main, select_texts
    from korbert.folders import tokenizer_files_sha256
    from corpus_tools.artifacts import atomic_write_json

    texts, marker, vocab = work / "positions-texts.jsonl", work / "positions-texts.json", run / "vocab"
    from korbert.data_get import default_folder

    corpus = SAMPLE_DATA / "petitions.jsonl.gz" if args.smoke else Path(args.data or default_folder()) / "corpus" / "kowiki.jsonl.gz"
    tc = TextsConfig(corpus=str(corpus),
                     tokenizer=str(vocab), out=str(texts), **({"skip_first": 0, "every": 3, "windows": 12} if args.smoke else {}))
    if not marker.is_file():
        sel = select_texts(tc)
        atomic_write_json(marker, {"tokenizer": tokenizer_files_sha256(vocab), "selection": sel})
    if json.loads(marker.read_text())["tokenizer"] != tokenizer_files_sha256(vocab):
        raise SystemExit(f"{texts} was chosen with another tokenizer than {vocab}'s: the arms must share their vocabulary")
    pc = PositionsConfig(model=str(run / "pretrain" / "final"), texts=str(texts), out=str(run / "positions"), **({"min_per_bucket": 10} if args.smoke else {}))
    # cached like the evals, by their key: its settings, the model folder and the texts' content
    r, skipped = _cached(Path(pc.out), eval_key(pc, _folder_key(pc.model)), lambda: main(pc), args.force)
    if skipped:
        print(f"positions: up to date ({pc.out})", flush=True)
    return r, [command(tc, "positions-texts"), command(pc, "positions")]


def summary(values: dict) -> dict:
    vals = list(values.values())
    return {"mean": round(sum(vals) / len(vals), 2), "range": [min(vals), max(vals)], "seeds": values}


def ratios(r: dict) -> dict:
    """An arm's ratios: each position bucket in 512-token windows over its 128-token reference (>= 1:
    the positions work), and KorQuAD F1 at 384 over 128 with matched steps (>= 1: the window holds)."""
    ref = r["mlm_acc_128_reference"]
    out = {f"ratio_position_{b}": round(a / ref[b], 4) if a is not None and ref.get(b) else None for b, a in r["mlm_acc_by_position"].items()}
    if r.get("korquad_f1_128") and "korquad_f1_384" in r:
        out["ratio_korquad_f1_384_to_128"] = round(r["korquad_f1_384"] / r["korquad_f1_128"], 4)
    return out


def per_seed(evals: dict) -> dict:
    """{"model": {figure: {seed: value}}, "control": ...} of run_evals' results: NSMC-R accuracy, KorQuAD EM, F1
    and optimizer steps by window (128, 384, 384_epochs)."""
    per = {"model": {}, "control": {}}
    for (name, seed), (r, _) in evals.items():
        side = "control" if name.endswith("_control") else "model"
        task = name.removesuffix("_control")
        if task == "nsmc":
            per[side].setdefault("nsmc", {})[seed] = round(100 * r["metrics"]["accuracy"], 2)
        else:
            w = {"korquad": "128", "korquad384": "384", "korquad384_epochs": "384_epochs"}[task]
            per[side].setdefault(f"korquad_f1_{w}", {})[seed] = round(r["metrics"]["f1"], 2)
            per[side].setdefault(f"korquad_em_{w}", {})[seed] = round(r["metrics"]["exact_match"], 2)
            per[side].setdefault(f"korquad_steps_{w}", {})[seed] = r["training"]["steps"]
    return {side: {k: dict(sorted(v.items())) for k, v in sorted(figs.items())} for side, figs in per.items()}


def record(pos: dict, evals: dict, pm: dict, sets: list[str], precision: str, commands: list[str]) -> dict:
    """An arm's record: its position measure, the means and per-seed values of its fine-tunings and its
    control's, its pretraining (final/manifest.json: `pm`), its settings and commands."""
    per = per_seed(evals)
    seeds = sorted({seed for _, seed in evals})
    return {
        "mlm_acc_by_position": pos["mlm_acc_by_position"], "mlm_acc_128_reference": pos["mlm_acc_128_reference"],
        "gap_se": pos.get("gap_se"), "masked_tokens": pos["masked_tokens"], "position_windows": pos["windows"], "texts": {k: pos["texts"][k] for k in ("path", "sha256", "documents")},
        **{k: summary(v)["mean"] for k, v in per["model"].items() if not k.startswith("korquad_steps")},
        **({} if not evals else {"per_seed": {k: summary(v) for k, v in per["model"].items()},
                                 "control": {k: summary(v) for k, v in per["control"].items()}, "seeds": seeds}),
        "settings": sets, "precision": precision,
        "pretrain": {k: pm.get(k) for k in ("step", "tokens", "seconds", "run_key", "trained_seq_len", "long_steps", "long_phase", "hardware", "eval")},
        "commands": commands,
    }


def committed_arm(name: str, results: Path, stages: Path, seeds: list[int]) -> dict:
    """An arm's record from what was committed, for sessions on fresh machines that keep no run folders: its
    position measure (NAME-positions.json), its final/manifest.json (NAME-pretrain-manifest.json), and each
    fine-tuning of `seeds` that has a kept marker (stages/NAME/, in the folders its recipe config names) or a
    result file an earlier session committed (NAME-TASK-seedS.json). An arm with no control of its own takes the
    before arm's where its final/ held the same config.json and tokenizer files (so the same control)."""
    from corpus_tools import config as C
    from evals.korquad import KorquadConfig
    from evals.nsmc import NsmcConfig
    from evals.positions import PositionsConfig
    from korbert.pretrain_config import PretrainConfig

    if not (results / f"{name}-positions.json").is_file():
        raise SystemExit(f"{results}: no {name}-positions.json, so no committed arm {name!r}")

    def known(cls, d):  # (a manifest's config also records what the run added, e.g. world_size)
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    saved = json.loads((stages / name / "recipe-config.json").read_text(encoding="utf-8")) if (stages / name / "recipe-config.json").is_file() else None
    pm = json.loads((results / f"{name}-pretrain-manifest.json").read_text(encoding="utf-8"))
    pos = json.loads((results / f"{name}-positions.json").read_text(encoding="utf-8"))
    run = Path(pm["config"]["out"]).parent  # (the run folder its configs name, as its recipe laid it out)
    evals = {}
    for seed in seeds:
        configs = eval_configs(run, seed, saved) if saved else {}
        for task in TASKS:
            marker = stages / name / Path(configs[task].out).relative_to(run) / "recipe-stage.json" if task in configs else None
            plain = results / f"{name}-{task}-seed{seed}.json"
            if marker is not None and marker.is_file():
                r = json.loads(marker.read_text(encoding="utf-8"))["result"]
            elif plain.is_file():
                r = json.loads(plain.read_text(encoding="utf-8"))
            else:
                continue
            if task in configs:  # (a file left from another configuration of the arm is not this one's result)
                want = C.to_dict(configs[task])  # (less `features`: where the cache sits, an absolute path, changes no result;
                ran = {**C.to_dict(type(configs[task])()), **r["config"]}  # a setting added since counts at its default)
                differ = sorted(k for k in set(want) | set(ran) if k != "features" and want.get(k) != ran.get(k))
                if differ:
                    raise SystemExit(f"{marker if marker is not None and marker.is_file() else plain} ran with other settings "
                                     f"({', '.join(differ)}) than {stages / name / 'recipe-config.json'} gives for {task}, seed {seed}")
            tool = "nsmc" if task.startswith("nsmc") else "korquad"
            evals[(task, seed)] = (r, command(known(NsmcConfig if tool == "nsmc" else KorquadConfig, r["config"]), tool))  # (the config it ran)
    arm_file = results / f"{name}-arm.json"
    old = json.loads(arm_file.read_text(encoding="utf-8")) if arm_file.is_file() else {}
    ran = old.get("commands") or [command(known(PretrainConfig, pm["config"]), "", tool="pretrain"), command(known(PositionsConfig, pos["config"]), "positions")]
    out = record(pos, evals, pm, old.get("settings", []), old.get("precision") or pm["config"].get("precision_used"),
                 [*ran, *sorted({c for _, c in evals.values()} - set(ran))])
    tuned = [s for s in out["settings"] if s.startswith(("nsmc", "korquad"))]  # (its fine-tunings' settings: then not before's control)
    if name != "before" and not out.get("control", {}).get("korquad_f1_128") and (stages / "before").is_dir() and not tuned:
        bm = json.loads((results / "before-pretrain-manifest.json").read_text(encoding="utf-8"))
        if {k: v for k, v in pm["files"].items() if k != "model.safetensors"} == {k: v for k, v in bm["files"].items() if k != "model.safetensors"}:
            out["control"] = committed_arm("before", results, stages, seeds).get("control", {})
            out["control_from"] = "before (its final/ held the same config.json and tokenizer files: the same control)"
    return out


def same_as_committed(final: Path, committed: Path) -> None:
    """Stop where an arm pretrained again is another model than its committed final/ manifest (NAME-pretrain-manifest.json beside
    --stages) records: its fine-tunings would join that arm's committed rows. Every file it lists but the copied korbert/*.py is
    compared by content (bf16 kernels differ between CPUs; config.json's transformers_version stamp aside: the library's, not the model's)."""
    from corpus_tools.artifacts import machine
    from korbert.folders import file_sha256_as_written_by

    if not committed.is_file():
        return
    want = json.loads(committed.read_text(encoding="utf-8"))
    tv = want.get("versions", {}).get("transformers")
    differ = [n for n, h in want["files"].items() if not n.endswith(".py") and not ((final / n).is_file() and file_sha256_as_written_by(final / n, tv) == h)]
    if differ:
        raise SystemExit(f"{final}: {', '.join(differ)} differ from {committed}'s (pretrained on {want.get('hardware')}; "
                         f"this machine: {machine()['cpu']}): another model, whose fine-tunings cannot join that arm's committed "
                         "rows; pretrain it on the kind of CPU it ran on, or pass --stages outside benchmarks/results for a new measurement")
    print(f"{final}: the committed arm's model ({committed.name}: its weights, config and tokenizer files equal)", flush=True)


def arm(args) -> dict:
    from corpus_tools.artifacts import atomic_write_json
    from korbert.folders import tokenizer_files_sha256
    from korbert.runtime import resolve_precision

    work = Path(args.work)
    run = arm_paths(work, args.arm)
    sets = (args.after_set if args.arm == "after" else []) + args.set
    restored = restore_stages(run, Path(args.stages))  # (before the recipe: its own seed's evals read them too)
    if restored:
        print(f"{run}: {restored} eval markers restored from {args.stages} (each reused only if its key holds)", flush=True)
    cmd = recipe_command(args, run, sets + reused_shards(work, args.arm, sets, run))
    first = arm_paths(work, "before") / "vocab"
    preprocess = [*cmd[:cmd.index("--set")], "--preprocess-only", *cmd[cmd.index("--set"):]]
    shared = args.arm != "before" and (first / "manifest.json").is_file()
    if shared and not (run / "vocab").exists():
        run.mkdir(parents=True, exist_ok=True)  # (a copy, never a link: a rebuild must not touch the before arm's)
        shutil.rmtree(run / "vocab.partial", ignore_errors=True)  # (a copy a kill cut short)
        shutil.copytree(first, run / "vocab.partial")
        (run / "vocab.partial").rename(run / "vocab")
        print(f"{run / 'vocab'}: copied from {first}", flush=True)
    if shared or args.positions_only:  # (the vocabulary checked before hours of pretraining; --positions-only pretrains alone)
        print("+", shlex.join(preprocess), flush=True)
        subprocess.run(preprocess, check=True, cwd=ROOT)
    if shared and tokenizer_files_sha256(run / "vocab") != tokenizer_files_sha256(first):
        raise SystemExit(f"{run / 'vocab'} is not {first}'s vocabulary (the recipe rebuilt it: other inputs or settings?); "
                         "the arms must share it")
    if args.positions_only:  # the recipe's pretraining stage alone, after its preprocessing above (the recipe would fine-tune too)
        from korbert.pretrain import main as pretrain
        from korbert.pretrain_config import PretrainConfig

        pc = PretrainConfig(**json.loads((run / "recipe-config.json").read_text(encoding="utf-8"))["pretrain"])
        print("+", command(pc, "", tool="pretrain"), flush=True)
        pretrain(pc)
        ran = [shlex.join(["korbert", *preprocess[3:]]), command(pc, "", tool="pretrain")]
    else:
        print("+", shlex.join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        ran = [shlex.join(["korbert", *cmd[3:]])]
    same_as_committed(run / "pretrain" / "final", Path(args.stages).parent / f"{args.arm}-pretrain-manifest.json")
    pos, pos_cmds = positions(args, run, work)  # (first: the arm's own figure, minutes, before hours of fine-tuning)
    evals = run_evals(run, args.seeds, args.force, args.tasks, Path(args.stages), run / "pretrain" / "final") if args.tasks or not args.positions_only else {}
    pm = json.loads((run / "pretrain" / "final" / "manifest.json").read_text(encoding="utf-8"))
    out = record(pos, evals, pm, sets, resolve_precision(args.precision, cuda=False), [*ran, *sorted({c for _, c in evals.values()}), *pos_cmds])
    atomic_write_json(run / "long-positions-arm.json", out)
    print(f"\n{args.arm}: {json.dumps({k: out[k] for k in ('mlm_acc_by_position', 'mlm_acc_128_reference')})}")
    return out


def collect(args) -> dict:
    from corpus_tools.artifacts import atomic_write_json, machine, versions

    work = Path(args.work)
    if args.committed:  # from the committed files: --committed NAME names the arm that stands as `after`
        results = Path(args.stages).parent
        names = sorted(p.name.removesuffix("-positions.json") for p in results.glob("*-positions.json"))
        if "before" not in names or args.committed not in names or args.committed == "before":
            raise SystemExit(f"--committed {args.committed}: {results} holds the position measures of {names}; before and it are needed")
        got = {a: committed_arm(a, results, Path(args.stages), args.seeds) for a in names}
        arms = {"before": got.pop("before"), "after": {**got.pop(args.committed), "arm": args.committed}}
        others = {(f"{a} (earlier arm)" if a == "after" else a): r for a, r in got.items()}  # (its name now stands for ARM)
    else:
        arms = {a: json.loads((arm_paths(work, a) / "long-positions-arm.json").read_text(encoding="utf-8")) for a in ("before", "after")}
        others = {d.name: json.loads((d / "long-positions-arm.json").read_text(encoding="utf-8")) for d in sorted(work.iterdir())
                  if d.name not in arms and (d / "long-positions-arm.json").is_file()}
    precisions = {a: r.get("precision") for a, r in {**arms, **others}.items()}
    if len(set(precisions.values())) > 1:
        raise SystemExit(f"the arms pretrained in other precisions ({precisions}): run them with the same --precision on the same kind of CPU")
    rat = {a: ratios(r) for a, r in {**arms, **others}.items()}
    result = {
        "about": "issue 58: positions past 128 and KorQuAD at 384 vs 128 (matched steps), before and after (each arm's settings: "
                 "`settings`); benchmarks/long_positions.py",
        "preset": "demo (smoke)" if args.smoke else "cpu",
        "steps": args.steps if not args.committed else {a: r["pretrain"].get("step") for a, r in {**arms, **others}.items()},
        **{a: {**r, **rat[a]} for a, r in arms.items()},
        **({"decomposition": {a: {**r, **rat[a]} for a, r in others.items()}} if others else {}),
        "machine": machine() if not args.committed else {  # (each fine-tuning's own is in its result file)
            "collected_on": machine(), "pretrained_on": {a: r["pretrain"].get("hardware") for a, r in {**arms, **others}.items()}},
        "versions": versions(),
    }
    keys = list(dict.fromkeys(k for got in rat.values() for k in got))
    w = max(12, *map(len, rat)) + 1
    print("arm".ljust(w) + "".join(k.removeprefix("ratio_").rjust(26) for k in keys))
    for a, got in rat.items():
        print(a.ljust(w) + "".join(f"{got[k]:26.4f}" if got.get(k) is not None else "-".rjust(26) for k in keys))
    atomic_write_json(args.result, result)
    print(f"-> {args.result}")
    return result


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", help="before, after (with --after-set), or any name for one more arm with its own --set (e.g. schedule)")
    ap.add_argument("--collect", action="store_true")
    ap.add_argument("--committed", metavar="ARM", default="",
                    help="with --collect: read the arms from the committed files beside --stages (no run folders), ARM standing as `after`")
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[RECIPE_SEED, 43, 44])
    ap.add_argument("--data", default="")
    ap.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"], help="pretraining precision, the same for every arm")
    ap.add_argument("--workers", type=int, default=2, help="Dask workers for the shards (0: one process)")
    ap.add_argument("--work", default="runs/long-positions")
    ap.add_argument("--after-set", nargs="*", default=AFTER, help="the after arm's --set items (default: %(default)s)")
    ap.add_argument("--set", nargs="*", default=[], help="--set items for both arms")
    ap.add_argument("--result", default=str(ROOT / "benchmarks" / "results" / "long-positions-cpu.json"))
    ap.add_argument("--smoke", action="store_true", help="the demo preset on the embedded sample, tiny: checks the script end to end")
    ap.add_argument("--positions-only", action="store_true",
                    help="the recipe's preprocessing and pretraining, then the position measure: no fine-tuning (the decomposition's arms)")
    ap.add_argument("--tasks", nargs="+", choices=TASKS,
                    help="only these fine-tunings (e.g. nsmc beside --positions-only: a candidate's cost at 128 before its full arm)")
    ap.add_argument("--controls-only", action="store_true",
                    help="the arm's control fine-tunings alone, on a stand-in of its final/ (no pretraining) checked against --final-manifest")
    ap.add_argument("--final-manifest", default="", help="with --controls-only: the committed final/manifest.json of the arm's pretraining")
    ap.add_argument("--stages", default=str(STAGES), help="where each eval's marker (key and result) is kept, and restored from (default: %(default)s)")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    stages_used = not args.collect or bool(args.committed)
    if args.smoke and (args.result.startswith(str(ROOT / "benchmarks")) or stages_used and str(Path(args.stages).resolve()).startswith(str(ROOT / "benchmarks"))):
        raise SystemExit("--smoke: pass --result and --stages outside benchmarks/results (a smoke run is not a measurement)")
    if args.collect:
        return collect(args)
    if not args.arm:
        ap.error("--arm before|after, or --collect")
    committed = (Path(args.stages).parent / f"{args.arm}-pretrain-manifest.json").is_file()  # (its rows join it: --collect --committed)
    if args.tasks and args.arm in ("before", "after") and not committed:
        ap.error("--tasks is for the decomposition's arms: before and after run every fine-tuning (--collect reads them whole), "
                 "unless the arm's pretraining is committed beside --stages")
    if committed and not args.positions_only and not args.controls_only:  # (the recipe fine-tunes before same_as_committed)
        ap.error(f"{args.arm}'s pretraining is committed beside --stages: make it again with --positions-only (and --tasks)")
    if args.controls_only:
        if not args.final_manifest:
            ap.error("--controls-only needs --final-manifest (the arm's committed final/manifest.json)")
        return controls_only(args)
    if args.positions_only and args.arm in ("before", "after") and not committed:
        ap.error("--positions-only is for the decomposition's arms: before and after are fine-tuned too, "
                 "unless the arm's pretraining is committed beside --stages")
    return arm(args)


if __name__ == "__main__":
    main()
