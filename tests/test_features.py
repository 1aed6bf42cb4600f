"""Cached fine-tuning features (evals/features.py): the KorQuAD windows equal the tokenizer's own
overflow windows, the cache is reused (counted, not timed) and shared by model and control,
fine-tuning runs from the cache where Kiwi cannot be imported, any transformers folder works, and
stale or damaged caches are refused with one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLE
from corpus_tools.text import InputError
from evals import features as F
from evals.data import read_nsmc, read_squad, squad_examples

REPO = Path(__file__).resolve().parent.parent
DEV = SAMPLE / "korquad_dev.json"


def _nsmc(model, out, **kw):
    from evals.nsmc import NsmcConfig, main

    args = dict(model=str(model), out=str(out), max_train_examples=160, valid_size=80, max_eval_examples=100,
                epochs=1, batch_size=16, max_len=48, lr=1e-3, device="cpu", seed=5, threads=1)
    return main(NsmcConfig(**{**args, **kw}))


def _korquad(model, out, **kw):
    from evals.korquad import KorquadConfig, main

    args = dict(model=str(model), out=str(out), max_train_examples=30, max_eval_examples=20, epochs=1, batch_size=8,
                max_len=160, stride=48, lr=1e-3, device="cpu", seed=3, threads=1)
    return main(KorquadConfig(**{**args, **kw}))


@pytest.mark.parametrize("which", ["korbert", "bert"])
def test_cached_windows_equal_the_tokenizers_own_overflow(which, model_dir, bert_dir, tmp_path):
    from korbert.folders import open_folder
    from evals.korquad import prepare_features

    mf = open_folder(str(model_dir if which == "korbert" else bert_dir))
    examples = squad_examples(read_squad(DEV), DEV)
    got = F.korquad(tmp_path, mf, str(DEV), examples, max_len=128, stride=32, max_query_len=24)
    want = prepare_features(mf.tokenizer(), examples, max_len=128, stride=32, max_query_len=24, train=True)
    assert len(got) == len(want) > 2 * len(examples)  # contexts overflow into several windows
    rows = got.rows()
    for g, w in zip(rows, want):
        assert g["input_ids"] == w["input_ids"] and g["token_type_ids"] == w["token_type_ids"]
        assert g["offsets"] == w["offsets"] and g["example"] == w["example"]
        assert (g["start_positions"], g["end_positions"]) == (w["start_positions"], w["end_positions"])
    assert got.meta["counts"]["contexts"] < len(examples)  # each context once, not once per question
    assert any(r["start_positions"] > 0 for r in rows)


def test_contexts_longer_than_the_model_are_windowed_without_transformers_length_warning(model_dir, tmp_path):
    """A context is tokenized whole, then cut into windows: transformers' "longer than the specified
    maximum sequence length ... indexing errors" notice does not apply and is not logged."""
    import logging
    from dataclasses import replace

    import transformers

    from korbert.folders import open_folder

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    mf = open_folder(str(model_dir))  # a fresh tokenizer: transformers logs that notice once per instance
    ex = squad_examples(read_squad(DEV), DEV)[0]
    long = replace(ex, context=ex.context + " " + " ".join([ex.context] * 40))
    keep, root = Keep(), transformers.logging.get_logger("transformers")
    root.addHandler(keep)
    try:
        got = F.korquad(tmp_path, mf, str(DEV), [long], max_len=128, stride=32, max_query_len=24)
        n = len(mf.tokenizer()(long.context, add_special_tokens=False, verbose=False)["input_ids"])
        assert n > mf.tokenizer().model_max_length and len(got) > n // 128  # windowed
        assert not [m for m in keep.messages if "sequence length is longer" in m]
        mf.tokenizer()(long.context)  # (what the handler sees when the notice is logged)
        assert [m for m in keep.messages if "sequence length is longer" in m]
    finally:
        root.removeHandler(keep)


def test_nsmc_features_equal_the_tokenizer_and_are_reused_by_model_and_control(model_dir, tmp_path, one_thread):
    from korbert.folders import open_folder

    before = dict(F.STATS)
    a = _nsmc(model_dir, tmp_path / "model")
    assert F.STATS["built"] - before.get("built", 0) == 2 and a["features"] == {**a["features"], "built": 2, "reused": 0}
    c = _nsmc(model_dir, tmp_path / "control", control=True)
    b = _nsmc(model_dir, tmp_path / "again")
    assert c["features"]["built"] == b["features"]["built"] == 0 and c["features"]["reused"] == b["features"]["reused"] == 2
    assert F.STATS["built"] - before.get("built", 0) == 2  # the control and the rerun built nothing
    assert c["features"]["folders"] == a["features"]["folders"] and all(str(tmp_path / "features") in f for f in a["features"]["folders"])
    assert b["metrics"] == a["metrics"] and b["training"]["history"] == a["training"]["history"]
    assert (tmp_path / "model" / "predictions.tsv").read_bytes() == (tmp_path / "again" / "predictions.tsv").read_bytes()
    # what the cache holds is what the tokenizer gives
    mf = open_folder(str(model_dir))
    rows = read_nsmc(SAMPLE / "nsmc_test.txt")
    cached = F.nsmc(tmp_path / "features", mf, str(SAMPLE / "nsmc_test.txt"), rows, 48)
    assert not cached.built
    enc = mf.tokenizer()([r.text for r in rows[:300]], truncation=True, max_length=48)
    assert cached.columns["input_ids"][:300] == enc["input_ids"] and cached.columns["label"][:300] == [r.label for r in rows[:300]]
    # a changed setting is another key: built, never the old cache
    other = F.nsmc(tmp_path / "features", mf, str(SAMPLE / "nsmc_test.txt"), rows, 40)
    assert other.built and other.folder != cached.folder and max(map(len, other.columns["input_ids"])) <= 40


def test_fine_tuning_from_the_cache_runs_without_kiwi(model_dir, tmp_path, one_thread):
    feats = tmp_path / "feats"
    want_n = _nsmc(model_dir, tmp_path / "n", features=str(feats))
    want_k = _korquad(model_dir, tmp_path / "k", features=str(feats))
    # one process without Kiwi runs the three commands (argv split at "--next") and prints their exit codes
    script = (
        "import sys; sys.modules['kiwipiepy'] = None\n"
        "from korbert.cli import main\n"
        "argv, runs = sys.argv[1:], [[]]\n"
        "for a in argv:\n"
        "    runs.append([]) if a == '--next' else runs[-1].append(a)\n"
        "print('exit codes', [main(r) for r in runs])\n"
    )
    common = ["--model", str(model_dir), "--features", str(feats), "--device", "cpu", "--threads", "1", "--epochs", "1", "--lr", "1e-3"]
    nsmc = ["eval", "nsmc", *common, "--out", str(tmp_path / "n2"), "--max-train-examples", "160", "--valid-size", "80",
            "--max-eval-examples", "100", "--batch-size", "16", "--max-len", "48", "--seed", "5"]
    korquad = ["eval", "korquad", *common, "--out", str(tmp_path / "k2"), "--max-train-examples", "30", "--max-eval-examples", "20",
               "--batch-size", "8", "--max-len", "160", "--stride", "48", "--seed", "3"]
    # and settings the cache does not hold: a one-line error naming the folder, not a traceback
    bad = [*nsmc[:-4], "--max-len", "40", "--seed", "5"]
    p = subprocess.run([sys.executable, "-c", script, *nsmc, "--next", *korquad, "--next", *bad], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "exit codes [0, 0, 2]" in p.stdout, p.stderr[-2000:]
    assert p.stdout.count("read from the cache") >= 2 and "Traceback" not in p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert "no cached nsmc features" in line and str(feats) in line and "kiwipiepy" in line
    got_n = json.loads((tmp_path / "n2" / "results.json").read_text(encoding="utf-8"))
    got_k = json.loads((tmp_path / "k2" / "results.json").read_text(encoding="utf-8"))
    assert got_n["metrics"] == want_n["metrics"] and got_n["features"]["built"] == 0
    assert got_k["metrics"] == want_k["metrics"] and got_k["features"]["built"] == 0
    assert (tmp_path / "k2" / "predictions.json").read_bytes() == (tmp_path / "k" / "predictions.json").read_bytes()


def test_a_feature_cache_of_korbert_s_tokenizer_is_keyed_on_the_kiwi_version_issue_59(model_dir, bert_dir, tmp_path, monkeypatch, one_thread):
    """Features made with another Kiwi were reused after `pip install -U kiwipiepy` (the key named the
    tokenizer files only). The installed version is stood in for; a WordPiece folder runs no Kiwi."""
    from corpus_tools import morph
    from korbert.folders import open_folder

    installed = morph.kiwi_versions()
    path = tmp_path / "test.txt"
    path.write_text("".join((SAMPLE / "nsmc_test.txt").read_text(encoding="utf-8").splitlines(keepends=True)[:41]), encoding="utf-8")
    rows = read_nsmc(path)
    for folder in (model_dir, bert_dir):
        mf, root = open_folder(str(folder)), tmp_path / f"features-{folder.name}"
        first = F.nsmc(root, mf, str(path), rows, 32)
        assert first.built and not F.nsmc(root, mf, str(path), rows, 32).built
        monkeypatch.setattr(morph, "kiwi_versions", lambda: {**installed, "kiwipiepy_model": "0.0.1"})
        other = F.nsmc(root, mf, str(path), rows, 32)
        if mf.kind == "transformers":  # its own tokenizer, no Kiwi: the same key as before
            assert not other.built and other.folder == first.folder and "kiwi" not in first.meta
            continue
        assert other.built and other.folder != first.folder and other.meta["kiwi"]["kiwipiepy_model"] == "0.0.1"
        assert first.meta["kiwi"] == installed and other.columns == first.columns
        monkeypatch.setattr(morph, "kiwi_versions", lambda: {})  # no Kiwi here: the newest set is read, whichever Kiwi built it
        assert F.nsmc(root, mf, str(path), rows, 32).folder == other.folder
        monkeypatch.undo()


def test_any_transformers_folder_end_to_end(bert_dir, tmp_path, one_thread):
    from transformers import AutoTokenizer

    n = _nsmc(bert_dir, tmp_path / "n")
    k = _korquad(bert_dir, tmp_path / "k")
    assert n["model"]["folder_kind"] == k["model"]["folder_kind"] == "transformers"
    assert n["model"]["architecture"] == "BertForSequenceClassification" and k["model"]["architecture"] == "BertForQuestionAnswering"
    assert 0 <= n["metrics"]["accuracy"] <= 1 and 0 <= k["metrics"]["f1"] <= 100
    # its own WordPiece tokenizer, not Kiwi + a korbert vocabulary
    meta = json.loads(next((tmp_path / "features").glob("nsmc-*/features.json")).read_text(encoding="utf-8"))
    assert meta["tokenizer"]["class"] != "KorBertTokenizer"
    tok = AutoTokenizer.from_pretrained(bert_dir)
    assert tok.convert_ids_to_tokens(tok("영화가 정말 재밌었어요")["input_ids"])[1] != "[UNK]"


def test_cache_and_folder_errors(model_dir, bert_dir, tmp_path, capsys, one_thread):
    import shutil

    from korbert.folders import open_folder
    from korbert.cli import main as korbert

    mf = open_folder(str(model_dir))
    rows = read_nsmc(SAMPLE / "nsmc_test.txt")
    built = F.nsmc(tmp_path / "f", mf, str(SAMPLE / "nsmc_test.txt"), rows, 32)
    arrow = built.folder / "reviews.arrow"
    arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])  # a truncated cache file
    with pytest.raises(InputError, match="truncated") as e:
        F.nsmc(tmp_path / "f", mf, str(SAMPLE / "nsmc_test.txt"), rows, 32)
    assert str(arrow) in str(e.value) and "--rebuild-features" in str(e.value)
    again = F.nsmc(tmp_path / "f", mf, str(SAMPLE / "nsmc_test.txt"), rows, 32, rebuild=True)
    assert again.built and again.columns["input_ids"] == built.columns["input_ids"]
    # another tokenizer (same folder name, other files): its own cache, the old one is not read
    other = tmp_path / "other-model"
    shutil.copytree(bert_dir, other)
    mf2 = open_folder(str(other))
    assert mf2.tokenizer_sha256 != mf.tokenizer_sha256
    assert F.nsmc(tmp_path / "f", mf2, str(SAMPLE / "nsmc_test.txt"), rows, 32).folder != again.folder
    # not a model folder, and a tokenizer without offsets for KorQuAD: one line each
    (tmp_path / "empty").mkdir()
    assert korbert(["eval", "nsmc", "--model", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no config.json" in err and "\n" not in err
    slow = tmp_path / "slow"
    shutil.copytree(bert_dir, slow)
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    vocab = json.loads((bert_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    (slow / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])), encoding="utf-8")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (slow / name).unlink(missing_ok=True)
    BertTokenizerLegacy(str(slow / "vocab.txt"), do_lower_case=False).save_pretrained(slow)
    (slow / "tokenizer.json").unlink(missing_ok=True)
    assert not open_folder(str(slow)).tokenizer().is_fast
    assert korbert(["eval", "korquad", "--model", str(slow), "--out", str(tmp_path / "kq"), "--max-train-examples", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert "gives no character offsets" in err and str(slow) in err and "\n" not in err


# Both children wait at their first Dataset.map until the other one is there too, so both are
# building the same feature set at once (the race of two evals started together on one --features
# folder, made certain rather than left to timing). The wait gives up after a minute, so a fix that
# serializes the builds with a lock would still finish.
RACE = """\
import os, sys, time
from pathlib import Path
from evals import features as F

real, gate = F._map, Path(os.environ["RACE_GATE"])
def _map(*a, **kw):
    if not (gate / str(os.getpid())).exists():
        (gate / str(os.getpid())).touch()
        t = time.time()
        while len(list(gate.iterdir())) < 2 and time.time() - t < 60:
            time.sleep(0.05)
    return real(*a, **kw)
F._map = _map
from korbert.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # out of CI for the suite's time (run with -m slow)
def test_race_two_evals_building_the_same_features(model_dir, tmp_path):
    import os

    from korbert.folders import open_folder

    feats, gate = tmp_path / "feats", tmp_path / "gate"
    gate.mkdir()
    argv = ["eval", "nsmc", "--model", str(model_dir), "--features", str(feats), "--max-steps", "5", "--device", "cpu",
            "--threads", "1", "--max-train-examples", "160", "--valid-size", "80", "--max-eval-examples", "100",
            "--batch-size", "16", "--max-len", "48", "--seed", "5"]
    env = {**os.environ, "RACE_GATE": str(gate)}
    procs = [subprocess.Popen([sys.executable, "-c", RACE, *argv, "--out", str(tmp_path / f"run{i}")], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    assert len(list(gate.iterdir())) == 2  # both were building at once
    # the cache ends complete: its two feature sets, no build folder left behind, and what a
    # single process builds into an empty folder
    assert sorted(d.name.split("-")[0] for d in feats.iterdir()) == ["nsmc", "nsmc"]
    assert not list(feats.glob("*.partial*"))
    mf = open_folder(str(model_dir))
    for name in ("nsmc_train.txt", "nsmc_test.txt"):
        rows = read_nsmc(SAMPLE / name)
        got = F.nsmc(feats, mf, str(SAMPLE / name), rows, 48)
        want = F.nsmc(tmp_path / "single", mf, str(SAMPLE / name), rows, 48)
        assert not got.built and want.built
        assert got.meta["files"] == want.meta["files"] and got.columns == want.columns
    runs = [json.loads((tmp_path / f"run{i}" / "results.json").read_text(encoding="utf-8")) for i in range(2)]
    assert runs[0]["metrics"] == runs[1]["metrics"] and runs[0]["features"]["folders"] == runs[1]["features"]["folders"]


def test_race_build_folders_of_killed_processes_are_removed_once_stale(model_dir, tmp_path):
    import os
    import time

    from korbert.folders import open_folder

    mf = open_folder(str(model_dir))
    path = SAMPLE / "nsmc_test.txt"
    rows = read_nsmc(path)[:50]
    root = tmp_path / "f"
    dead, live = root / "nsmc-0123456789abcdef.partial", root / "nsmc-0123456789abcdef.partial-99-00ff00ff"
    for d in (dead, live):
        d.mkdir(parents=True)
        (d / "reviews.arrow").write_bytes(b"x")
    old = time.time() - (F.STALE_HOURS + 1) * 3600
    for p in (dead / "reviews.arrow", dead):
        os.utime(p, (old, old))
    os.utime(live, (old, old))  # an old folder whose build still writes its file: still running
    got = F.nsmc(root, mf, str(path), rows, 32)
    assert got.built and not dead.exists() and (live / "reviews.arrow").exists()
    assert sorted(p.name for p in root.iterdir()) == sorted([got.folder.name, live.name])
