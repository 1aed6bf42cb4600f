"""Parquet inputs to `korbert vocab` and `korbert shards`: the documents (and skips) of the same rows
as JSON Lines, one piece per row group, the same shard bytes for one process and 1, 2, 3 Dask
workers, a folder of Parquet files, `PATH@N`, and a missing column as one clear line. Real pyarrow,
real Kiwi, rows from the sample reviews; every Dask cluster listens on 127.0.0.1 and is stopped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from conftest import sample_texts  # noqa: E402
from corpus_tools.artifacts import sha256_file  # noqa: E402
from corpus_tools.pieces import document_key, file_id, parquet_pieces, read_piece  # noqa: E402
from corpus_tools.shards import main as shards_main  # noqa: E402
from corpus_tools.shards_config import ShardsConfig  # noqa: E402
from corpus_tools.text import InputError, ReadStats, expand_inputs, iter_documents  # noqa: E402

ROWS, GROUP = 480, 100  # five row groups (the last one short): five pieces
FIELDS = ["title", "text"]
EMPTY_AT = {7: None, 8: "", 9: " \u3000 "}  # null, empty and whitespace-only texts: three "empty" documents


def corpus_rows(n: int = ROWS) -> tuple[list, list]:
    """(titles, texts) of n sample reviews: every third row has a title (the others a null one), and
    rows 7-9 have no usable text."""
    texts = sample_texts(n)
    for i, t in EMPTY_AT.items():
        texts[i] = t
    titles = [f"리뷰 {i}" if i % 3 == 0 and i not in EMPTY_AT else None for i in range(n)]
    return titles, texts


def write_parquet(path: Path, titles: list, texts: list, row_group_size: int = GROUP, first_id: int = 0) -> Path:
    table = pa.table({
        "id": pa.array(range(first_id, first_id + len(texts)), pa.int64()),
        "title": pa.array(titles, pa.string()),
        "text": pa.array(texts, pa.string()),
    })
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def write_jsonl_rows(path: Path, titles: list, texts: list) -> Path:
    """The same rows as JSON Lines: {"title": ..., "text": ...}, nulls as JSON null."""
    path.write_text(
        "".join(json.dumps({"title": a, "text": b}, ensure_ascii=False) + "\n" for a, b in zip(titles, texts)), encoding="utf-8"
    )
    return path


def shard_files(folder: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(folder.glob("*.npy"))}


def build(vocab_dir, inputs, out, **kw) -> dict:
    return shards_main(ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(i) for i in inputs], out=str(out), valid_fraction=0.1, show=0, **kw))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    """(reviews.parquet in five row groups, reviews.jsonl): the same rows."""
    d = tmp_path_factory.mktemp("parquet")
    titles, texts = corpus_rows()
    return write_parquet(d / "reviews.parquet", titles, texts), write_jsonl_rows(d / "reviews.jsonl", titles, texts)


@pytest.fixture(scope="module")
def single(vocab_dir, corpus, tmp_path_factory) -> tuple[Path, dict]:
    """Shards of the Parquet file, built in this process."""
    out = tmp_path_factory.mktemp("single")
    return out, build(vocab_dir, [corpus[0]], out)


def test_parquet_yields_the_documents_of_the_same_jsonl_one_piece_per_row_group(corpus):
    parquet, jsonl = corpus
    sp, sj = ReadStats(), ReadStats()
    from_parquet = list(iter_documents([parquet], text_field=FIELDS, stats=sp))
    from_jsonl = [t for _, t in iter_documents([jsonl], text_field=FIELDS, stats=sj)]
    assert [t for _, t in from_parquet] == from_jsonl and len(from_jsonl) == ROWS
    assert from_jsonl[0] == "리뷰 0\n" + sample_texts(1)[0]  # the title before the text, joined by a newline
    assert from_parquet[7] == (f"{parquet}:row 7", "")  # a null text: an empty document, for the filters downstream
    assert sp.documents_in == sj.documents_in == ROWS and not sp.skipped and sp.bytes > 0

    fid = file_id(sha256_file(parquet))
    pieces = parquet_pieces(0, parquet, fid, FIELDS)
    assert [(p.row_group, p.start, p.end) for p in pieces] == [(g, g * GROUP, min((g + 1) * GROUP, ROWS)) for g in range(5)]
    assert [p.name for p in pieces] == [f"0000-{g:05d}" for g in range(5)] and not any(p.streamed for p in pieces)
    stats = ReadStats()
    docs = [d for p in pieces for d in read_piece(p, None, FIELDS, stats=stats)]
    assert [d[0] for d in docs] == list(range(ROWS))  # a document's offset is its row in the file
    assert [(w, t) for _, w, t in docs] == from_parquet
    assert stats.documents_in == ROWS and stats.bytes == sp.bytes == sum(p.bytes for p in pieces)
    assert len({document_key(fid, d[0]) for d in docs}) == ROWS


def test_vocab_from_parquet_is_the_vocab_from_the_same_jsonl(corpus, tmp_path):
    from corpus_tools.vocab import VocabConfig, main

    def vocab(path: Path, out: str) -> dict:
        return main(VocabConfig(inputs=[str(path)], out=str(tmp_path / out), vocab_size=1300, num_unused=5, show=0, threads=2))

    p, j = vocab(corpus[0], "p"), vocab(corpus[1], "j")
    assert p["tokenizer_hash"] == j["tokenizer_hash"]
    assert (tmp_path / "p" / "spm.model").read_bytes() == (tmp_path / "j" / "spm.model").read_bytes()
    same = ("documents_in", "documents_used", "documents_skipped", "characters", "sentences")
    assert {k: p["counts"][k] for k in same} == {k: j["counts"][k] for k in same}
    assert p["counts"]["documents_skipped"] == {"empty": len(EMPTY_AT)} and p["counts"]["documents_used"] == ROWS - len(EMPTY_AT)


def test_shards_from_parquet_hold_the_documents_of_the_same_jsonl(vocab_dir, corpus, single, tmp_path):
    """Document keys differ (row vs byte offset, another file), so the splits differ; what each
    document is does not: the documents, sentences and tokens read, and the skips."""
    _, ref = single
    j = build(vocab_dir, [corpus[1]], tmp_path / "jsonl", shard_mb=0.01)
    assert ref["counts"]["pieces"] == 5 and j["counts"]["pieces"] > 1
    same = ("documents_in", "documents_used", "documents_skipped", "sentences", "document_tokens")
    assert {k: ref["counts"][k] for k in same} == {k: j["counts"][k] for k in same}
    assert ref["counts"]["documents_skipped"] == {"empty": len(EMPTY_AT)}
    assert ref["counts"]["first_skip_at"]["empty"] == f"{corpus[0]}:row 7"
    assert sum(ref["counts"][s]["documents"] for s in ("train", "valid")) == ROWS - len(EMPTY_AT)


@pytest.mark.parametrize("counts", [
    pytest.param((2,), id="2-workers"),
    pytest.param((1, 2, 3), id="1-2-3-workers", marks=pytest.mark.slow),  # out of CI for the suite's time (test_shards_dask.py has 1, 2, 3)
])
def test_one_process_and_dask_workers_write_the_same_bytes_from_parquet(vocab_dir, corpus, single, tmp_path, counts):
    pytest.importorskip("distributed")
    ref_dir, ref = single
    assert {name.split(".")[0].split("-", 1)[1] for name in shard_files(ref_dir)} == {f"0000-{g:05d}" for g in range(5)}
    assert ref["run"]["engine"] == "one process" and ref["counts"]["valid"]["instances"] > 0
    environ = dict(os.environ)
    for n in counts:
        m = build(vocab_dir, [corpus[0]], tmp_path / f"w{n}", workers=n)
        assert dict(os.environ) == environ
        assert m["run"]["engine"] == f"dask, {n} local workers"
        assert shard_files(tmp_path / f"w{n}") == shard_files(ref_dir), n
        assert m["counts"] == ref["counts"] and m["shards"] == ref["shards"] and m["key"] == ref["key"]


def test_unusable_rows_are_counted_by_reason(vocab_dir, tmp_path):
    """Null, empty, control-only and one-character texts in a string column; a binary column with a
    cell that is not UTF-8. Counted by the reader (invalid_utf8) and the filters (empty, too_short),
    in one process and in the manifest, like the other formats' skips; --strict stops at the first."""
    d = tmp_path / "in"
    d.mkdir()
    good = [t for t in sample_texts(120) if len(t.strip()) >= 2]
    strings = good[:50]
    strings[3:3] = [None, "", "\x00\x01", "가"]
    pq.write_table(pa.table({"text": pa.array(strings, pa.string())}), d / "a.parquet", row_group_size=20)
    cells = [t.encode() for t in good[50:100]]
    cells[10:10] = [b"\xff\xfe not utf-8", None]
    pq.write_table(pa.table({"text": pa.array(cells, pa.binary())}), d / "b.parquet", row_group_size=20)

    stats = ReadStats()
    texts = [t for _, t in iter_documents([d], text_field="text", stats=stats)]
    assert stats.skipped == {"invalid_utf8": 1} and stats.examples["invalid_utf8"] == f"{d / 'b.parquet'}:row 10"
    assert stats.documents_in == len(strings) + len(cells) == len(texts) + 1
    assert texts[50 + 4 : 50 + 4 + 10] == good[50:60] and texts[50 + 4 + 10] == ""  # the null binary cell: an empty document

    m = build(vocab_dir, [d], tmp_path / "out", text_field=["text"])
    c = m["counts"]
    assert c["documents_skipped"] == {"empty": 4, "invalid_utf8": 1, "too_short": 1}
    assert c["first_skip_at"]["empty"] == f"{d / 'a.parquet'}:row 3" and c["first_skip_at"]["too_short"] == f"{d / 'a.parquet'}:row 6"
    assert c["documents_in"] == c["documents_used"] + 6 == len(strings) + len(cells)
    with pytest.raises(InputError, match=r"b\.parquet:row 10: invalid utf8"):
        list(iter_documents([d / "b.parquet"], strict=True))


def test_a_missing_or_non_text_column_is_one_clear_line(vocab_dir, corpus, tmp_path, capsys):
    from korbert.cli import main as korbert

    parquet = corpus[0]
    for stage, extra in (("shards", ["--tokenizer", str(vocab_dir)]), ("vocab", [])):
        args = [stage, *extra, "--inputs", str(parquet), "--out", str(tmp_path / stage), "--text-field", "body", "content"]
        assert korbert(args) == 2
        err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
        assert err == [f"korbert {stage}: error: {parquet}: no column 'body' or 'content' (its columns: id, title, text; --text-field names them)"]
    with pytest.raises(InputError, match=r"column 'id' holds int64, not text"):
        list(iter_documents([parquet], text_field=["id", "text"]))
    with pytest.raises(InputError, match="cannot read as Parquet"):
        (tmp_path / "not.parquet").write_text('{"text": "제이슨"}\n', encoding="utf-8")
        list(iter_documents([tmp_path / "not.parquet"]))
    # one of the fields suffices, as in JSON Lines (a row without a title is its text)
    assert [t for _, t in iter_documents([parquet], text_field=["headline", "text"])][:2] == sample_texts(2)


def test_a_folder_of_parquet_files(vocab_dir, corpus, tmp_path):
    """The files below a folder, sorted; Spark's and Hive's _SUCCESS / _common_metadata and hidden
    checksum files are left out."""
    titles, texts = corpus_rows()
    d = tmp_path / "dataset"
    (d / "year=2024").mkdir(parents=True)
    write_parquet(d / "year=2024" / "part-00001.parquet", titles[300:], texts[300:], row_group_size=64, first_id=300)
    write_parquet(d / "part-00000.parquet", titles[:300], texts[:300], row_group_size=128)
    (d / "_SUCCESS").write_bytes(b"")
    pq.write_metadata(pq.read_schema(d / "part-00000.parquet"), d / "_common_metadata")
    (d / ".part-00000.parquet.crc").write_bytes(b"\x00crc")
    assert [p.relative_to(d).as_posix() for p in expand_inputs([d])] == ["part-00000.parquet", "year=2024/part-00001.parquet"]
    assert [t for _, t in iter_documents([d], text_field=FIELDS)] == [t for _, t in iter_documents([corpus[1]], text_field=FIELDS)]
    m = build(vocab_dir, [d], tmp_path / "out")
    assert m["counts"]["files"] == 2 and m["counts"]["pieces"] == 3 + 3  # 300 rows in groups of 128, 180 in groups of 64
    assert m["counts"]["documents_in"] == ROWS and m["counts"]["documents_skipped"] == {"empty": len(EMPTY_AT)}


def test_first_n_rows_of_a_parquet_file(vocab_dir, corpus, single, tmp_path):
    """`PATH@N`: the first N rows (a null one included), cut inside a row group; its whole row groups'
    shards are those of the whole file, byte for byte (a document's key is its row)."""
    parquet, jsonl = corpus
    n = 2 * GROUP + 37
    assert [t for _, t in iter_documents([f"{parquet}@{n}"], text_field=FIELDS)] == [t for _, t in iter_documents([f"{jsonl}@{n}"], text_field=FIELDS)]
    assert len(list(iter_documents([f"{parquet}@5"]))) == 5
    path = expand_inputs([f"{parquet}@{n}"])[0]
    assert [(p.start, p.end) for p in parquet_pieces(0, path, 1, FIELDS)] == [(0, 100), (100, 200), (200, n)]

    m = build(vocab_dir, [f"{parquet}@{n}"], tmp_path / "first")
    assert m["counts"]["documents_in"] == n and m["counts"]["pieces"] == 3 and m["inputs"][0]["first_documents"] == n
    whole, part = shard_files(single[0]), shard_files(tmp_path / "first")
    kept = {k: v for k, v in whole.items() if "0000-00000" in k or "0000-00001" in k}
    assert kept and {k: part[k] for k in kept} == kept
    assert any(part[k] != whole[k] for k in part if "0000-00002" in k)
