"""The evals: the official KorQuAD metric (hand-worked cases), data readers and their errors, the
KorQuAD article split, QA features and decoding, and tiny end-to-end NSMC / KorQuAD / baseline runs."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLE, data_file
from corpus_tools.artifacts import read_manifest, sha256_file
from corpus_tools.text import InputError
from evals.data import read_nsmc, read_squad, split_articles, squad_examples
from evals.korquad_metric import evaluate, exact_match_score, f1_score, normalize_answer

# -- the official KorQuAD 1.0 metric -------------------------------------------------------------


def squad_word_f1(prediction: str, ground_truth: str) -> float:
    """SQuAD v1.1's word-level F1 (on the same normalization), to show where KorQuAD's differs."""
    p, g = normalize_answer(prediction).split(), normalize_answer(ground_truth).split()
    same = sum((Counter(p) & Counter(g)).values())
    return 0.0 if same == 0 else 2 * (same / len(p)) * (same / len(g)) / (same / len(p) + same / len(g))


def test_normalize_answer_official_rules():
    assert normalize_answer("《한국의 역사》") == "한국의 역사"  # 《 》 -> spaces, then collapsed
    assert normalize_answer('"Hello," (World)!') == "hello world"  # quotes/parens -> space; , ! deleted
    assert normalize_answer("‘조선’〈실록〉<책>") == "조선 실록 책"
    assert normalize_answer("1,000원.") == "1000원"  # ASCII punctuation is deleted, not spaced
    assert normalize_answer("“세종”") == "“세종”"  # curly double quotes are not in the official list
    assert normalize_answer("조선·한국…") == "조선·한국…"  # neither are · and …
    assert normalize_answer("The answer") == "the answer"  # no article removal (unlike SQuAD)
    assert normalize_answer("  세종   대왕 ") == "세종 대왕"


def test_f1_is_over_characters_hand_worked():
    # spaces do not count: the same characters give 1.0 (word-level: 0.0), but EM still differs
    assert f1_score("세종 대왕", "세종대왕") == 1.0
    assert squad_word_f1("세종 대왕", "세종대왕") == 0.0
    assert not exact_match_score("세종 대왕", "세종대왕")
    # pred chars 1 9 8 9 년 2 월 (7), gold + 1 5 일 (10): 7 common -> P=1, R=0.7 -> F1 = 14/17
    assert f1_score("1989년 2월", "1989년 2월 15일") == pytest.approx(14 / 17)
    assert squad_word_f1("1989년 2월", "1989년 2월 15일") == pytest.approx(0.8)  # word-level differs
    # multiset: 가가가 vs 가나 -> 1 common; P=1/3, R=1/2 -> F1 = 2/5
    assert f1_score("가가가", "가나") == pytest.approx(0.4)
    # a particle attached: 임종석이 vs 임종석 -> P=3/4, R=1 -> F1 = 6/7 (word-level: 0)
    assert f1_score("임종석이", "임종석") == pytest.approx(6 / 7)
    assert squad_word_f1("임종석이", "임종석") == 0.0
    assert f1_score("(임종석)", "임종석") == 1.0 and exact_match_score("(임종석)", "임종석")
    assert f1_score("...", "가") == 0.0 and f1_score("나", "가") == 0.0


def test_evaluate_hand_worked():
    data = [{"paragraphs": [{"qas": [
        {"id": "q1", "answers": [{"text": "세종대왕"}, {"text": "세종"}]},   # EM 0, F1 1 (max over both)
        {"id": "q2", "answers": [{"text": "1989년 2월 15일"}]},           # EM 1, F1 1 (final "." removed)
        {"id": "q3", "answers": [{"text": "훈민정음"}]},                   # unanswered: 0, 0
        {"id": "q4", "answers": [{"text": "1989년 2월 15일"}]},           # EM 0, F1 14/17
    ]}]}]
    preds = {"q1": "세종 대왕", "q2": "1989년 2월 15일.", "q4": "1989년 2월"}
    got = evaluate(data, preds, quiet=True)
    assert got["exact_match"] == pytest.approx(25.0)
    assert got["f1"] == pytest.approx(100 * (1 + 1 + 0 + 14 / 17) / 4)  # = 1200/17 = 70.588...


# -- readers -------------------------------------------------------------------------------------


def test_read_nsmc_sample_and_empty_review(tmp_path):
    rows = read_nsmc(SAMPLE / "nsmc_train.txt")
    assert len(rows) == 8000 and {r.label for r in rows} == {0, 1}
    p = tmp_path / "ok.txt"
    p.write_text("id\tdocument\tlabel\n1\t\t0\n2\t좋아요 \"최고\"\t1\r\n", encoding="utf-8")
    got = read_nsmc(p)
    assert [(r.id, r.text, r.label) for r in got] == [("1", "", 0), ("2", '좋아요 "최고"', 1)]


@pytest.mark.parametrize("body, where, what", [
    ("id\tdocument\tlabel\n1\t좋다\t1\n2\t나쁘다\n", ":3:", "3 tab-separated fields"),
    ("id\tdocument\tlabel\n1\t좋다\t1\n2\t보통\t5\n", ":3:", "label '5' is not 0 or 1"),
    ("id\ttext\tlabel\n1\t좋다\t1\n", ":1:", "header"),
    ("id\tdocument\tlabel\n1\t좋다\t1\n1\t또\t0\n", ":3:", "repeats line 2"),
])
def test_read_nsmc_errors_name_file_and_line(tmp_path, body, where, what):
    p = tmp_path / "bad.txt"
    p.write_text(body, encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_nsmc(p)
    assert f"{p}{where}" in str(e.value) and what in str(e.value)


def test_read_nsmc_bad_utf8_and_missing(tmp_path):
    p = tmp_path / "bin.txt"
    p.write_bytes("id\tdocument\tlabel\n1\t좋다\t1\n".encode() + b"2\t\xff\xfe\t0\n")
    with pytest.raises(InputError, match=rf"{p}:3: not valid UTF-8"):
        read_nsmc(p)
    with pytest.raises(InputError, match="no such file"):
        read_nsmc(tmp_path / "nope.txt")


def _squad(tmp_path, data) -> Path:
    p = tmp_path / "squad.json"
    p.write_text(json.dumps({"version": "KorQuAD_v1.0_dev", "data": data}, ensure_ascii=False), encoding="utf-8")
    return p


def test_read_squad_errors_name_the_field(tmp_path):
    good_q = {"id": "a", "question": "누가?", "answers": [{"text": "세종", "answer_start": 0}]}
    p = _squad(tmp_path, [{"title": "t", "paragraphs": [{"context": "세종이 만들었다", "qas": [good_q]}, {"qas": []}]}])
    with pytest.raises(InputError, match=r"data\[0\]\.paragraphs\[1\]: missing field 'context'"):
        read_squad(p)
    bad = dict(good_q, answers=[{"text": "세종", "answer_start": "0"}])
    p = _squad(tmp_path, [{"paragraphs": [{"context": "세종이 만들었다", "qas": [bad]}]}])
    with pytest.raises(InputError, match=r"qas\[0\]\.answers\[0\]\.answer_start: expected int, got str"):
        read_squad(p)
    p = _squad(tmp_path, [{"paragraphs": [{"context": "세종이 만들었다", "qas": [good_q, good_q]}]}])
    with pytest.raises(InputError, match=r"qas\[1\]\.id: 'a' repeats"):
        read_squad(p)
    off = dict(good_q, answers=[{"text": "세종", "answer_start": 2}])
    p = _squad(tmp_path, [{"paragraphs": [{"context": "세종이 만들었다", "qas": [off]}]}])
    data = read_squad(p)  # fine for scoring ...
    with pytest.raises(InputError, match=r"answers\[0\]: answer_start 2 does not point at the answer text '세종'"):
        squad_examples(data, p, need_answer=True)  # ... not for training
    p.write_text('{"data": [\n{"paragraphs": [}', encoding="utf-8")
    with pytest.raises(InputError, match=rf"{p}:2: not valid JSON"):
        read_squad(p)
    p.write_text('[1, 2]', encoding="utf-8")
    with pytest.raises(InputError, match="no top-level 'data' list"):
        read_squad(p)


def test_korquad_article_split():
    train, held = split_articles(140)
    assert held == list(range(0, 140, 5)) and len(held) == 28 and len(train) == 112
    assert not set(train) & set(held) and sorted(train + held) == list(range(140))
    data = read_squad(SAMPLE / "korquad_dev.json")
    train, held = split_articles(len(data))
    assert held == [0, 5, 10] and len(squad_examples(data, articles=held)) + len(squad_examples(data, articles=train)) == 474


def test_korquad_split_on_the_official_dev_file():
    full_dev = data_file("korquad", "KorQuAD_v1.0_dev.json")  # $KORBERT_DATA's; in CI a missing file fails
    data = read_squad(full_dev)
    train, held = split_articles(len(data))
    assert len(data) == 140 and (len(held), len(train)) == (28, 112)
    assert len(squad_examples(data, articles=held)) == 1287
    assert len(squad_examples(data, full_dev, train, need_answer=True)) == 4487


# -- QA features and decoding --------------------------------------------------------------------


def test_features_map_answers_back_by_offsets(tok):
    from evals.korquad import answer_chars, prepare_features

    data = read_squad(SAMPLE / "korquad_dev.json")
    ex = squad_examples(data, articles=[0, 1, 2, 3], need_answer=True)
    feats = prepare_features(tok, ex, max_len=128, stride=32, max_query_len=32, train=True)
    assert len(feats) > 2 * len(ex)  # long contexts overflow into several windows
    found, exact = set(), 0
    for f in feats:
        x = ex[f["example"]]
        a = x.answers[0]
        start, end = answer_chars(x)  # the answer's span, surrounding whitespace left out
        assert x.context[start:end] == a["text"].strip()
        offs, s, e = f["offsets"], f["start_positions"], f["end_positions"]
        ctx = [o for o in offs if o is not None]
        assert len(f["input_ids"]) <= 128 and len(offs) == len(f["input_ids"])
        if s == 0:  # [CLS]: this window does not hold the whole answer
            assert e == 0 and not (ctx[0][0] <= start and ctx[-1][1] >= end)
            continue
        assert offs[s] is not None and offs[e] is not None and s <= e
        assert offs[s][0] <= start < offs[s][1] and offs[e][0] < end <= offs[e][1]  # the edge tokens
        span = x.context[offs[s][0] : offs[e][1]]
        assert x.context[start:end] in span
        exact += span == x.context[start:end]
        found.add(f["example"])
    assert found == set(range(len(ex)))  # every answer lies whole in some window
    assert exact / sum(f["start_positions"] > 0 for f in feats) > 0.9
    # after the windowing, encode_documents still encodes whole documents (no truncation leaks)
    long = "가나다 " * 200
    assert len(tok.encode_documents([long])[0]["ids"]) == len(tok(long, add_special_tokens=False)["input_ids"]) > 384


def _feature(offsets, start_logits, end_logits, example=0):
    return {"input_ids": [0] * len(offsets), "example": example, "offsets": offsets}, (np.array(start_logits), np.array(end_logits))


def test_postprocess_picks_the_best_valid_span_by_offsets():
    from evals.data import QAExample
    from evals.korquad import postprocess

    context = "세종대왕은 1443년에 훈민정음을 창제했다."
    ex = QAExample("q", "무엇을 창제했나?", context, [{"text": "훈민정음", "answer_start": 13}], 0)
    toks = [(0, 4), (4, 5), (6, 10), (10, 11), (11, 12), (13, 17), (17, 18), (19, 21), (21, 23), (23, 24)]
    offsets = [None, None, None] + toks + [None]  # [CLS] q q ... [SEP]: context tokens are 3..12
    #                 CLS  q   q  세종대왕 은 1443 년 에 훈민정음 을 창제 했다 .  SEP
    start_1 = [10, 9, 9, 0, 0, 5, 0, 0, 4, 0, 0, 0, 0, 9]
    end_1 = [10, 9, 9, 3, 0, 0, 4, 0, 0, 3.5, 0, 0, 0, 9]
    f1, l1 = _feature(offsets, start_1, end_1)
    # [CLS]/question/[SEP] logits are ignored; (세종대왕, 세종대왕) scores 3 < (1443, 년) 9
    preds, nbest = postprocess([ex], [f1], [l1], n_best=20, max_answer_len=30)
    assert preds == {"q": "1443년"}
    assert [c["text"] for c in nbest["q"][:3]] == ["1443년", "1443년에 훈민정음을", "훈민정음을"]
    assert sum(c["probability"] for c in nbest["q"]) == pytest.approx(1.0)
    # max_answer_len 2 drops the 5-token span; the order of the rest is kept
    _, nbest = postprocess([ex], [f1], [l1], n_best=20, max_answer_len=2)
    assert [c["text"] for c in nbest["q"][:2]] == ["1443년", "훈민정음을"]
    # a second window of the same question with a better span wins; text is sliced from context
    offs2 = [None, None] + toks[5:] + [None]
    start_2 = [0, 0, 20, 0, 0, 0, 0, 0]
    end_2 = [0, 0, 19, 0, 0, 0, 0, 0]
    f2, l2 = _feature(offs2, start_2, end_2)
    preds, nbest = postprocess([ex], [f1, f2], [l1, l2])
    assert preds == {"q": "훈민정음"} and nbest["q"][0]["feature"] == 1
    # a span may not start on a whitespace-only token: it is trimmed to the text
    offs3 = [None, (5, 6), (6, 10), None]  # a lone "▁" token spans the space at 5
    f3, l3 = _feature(offs3, [0, 9, 1, 0], [0, 0, 9, 0])
    assert postprocess([ex], [f3], [l3])[0] == {"q": "1443"}
    # no valid pair among the top n_best (best end before best start): every pair is searched
    f4, l4 = _feature(offsets, [0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 0])
    assert postprocess([ex], [f4], [l4], n_best=1)[0] == {"q": "훈민정음을"}
    assert postprocess([ex], [], [])[0] == {"q": ""}  # no window: an empty answer


# -- end to end ----------------------------------------------------------------------------------


def _nsmc(model_dir, out, **kw):
    from evals.nsmc import NsmcConfig, main

    args = dict(model=str(model_dir), out=str(out), max_train_examples=200, valid_size=100, max_eval_examples=120,
                epochs=2, batch_size=16, max_len=64, lr=1e-3, device="cpu", seed=7, threads=1)
    return main(NsmcConfig(**{**args, **kw}))


def test_nsmc_end_to_end_and_deterministic(model_dir, tok, tmp_path, one_thread):
    r1 = _nsmc(model_dir, tmp_path / "a")
    r2 = _nsmc(model_dir, tmp_path / "b")
    assert (tmp_path / "a" / "predictions.tsv").read_bytes() == (tmp_path / "b" / "predictions.tsv").read_bytes()
    assert r1["metrics"] == r2["metrics"] and r1["training"]["history"] == r2["training"]["history"]
    saved = json.loads((tmp_path / "a" / "results.json").read_text(encoding="utf-8"))
    assert saved["metrics"] == r1["metrics"] and 0.0 <= saved["metrics"]["accuracy"] <= 1.0
    assert saved["tokenizer_hash"] == tok.fingerprint and saved["model"]["path"] == str(model_dir)
    assert saved["n"] == {"train": 200, "valid": 100, "test": 120} and saved["full_test"] is False
    assert saved["config"]["max_eval_examples"] == 120 and saved["config"]["seed"] == 7
    assert saved["data"]["test"]["sha256"] == sha256_file(SAMPLE / "nsmc_test.txt")
    assert saved["examples_per_s"] > 0 and saved["device"]["kind"] == "cpu" and saved["seconds"]["total"] > 0
    assert len(saved["training"]["history"]) == 2 and saved["training"]["selected_epoch"] in (1, 2)
    lines = (tmp_path / "a" / "predictions.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "id\tlabel\tprediction\tp_positive" and len(lines) == 121
    test = read_nsmc(SAMPLE / "nsmc_test.txt")[:120]
    rows = [line.split("\t") for line in lines[1:]]
    assert [r[0] for r in rows] == [t.id for t in test] and [int(r[1]) for r in rows] == [t.label for t in test]
    assert sum(int(r[2]) == int(r[1]) for r in rows) / 120 == pytest.approx(saved["metrics"]["accuracy"], abs=1e-6)
    read_manifest(tmp_path / "a", "eval", verify=True)
    ctl = _nsmc(model_dir, tmp_path / "c", control=True, epochs=1)
    assert ctl["control"] is True and ctl["model"]["init"].startswith("random")
    assert (tmp_path / "c" / "predictions.tsv").read_bytes() != (tmp_path / "a" / "predictions.tsv").read_bytes()


def test_korquad_end_to_end_and_deterministic(model_dir, tmp_path, one_thread):
    from evals.korquad import KorquadConfig, main

    def run(out):
        return main(KorquadConfig(model=str(model_dir), out=str(out), max_train_examples=40, max_eval_examples=25,
                                  epochs=1, batch_size=8, lr=1e-3, device="cpu", seed=3, threads=1))

    r = run(tmp_path / "a")
    run(tmp_path / "b")
    for name in ("predictions.json", "nbest_predictions.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    data = read_squad(SAMPLE / "korquad_dev.json")
    scored = squad_examples(data, articles=[0, 5, 10])[:25]
    preds = json.loads((tmp_path / "a" / "predictions.json").read_text(encoding="utf-8"))
    assert list(preds) == [e.id for e in scored]  # the official format: {question id: answer text}
    assert all(isinstance(p, str) and p in e.context for p, e in zip(preds.values(), scored))
    nbest = json.loads((tmp_path / "a" / "nbest_predictions.json").read_text(encoding="utf-8"))
    for e in scored:
        best = nbest[e.id][0]
        assert best["text"] == preds[e.id] == e.context[best["start_char"] : best["end_char"]]
    want = evaluate([{"paragraphs": [{"qas": [{"id": e.id, "answers": e.answers} for e in scored]}]}], preds)
    assert r["metrics"] == {"exact_match": round(want["exact_match"], 4), "f1": round(want["f1"], 4)}
    assert r["protocol"]["name"] == "dev-split" and r["protocol"]["scored_articles"] == [0, 5, 10]
    assert r["n"]["train_questions"] == 40 and r["n"]["scored_questions"] == 25 and r["full_eval"] is False
    assert r["n"]["train_windows"] >= 40 and r["examples_per_s"] > 0
    assert r["config"]["max_len"] == 384 and r["config"]["stride"] == 128
    read_manifest(tmp_path / "a", "eval", verify=True)


def test_model_folder_errors(model_dir, tmp_path, capsys):
    from evals.finetune import load_model
    from korbert.folders import open_folder
    from evals.nsmc import NsmcConfig
    from evals.nsmc import main as nsmc_main
    from korbert.cli import main as korbert

    def korbert_nsmc(**kw):
        return nsmc_main(NsmcConfig(**kw))

    with pytest.raises(InputError, match="no such folder"):
        load_model(str(tmp_path / "nope"), "cls", False, 0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        load_model(str(tmp_path / "empty"), "qa", False, 0)
    bad = tmp_path / "mixed"
    shutil.copytree(model_dir, bad)
    (bad / "manifest.json").write_text(json.dumps({"kind": "model", "tokenizer_hash": "0" * 64}), encoding="utf-8")
    with pytest.raises(InputError, match="manifest.json says the model was trained with 000000000000"):
        open_folder(str(bad)).tokenizer()  # checked when the tokenizer is loaded (building features)
    with pytest.raises(InputError, match="manifest.json says the model was trained with 000000000000"):
        korbert_nsmc(model=str(bad), out=str(tmp_path / "o"), max_train_examples=10, max_eval_examples=10, device="cpu")
    (bad / "manifest.json").unlink()
    (bad / "model.safetensors").unlink()
    with pytest.raises(InputError, match="no model.safetensors"):
        load_model(str(bad), "cls", False, 0)
    assert load_model(str(bad), "qa", True, 0).info["control"]  # the control needs only config.json
    assert korbert(["eval", "korquad", "--model", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("korbert eval: error: --model") and "no such folder" in err and "\n" not in err
    assert korbert(["eval", "nsmc", "--model", str(model_dir), "--train", str(tmp_path / "x.txt")]) == 2
    assert f"{tmp_path / 'x.txt'}: no such file" in capsys.readouterr().err


def test_cli_help_for_each_task(capsys):
    from evals.cli import main

    main(["--help"])
    assert "korbert eval nsmc" in capsys.readouterr().out
    for task, flag in (("nsmc", "--valid-size"), ("korquad", "--train-file"), ("baseline", "--analyzer")):
        with pytest.raises(SystemExit) as e:
            main([task, "--help"])
        assert e.value.code == 0 and flag in capsys.readouterr().out
    with pytest.raises(InputError, match="unknown eval task"):
        main(["squad"])


def test_baseline_on_the_sample_beats_chance(tmp_path):
    from evals.baseline import BaselineConfig, main

    r = main(BaselineConfig(out=str(tmp_path), analyzer="both", max_train_examples=4000, max_eval_examples=1000))
    assert r["n"] == {"train": 4000, "test": 1000} and r["full_test"] is False
    assert r["metrics"]["accuracy_char"] > 0.7 and r["metrics"]["accuracy_morph"] > 0.7
    for kind in ("char", "morph"):
        lines = (tmp_path / f"predictions-{kind}.tsv").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 1001 and lines[0] == "id\tlabel\tprediction\tp_positive"
        rows = [line.split("\t") for line in lines[1:]]
        assert sum(a[1] == a[2] for a in rows) / 1000 == pytest.approx(r["metrics"][f"accuracy_{kind}"])
    assert r["config"]["c"] == 2.0 and r["config"]["char_ngrams"] == [1, 4]
    read_manifest(tmp_path, "eval", verify=True)


def test_fine_tuning_past_the_trained_positions_is_refused(model_dir, tmp_path, one_thread):
    """A korbert export whose manifest says it was pretrained on 128 tokens: KorQuAD windows of 384
    are refused (naming both numbers and the two ways out); --allow-untrained-positions, windows
    within 128 and the control (random everywhere) go on. NSMC-R reviews likewise."""
    from evals.korquad import KorquadConfig, main
    from evals.nsmc import NsmcConfig, main as nsmc_main

    folder = tmp_path / "model128"
    shutil.copytree(model_dir, folder)
    m = json.loads((folder / "manifest.json").read_text()) if (folder / "manifest.json").exists() else {}
    (folder / "manifest.json").write_text(json.dumps({**m, "trained_seq_len": 128}))

    def run(out, **kw):
        return main(KorquadConfig(model=str(folder), out=str(tmp_path / out), max_train_examples=8, max_eval_examples=2,
                                  epochs=0, max_steps=1, batch_size=8, device="cpu", seed=3, threads=1, **kw))

    with pytest.raises(InputError, match=r"--max-len 384 is longer than the 128 tokens .*--long-shards.*--max-len 128 --stride 32 --max-query-len 40"):
        run("a")
    assert run("b", allow_untrained_positions=True)["config"]["max_len"] == 384
    assert run("c", max_len=128, stride=32, max_query_len=40)["config"]["max_len"] == 128
    assert run("d", control=True)["config"]["max_len"] == 384
    with pytest.raises(InputError, match="--max-len 200 is longer than the 128 tokens"):
        nsmc_main(NsmcConfig(model=str(folder), out=str(tmp_path / "n"), max_len=200, device="cpu"))
