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
                                                      "metrics": {"accuracy": 0.8, "exact_match": 1.0, "f1": 9.0}, "protocol": {"name": "dev-split"}})
    (final / "manifest.json").write_text(json.dumps({"step": 2000}))
    early = study.collect(run, "morpheme-attached", [42], "")
    assert early["finished"] is False and early["vocabulary"] == {"tokenizer_hash": "ab" * 32, "attach_version": 3}
    (final / "manifest.json").write_text(json.dumps({"step": 10000}))
    (run / "report.json").write_text(json.dumps({"pretraining": {"steps": 10000}, "finetuning": {"nsmc": {"protocol": "full"}}}))
    got = study.collect(run, "morpheme-attached", [42], "")
    assert got["finished"] is True and got["steps"] == 10000 and got["scores"]["model"]["nsmc_acc"]["mean"] == 80.0
    # which vocabulary the scores belong to: a morpheme-attached row of another ATTACH_VERSION is another arm
    assert got["vocabulary"] == {"tokenizer_hash": "ab" * 32, "attach_version": 3}
