"""Input pieces: the units of work (and of resume) of the shards stage, and reading one.

A piece is a stretch of one input file, cut at document boundaries, of about `piece_bytes`:
  * an uncompressed file is cut into byte ranges [start, end) without reading it: a document
    belongs to the range its first byte falls in, so the task of a range seeks to it and reads its
    own documents only (plus the end of its last document, past `end`);
  * a .gz file cannot be entered in the middle, so one reader (`stream_pieces`, the stage's driver)
    decompresses it and cuts the stream at document boundaries; a piece then carries its bytes.
    So does a file read only in part (`PATH@N`: the first N documents);
  * a Parquet file is cut into its row groups, known from its footer (`parquet_pieces`): the task
    of a piece reads that row group's text columns only (`PATH@N`: its first N rows).
Either way a document is known by (its file's sha256, the byte offset where it starts in the
decompressed stream; in a Parquet file, its row, counted from 0): `document_key`, from which the
shards stage draws all its random choices.
Neither depends on which process reads the piece, so the output is the same for one process and
for any number of workers.

The documents a piece yields are those `text.iter_documents` yields for the file, in order
(tests/test_pieces.py checks it on every way of cutting): plain text has documents separated by
blank lines (or one per line), JSON Lines one object per non-blank line, Parquet one row per
document. Undecodable lines (and non-UTF-8 cells of a binary Parquet column) and malformed JSON
are counted in the piece's ReadStats, by the piece that owns them.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Sequence

from corpus_tools.shard_format import mix64
from corpus_tools.text import (
    FirstDocs, InputError, ReadStats, format_of, jsonl_text, open_parquet, open_text, parquet_groups, parquet_rows,
)

_MASK63 = (1 << 63) - 1


@dataclass(frozen=True)
class Piece:
    """Piece `index` of input file `file`: bytes [start, end) of its (decompressed) stream, or of a
    Parquet file, rows [start, end) of row group `row_group`. Ranged and Parquet pieces are read
    from `path` by whoever runs them; streamed ones come with their bytes."""

    file: int
    index: int
    path: str
    start: int
    end: int
    streamed: bool
    file_id: int  # from the file's sha256: with a document's offset, its identity
    first_line: int | None = 1  # the line number at `start` (None: not known without reading before it)
    row_group: int | None = None  # a Parquet piece: its row group (`index` too)
    size: int | None = None  # a Parquet piece: its text columns' uncompressed size (the footer's)

    @property
    def name(self) -> str:
        return f"{self.file:04d}-{self.index:05d}"

    @property
    def bytes(self) -> int:
        return self.size if self.size is not None else self.end - self.start


def file_id(sha256: str) -> int:
    return int(sha256[:16], 16)


def document_key(fid: int, offset: int) -> int:
    """A document's identity as a non-negative int64: splitmix64 of (file id, byte offset)."""
    return int(mix64(fid ^ (offset * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF))) & _MASK63


def is_streamed(path: Path) -> bool:
    return path.suffix == ".gz" or isinstance(path, FirstDocs)


def ranged_pieces(file: int, path: Path, size: int, fid: int, piece_bytes: int) -> list[Piece]:
    """The byte ranges of an uncompressed file: known from its size, without reading it."""
    n = -(-size // piece_bytes)
    return [
        Piece(file, k, str(path), k * piece_bytes, min(size, (k + 1) * piece_bytes), False, fid, 1 if k == 0 else None)
        for k in range(n)
    ]


def parquet_pieces(file: int, path: Path, fid: int, text_field: str | Sequence[str]) -> list[Piece]:
    """A Parquet file's row groups, one piece each, from its footer alone (an InputError, here in the
    driver, when it has no text column); a `PATH@N` file's pieces stop after its N-th row."""
    fields = [text_field] if isinstance(text_field, str) else list(text_field)
    pf, columns = open_parquet(path, fields)
    first = path.first if isinstance(path, FirstDocs) else 0
    with pf:
        groups = parquet_groups(pf, columns, first)
    return [
        Piece(file, g, str(path), start, stop, False, fid, None, row_group=g, size=size)
        for g, start, stop, size in groups
    ]


def stream_pieces(file: int, path: Path, fid: int, piece_bytes: int, one_doc_per_line: bool) -> Iterator[tuple[Piece, bytes]]:
    """Decompress `path` and cut it into pieces of about `piece_bytes`, each ending where no
    document is open; a `PATH@N` file ends before its (N+1)-th document."""
    fmt = format_of(path)
    limit = path.first if isinstance(path, FirstDocs) else 0
    blank_separated = fmt == "txt" and not one_doc_per_line
    docs, open_, k = 0, False, 0
    start = offset = 0
    line = first_line = 1
    buf: list[bytes] = []
    try:
        fh = open_text(path)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    try:
        with fh:
            for raw in fh:
                # does this line start a document (or a counted bad line)?
                try:
                    text: str | None = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
                if blank_separated:
                    starts = text is None or (not open_ and bool(text.strip()))
                    if text is not None:
                        open_ = bool(text.strip())
                else:
                    starts = (one_doc_per_line and fmt == "txt") or text is None or bool(text.strip())
                if starts:
                    if limit and docs == limit:
                        break
                    docs += 1
                buf.append(raw)
                offset += len(raw)
                line += 1
                if offset - start >= piece_bytes and not open_:
                    yield Piece(file, k, str(path), start, offset, True, fid, first_line), b"".join(buf)
                    buf, start, first_line, k = [], offset, line, k + 1
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise InputError(f"{path}: cannot read ({e})") from None
    if offset > start:
        yield Piece(file, k, str(path), start, offset, True, fid, first_line), b"".join(buf)


# ---------------------------------------------------------------------------------------------
# Reading a piece
# ---------------------------------------------------------------------------------------------


def _lines_before(fh: BinaryIO, end: int, block: int = 1 << 16) -> Iterator[bytes]:
    """The lines that end before byte `end` (a line start), the last first, without newlines."""
    pos, head = end - 1, b""  # bytes [.., end - 1) hold them; byte end - 1 is the last one's newline
    if pos < 0:
        return
    while True:
        step = min(pos, block)
        pos -= step
        fh.seek(pos)
        parts = (fh.read(step) + head).split(b"\n")
        head = parts[0]
        yield from reversed(parts[1:])
        if pos == 0:
            yield head
            return


def _open_at(fh: BinaryIO, at: int) -> bool:
    """Plain text, blank-line separated: is a document open at line start `at`? (The last
    decodable line before it is not blank; undecodable lines neither open nor close one.)"""
    for raw in _lines_before(fh, at):
        try:
            return bool(raw.decode("utf-8").strip())
        except UnicodeDecodeError:
            continue
    return False


def _lines(fh: Iterable[bytes], at: int) -> Iterator[tuple[int, bytes]]:
    for raw in fh:
        yield at, raw
        at += len(raw)


def read_piece(
    piece: Piece,
    data: bytes | None = None,
    text_field: str | Sequence[str] = "text",
    one_doc_per_line: bool = False,
    stats: ReadStats | None = None,
    strict: bool = False,
) -> Iterator[tuple[int, str, str]]:
    """Yield (offset, where, raw_text) for the documents of `piece`; `data`: a streamed piece's
    bytes. where = "file:line", or "file:byte N" inside a file's range past its first; a Parquet
    piece's offset is the row and where is "file:row N"."""
    stats = stats if stats is not None else ReadStats()
    fields = [text_field] if isinstance(text_field, str) else list(text_field)
    path = Path(piece.path)
    fmt = format_of(path)
    blank_separated = fmt == "txt" and not one_doc_per_line
    start, end = piece.start, piece.end
    stats.files += 1
    stats.bytes += piece.bytes
    if piece.row_group is not None:  # Parquet: offset = the row
        pf, columns = open_parquet(path, fields)
        with pf:
            yield from parquet_rows(pf, path, columns, piece.row_group, start, end, stats, strict)
        return

    def where(offset: int, line: int | None) -> str:
        return f"{piece.path}:{line}" if line is not None else f"{piece.path}:byte {offset}"

    def bad(reason: str, at: str) -> None:
        if strict:
            raise InputError(f"{at}: {reason.replace('_', ' ')}")
        stats.documents_in += 1
        stats.skip(reason, at)

    open_ = False  # blank-line separated: a document is open (ours when `buf`)
    if data is not None:
        fh: BinaryIO = io.BytesIO(data)
        first = start
    else:
        try:
            fh = open(path, "rb")
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror}") from None
        first = 0
        if start > 0:  # the first line that starts in the range
            fh.seek(start - 1)
            fh.readline()
            first = fh.tell()
            open_ = blank_separated and _open_at(fh, first)  # then it is the end of an earlier range's document
            fh.seek(first)
    lineno = piece.first_line if first == start else None
    buf: list[str] = []
    doc_at, doc_line = 0, None
    with fh:
        for offset, raw in _lines(fh, first):
            line_no, lineno = lineno, (lineno + 1 if lineno is not None else None)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                if open_:
                    if buf:  # inside our document: ours to count
                        bad("invalid_utf8", where(offset, line_no))
                    continue
                if offset >= end:
                    break
                bad("invalid_utf8", where(offset, line_no))
                continue
            if blank_separated:
                if line.strip():
                    if not open_:
                        if offset >= end:
                            break
                        open_, buf, doc_at, doc_line = True, [line], offset, line_no
                    elif buf:
                        buf.append(line)
                else:
                    if buf:
                        stats.documents_in += 1
                        yield doc_at, where(doc_at, doc_line), "".join(buf)
                    open_, buf = False, []
                    if offset >= end:
                        break
                continue
            if offset >= end:
                break
            if one_doc_per_line and fmt == "txt":
                stats.documents_in += 1
                yield offset, where(offset, line_no), line.rstrip("\r\n")
                continue
            if not line.strip():
                continue
            text, problem = jsonl_text(line, fields)
            if problem:
                bad(problem, where(offset, line_no))
                continue
            stats.documents_in += 1
            yield offset, where(offset, line_no), text
    if buf:
        stats.documents_in += 1
        yield doc_at, where(doc_at, doc_line), "".join(buf)
