"""Input pieces: however a file is cut, its pieces yield exactly the documents (and skips) that
reading the whole file yields, each document once, in order."""

from __future__ import annotations

import gzip
from collections import Counter

import pytest

from conftest import sample_texts, write_jsonl
from corpus_tools.artifacts import sha256_file
from corpus_tools.pieces import document_key, file_id, is_streamed, ranged_pieces, read_piece, stream_pieces
from corpus_tools.text import ReadStats, iter_documents


def _awkward_txt(path, n: int = 60):
    """Blank-line separated documents with the cases a cut must get right: runs of blank lines,
    whitespace-only lines (blank), undecodable lines between and inside documents, CRLF, no final newline."""
    texts = sample_texts(n)
    out = b""
    for i, t in enumerate(texts):
        body = t.encode()
        if i % 7 == 3:
            body += b"\n\xff\xfe inside a document"
        if i % 11 == 5:
            body = b"\xc3\x28 before a document\n" + body
        out += body + (b"\r\n" if i % 5 == 0 else b"\n") + (b"\n \t\n\n" if i % 4 == 0 else "\u3000\n".encode() if i % 4 == 1 else b"\n")
    path.write_bytes(out.rstrip(b"\n"))
    return path


def _hostile_jsonl(path, n: int = 80):
    write_jsonl(path, sample_texts(n))
    lines = path.read_bytes().split(b"\n")
    lines[5:5] = [b"{broken", b"", b'{"other": 1}', b"\xff\xfe", b"   "]
    path.write_bytes(b"\n".join(lines))
    return path


def _pieces_of(spec, piece_bytes: int, one_doc_per_line: bool = False):
    from corpus_tools.text import expand_inputs

    (path,) = expand_inputs([str(spec)])
    fid = file_id(sha256_file(path))
    if is_streamed(path):
        return list(stream_pieces(0, path, fid, piece_bytes, one_doc_per_line))
    return [(p, None) for p in ranged_pieces(0, path, path.stat().st_size, fid, piece_bytes)]


def _read_all(spec, piece_bytes: int, **kw):
    docs, stats = [], ReadStats()
    pieces = _pieces_of(spec, piece_bytes, kw.get("one_doc_per_line", False))
    for piece, data in pieces:
        docs += [(off, text) for off, _, text in read_piece(piece, data, stats=stats, **kw)]
    return docs, stats, pieces


@pytest.mark.parametrize("kind", ["txt", "txt.gz", "lines.txt", "jsonl", "jsonl.gz", "jsonl@N"])
def test_every_cut_yields_the_files_documents_once_in_order(tmp_path, kind):
    base = kind.split("@")[0]
    if base.startswith("txt") or base == "lines.txt":
        src = _awkward_txt(tmp_path / "a.txt")
    else:
        src = _hostile_jsonl(tmp_path / "a.jsonl")
    if base.endswith(".gz"):
        gz = tmp_path / f"a.{base}"
        gz.write_bytes(gzip.compress(src.read_bytes()))
        src = gz
    spec = f"{src}@37" if "@" in kind else str(src)
    kw = {"text_field": "text", "one_doc_per_line": kind == "lines.txt"}
    ref_stats = ReadStats()
    ref = [t for _, t in iter_documents([spec], stats=ref_stats, **kw)]
    assert len(ref) > 30 and (sum(ref_stats.skipped.values()) > 2 or kind == "lines.txt")
    size = len(gzip.decompress(src.read_bytes())) if base.endswith(".gz") else src.stat().st_size
    for piece_bytes in (1, 7, 100, 997, 5000, size, 10 * size):
        docs, stats, pieces = _read_all(spec, piece_bytes, **kw)
        assert [t for _, t in docs] == ref, piece_bytes
        assert stats.documents_in == ref_stats.documents_in and stats.skipped == ref_stats.skipped, piece_bytes
        assert [off for off, _ in docs] == sorted({off for off, _ in docs})  # offsets: distinct, increasing
        assert sum(p.bytes for p, _ in pieces) <= size and [p.index for p, _ in pieces] == list(range(len(pieces)))
        if piece_bytes >= 100 and "@" not in kind:
            assert len(pieces) > 1 or piece_bytes >= size


def test_where_names_lines_then_byte_offsets(tmp_path):
    src = _hostile_jsonl(tmp_path / "a.jsonl")
    whole = [w for _, w, _ in read_piece(_pieces_of(src, 10**9)[0][0])]
    assert whole[0].endswith("a.jsonl:1")
    stats = ReadStats()
    for piece, _ in _pieces_of(src, 300):
        list(read_piece(piece, stats=stats))
    assert stats.examples["malformed_json"].endswith("a.jsonl:6") or ":byte " in stats.examples["malformed_json"]
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    streamed = [w for p, d in _pieces_of(gz, 300) for _, w, _ in read_piece(p, d)]
    assert streamed == [w for w, _ in iter_documents([gz])]  # the stream knows its line numbers


def test_document_keys_are_distinct_and_depend_on_content_and_offset():
    keys = Counter(document_key(f, off) for f in (1, 2, 3) for off in range(0, 200_000, 7))
    assert max(keys.values()) == 1 and min(keys) >= 0 and max(keys) < 2**63
