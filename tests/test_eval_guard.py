"""The guard against pretraining on evaluation text (corpus_tools/guard.py) and its place in the
shards and the recipe: NSMC test reviews matched by letters and digits alone, KorQuAD contexts by a
48-character shared run wherever it starts (47 are not enough), such documents left out of the shards
and the vocabulary's sample and counted in their manifests (the same with Dask workers),
`--keep-eval-text` keeping them, `eval_strict` refusing fresh and reused shards alike, the keys that
redo the work when the evaluation files or the policy change, and the embedded sample free of its
own evaluation text. Real Kiwi, the embedded sample's evaluation files."""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest

from conftest import nsmc_test_docs, sample_texts, write_jsonl
from corpus_tools import SAMPLE_DATA
from corpus_tools.guard import EvalText, flat, korquad_contexts, review_key
from corpus_tools.shards import main as shards_main
from corpus_tools.shards_config import ShardsConfig
from corpus_tools.text import InputError

NSMC_TEST, KORQUAD = SAMPLE_DATA / "nsmc_test.txt", SAMPLE_DATA / "korquad_dev.json"
FILL = "◆"  # a character no context holds: a run cannot grow across it


@pytest.fixture(scope="module")
def guard() -> EvalText:
    return EvalText(nsmc_test=[NSMC_TEST], korquad=[KORQUAD])


def test_review_key_keeps_letters_and_digits_in_nfc_casefolded():
    assert review_key("정말 재밌어요!! 10점...") == review_key("정말재밌어요 10 점") == "정말재밌어요10점"
    assert review_key(unicodedata.normalize("NFD", "최고의 영화")) == review_key("최고의_영화") == "최고의영화"
    assert review_key("BEST movie") == review_key("best  MOVIE ~~") == "bestmovie"
    assert review_key("...!!! ㅋ") == "ㅋ" and review_key(" ... ") == ""


def test_a_test_review_is_found_through_spacing_and_punctuation_but_not_inside_a_longer_text(guard):
    long_ones = [d for d in nsmc_test_docs(500) if len(review_key(d)) >= 12][:20]
    assert len(long_ones) == 20
    for d in long_ones:
        assert guard.check(d) == "nsmc_test_review"
        assert guard.check("  " + d.replace(" ", "") + " ...!! ") == "nsmc_test_review"
        assert guard.check(unicodedata.normalize("NFD", d)) == "nsmc_test_review"
        assert guard.check(d + " 그리고 한 문장 더") is None  # equality, not containment: another document
        assert guard.check(d[: len(d) // 2]) is None


def test_a_48_character_run_of_a_context_is_found_wherever_it_starts_and_47_never_are(guard):
    ctxs = [flat(c) for _, c in korquad_contexts(KORQUAD)]
    ctx = max(ctxs, key=len)
    assert FILL not in "".join(ctxs) and len(ctx) > 200
    starts = [s for s in range(0, 120) if " " not in (ctx[s], ctx[s + 46], ctx[s + 47])][:40]  # a run's ends are not stripped spaces
    assert len(starts) == 40
    for start in starts:  # many places in the context, and every place in the document
        for before in (0, 1, 7, 23, 24, 25, 47, 100):
            head = FILL * before
            assert guard.shares_context(head + ctx[start:start + 48] + FILL * 5), (start, before)
            assert not guard.shares_context(head + ctx[start:start + 47] + FILL * 5), (start, before)
    # whitespace is compared collapsed: a copy reflowed with newlines and double spaces is still one
    piece = ctx[10:120]
    assert guard.check("머리말\n\n" + piece.replace(" ", "  \n") + "\n꼬리말") == "korquad_context"
    assert guard.check("서울은 대한민국의 수도이다.") is None
    assert EvalText(korquad=[KORQUAD], run=60).shares_context(ctx[0:59]) is False


def test_titles_are_the_scored_articles_in_nfc_with_underscores_as_spaces(guard):
    titles = {" ".join(unicodedata.normalize("NFC", t).replace("_", " ").split()) for t, _ in korquad_contexts(KORQUAD)}
    assert guard.titles == titles and "하쿠나 마타타" in titles  # 하쿠나_마타타 in the file, as Wikipedia writes it
    assert guard.is_title("하쿠나 마타타") and guard.is_title(unicodedata.normalize("NFD", " 하쿠나_마타타 "))
    assert EvalText(nsmc_test=[NSMC_TEST]).titles == set() and EvalText(nsmc_test=[NSMC_TEST]).check(max(titles)) is None


def corpus_with_eval_text(path: Path, guard: EvalText) -> tuple[Path, dict]:
    """Sample reviews the guard passes, plus three test reviews respaced and repunctuated and two
    documents that copy 60 characters of a context: the counts the shards must find."""
    clean = [t for t in sample_texts(400) if guard.check(t) is None][:300]
    reviews = [d for d in nsmc_test_docs(500) if len(review_key(d)) >= 12][:3]
    ctx = max((flat(c) for _, c in korquad_contexts(KORQUAD)), key=len)
    planted = [reviews[0].replace(" ", "") + "!!", " " + reviews[1] + " ...", reviews[2] + "~",
               "이 글은 백과사전에서 옮겼다. " + ctx[30:90] + " 끝.", ctx[100:160]]
    docs = clean[:100] + planted[:2] + clean[100:200] + planted[2:] + clean[200:]
    return write_jsonl(path, docs), {"korquad_context": 2, "nsmc_test_review": 3}


def build(vocab_dir, inputs, out, **kw):
    return shards_main(ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(i) for i in inputs], out=str(out), valid_fraction=0.1, show=0, **kw))


def test_shards_leave_out_the_documents_holding_eval_text_count_them_and_strict_refuses_them(vocab_dir, guard, tmp_path, capsys):
    corpus, expected = corpus_with_eval_text(tmp_path / "corpus.jsonl", guard)
    evals = dict(eval_nsmc_test=str(NSMC_TEST), eval_korquad=str(KORQUAD))
    m = build(vocab_dir, [corpus], tmp_path / "s", **evals)
    c = m["counts"]
    assert c["eval_text"] == expected and c["eval_text_by_file"] == {str(corpus): expected}
    assert set(c["eval_text_first_at"]) == set(expected) and all(str(corpus) in w for w in c["eval_text_first_at"].values())
    # left out: skipped as eval_text, not pretrained on (documents in = used + skipped still holds)
    assert c["documents_in"] == 305 and c["documents_used"] == 300 and c["documents_skipped"] == {"eval_text": 5}
    assert c["first_skip_at"]["eval_text"] == min(c["eval_text_first_at"].values(), key=lambda w: int(w.rsplit(":", 1)[1]))
    assert "evaluation text in the corpus (documents left out, counted)" in capsys.readouterr().out

    # the same counts (and bytes) from two Dask workers on 127.0.0.1
    m2 = build(vocab_dir, [corpus], tmp_path / "w2", workers=2, **evals)
    assert m2["counts"]["eval_text"] == expected and m2["counts"]["eval_text_first_at"] == c["eval_text_first_at"]
    assert m2["counts"]["documents_used"] == 300 and [sh["files"] for sh in m2["shards"]["train"]] == [sh["files"] for sh in m["shards"]["train"]]

    # --strict refuses: the first such document, fresh ...
    with pytest.raises(InputError, match=r"corpus.jsonl.*: nsmc test review in the corpus \(eval_strict"):
        build(vocab_dir, [corpus], tmp_path / "strict", eval_strict=True, **evals)
    # ... and shards built before it was asked for (reused: their counts decide)
    with pytest.raises(InputError, match=r"in the corpus \(eval_strict; \{'korquad_context': 2, 'nsmc_test_review': 3\}\)"):
        build(vocab_dir, [corpus], tmp_path / "s", eval_strict=True, **evals)
    assert "up to date" in capsys.readouterr().out

    # a clean corpus passes --strict, and without evaluation files nothing is counted or left out
    clean = write_jsonl(tmp_path / "clean.jsonl", [t for t in sample_texts(200) if guard.check(t) is None])
    assert build(vocab_dir, [clean], tmp_path / "c", eval_strict=True, **evals)["counts"]["eval_text"] == {}
    none = build(vocab_dir, [corpus], tmp_path / "none")["counts"]
    assert none["eval_text"] == {} and none["documents_used"] == 305


def test_korbert_shards_drops_a_test_review_keep_eval_text_keeps_it_and_says_so(vocab_dir, tmp_path, capsys):
    """The command line: one corpus document equal to a test review (respaced, repunctuated) among
    clean ones. Dropped and counted by default; --eval-strict refuses; --keep-eval-text keeps it, counted."""
    from corpus_tools.shards import cli

    guard = EvalText(nsmc_test=[NSMC_TEST])
    review = next(d for d in nsmc_test_docs(500) if len(review_key(d)) >= 12)
    clean = [t for t in sample_texts(200) if guard.check(t) is None][:150]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", clean[:70] + ["  " + review.replace(" ", "") + " ...!!"] + clean[70:])
    args = ["--tokenizer", str(vocab_dir), "--inputs", str(corpus), "--eval-nsmc-test", str(NSMC_TEST), "--show", "0"]
    c = cli(args + ["--out", str(tmp_path / "drop")])["counts"]
    assert (c["documents_in"], c["documents_used"], c["documents_skipped"]) == (151, 150, {"eval_text": 1})
    assert c["eval_text"] == {"nsmc_test_review": 1} and c["eval_text_first_at"] == {"nsmc_test_review": f"{corpus}:71"}
    out = capsys.readouterr().out
    assert "151 in = 150 used + 1 skipped: {'eval_text': 1}" in out and "documents left out, counted" in out
    with pytest.raises(InputError, match=rf"{corpus}:71: nsmc test review in the corpus \(eval_strict\)"):
        cli(args + ["--out", str(tmp_path / "strict"), "--eval-strict"])
    k = cli(args + ["--out", str(tmp_path / "keep"), "--keep-eval-text"])["counts"]
    assert (k["documents_used"], k["documents_skipped"], k["eval_text"]) == (151, {}, {"nsmc_test_review": 1})
    assert k["train"]["tokens"] + k["valid"]["tokens"] > c["train"]["tokens"] + c["valid"]["tokens"]
    assert "evaluation text in the corpus (documents kept, counted)" in capsys.readouterr().out


def test_the_policy_is_part_of_the_shards_key_and_the_vocabularys(vocab_dir, tmp_path, capsys):
    """Shards or a vocabulary made under one policy are redone, not reused, under the other; the
    same policy again is up to date."""
    from corpus_tools.vocab import VocabConfig
    from corpus_tools.vocab import main as vocab_main

    review = next(d for d in nsmc_test_docs(500) if len(review_key(d)) >= 12)
    clean = [t for t in sample_texts(300) if EvalText(nsmc_test=[NSMC_TEST]).check(t) is None]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", clean[:150] + [review + "!!"] + clean[150:])
    evals = dict(eval_nsmc_test=str(NSMC_TEST))
    drop = build(vocab_dir, [corpus], tmp_path / "s", **evals)
    with pytest.raises(InputError, match="holds shards made with other options"):
        build(vocab_dir, [corpus], tmp_path / "s", keep_eval_text=True, **evals)
    keep = build(vocab_dir, [corpus], tmp_path / "s", keep_eval_text=True, replace=True, **evals)
    assert keep["key"] != drop["key"] and keep["counts"]["documents_used"] == drop["counts"]["documents_used"] + 1
    capsys.readouterr()
    assert build(vocab_dir, [corpus], tmp_path / "s", keep_eval_text=True, **evals)["key"] == keep["key"]
    assert "up to date" in capsys.readouterr().out

    def vocab(**kw):
        return vocab_main(VocabConfig(inputs=[str(corpus)], out=str(tmp_path / "v"), vocab_size=1000, num_unused=5, show=0, **evals, **kw))

    v = vocab()
    assert v["counts"]["documents_skipped"] == {"eval_text": 1} and v["counts"]["eval_text"] == {"nsmc_test_review": 1}
    capsys.readouterr()
    kv = vocab(keep_eval_text=True)
    assert "up to date" not in capsys.readouterr().out and kv["counts"]["documents_used"] == v["counts"]["documents_used"] + 1
    assert kv["config"]["eval_text"][-1] == "keep" and v["config"]["eval_text"][-1] == "drop"
    vocab(keep_eval_text=True)
    assert "up to date" in capsys.readouterr().out
    with pytest.raises(InputError, match=r"nsmc test review in the corpus \(eval_strict"):
        vocab(keep_eval_text=True, eval_strict=True)


def test_strict_refuses_a_run_resumed_from_pieces_built_without_it(vocab_dir, guard, tmp_path):
    """A run killed after its last piece, before its manifest, resumed with eval_strict: every
    piece is resumed, none rebuilt, and their counts are checked all the same; no manifest is written."""
    corpus, _ = corpus_with_eval_text(tmp_path / "corpus.jsonl", guard)
    evals = dict(eval_nsmc_test=str(NSMC_TEST), eval_korquad=str(KORQUAD), shard_mb=0.01)
    pieces = build(vocab_dir, [corpus], tmp_path / "whole", **evals)["counts"]["pieces"]
    assert pieces > 1
    finished = []

    def kill_after_last(name):
        finished.append(name)
        if len(finished) == pieces:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        shards_main(ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(corpus)], out=str(tmp_path / "s"), valid_fraction=0.1, show=0,
                                 **evals), on_piece=kill_after_last)
    with pytest.raises(InputError, match=r"in the corpus \(eval_strict"):
        build(vocab_dir, [corpus], tmp_path / "s", eval_strict=True, **evals)
    assert not (tmp_path / "s" / "manifest.json").exists()


def test_shards_are_rebuilt_when_the_evaluation_files_change(vocab_dir, guard, tmp_path, capsys):
    corpus, expected = corpus_with_eval_text(tmp_path / "corpus.jsonl", guard)
    nsmc = tmp_path / "nsmc_test.txt"
    shutil.copy(NSMC_TEST, nsmc)
    build(vocab_dir, [corpus], tmp_path / "s", eval_nsmc_test=str(nsmc))
    assert build(vocab_dir, [corpus], tmp_path / "s", eval_nsmc_test=str(nsmc))["counts"]["eval_text"] == {"nsmc_test_review": 3}
    assert "up to date" in capsys.readouterr().out
    # the same file under another path: still up to date (the key holds content, not paths)
    moved = tmp_path / "moved.txt"
    shutil.copy(nsmc, moved)
    build(vocab_dir, [corpus], tmp_path / "s", eval_nsmc_test=str(moved))
    assert "up to date" in capsys.readouterr().out
    # a test file without those three reviews: rebuilt, and the count follows it
    lines = nsmc.read_text(encoding="utf-8").splitlines(keepends=True)
    planted = {review_key(d) for d in nsmc_test_docs(500) if len(review_key(d)) >= 12}
    nsmc.write_text("".join(x for i, x in enumerate(lines) if i == 0 or review_key(x.split("\t")[1]) not in planted), encoding="utf-8")
    m = build(vocab_dir, [corpus], tmp_path / "s", eval_nsmc_test=str(nsmc), replace=True)
    assert "up to date" not in capsys.readouterr().out and m["counts"]["eval_text"] == {}


def test_the_recipe_hands_its_scored_files_and_policy_to_the_vocabulary_and_both_shard_stages(tmp_path):
    from korbert.recipe import RecipeConfig, stage_configs

    c = stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "run"), strict=True))["cfgs"]
    for stage in ("vocab", "shards", "shards_long"):
        if stage in c:
            assert c[stage].eval_nsmc_test == c["nsmc"].test and c[stage].eval_korquad == c["korquad"].dev_file
            assert c[stage].eval_strict is True and c[stage].keep_eval_text is False
    kept = stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "run"), keep_eval_text=True))["cfgs"]
    assert kept["vocab"].keep_eval_text and kept["shards"].keep_eval_text and not kept["shards"].eval_strict
    assert json.loads(Path(c["korquad"].dev_file).read_text(encoding="utf-8"))["data"]


# --- issue 59: a KorQuAD train file holds none of the scored dev questions, and is official only when pinned

def test_a_korquad_train_file_sharing_scored_questions_is_refused_and_another_is_a_custom_one_issue_59(model_dir, tmp_path, one_thread):
    """The dev file as the train file, or a train file with a scored question's id or a scored
    paragraph's context, is refused in one line. A train file that copies a scored paragraph with
    a sentence more (train and dev share Wikipedia text) is used, and named "custom train file"."""
    import copy

    from evals.korquad import KorquadConfig, main

    dev = json.loads(KORQUAD.read_text(encoding="utf-8"))["data"]

    def train_file(data) -> Path:
        path = tmp_path / "train.json"
        path.write_text(json.dumps({"version": "KorQuAD_v1.0_train", "data": data}, ensure_ascii=False), encoding="utf-8")
        return path

    def run(train):  # the first 5 dev questions scored: the first paragraph of the first article
        return main(KorquadConfig(model=str(model_dir), dev_file=str(KORQUAD), train_file=str(train), out=str(tmp_path / "out"),
                                  max_train_examples=8, max_eval_examples=5, epochs=1, batch_size=8, device="cpu", seed=3, threads=1))

    scored = dev[0]["paragraphs"][0]
    renamed = copy.deepcopy(dev[0])
    for p in renamed["paragraphs"]:
        for q in p["qas"]:
            q["id"] = "train-" + q["id"]
    with pytest.raises(InputError, match=r"korquad_dev.json: shares 5 question ids \(first: 6548850-0-0\) and 1 paragraph context "
                                         r"\(first: data\[0\]\.paragraphs\[0\]\) with the 5 scored questions of .*korquad_dev.json"):
        run(KORQUAD)
    with pytest.raises(InputError, match=r"train.json: shares 0 question ids and 1 paragraph context \(first: data\[0\]\.paragraphs\[0\]\)"):
        run(train_file([renamed]))
    other = copy.deepcopy(dev[1])
    other["paragraphs"][0]["qas"][0]["id"] = scored["qas"][4]["id"]
    with pytest.raises(InputError, match=r"train.json: shares 1 question id \(first: 6548853-0-2\) and 0 paragraph contexts"):
        run(train_file([other]))
    renamed["paragraphs"][0]["context"] += " 그 뒤의 일은 다른 문서에 있다."  # answers keep their offsets
    r = run(train_file([renamed]))
    assert r["protocol"]["name"] == "custom train file" and r["protocol"]["scored_questions"] == 5


def test_the_embedded_sample_holds_none_of_its_own_evaluation_text():
    """corpus_tools/make_sample.py draws the corpus from documents the guard passes: read as the
    stages read it, no document of the demo's corpus equals one of its NSMC test reviews or shares a
    48-character run with one of its KorQuAD contexts (the demo pretrains on none of what it scores)."""
    from corpus_tools.text import ReadStats, clean, iter_documents

    guard = EvalText(nsmc_test=[NSMC_TEST], korquad=[KORQUAD])
    stats = ReadStats()
    docs = iter_documents([SAMPLE_DATA / "reviews.jsonl.gz", SAMPLE_DATA / "petitions.jsonl.gz"], text_field=["title", "text"], stats=stats)
    found = [(where, hit) for where, text in docs if (hit := guard.check(clean(text)))]
    assert stats.documents_in == 20150 and found == []


def test_a_cached_korquad_result_is_named_by_its_files_in_the_report_issue_59():
    """A result fine-tuned before the check said "official" for any train file; the report and the
    card (korbert run) name it again from the two files."""
    from evals.korquad import KorquadConfig
    from korbert.report import _korquad_protocol

    cached = {"name": "official", "train": "all of --train-file", "scored": "all of --dev-file", "scored_questions": 5}
    assert _korquad_protocol(cached, KorquadConfig(train_file=str(KORQUAD), dev_file=str(KORQUAD))) == {**cached, "name": "custom train file"}
    split = {"name": "dev-split", "holdout_every": 5, "scored_articles": [0, 5, 10], "train_articles": 11}
    assert _korquad_protocol(split, KorquadConfig()) is split


def test_the_report_says_what_became_of_the_evaluation_text():
    """Left out (the default): one plain line, per kind and per file. Kept (--keep-eval-text): in bold,
    pretrained on. None found: one positive line, not silence."""
    from korbert.report import _eval_text_line

    c = {"eval_text": {"korquad_context": 2, "nsmc_test_review": 3},
         "eval_text_first_at": {"korquad_context": "/d/kowiki.jsonl.gz:7", "nsmc_test_review": "/d/reviews.jsonl.gz:10"},
         "eval_text_by_file": {"/d/kowiki.jsonl.gz": {"korquad_context": 2}, "/d/reviews.jsonl.gz": {"nsmc_test_review": 3}},
         "eval_text_policy": "drop"}
    drop = _eval_text_line(c)
    assert drop.startswith("Evaluation text left out of pretraining: 2 documents sharing a 48-character run with a KorQuAD context "
                           "(first: /d/kowiki.jsonl.gz:7); 3 documents equal to an NSMC test review")
    assert "By file: kowiki.jsonl.gz: 2 KorQuAD context runs; reviews.jsonl.gz: 3 NSMC test reviews." in drop and "**" not in drop
    keep = _eval_text_line({**c, "eval_text_policy": "keep"})
    assert keep.startswith("**Evaluation text in the corpus**: 2 documents") and "**They were pretrained on** (`--keep-eval-text`" in keep
    none = _eval_text_line({**c, "eval_text": {}, "eval_text_first_at": {}, "eval_text_by_file": {}})
    assert none.startswith("Evaluation text in the corpus: none found") and none.endswith("so nothing was left out.")


def test_a_worker_checks_the_evaluation_files_it_reads_are_the_stages(tmp_path):
    """A Dask worker reads the evaluation files where it runs: one missing there, or another file under
    the same path, is refused in one line instead of guarding against other text without a word."""
    from corpus_tools.artifacts import sha256_file
    from corpus_tools.shard_task import _task_guard

    want = (sha256_file(NSMC_TEST), "")
    assert _task_guard(str(NSMC_TEST), "", (), want).check(nsmc_test_docs(1)[0]) == "nsmc_test_review"
    other = tmp_path / "ratings_test.txt"
    other.write_text("id\tdocument\tlabel\n1\t다른 리뷰\t0\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"ratings_test.txt: this evaluation file is another file than the one the shards stage read on worker "):
        _task_guard(str(other), "", (), want)
    with pytest.raises(InputError, match="gone.txt: this evaluation file is missing on worker"):
        _task_guard(str(tmp_path / "gone.txt"), "", (), want)


# --- issue 60: KLUE's dev text ------------------------------------------------------------------

KLUE_PREMISE = "흡연자분들은 발코니가 있는 방이면 발코니에서 흡연이 가능합니다."  # 35 characters (a real KLUE-NLI dev premise)
KLUE_SENT = "세익스피어가 이렇게 차별주의적인 사람이었다니"  # 22 characters
KLUE_LONG = "이 영화는 감독의 전작들과 비교해도 훨씬 짜임새가 있었고 배우들의 연기 또한 흠잡을 데가 없었다고 생각한다."  # 59


def klue_files(tmp_path: Path) -> list[Path]:
    nli = tmp_path / "klue-nli-v1.1_dev.json"
    nli.write_text(json.dumps([{"guid": "n0", "premise": KLUE_PREMISE, "hypothesis": "금연 객실만 있다.", "gold_label": "contradiction"},
                               {"guid": "n1", "premise": KLUE_LONG, "hypothesis": "짧다.", "gold_label": "neutral"}], ensure_ascii=False),
                   encoding="utf-8")
    ner = tmp_path / "klue-ner-v1.1_dev.tsv"
    ner.write_text("## 주석\n## n0\t" + KLUE_SENT + "\n" + "".join(f"{c}\tO\n" for c in KLUE_SENT) + "\n", encoding="utf-8")
    return [nli, ner]


def test_klue_dev_text_is_found_equal_by_letters_held_whole_or_by_a_48_character_run(tmp_path):
    g = EvalText(klue=klue_files(tmp_path))
    assert g.check(KLUE_SENT.replace(" ", "") + "..!!") == "klue_review"  # a review that is the sentence
    assert g.check(f"{KLUE_SENT}.. 그래도 볼만함") == "klue_text"  # a review that holds it whole
    assert g.check(f"문서의 앞. {KLUE_PREMISE.replace(' ', '  ')} 뒤에 이어지는 글.") == "klue_text"  # whitespace collapsed
    assert g.check(f"문서의 앞. {KLUE_SENT[:-1]} 뒤") is None  # 21 of its 22 characters: not the whole text
    for start in (0, 3, 11):  # a shared 48-character run of a longer text, wherever it starts; 47 are not enough
        assert g.check("◆" * 5 + KLUE_LONG[start:start + 48] + "◆" * 5) == "klue_text"
        assert g.check("◆" * 5 + KLUE_LONG[start:start + 47] + "◆" * 5) is None
    assert g.check("전혀 관계없는 문서입니다. 이 글은 다른 이야기를 한다.") is None
    assert EvalText(nsmc_test=[NSMC_TEST]).check(KLUE_SENT) is None


def test_shards_and_the_vocabulary_leave_out_klue_text_and_rebuild_when_the_klue_files_change(vocab_dir, tmp_path, capsys):
    from corpus_tools.vocab import VocabConfig
    from corpus_tools.vocab import main as vocab_main

    files = klue_files(tmp_path)
    clean = [t for t in sample_texts(200) if EvalText(klue=files).check(t) is None][:150]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", clean[:50] + [f"{KLUE_SENT}... 최고"] + clean[50:100] + [KLUE_PREMISE] + clean[100:])
    m = build(vocab_dir, [corpus], tmp_path / "s", eval_klue=[str(f) for f in files])
    assert m["counts"]["eval_text"] == {"klue_text": 1, "klue_review": 1}
    assert m["counts"]["documents_used"] == 150 and len(m["eval_guard"]["klue"]) == 2
    with pytest.raises(InputError, match=r"corpus.jsonl:51: klue text in the corpus \(eval_strict"):
        build(vocab_dir, [corpus], tmp_path / "strict", eval_klue=[str(f) for f in files], eval_strict=True)
    none = build(vocab_dir, [corpus], tmp_path / "none")
    assert none["counts"]["documents_used"] == 152 and "klue" not in none["eval_guard"]
    files[0].write_text(files[0].read_text(encoding="utf-8").replace("금연 객실만", "흡연 불가"), encoding="utf-8")
    capsys.readouterr()
    build(vocab_dir, [corpus], tmp_path / "s", eval_klue=[str(f) for f in files], replace=True)  # another KLUE file: built again
    assert "up to date" not in capsys.readouterr().out
    v = vocab_main(VocabConfig(inputs=[str(corpus)], out=str(tmp_path / "v"), vocab_size=900, show=0, eval_klue=[str(f) for f in files]))
    assert v["counts"]["eval_text"] == {"klue_review": 1, "klue_text": 1}
