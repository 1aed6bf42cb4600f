"""The guard against pretraining on evaluation text (corpus_tools/guard.py) and its place in the
shards and the recipe: NSMC test reviews matched by letters and digits alone, KorQuAD contexts by a
48-character shared run wherever it starts (47 are not enough), the counts in the shards manifest
(the same with Dask workers), `eval_strict` refusing fresh and reused shards alike, and the key that
rebuilds shards when the evaluation files change. Real Kiwi, the embedded sample's evaluation files."""

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


def test_titles_are_the_scored_articles_in_nfc(guard):
    titles = {unicodedata.normalize("NFC", t).strip() for t, _ in korquad_contexts(KORQUAD)}
    assert guard.titles == titles and titles
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


def test_shards_count_the_documents_holding_eval_text_and_strict_refuses_them(vocab_dir, guard, tmp_path, capsys):
    corpus, expected = corpus_with_eval_text(tmp_path / "corpus.jsonl", guard)
    evals = dict(eval_nsmc_test=str(NSMC_TEST), eval_korquad=str(KORQUAD))
    m = build(vocab_dir, [corpus], tmp_path / "s", **evals)
    c = m["counts"]
    assert c["eval_text"] == expected
    assert set(c["eval_text_first_at"]) == set(expected) and all(str(corpus) in w for w in c["eval_text_first_at"].values())
    assert c["documents_used"] == c["documents_in"] == 305  # counted, kept
    assert "evaluation text in the corpus" in capsys.readouterr().out

    # the same counts (and bytes) from two Dask workers on 127.0.0.1
    m2 = build(vocab_dir, [corpus], tmp_path / "w2", workers=2, **evals)
    assert m2["counts"]["eval_text"] == expected and m2["counts"]["eval_text_first_at"] == c["eval_text_first_at"]

    # --strict refuses: the first such document, fresh ...
    with pytest.raises(InputError, match=r"corpus.jsonl.*: nsmc test review in the corpus \(eval_strict"):
        build(vocab_dir, [corpus], tmp_path / "strict", eval_strict=True, **evals)
    # ... and shards built before it was asked for (reused: their counts decide)
    with pytest.raises(InputError, match=r"in the corpus \(eval_strict; \{'korquad_context': 2, 'nsmc_test_review': 3\}\)"):
        build(vocab_dir, [corpus], tmp_path / "s", eval_strict=True, **evals)
    assert "up to date" in capsys.readouterr().out

    # a clean corpus passes --strict, and without evaluation files nothing is counted
    clean = write_jsonl(tmp_path / "clean.jsonl", [t for t in sample_texts(200) if guard.check(t) is None])
    assert build(vocab_dir, [clean], tmp_path / "c", eval_strict=True, **evals)["counts"]["eval_text"] == {}
    assert build(vocab_dir, [corpus], tmp_path / "none")["counts"]["eval_text"] == {}


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


def test_the_recipe_hands_its_scored_files_to_both_shard_stages(tmp_path):
    from korbert.recipe import RecipeConfig, stage_configs

    c = stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "run"), strict=True))["cfgs"]
    for stage in ("shards", "shards_long"):
        if stage in c:
            assert c[stage].eval_nsmc_test == c["nsmc"].test and c[stage].eval_korquad == c["korquad"].dev_file
            assert c[stage].eval_strict is True
    assert json.loads(Path(c["korquad"].dev_file).read_text(encoding="utf-8"))["data"]
