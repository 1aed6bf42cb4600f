"""The tokenizer study's bookkeeping (benchmarks/tokenizer_kinds_quality.py): per-seed scores, gains over
each kind's own control, spreads, and comparisons over the seeds both kinds finished only."""

from pathlib import Path

import pytest

from conftest import load_benchmark


@pytest.fixture(scope="module")
def study():
    return load_benchmark("tokenizer_kinds_quality")


def results(nsmc: float, nsmc_control: float, em: float, f1: float, em_control: float, f1_control: float) -> dict:
    return {
        "nsmc": {"task": "nsmc", "metrics": {"accuracy": nsmc}},
        "nsmc_control": {"task": "nsmc", "metrics": {"accuracy": nsmc_control}},
        "korquad": {"task": "korquad", "metrics": {"exact_match": em, "f1": f1}},
        "korquad_control": {"task": "korquad", "metrics": {"exact_match": em_control, "f1": f1_control}},
    }


def test_summary_per_seed_gain_and_spread(study):
    s = study.summarize({42: results(0.84, 0.80, 5.0, 14.0, 1.0, 7.0), 43: results(0.85, 0.82, 6.0, 15.0, 2.0, 8.0)})
    assert s["model"]["nsmc_acc"] == {"seeds": {42: 84.0, 43: 85.0}, "n": 2, "mean": 84.5, "spread": 1.0}
    assert s["control"]["korquad_f1"]["mean"] == 7.5
    assert s["gain"]["nsmc_acc"]["seeds"] == {42: 4.0, 43: 3.0}  # model minus its own control, seed by seed
    assert s["gain"]["korquad_em"]["mean"] == 4.0
    one = study.summarize({42: results(0.84, 0.80, 5.0, 14.0, 1.0, 7.0)})
    assert one["model"]["nsmc_acc"]["spread"] is None and one["model"]["nsmc_acc"]["n"] == 1  # one seed: no spread, not 0


def test_comparison_uses_only_the_seeds_both_kinds_finished(study):
    plain = {"scores": study.summarize({42: results(0.80, 0.78, 4.0, 10.0, 1.0, 6.0), 43: results(0.90, 0.80, 6.0, 12.0, 1.0, 6.0)})}
    morpheme = {"scores": study.summarize({42: results(0.82, 0.79, 5.0, 13.0, 1.0, 7.0)})}
    c = study.compare({"plain": plain, "morpheme": morpheme})
    assert c["seeds_morpheme_vs_plain_nsmc_acc"] == [42]
    assert c["diff_morpheme_vs_plain_nsmc_acc_points"] == 2.0  # 82 - 80 (seed 42), not 82 - mean(80, 90)
    assert c["ratio_morpheme_vs_plain_korquad_f1"] == 1.3
    assert c["diff_morpheme_vs_plain_gain_nsmc_acc_points"] == 1.0  # (82 - 79) - (80 - 78)
    assert study.compare({"morpheme": morpheme}) == {}  # no plain arm: nothing to compare with


def test_nothing_is_collected_while_the_model_is_still_training(study, tmp_path, model_dir):
    import shutil

    from evals.nsmc import NsmcConfig
    from korbert.recipe import _cached

    model = tmp_path / "pretrain" / "final"
    shutil.copytree(model_dir, model)
    c = NsmcConfig(model=str(model), out=str(tmp_path / "nsmc"))
    _cached(Path(c.out), study.stage_key(c), lambda: {"task": "nsmc", "metrics": {"accuracy": 0.8}}, False)
    assert study.finished(c)["metrics"]["accuracy"] == 0.8
    shutil.rmtree(model)  # pretrain/ moved away, or a --force rerun: no final/ until it is exported again
    assert study.finished(c) is None


def test_an_earlier_budgets_model_is_not_collected_as_this_ones(study, tmp_path, model_dir):
    """A 10,000-step run started over a finished 2,000-step one keeps the old final/ (and evals that
    match it) until it exports: collect labelled those scores 10,000 steps (recipe-config.json's)."""
    import json
    import shutil

    model = tmp_path / "final"
    shutil.copytree(model_dir, model)
    (model / "manifest.json").write_text(json.dumps({"step": 2000}))
    assert study.trained_steps({"pretrain": {"max_steps": 10000}}, str(model)) is None
    assert study.trained_steps({"pretrain": {"max_steps": 2000}}, str(model)) == 2000
    (model / "manifest.json").unlink()
    assert study.trained_steps({"pretrain": {"max_steps": 2000}}, str(model)) is None  # not exported by pretraining


def test_collect_reports_a_run_unfinished_while_final_holds_an_earlier_budget(study, tmp_path, monkeypatch):
    """collect() itself, on a run folder whose recipe-config.json asks for 10,000 steps: while final/ is
    the 2,000-step export (with evals that match it), the run is unfinished; once final/ is the 10,000-step
    export, its scores are collected under 10,000 steps."""
    import json

    run = tmp_path / "tkq-morpheme-attached"
    final = run / "pretrain" / "final"
    final.mkdir(parents=True)
    (run / "vocab").mkdir()
    (run / "vocab" / "manifest.json").write_text(json.dumps({"tokenizer_hash": "ab" * 32, "config": {"kind": "morpheme-attached", "attach_version": 3}}))
    cfg = {"pretrain": {"max_steps": 10000}, **{t: {"model": str(final), "out": str(run / t), "control": t.endswith("control")} for t in study.TASKS}}
    cfg["korquad"]["dev_file"], cfg["nsmc"]["test"] = "dev.json", "test.txt"
    (run / "recipe-config.json").write_text(json.dumps(cfg))
    (run / "report.json").write_text(json.dumps({"pretraining": {"steps": 2000}, "finetuning": {"nsmc": {"protocol": "full"}}}))
    monkeypatch.setattr(study, "text_measures", lambda *a: {})
    monkeypatch.setattr(study, "finished", lambda c: {"task": "korquad" if Path(c.out).name.startswith("korquad") else "nsmc", "config": {"seed": 42},
                                                      "metrics": {"accuracy": 0.8, "exact_match": 1.0, "f1": 9.0}, "protocol": {"name": "dev-split"},
                                                      "data": {"test": {"sha256": "ab"}}, "versions": {"torch": "2.13.0+cpu"}})
    (final / "manifest.json").write_text(json.dumps({"step": 2000}))
    early = study.collect(run, "morpheme-attached", [42], "")
    assert early["finished"] is False and early["vocabulary"] == {"tokenizer_hash": "ab" * 32, "attach_version": 3}
    (final / "manifest.json").write_text(json.dumps({"step": 10000}))
    (run / "report.json").write_text(json.dumps({"pretraining": {"steps": 10000}, "finetuning": {"nsmc": {"protocol": "full"}},
                                                 "corpus": {"documents": 3, "characters": 40}}))
    got = study.collect(run, "morpheme-attached", [42], "")
    assert got["finished"] is True and got["steps"] == 10000 and got["scores"]["model"]["nsmc_acc"]["mean"] == 80.0
    # which vocabulary the scores belong to: a morpheme-attached row of another ATTACH_VERSION is another arm
    assert got["vocabulary"] == {"tokenizer_hash": "ab" * 32, "attach_version": 3}
    # what it read, by content: --kinds-from compares another kind's row with these
    assert got["inputs"] == {"corpus": {"documents": 3, "characters": 40}, "nsmc.test": "ab", "korquad.test": "ab"}


def recipe_config(run: Path, kind: str, mask_prob: float = 0.15) -> dict:
    """The parts of a run's recipe-config.json that name its kind (run folder, vocab.kind, its --set entry,
    the baseline's analyzer), around settings that do not."""
    return {"recipe": {"out": str(run), "set": [f"vocab.kind={kind}", "pretrain.max_steps=10000", "nsmc.seed=42"]},
            "vocab": {"out": f"{run}/vocab", "kind": kind, "vocab_size": 16000},
            "shards": {"tokenizer": f"{run}/vocab", "mask_prob": mask_prob},
            "pretrain": {"shards": f"{run}/shards", "max_steps": 10000},
            "baseline": {"analyzer": "char" if kind == "plain" else "both"}}


def test_settings_differ_only_where_they_do_not_name_the_kind(study, tmp_path):
    import json

    for kind, prob in (("plain", 0.15), ("morpheme", 0.15), ("morpheme-attached", 0.2)):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "recipe-config.json").write_text(json.dumps(recipe_config(Path("runs") / f"tkq-{kind}", kind, prob)))
    plain, morpheme, attached = (study.settings(json.loads((tmp_path / k / "recipe-config.json").read_text())) for k in ("plain", "morpheme", "morpheme-attached"))
    assert plain == morpheme and plain["vocab"]["out"] == "RUN/vocab"
    assert study.differences(plain, attached) == ["shards.mask_prob: 0.15 -> 0.2"]
    assert study.differences({"a": 1}, {"a": 1, "b": 2}) == ["b: '(absent)' -> 2"]  # a setting only one side has
    # a run now pins the long phase the study ran (issue 58 changed the preset's): its --set items name no setting of its own
    cmd = study.recipe_command("plain", Path("runs/x"), 10, 42, "", [])
    assert all(pin in cmd for pin in study.PINNED) and "pretrain.long_schedule=shared" in cmd
    pinned = recipe_config(Path("runs") / "tkq-plain", "plain", 0.15)
    pinned["recipe"]["set"] = [*pinned["recipe"]["set"], *study.PINNED]
    assert study.settings(pinned) == plain


DATA = {"nsmc": {"train": {"sha256": "a1"}, "test": {"sha256": "b2"}}, "korquad": {"dev": {"sha256": "c3"}}}


def results_files(res: dict, seed: int, data: dict = DATA) -> dict:
    """`results()` as results.json files hold them: with the seed, the inputs' hashes and library versions."""
    return {t: {**r, "config": {"seed": seed}, "data": data[r["task"]], "versions": {"torch": "2.13.0+cpu"}} for t, r in res.items()}


def earlier_study(study, folder: Path, kind: str, per_seed: dict, **row) -> Path:
    """An earlier --out of the study holding one finished `kind`, with its --copy-to copy beside it."""
    import json

    out = folder / "study.json"
    copy = folder / f"study-{kind}"
    copy.mkdir(parents=True, exist_ok=True)
    (copy / "recipe-config.json").write_text(json.dumps(recipe_config(Path(f"runs/tkq-{kind}"), kind)))
    (copy / "report.json").write_text(json.dumps({"corpus": {"documents": 10, "characters": 900}}))
    for seed, res in per_seed.items():
        for t, r in res.items():
            (copy / f"{t}-seed{seed}-results.json").write_text(json.dumps(r))
    rows = json.loads(out.read_text())["kinds"] if out.is_file() else {}
    rows[kind] = {"finished": True, "steps": 10000, "seeds": sorted(per_seed), "run": f"runs/tkq-{kind}",
                  "scores": study.summarize(per_seed), "held_out": {}, **row}
    out.write_text(json.dumps({"command": "python benchmarks/tokenizer_kinds_quality.py --collect-only", "kinds": rows}))
    return out


def test_kinds_from_an_earlier_file_are_compared_only_with_the_same_settings_and_inputs(study, tmp_path, monkeypatch):
    """One kind rerun (morpheme-attached), the others compared from the earlier --out: plain is taken from
    it (marked with the file it came from) when its copy holds its row and its settings and inputs are this
    run's; the file's row of the rerun kind never is; any other difference stops the study, writing nothing."""
    import json

    run = tmp_path / "runs" / "tkq-morpheme-attached"
    run.mkdir(parents=True)
    (run / "recipe-config.json").write_text(json.dumps(recipe_config(run, "morpheme-attached")))
    plain_res = {42: results_files(results(0.80, 0.78, 4.0, 10.0, 1.0, 6.0), 42), 43: results_files(results(0.90, 0.80, 6.0, 12.0, 1.0, 6.0), 43)}
    earlier = earlier_study(study, tmp_path / "results", "plain", plain_res)
    earlier_study(study, tmp_path / "results", "morpheme-attached", {42: results_files(results(0.99, 0.78, 4.0, 10.0, 1.0, 6.0), 42)},
                  vocabulary={"attach_version": 2})  # the version before the rerun: it must not be compared
    now = {"run": str(run), "finished": True, "steps": 10000, "seeds": [42], "vocabulary": {"attach_version": 3},
           "scores": study.summarize({42: results(0.82, 0.79, 5.0, 13.0, 1.0, 7.0)}),
           "held_out": {"korquad_contexts": {"tokens_per_char": 0.6, "lone_marker_share_of_tokens": 0.01}},
           "korquad_answer_alignment": {"aligned_share": 1.0}, "library_versions": {"torch": "2.13.0+cpu"},
           "inputs": {"corpus": {"documents": 10, "characters": 900}, "nsmc.train": "a1", "nsmc.test": "b2", "korquad.dev": "c3"}}
    collected, copied = {"morpheme-attached": now}, []

    def collect(run, kind, seeds, copy_to):
        if copy_to:
            copied.append(kind)  # what collect() would copy into COPY_TO-KIND/
        return collected.get(kind)
    monkeypatch.setattr(study, "collect", collect)
    out = tmp_path / "out.json"
    monkeypatch.setattr("sys.argv", ["tokenizer_kinds_quality.py", "--collect-only", "--kinds", "morpheme-attached", "--seeds", "42",
                                     "--kinds-from", "results/study.json", "--out", str(out), "--copy-to", "copies"])  # relative to where the command runs

    def run_main():
        monkeypatch.chdir(tmp_path)  # main() changes to the repository root: restored after the test
        study.main()
        return json.loads(out.read_text())

    got = run_main()
    assert sorted(got["kinds"]) == ["morpheme-attached", "plain"]
    assert got["kinds"]["plain"]["from"]["file"] == str(earlier.resolve())  # outside the repository: the resolved path
    assert got["kinds"]["morpheme-attached"]["scores"]["model"]["nsmc_acc"]["mean"] == 82.0  # this run's, not the file's version 2
    assert got["diff_morpheme-attached_vs_plain_nsmc_acc_points"] == 2.0  # seed 42 only: 82 - 80, the seed both finished
    assert got["kinds"]["plain"]["from"]["sha256"] == __import__("hashlib").sha256(earlier.read_bytes()).hexdigest()
    assert copied == ["morpheme-attached"]  # this run's kind copied, once the earlier rows passed
    out.unlink()
    copied.clear()

    collected.clear()  # the rerun kind not collected yet (no vocabulary): nothing from the file stands in for it
    assert run_main()["kinds"] == {}
    collected["morpheme-attached"] = now

    def refused(match: str, **change):
        for name, text in change.items():
            (tmp_path / "results" / "study-plain" / name).write_text(json.dumps(text))
        with pytest.raises(SystemExit, match=match):
            run_main()
        assert not out.exists() and not copied  # the study stopped before writing or copying anything

    out.unlink()
    refused(r"plain ran with other settings than morpheme-attached now \(earlier -> now\): shards.mask_prob: 0.2 -> 0.15",
            **{"recipe-config.json": recipe_config(Path("runs/tkq-plain"), "plain", 0.2)})
    changed = {**DATA["nsmc"], "test": {"sha256": "changed"}}
    refused("plain's results files read different inputs", **{"recipe-config.json": recipe_config(Path("runs/tkq-plain"), "plain"),
            "nsmc-seed42-results.json": {**plain_res[42]["nsmc"], "data": changed}})
    refused(r"other inputs .*nsmc.test: 'changed' -> 'b2'", **{f"{t}-seed{seed}-results.json": {**plain_res[seed][t], "data": changed}
                                                               for seed in (42, 43) for t in ("nsmc", "nsmc_control")})
    for seed in (42, 43):
        for t in ("nsmc", "nsmc_control"):
            (tmp_path / "results" / "study-plain" / f"{t}-seed{seed}-results.json").write_text(json.dumps(plain_res[seed][t]))
    refused("does not hold plain's row", **{"nsmc-seed42-results.json": {**plain_res[42]["nsmc"], "metrics": {"accuracy": 0.5}}})
    (tmp_path / "results" / "study-plain" / "nsmc-seed42-results.json").write_text(json.dumps(plain_res[42]["nsmc"]))
    (tmp_path / "results" / "study-plain" / "recipe-config.json").unlink()
    refused(r"study-plain/ cannot be read")


def test_kinds_from_refuses_a_row_of_another_vocabulary_version(study, tmp_path):
    """A row whose vocabulary manifest recorded another *_version than the code builds is another arm."""
    import json

    run = tmp_path / "runs" / "tkq-plain"
    run.mkdir(parents=True)
    (run / "recipe-config.json").write_text(json.dumps(recipe_config(run, "plain")))
    earlier = earlier_study(study, tmp_path / "results", "morpheme-attached", {42: results_files(results(0.8, 0.78, 4.0, 10.0, 1.0, 6.0), 42)},
                            vocabulary={"attach_version": 2})
    now = {"plain": {"run": str(run), "library_versions": {"torch": "2.13.0+cpu"},
                     "inputs": {"corpus": {"documents": 10, "characters": 900}, "nsmc.train": "a1", "nsmc.test": "b2", "korquad.dev": "c3"}}}
    with pytest.raises(SystemExit, match=r"another vocabulary than the code builds: attach_version 2 \(the code builds \d+\)"):
        study.earlier_kinds(earlier, {"plain"}, now)
    with pytest.raises(SystemExit, match="another vocabulary"):
        study.earlier_kinds(earlier, {"plain"}, {})  # before training too: nothing finished to compare with yet
    # a row from before the vocabulary record: version 1 of morpheme-attached, not today's
    earlier = earlier_study(study, tmp_path / "old", "morpheme-attached", {42: results_files(results(0.8, 0.78, 4.0, 10.0, 1.0, 6.0), 42)})
    with pytest.raises(SystemExit, match=r"attach_version 1 \(not recorded: taken as 1\)"):
        study.earlier_kinds(earlier, {"plain"}, now)
    # a plain row from before the record is plain version 1, which the code still builds
    earlier = earlier_study(study, tmp_path / "old-plain", "plain", {42: results_files(results(0.8, 0.78, 4.0, 10.0, 1.0, 6.0), 42)})
    assert list(study.earlier_kinds(earlier, {"morpheme-attached"}, {})) == []  # checked; compared at the collect
