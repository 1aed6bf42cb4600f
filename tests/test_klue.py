"""The KLUE tasks (evals/klue.py): each of the four fine-tunes a real tiny model end to end on small
files written here (real review text), splits the dev file by group so that no scored text is trained
on, writes results.json under KLUE's metric names with bootstrap intervals and predictions.jsonl; the
NER counts give klue_metric's scores; a train file holding a scored text is refused."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from conftest import sample_texts
from corpus_tools.text import InputError
from evals import klue_metric as M
from evals.klue import TASKS, KlueConfig, main, ner_counts, ner_scores, protocol_name, split_groups
from evals.klue_data import NLI_LABELS, YNAT_LABELS, read_nli, read_sts, read_ynat

# real reviews, none of them in the tests' pretraining corpus (conftest.corpus_file: the sample's first 3,000)
TEXTS = [t for t in sample_texts(4400)[3600:] if 12 <= len(t) <= 60]


def nli_file(path, premises: int = 40):
    rows = []
    for p in range(premises):
        for k, label in enumerate(NLI_LABELS):
            rows.append({"guid": f"nli_{3 * p + k:05d}", "premise": TEXTS[p], "hypothesis": TEXTS[100 + 3 * p + k], "gold_label": label})
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    return path


def sts_file(path, n: int = 60):
    rng = random.Random(0)
    rows = []
    for i in range(n):
        score = rng.uniform(0, 5)  # the annotators' mean; KLUE's `label` is it rounded
        rows.append({"guid": f"sts_{i:05d}", "sentence1": TEXTS[i], "sentence2": TEXTS[i + 200],
                     "labels": {"label": round(score, 1), "real-label": score, "binary-label": int(score >= 3)}})
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    return path


def ynat_file(path, n: int = 70):
    rows = [{"guid": f"ynat_{i:05d}", "title": TEXTS[i], "label": YNAT_LABELS[i % 7]} for i in range(n)]
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    return path


def ner_file(path, n: int = 50):
    """Sentences `<name>씨가 <review>`: a PS entity that ends where the particle begins."""
    names = ["김철수", "박영희", "이순신", "홍길동", "최민수"]
    blocks = ["## 토큰, 레이블 구분자 : \\t", ""]
    for i in range(n):
        name = names[i % 5]
        text = f"{name}씨가 {TEXTS[i]}"
        tags = ["B-PS"] + ["I-PS"] * (len(name) - 1) + ["O"] * (len(text) - len(name))
        lines = [f"## klue-ner_{i:05d}\t<{name}:PS>씨가 {TEXTS[i]}"] + [f"{c}\t{t}" for c, t in zip(text, tags)]
        blocks.append("\n".join(lines) + "\n")
    path.write_text("\n".join(blocks), encoding="utf-8")
    return path


WRITERS = {"klue-nli": nli_file, "klue-sts": sts_file, "klue-ner": ner_file, "ynat": ynat_file}


@pytest.mark.parametrize("task", ["klue-nli", "klue-sts", "klue-ner", "ynat"])
def test_each_task_fine_tunes_and_scores_the_held_out_groups(task, model_dir, tmp_path, one_thread):
    dev = WRITERS[task](tmp_path / f"{task}_dev.{'tsv' if task == 'klue-ner' else 'json'}")
    out = tmp_path / "run"
    res = main(task, KlueConfig(model=str(model_dir), dev_file=str(dev), out=str(out), epochs=1, batch_size=8, bootstrap=200, device="cpu"))
    examples = TASKS[task].read(dev)
    train, scored, groups = split_groups(examples, TASKS[task].texts, 5)
    assert res["protocol"]["name"] == "KLUE dev-split" and res["protocol"]["groups"] == groups
    assert res["n"] == {"train": len(train), "scored": len(scored)}
    assert set(res["metrics"]) == set(TASKS[task].metrics)
    for k, v in res["metrics"].items():  # the interval is of the same metric: it holds the point estimate
        lo, hi = res["ci95"][k]
        assert lo <= v + 0.005 and v - 0.005 <= hi, (k, v, lo, hi)  # (intervals rounded to 2 places)
    lines = [json.loads(x) for x in (out / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [x["guid"] for x in lines] == [examples[i].guid for i in scored]
    if task == "klue-ner":  # a tag for every character, spaces included, and the scores recomputed from them
        assert all(len(x["tags"]) == len(examples[i].text) for x, i in zip(lines, scored))
        keep = [[j for j, c in enumerate(examples[i].text) if not c.isspace()] for i in scored]
        gold = [[examples[i].tags[j] for j in k] for i, k in zip(scored, keep)]
        pred = [[x["tags"][j] for j in k] for x, k in zip(lines, keep)]
        assert res["metrics"]["entity_f1"] == pytest.approx(M.ner_entity_f1(gold, pred), abs=1e-4)
        assert res["metrics"]["char_f1"] == pytest.approx(M.ner_char_f1(gold, pred), abs=1e-4)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert {"results.json", "predictions.jsonl"} <= set(manifest["files"])


def test_the_nli_split_keeps_a_premise_and_its_hypotheses_together(tmp_path):
    dev = read_nli(nli_file(tmp_path / "nli.json", premises=23))
    train, scored, groups = split_groups(dev, TASKS["klue-nli"].texts, 5)
    assert groups == 23 and len(scored) == 3 * 5  # premises 0, 5, 10, 15, 20
    assert not {dev[i].a for i in train} & {dev[i].a for i in scored}
    with pytest.raises(InputError, match="at least 2"):
        split_groups(dev, TASKS["klue-nli"].texts, 1)


@pytest.mark.parametrize("task", ["klue-sts", "klue-ner", "ynat"])
def test_a_text_that_occurs_twice_is_scored_or_trained_on_never_both(task, tmp_path):
    """A sentence, a pair's sentence or a headline repeated under another guid: both copies land in one group."""
    path = WRITERS[task](tmp_path / "dev")
    examples = TASKS[task].read(path)
    twin = examples[7]  # group 7: trained on; its copy goes at the end, where its own group number would be scored
    examples.append(type(twin)(**{**vars(twin), "guid": "copy"}))
    train, scored, groups = split_groups(examples, TASKS[task].texts, 5)
    assert len(examples) - 1 in train and groups == len(examples) - 1
    texts = [set(TASKS[task].texts(examples[i])) for i in scored]
    assert not set().union(*texts) & set().union(*[set(TASKS[task].texts(examples[i])) for i in train])


def test_ner_counts_give_klue_metric_scores_on_random_tags():
    rng = random.Random(3)
    for _ in range(30):
        gold = [[rng.choice(M.NER_TAGS[:4] + ("O",) * 4) for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 6))]
        pred = [[rng.choice(M.NER_TAGS[:6] + ("O",) * 3) for _ in s] for s in gold]
        got = ner_scores(ner_counts(gold, pred).sum(0))
        assert got["entity_f1"] == pytest.approx(M.ner_entity_f1(gold, pred), abs=1e-9)
        assert got["char_f1"] == pytest.approx(M.ner_char_f1(gold, pred), abs=1e-9)


def test_readers_give_one_line_errors_and_protocol_names(tmp_path):
    bad = tmp_path / "klue-nli-v1.1_dev.json"
    bad.write_text(json.dumps([{"guid": "a", "premise": "x", "hypothesis": "y", "gold_label": "maybe"}]), encoding="utf-8")
    with pytest.raises(InputError, match=r"\[0\]\.gold_label: 'maybe' is not one of"):
        read_nli(bad)
    bad.write_text(json.dumps([{"guid": "a", "sentence1": "x", "sentence2": "y", "labels": {}}]), encoding="utf-8")
    with pytest.raises(InputError, match=r"\[0\]\.labels\.label: missing"):
        read_sts(bad)
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(InputError, match="not a JSON file"):
        read_ynat(bad)
    with pytest.raises(InputError, match="no such file"):
        read_ynat(tmp_path / "none.json")
    sts = sts_file(tmp_path / "klue-sts-v1.1_dev.json")
    # a file named like KLUE's but not its content is not "official"
    assert protocol_name("klue-sts", str(sts), str(sts)) == "custom train file" and protocol_name("klue-sts", "", str(sts)) == "KLUE dev-split"


def test_official_is_the_pinned_pair_by_content_in_its_order(tmp_path, monkeypatch):
    """The shared data has KLUE's dev files, not its train files: a copy of the NLI dev file under any name is
    "official" only in the dev role of a pinned pair; with the pins swapped for test files, the order decides."""
    import evals.klue as K
    from conftest import data_file
    from corpus_tools.artifacts import git_blob_id

    a, b = nli_file(tmp_path / "a.json", 5), nli_file(tmp_path / "b.json", 6)
    pins = {**K.KLUE_GIT_BLOBS, "klue-nli-v1.1_train.json": git_blob_id(a), "klue-nli-v1.1_dev.json": git_blob_id(b)}
    real = K.KLUE_GIT_BLOBS
    monkeypatch.setattr(K, "KLUE_GIT_BLOBS", pins)
    assert protocol_name("klue-nli", str(a), str(b)) == "official"
    assert protocol_name("klue-nli", str(b), str(a)) == "custom train file"  # swapped: not the published protocol
    assert protocol_name("klue-sts", str(a), str(b)) == "custom train file"  # another task's pins
    monkeypatch.setattr(K, "KLUE_GIT_BLOBS", real)
    dev = data_file("klue", "klue-nli-v1.1_dev.json")
    assert git_blob_id(dev) == K.KLUE_GIT_BLOBS["klue-nli-v1.1_dev.json"]
    assert protocol_name("klue-nli", str(a), str(dev)) == "custom train file"


def test_a_train_file_is_refused_for_a_scored_guid_and_its_shared_texts_are_counted(model_dir, tmp_path, one_thread):
    dev = ynat_file(tmp_path / "dev.json", 20)
    train = tmp_path / "train.json"
    rows = [{"guid": f"t{i}", "title": TEXTS[300 + i], "label": YNAT_LABELS[i % 7]} for i in range(30)] + [
        {"guid": "t99", "title": TEXTS[7], "label": YNAT_LABELS[1]}]
    train.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    res = main("ynat", KlueConfig(model=str(model_dir), dev_file=str(dev), train_file=str(train), out=str(tmp_path / "o"), device="cpu",
                                  epochs=1, batch_size=8))
    assert res["protocol"] == {"name": "custom train file", "train": "all of --train-file", "scored": "all of --dev-file",
                               "train_examples_sharing_a_dev_text": 1}
    assert res["n"] == {"train": 31, "scored": 20} and res["ci95"] == {}  # (all of dev scored: no dev-split interval)
    rows[0]["guid"] = "ynat_00003"
    train.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(InputError, match="ynat_00003 is also a scored dev example"):
        main("ynat", KlueConfig(model=str(model_dir), dev_file=str(dev), train_file=str(train), out=str(tmp_path / "o2"), device="cpu"))


def test_sts_reads_the_annotators_mean_not_the_rounded_label(tmp_path):
    path = sts_file(tmp_path / "sts.json")
    rows = json.loads(path.read_text(encoding="utf-8"))
    got = read_sts(path)
    assert [e.label for e in got] == [r["labels"]["real-label"] for r in rows] != [r["labels"]["label"] for r in rows]


def test_ner_features_train_each_token_on_its_first_characters_tag_and_never_on_special_tokens(model_dir, tmp_path):
    from evals import features as F
    from evals.data import read_klue_ner
    from korbert.folders import open_folder

    dev = read_klue_ner(ner_file(tmp_path / "ner.tsv", 12))
    mf = open_folder(str(model_dir))
    cached = F.klue(tmp_path / "f", mf, "klue-ner", str(tmp_path / "ner.tsv"), {"text": [e.text for e in dev], "tags": [e.tags for e in dev]}, 128)
    for e, row in zip(dev, cached.rows()):
        offs = [tuple(o) for o in row["offsets"]]
        real = [k for k, o in enumerate(offs) if o != (0, 0)]
        assert [k for k, lab in enumerate(row["labels"]) if lab == -100] == [0, len(offs) - 1]  # [CLS] and [SEP] only
        assert [M.NER_TAGS[row["labels"][k]] for k in real] == M.token_tags(e.text, e.tags, [offs[k] for k in real])
        assert "B-PS" in [M.NER_TAGS[row["labels"][k]] for k in real]  # the name's first token
        assert M.char_tags(e.text, [M.NER_TAGS[max(lab, 0)] if lab != -100 else "O" for lab in row["labels"]], offs) == e.tags


def test_bootstrap_interval_narrows_with_more_groups():
    from evals.klue import bootstrap, scorer

    rng = np.random.default_rng(0)
    width = []
    for n in (40, 1000):
        gold = list(rng.integers(0, 3, n))
        pred = [g if rng.random() < 0.7 else (g + 1) % 3 for g in gold]
        ci, used = bootstrap(scorer("klue-nli", gold, pred), [[i] for i in range(n)], 300, 0)
        width.append(ci["accuracy"][1] - ci["accuracy"][0])
        assert used == {"resamples": 300, "used": {"accuracy": 300}}
    assert width[1] < width[0] / 2
    # Pearson r is undefined on a resample of equal predictions: left out of that interval and counted
    ci, used = bootstrap(scorer("klue-sts", [0.5, 4.0, 2.0, 3.5], [1.0, 1.0, 1.0, 2.0]), [[0], [1], [2], [3]], 200, 1)
    assert 0 < used["used"]["pearson"] < 200 and used["used"]["f1"] == 200 and set(ci) == {"pearson", "f1"}
    assert scorer("klue-sts", [0.5, 4.0], [1.0, 1.0])(np.arange(2))["pearson"] is None
    assert bootstrap(scorer("klue-nli", [], []), [], 200, 1) == ({}, {"resamples": 0, "used": {}})  # nothing scored: no interval


@pytest.mark.parametrize("task", list(TASKS))
def test_each_task_explains_itself_on_the_command_line(task, capsys):
    from korbert.cli import main as korbert

    with pytest.raises(SystemExit) as done:
        korbert(["eval", task, "--help"])
    assert done.value.code == 0 and "--holdout-every" in capsys.readouterr().out
    assert korbert(["eval", task, "--model", "m"]) == 2  # no --dev-file: one line, not a traceback
    assert capsys.readouterr().err.strip().endswith("--model and --dev-file are required")


def test_klue_ner_runs_from_its_feature_cache_where_kiwi_is_missing(model_dir, tmp_path, one_thread):
    """The features are built once (Kiwi runs in korbert's tokenizer) and read back by a process in which
    `import kiwipiepy` fails, as on a GPU machine that carries the cache: the same scores."""
    import subprocess
    import sys
    from pathlib import Path

    dev = ner_file(tmp_path / "klue-ner-v1.1_dev.tsv", 30)
    feats = tmp_path / "feats"
    common = ["--model", str(model_dir), "--dev-file", str(dev), "--features", str(feats), "--device", "cpu", "--threads", "1",
              "--epochs", "1", "--batch-size", "8", "--bootstrap", "20"]
    want = main("klue-ner", KlueConfig(model=str(model_dir), dev_file=str(dev), features=str(feats), out=str(tmp_path / "a"),
                                       device="cpu", threads=1, epochs=1, batch_size=8, bootstrap=20))
    script = "import sys; sys.modules['kiwipiepy'] = None\nfrom korbert.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    p = subprocess.run([sys.executable, "-c", script, "eval", "klue-ner", *common, "--out", str(tmp_path / "b")],
                       cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads((tmp_path / "b" / "results.json").read_text(encoding="utf-8"))
    assert got["metrics"] == want["metrics"] and got["features"]["built"] == 0
    assert (tmp_path / "b" / "predictions.jsonl").read_bytes() == (tmp_path / "a" / "predictions.jsonl").read_bytes()
