"""Does morphology pay? The `cpu` preset once per tokenizer kind, scored over several fine-tuning seeds.

    python benchmarks/tokenizer_kinds_quality.py --kinds morpheme plain morpheme-attached --steps N --seeds 42 43

For each kind this runs

    korbert run --preset cpu --out WORK-KIND --set vocab.kind=KIND pretrain.max_minutes=0 pretrain.max_steps=N
        pretrain.precision=fp32 nsmc.seed=S1 korquad.seed=S1 [PINNED: the long phase as the study ran it]

and then, on the model that run pretrained, NSMC-R and KorQuAD again for every further seed, each
with its own random-init control (the run's fine-tuning settings from its recipe-config.json, only
the seed and the output folder changed). A step budget, not the preset's 30 minutes: every kind gets
the same optimizer steps of the same batch shape whatever the machine or what else runs on it, so
arms run on different days (or side by side) are comparable; fp32, so a CPU with bf16 instructions
computes what one without them does. Every stage is cached by content (the recipe's keys, and the same
keys here for the further seeds), so a killed study resumes where it stopped.

The text measurements of each kind's own vocabulary (tokens per character, lone "▁" share, byte
fallback, KorQuAD answer-boundary alignment) are taken on the same held-out text as
benchmarks/tokenizer_kinds.py. Preprocessing CPU per MB is that benchmark's (it times each stage
alone; the stage times of runs that share the machine are not measurements).

Writes --out (default benchmarks/results/tokenizer-kinds-cpu.json): each kind's scores per seed, their
means and spreads, each against its control; differences (points) and ratios are each kind's mean over
plain's (the baseline a user without Kiwi would run), over the seeds both finished. Only results of the
model and settings a run holds now are collected. With --copy-to, each run's report and results files
are copied there too. With --kinds-from, the kinds not rerun are compared from an earlier --out, once
their settings and inputs are checked against this run's (one kind rerun after its vocabulary changed):

    python benchmarks/tokenizer_kinds_quality.py --kinds morpheme-attached --steps N --seeds 42 43 \
        --kinds-from benchmarks/results/tokenizer-kinds-cpu.json --copy-to benchmarks/results/tokenizer-kinds-cpu
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402
from korbert.recipe import LONG_PHASE_BEFORE_58  # noqa: E402

KINDS = ("morpheme", "morpheme-attached", "plain")
# the preset's long phase as the study ran it (before issue 58's defaults), so that a run again reproduces it
PINNED = [*LONG_PHASE_BEFORE_58, "shards_long.instances=document"]
TASKS = ("nsmc", "nsmc_control", "korquad", "korquad_control")


def recipe_command(kind: str, run: Path, steps: int, seed: int, data: str, extra: list[str]) -> list[str]:
    sets = [f"vocab.kind={kind}", "pretrain.max_minutes=0", f"pretrain.max_steps={steps}", "pretrain.precision=fp32",
            f"nsmc.seed={seed}", f"korquad.seed={seed}", *PINNED, *extra]
    return [sys.executable, "-m", "korbert.cli", "run", "--preset", "cpu", "--out", str(run), *(["--data", data] if data else []),
            "--set", *sets]


def recipe_configs(saved: dict) -> dict:
    """The run's four fine-tuning configs, as its recipe-config.json (`saved`) holds them."""
    from evals.korquad import KorquadConfig
    from evals.nsmc import NsmcConfig

    return {t: (NsmcConfig if t.startswith("nsmc") else KorquadConfig)(**saved[t]) for t in TASKS}


def seed_configs(run: Path, saved: dict, seed: int) -> dict:
    """The run's four fine-tuning configs with another seed, each into run/seed-S/<task>/<model|control>,
    reading the run's feature caches (the same tokenizer and data: nothing is tokenized again)."""
    from evals import features as F

    out = {}
    for task, c in recipe_configs(saved).items():
        where = "control" if task.endswith("control") else "model"
        out[task] = replace(c, seed=seed, out=str(run / f"seed-{seed}" / task.split("_")[0] / where),
                            features=c.features or str(F.default_dir(c.out)))
    return out


def stage_key(c) -> str:
    """The key the recipe (and run_seed) caches an eval under: its config, the model it reads (a
    control: the model's config and tokenizer, not its weights) and its input files' content."""
    from korbert.recipe import _folder_key, eval_key

    return eval_key(c, _folder_key(c.model, weights=not c.control))


def run_seed(run: Path, seed: int, force: bool) -> dict:
    """NSMC-R and KorQuAD with this seed on the run's model and its control, cached like the recipe's evals."""
    from evals import korquad, nsmc
    from korbert.recipe import _cached

    saved = json.loads((run / "recipe-config.json").read_text(encoding="utf-8"))
    results = {}
    for task, c in seed_configs(run, saved, seed).items():
        module = nsmc if task.startswith("nsmc") else korquad
        print(f"\n== {run.name}: {task} (seed {seed}) ==", flush=True)
        results[task], skipped = _cached(Path(c.out), stage_key(c), lambda: module.main(c), force)
        if skipped:
            print(f"up to date ({c.out})")
    return results


def finished(c) -> dict | None:
    """The eval's results if it ran with this config on the model as it is now (its recipe-stage.json
    key matches), else None: results of an earlier model or other settings are never collected, and
    none while the model folder is absent (final/ not exported yet, or moved away)."""
    from korbert.recipe import cached_result

    if not (Path(c.model) / "config.json").is_file():
        return None
    return cached_result(Path(c.out), stage_key(c))


def trained_steps(cfg: dict, model: str) -> int | None:
    """The optimizer steps the exported model at `model` was trained for, if they are the run's budget
    (recipe-config.json's pretrain.max_steps), else None: a longer run started over an earlier one keeps
    the earlier final/ (and its evals) until it exports, and those are not this budget's results."""
    manifest = Path(model) / "manifest.json"
    if not manifest.is_file():
        return None
    step = json.loads(manifest.read_text(encoding="utf-8")).get("step")
    return step if step == cfg["pretrain"]["max_steps"] else None


def scores(r: dict) -> dict:
    m = r["metrics"]
    if r["task"] == "nsmc":
        return {"nsmc_acc": round(100 * m["accuracy"], 2)}
    return {"korquad_em": round(m["exact_match"], 2), "korquad_f1": round(m["f1"], 2)}


def summarize(per_seed: dict[int, dict]) -> dict:
    """{"model"|"control"|"gain": {metric: {"seeds": {seed: value}, "n", "mean", "spread"}}}; gain is
    model minus control per seed (what pretraining bought with this tokenizer); spread is max - min
    over the fine-tuning seeds (null with one seed)."""
    out: dict = {"model": {}, "control": {}, "gain": {}}
    for seed, res in per_seed.items():
        for task, r in res.items():
            side = "control" if task.endswith("control") else "model"
            for metric, v in scores(r).items():
                out[side].setdefault(metric, {"seeds": {}})["seeds"][seed] = v
    for metric, d in out["model"].items():
        ctl = out["control"].get(metric, {"seeds": {}})["seeds"]
        out["gain"][metric] = {"seeds": {s: round(v - ctl[s], 2) for s, v in d["seeds"].items() if s in ctl}}
    for side in out.values():
        for d in side.values():
            vals = list(d["seeds"].values())
            d["n"] = len(vals)
            d["mean"] = round(statistics.fmean(vals), 2) if vals else None
            d["spread"] = round(max(vals) - min(vals), 2) if len(vals) > 1 else None
    return out


def text_measures(vocab: Path, kind: str, korquad_dev: str, nsmc_test: str, cache: Path) -> dict:
    """The kind's own vocabulary on the held-out text; cached in `cache` by tokenizer and files."""
    from corpus_tools.artifacts import sha256_file
    from evals.tokenizer_metrics import answer_alignment, text_stats
    from korbert import foreign
    from korbert.folders import tokenizer_files_sha256
    from tokenizer_kinds import held_out

    key = [tokenizer_files_sha256(vocab), sha256_file(korquad_dev), sha256_file(nsmc_test)]
    if cache.is_file() and (old := json.loads(cache.read_text(encoding="utf-8"))).get("key") == key:
        return old["measures"]
    texts, answers = held_out(Path(korquad_dev), Path(nsmc_test))
    tok = foreign.load(vocab, kind)
    measures = {"vocab_size": len(tok), "held_out": {name: text_stats(tok, t) for name, t in texts.items()},
                "korquad_answer_alignment": answer_alignment(tok, answers)}
    atomic_write_json(cache, {"key": key, "measures": measures})
    return measures


def collect(run: Path, kind: str, seeds: list[int], copy_to: str) -> dict | None:
    """One kind's vocabulary measures once its vocabulary is built, and its scores once `korbert run`
    finished (only those of the model and settings the run holds now); None before its vocabulary."""
    from tokenizer_kinds import vocabulary

    if not (run / "recipe-config.json").is_file() or not (run / "vocab" / "manifest.json").is_file():
        return None
    cfg = json.loads((run / "recipe-config.json").read_text(encoding="utf-8"))
    measures = {"vocabulary": vocabulary(run / "vocab"), **text_measures(
        run / "vocab", kind, cfg["korquad"]["dev_file"], cfg["nsmc"]["test"], run / "tokenizer-text-measures.json")}
    if not (run / "report.json").is_file():
        return {"run": str(run), "finished": False, **measures}
    recipe = recipe_configs(cfg)
    steps = trained_steps(cfg, recipe["nsmc"].model)
    first = {t: finished(c) for t, c in recipe.items()}
    if steps is None or any(r is None for r in first.values()):
        return {"run": str(run), "finished": False, **measures}
    ran = first["nsmc"]["config"]["seed"]
    per_seed, where = {ran: first}, {ran: {t: c.out for t, c in recipe.items()}}
    for seed in seeds:
        if seed != ran:
            configs = seed_configs(run, cfg, seed)
            res = {t: finished(c) for t, c in configs.items()}
            if all(r is not None for r in res.values()):
                per_seed[seed], where[seed] = res, {t: c.out for t, c in configs.items()}
    for seed, res in per_seed.items():
        assert all(r["config"]["seed"] == seed for r in res.values()), (run, seed)
    report = json.loads((run / "report.json").read_text(encoding="utf-8"))
    pre = report["pretraining"]
    if copy_to:
        dest = Path(f"{copy_to}-{kind}")
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("report.md", "report.json", "recipe-config.json"):
            shutil.copy(run / name, dest / name)
        if (run / "plots").is_dir():
            shutil.copytree(run / "plots", dest / "plots", dirs_exist_ok=True)
        for seed, outs in where.items():
            for task, out in outs.items():
                shutil.copy(Path(out) / "results.json", dest / f"{task}-seed{seed}-results.json")
    return {
        "run": str(run), "finished": True, "steps": steps, "seeds": sorted(per_seed),
        "pretraining": {
            **{k: pre[k] for k in ("steps", "tokens", "tokens_per_instance") if k in pre},
            # over each kind's own tokens: not comparable across kinds
            "own_vocabulary_held_out": {k: pre[k] for k in ("held_out_mlm_accuracy", "held_out_mlm_loss", "held_out_nsp_accuracy") if k in pre},
        },
        "scores": summarize(per_seed),
        **measures,
        "inputs": inputs(report, first["nsmc"], first["korquad"]), "library_versions": first["nsmc"].get("versions", {}),
        "protocols": {"nsmc": report["finetuning"]["nsmc"]["protocol"], "korquad": first["korquad"]["protocol"]["name"]},
    }


def settings(cfg: dict) -> dict:
    """A run's recipe-config.json (`cfg`) with what names its kind taken out: its run folder (as "RUN"),
    vocab.kind and the --set entry that chose it, and the TF-IDF baseline's analyzer (it follows the kind)."""
    run = json.dumps(cfg["recipe"]["out"], ensure_ascii=False)[1:-1]
    cfg = json.loads(json.dumps(cfg, ensure_ascii=False).replace(f'"{run}"', '"RUN"').replace(f'"{run}/', '"RUN/'))
    cfg["recipe"]["set"] = [s for s in cfg["recipe"]["set"] if not s.startswith("vocab.kind=") and s not in PINNED]  # (the rows before had none)
    cfg["vocab"].pop("kind", None)
    cfg.get("baseline", {}).pop("analyzer", None)
    return cfg


_ABSENT = "(absent)"


def differences(a, b, where: str = "") -> list[str]:
    """Where two settings trees differ, as "key: a -> b" lines (a key only one side has included)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in differences(a.get(k, _ABSENT), b.get(k, _ABSENT), f"{where}.{k}" if where else str(k))]
    return [] if a == b and (a is _ABSENT) == (b is _ABSENT) else [f"{where}: {a!r} -> {b!r}"]


def inputs(report: dict, nsmc: dict, korquad: dict) -> dict:
    """What a run read, by content: the corpus (documents and characters read, the same for every kind)
    and the NSMC-R and KorQuAD files' hashes (from its report and its seed's results files)."""
    return {"corpus": {k: report["corpus"][k] for k in ("documents", "characters")},
            **{f"{task}.{name}": f["sha256"] for task, r in (("nsmc", nsmc), ("korquad", korquad)) for name, f in r["data"].items()}}


def _versions(kind: str, vocabulary: dict) -> list[str]:
    """Where a kind's vocabulary (a row's `vocabulary` record) is not the one the code builds now: a
    *_version the code builds otherwise, or does not know. A row that records none is taken as version 1
    of its kind (rows before the record: a plain row is accepted, a morpheme-attached one is not)."""
    from corpus_tools.vocab import ATTACH_VERSION
    from korbert.plain import VERSION as PLAIN_VERSION

    now = {"attach_version": ATTACH_VERSION, "plain_version": PLAIN_VERSION}
    mine = {"morpheme-attached": "attach_version", "plain": "plain_version"}.get(kind)
    got = {k: v for k, v in vocabulary.items() if k.endswith("_version")}
    if mine and mine not in got:
        got[mine] = 1
    same = {("plain_version", 1): 2}  # plain version 2 changed only the offsets of byte-fallback runs: same ids
    return [f"{k} {v}{'' if k in vocabulary else ' (not recorded: taken as 1)'} (the code builds {now[k]})" if k in now
            else f"{k} {v} (a version this code does not know)" for k, v in got.items()
            if now.get(k) != v and same.get((k, v)) != now.get(k)]


def earlier_kinds(path: Path, rerun: set[str], now: dict[str, dict]) -> dict:
    """The finished kinds of an earlier --out (`path`) that this study does not rerun (`rerun`: the kinds
    it was given), each checked against the runs collected now (`now`: kind -> its finished record):

      - its copy (the --copy-to folder beside the file, PATH-without-.json-KIND/) is the row's: the same run
        folder, steps, and per-seed scores recomputed from the copied results files;
      - the same recipe settings but for what names the kind (`settings`), and the same inputs by content;
      - where the row records its vocabulary's *_version, the one the code builds now.

    A kind that fails a check stops the study: its scores are not this protocol's. Library versions that
    differ are recorded and printed, not refused (the environment, not the inputs)."""
    def stop(msg: str):
        raise SystemExit(f"--kinds-from {path}: {msg}")

    try:
        text = path.read_bytes()
        earlier, sha256 = json.loads(text), hashlib.sha256(text).hexdigest()  # the file's content: --out may overwrite it
        rows = earlier["kinds"]
    except (OSError, ValueError, KeyError) as e:
        stop(f"not a result file of this study ({e.__class__.__name__}: {e})")
    mine = {kind: (settings(json.loads((Path(r["run"]) / "recipe-config.json").read_text(encoding="utf-8"))), r["inputs"], r["library_versions"])
            for kind, r in now.items()}
    out = {}
    for kind, r in rows.items():
        if kind in rerun or not r.get("finished"):
            continue
        copy = path.with_name(f"{path.stem}-{kind}")
        try:
            raw = json.loads((copy / "recipe-config.json").read_text(encoding="utf-8"))
            theirs = settings(raw)
            report = json.loads((copy / "report.json").read_text(encoding="utf-8"))
            per_seed = {seed: {t: json.loads((copy / f"{t}-seed{seed}-results.json").read_text(encoding="utf-8")) for t in TASKS}
                        for seed in r["seeds"]}
        except (OSError, ValueError, KeyError) as e:
            stop(f"the copy of {kind}'s run in {copy}/ cannot be read ({e.__class__.__name__}: {e}), so its settings cannot be checked")
        seed0 = per_seed[r["seeds"][0]]
        # JSON made the seeds strings: ints again, as summarize() gives them, or no seed would be common
        scores = {side: {m: {**d, "seeds": {int(k): v for k, v in d["seeds"].items()}} for m, d in by.items()}
                  for side, by in r["scores"].items()}
        if raw["recipe"]["out"] != r["run"]:
            stop(f"{copy}/ is not the copy of {kind}'s row (another run folder than {r['run']})")
        if theirs["pretrain"]["max_steps"] != r["steps"] or summarize(per_seed) != scores:
            stop(f"{copy}/ does not hold {kind}'s row (its steps or per-seed scores differ from the file's): collected by another --out?")
        stale = _versions(kind, r.get("vocabulary", {}))
        if stale:
            stop(f"{kind}'s row is another vocabulary than the code builds: {', '.join(stale)}")
        if not mine:  # a check before training (or nothing finished yet): the rows are compared at the collect
            continue
        read = {json.dumps(inputs(report, res[t], res[t.replace("nsmc", "korquad")]), sort_keys=True)
                for res in per_seed.values() for t in ("nsmc", "nsmc_control")}
        if len(read) > 1:
            stop(f"{copy}/: {kind}'s results files read different inputs")
        for other, (s, ins, _) in mine.items():
            for what, a, b in (("settings", theirs, s), ("inputs", json.loads(next(iter(read))), ins)):
                diff = differences(a, b)
                if diff:
                    stop(f"{kind} ran with other {what} than {other} now (earlier -> now): " + "; ".join(diff[:4])
                         + (f" (and {len(diff) - 4} more)" if len(diff) > 4 else ""))
        libs = differences(seed0["nsmc"].get("versions", {}), next(iter(mine.values()))[2])
        out[kind] = {**r, "scores": scores, "from": r.get("from") or {
            "file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path), "command": earlier.get("command"),
            "sha256": sha256, "machine": earlier.get("machine"),
            "vocabulary_versions": "checked" if "vocabulary" in r else "not recorded in the file", "library_versions_differ": libs}}
        if libs:
            print(f"--kinds-from: {kind} ran with other library versions (earlier -> now): {'; '.join(libs)}")
    return out


def compare(kinds: dict) -> dict:
    """Each kind against plain over the seeds both finished: ratios of the means and differences in
    points, for the pretrained model and for its gain over its own control."""
    out = {}
    if "plain" not in kinds:
        return out
    base = kinds["plain"]["scores"]
    for kind, r in kinds.items():
        if kind == "plain":
            continue
        for side in ("model", "gain"):
            for m, d in r["scores"][side].items():
                common = sorted(set(d["seeds"]) & set(base[side].get(m, {"seeds": {}})["seeds"]))
                if not common:
                    continue
                mine = statistics.fmean(d["seeds"][s] for s in common)
                theirs = statistics.fmean(base[side][m]["seeds"][s] for s in common)
                tag = m if side == "model" else f"gain_{m}"
                out[f"diff_{kind}_vs_plain_{tag}_points"] = round(mine - theirs, 2)
                if side == "model" and theirs:
                    out[f"ratio_{kind}_vs_plain_{tag}"] = round(mine / theirs, 3)
                out[f"seeds_{kind}_vs_plain_{tag}"] = common
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--steps", type=int, default=0, help="pretraining optimizer steps, the same for every kind (required unless --collect-only)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[42, 43], help="fine-tuning seeds (the first runs inside `korbert run`)")
    ap.add_argument("--data", default="", help="the data folder (korbert run --data; default: the recipe's)")
    ap.add_argument("--work", default="runs/tkq", help="run folders are WORK-KIND (paths relative to the repository root)")
    ap.add_argument("--set", nargs="*", default=[], help="more `korbert run --set` settings, the same for every kind")
    ap.add_argument("--collect-only", action="store_true", help="train nothing: write --out from what the runs finished")
    ap.add_argument("--force", action="store_true", help="redo the further seeds' fine-tuning")
    ap.add_argument("--copy-to", default="", help="copy each run's report and results into COPY_TO-KIND/")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tokenizer-kinds-cpu.json"))
    ap.add_argument("--kinds-from", default="", metavar="FILE",
                    help="an earlier --out of this study, with its --copy-to copies beside it (FILE without .json, then -KIND/): the "
                    "finished kinds that --kinds does not name are compared from it, once their settings and inputs are checked "
                    "to be this run's (for one kind rerun after a change to its vocabulary). The first seed is part of the settings")
    a = ap.parse_args()
    if not a.collect_only and a.steps < 1:
        ap.error("--steps N is required (the same pretraining steps for every kind)")
    seeds = list(dict.fromkeys(a.seeds))
    out_path = Path(a.out).resolve()
    kinds_from = Path(a.kinds_from).resolve() if a.kinds_from else None
    os.chdir(ROOT)  # the run folders' recipe-config.json name paths relative to it

    load_before = os.getloadavg()
    if kinds_from and not a.collect_only:  # its rows, copies and versions before hours of training, not after
        earlier_kinds(kinds_from, set(a.kinds), {})
    kinds = {}
    for kind in a.kinds:
        run = Path(f"{a.work}-{kind}")
        if not a.collect_only:
            cmd = recipe_command(kind, run, a.steps, seeds[0], a.data, a.set)
            print("$ " + " ".join(["korbert", *cmd[3:]]), flush=True)
            subprocess.run(cmd, check=True)
            for seed in seeds[1:]:
                run_seed(run, seed, a.force)
        r = collect(run, kind, seeds, "" if kinds_from else a.copy_to)  # with --kinds-from: copied once checked
        if r is None:
            print(f"{run}: no vocabulary yet (skipped)")
            continue
        kinds[kind] = r
        h = r["held_out"]["korquad_contexts"]
        versions = ", ".join(f"{k} {v}" for k, v in r["vocabulary"].items() if k.endswith("_version"))
        print(f"{kind:>17}{f' ({versions})' if versions else ''}: tokens/char {h['tokens_per_char']} (KorQuAD contexts), lone ▁ {h['lone_marker_share_of_tokens']} of tokens, "
              f"answers aligned {r['korquad_answer_alignment']['aligned_share']}")
        if not r["finished"]:
            print(f"{run}: not finished (no scores yet)")
            continue
        s = r["scores"]
        print(f"{kind:>17} (seeds {r['seeds']}): " + ", ".join(
            f"{m} {s['model'][m]['mean']} (control {s['control'][m]['mean']}, spread {s['model'][m]['spread']})" for m in s["model"]))
    if kinds_from:
        now = {kind: r for kind, r in kinds.items() if r["finished"]}
        for kind, r in earlier_kinds(kinds_from, set(a.kinds), now).items():
            print(f"{kind:>17} (from {r['from']['file']}, seeds {r['seeds']}): " + ", ".join(
                f"{m} {v['mean']}" for m, v in r["scores"]["model"].items()))
            kinds[kind] = r
        for kind in now if a.copy_to else ():
            collect(Path(f"{a.work}-{kind}"), kind, seeds, a.copy_to)
    done = {k: r for k, r in kinds.items() if r["finished"]}
    steps = {r["steps"] for r in done.values()}
    if len(steps) > 1:
        raise SystemExit(f"the kinds were pretrained for different steps: {sorted(steps)}; not comparable")
    ratios = compare(done)
    for kind in ("morpheme-attached", "plain"):
        if kind in kinds and "morpheme" in kinds:
            for name, h in kinds[kind]["held_out"].items():
                ratios[f"ratio_{kind}_vs_morpheme_tokens_per_char_{name}"] = round(
                    h["tokens_per_char"] / kinds["morpheme"]["held_out"][name]["tokens_per_char"], 3)
    for k, v in ratios.items():
        print(f"  {k}: {v}")
    atomic_write_json(out_path, {
        **ratios, "stage": "tokenizer",
        "what": "the cpu preset once per tokenizer kind: the same pretraining steps (fp32), corpus and seeds; NSMC-R accuracy and "
        "KorQuAD EM/F1 per fine-tuning seed, each with its own random-init control (gain: model minus control). Spread is over "
        "fine-tuning seeds only: each kind has one pretraining run. The same steps are not the same text: tokens per character "
        "differ by kind, and so does the context a 128-token window holds. The MLM masking unit differs too: the morpheme kinds "
        "mask whole morphemes, plain (no Kiwi) whole eojeols, so each arm is a tokenizer with its masking. diff_/ratio_ compare each kind's mean with plain's "
        "over the seeds both finished. Stage times in the copied reports come from runs that shared the machine: not measurements",
        "command": "python benchmarks/" + Path(__file__).name + " " + " ".join(sys.argv[1:]),
        "machine": machine(), "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "steps": steps.pop() if steps else None, "seeds": seeds, "kinds": kinds,
    })
    print(f"-> {out_path}")


if __name__ == "__main__":
    main()
