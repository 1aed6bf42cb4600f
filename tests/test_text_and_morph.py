"""NFC with offsets, cleaning, corpus reading, and Kiwi surface segmentation."""

from __future__ import annotations

import gzip
import unicodedata

import pytest

from corpus_tools.morph import analyze, segment_spans
from corpus_tools.artifacts import file_record
from corpus_tools.text import InputError, ReadStats, clean, expand_inputs, iter_documents, nfc, nfc_with_offsets


def test_nfc_keeps_korean_composed():
    assert nfc("한국어") == "한국어"
    assert clean("  한국어\t\t형태소  ") == "한국어 형태소"


def test_nfc_offsets_map_whole_syllables_of_nfd_input():
    original = unicodedata.normalize("NFD", "한국어 abc")
    norm, starts, ends = nfc_with_offsets(original)
    assert norm == "한국어 abc"
    # every NFC char maps back to exactly the jamo it was composed from
    assert [original[s:e] for s, e in zip(starts, ends)] == [unicodedata.normalize("NFD", c) for c in norm]
    assert nfc_with_offsets("이미 NFC") == ("이미 NFC", None, None)


def test_clean_removes_controls_keeps_emoji_zwj():
    assert clean("가\x00나\u200b다") == "가나다"
    family = "👨\u200d👩\u200d👧"
    assert clean(f"가족 {family}") == f"가족 {family}"


def test_iter_documents_formats_and_counted_skips(tmp_path):
    (tmp_path / "a.txt").write_text("첫 문서 첫 줄\n둘째 줄\n\n둘째 문서\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text('{"text": "제이슨"}\n{broken\n{"other": 1}\n', encoding="utf-8")
    with gzip.open(tmp_path / "c.txt.gz", "wb") as f:
        f.write("압축된 문서\n".encode() + b"\xff\xfe bad bytes\n")
    stats = ReadStats()
    docs = [t for _, t in iter_documents([tmp_path], stats=stats)]
    assert docs == ["첫 문서 첫 줄\n둘째 줄\n", "둘째 문서\n", "제이슨", "압축된 문서\n"]
    assert stats.skipped == {"malformed_json": 1, "missing_field": 1, "invalid_utf8": 1}
    assert stats.documents_in == len(docs) + sum(stats.skipped.values())
    assert "b.jsonl:2" in stats.examples["malformed_json"]
    with pytest.raises(InputError, match="invalid utf8"):
        list(iter_documents([tmp_path / "c.txt.gz"], strict=True))
    with pytest.raises(InputError, match="not found"):
        list(iter_documents([tmp_path / "missing.txt"]))
    # PATH@N: the first N documents of one file (malformed lines count as documents read)
    assert [t for _, t in iter_documents([f"{tmp_path / 'a.txt'}@1"])] == ["첫 문서 첫 줄\n둘째 줄\n"]
    assert [t for _, t in iter_documents([f"{tmp_path / 'b.jsonl'}@2"])] == ["제이슨"]
    assert [t for _, t in iter_documents([f"{tmp_path / 'a.txt'}@9", tmp_path / "b.jsonl"])][:3] == docs[:3]
    assert file_record(expand_inputs([f"{tmp_path / 'a.txt'}@1"])[0])["first_documents"] == 1
    with pytest.raises(InputError, match="not found"):
        list(iter_documents([f"{tmp_path / 'missing.txt'}@3"]))


def test_jsonl_lines_that_are_not_one_text(tmp_path):
    """JSON that is not an object is malformed; null fields are left out (the length filter downstream
    counts an empty document); a non-string value is written out; several fields join by a newline."""
    lines = ['[1, 2]', 'null', '"문자열"', '{"text": null}', '{"title": null, "text": null}', '{"text": 2024}',
             '{"title": "제목", "text": "본문"}', '{"title": "제목만"}', '{"title": null, "text": "본문만"}', '', '{"body": "x"}']
    (tmp_path / "e.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    stats = ReadStats()
    got = list(iter_documents([tmp_path / "e.jsonl"], text_field=["title", "text"], stats=stats))
    assert [t for _, t in got] == ["", "", "2024", "제목\n본문", "제목만", "본문만"]
    assert [w.rsplit(":", 1)[1] for w, _ in got] == ["4", "5", "6", "7", "8", "9"]
    assert stats.skipped == {"malformed_json": 3, "missing_field": 1}  # the blank line is no document
    assert stats.documents_in == 10
    with pytest.raises(InputError, match="malformed json"):
        list(iter_documents([tmp_path / "e.jsonl"], strict=True))


def test_one_doc_per_line(tmp_path):
    (tmp_path / "d.txt").write_text("하나\n둘\n\n셋\n", encoding="utf-8")
    assert [t for _, t in iter_documents([tmp_path / "d.txt"], one_doc_per_line=True)] == ["하나", "둘", "", "셋"]


def test_contracted_morphemes_merge_into_surface_segments():
    (a,) = analyze(["나는 학교에 갔다. 했습니다! 입니다"])
    assert a.surfaces() == ["나", "는", "학교", "에", "갔", "다", ".", "했", "습니다", "!", "입니다"]
    assert a.eojeol_start == [True, False, True, False, True, False, False, True, False, False, True]
    # Kiwi's forms are not substrings (가+었, 이+ᆸ니다) but every segment is
    assert {"었", "ᆸ니다"} <= {m.form for m in a.morphemes}


def test_space_issue_187_style_no_space_input():
    # kiwipiepy's own regression case: one eojeol, several morphemes with shared spans
    (a,) = analyze(["때문일겁니다"])
    assert "".join(a.surfaces()) == "때문일겁니다"
    assert a.eojeol_start[0] and not any(a.eojeol_start[1:])


HOSTILE = [
    "👍🏽 한국어😀 漢字 𠀀 ㅋㅋㅋ ＡＢＣ https://x.com/a?b=1\t탭\n줄  여러   공백 ",
    unicodedata.normalize("NFD", "한국어를 공부했다"),
    "\x00널문자\u200b제로폭 ᄀ ㅏ",
    "   ",
    "",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_segments_tile_every_non_space_char(text):
    (a,) = analyze([text], split_sents=True)
    covered = []
    prev_end = 0
    for s, e in a.segments:
        assert prev_end <= s < e <= len(text)
        assert not any(c.isspace() for c in text[s:e])
        covered += range(s, e)
        prev_end = e
    assert covered == [i for i, c in enumerate(text) if not c.isspace()]
    for s, e in a.sentences:
        assert 0 <= s <= e <= len(text)


def test_segment_spans_merges_overlaps_and_fills_gaps():
    # "했다": 하(0,1) 었(0,1) 다(1,2) -> one merged segment + "다"; an uncovered "#" becomes its own
    assert segment_spans("했다 #x", [(0, 1), (0, 1), (1, 2), (4, 5)]) == [(0, 1), (1, 2), (3, 4), (4, 5)]
    assert segment_spans("ab", [(0, 2), (1, 1)]) == [(0, 2)]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork() only")
def test_a_forked_child_analyses_with_its_own_kiwi_and_exits(tmp_path):
    """A child forked after the parent loaded Kiwi (a DataLoader worker, datasets' num_proc) gets the
    parent's segments and exits normally, interpreter shutdown included: the parent's instance, whose
    threads the child lacks, is neither used nor freed there."""
    import subprocess
    import sys

    code = """
import os, sys
from corpus_tools.morph import analyze
text = "형태소 분석기는 한국어 문장을 나눈다."
want = analyze([text])
pid = os.fork()
if pid == 0:
    ok = analyze([text]) == want
    sys.stdout.write("child ok\\n" if ok else "child differs\\n")
    sys.stdout.flush()
    sys.exit(0 if ok else 3)  # a normal exit: module teardown and garbage collection run
_, status = os.waitpid(pid, 0)
print("child status", os.waitstatus_to_exitcode(status))
"""
    import os
    import signal

    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the parent and the child that hangs
        p.communicate()
        raise AssertionError("the forked child hung") from None
    assert p.returncode == 0, err[-2000:]
    assert out.split("\n")[:2] == ["child ok", "child status 0"], out + err[-2000:]
