"""Text in: reading raw corpora, NFC with exact offsets back to the user's string, cleaning.

Input formats (the sample files in corpus_tools/sample_data/ double as the spec):
  * plain text (.txt): documents separated by blank lines, or one document per line
    (`one_doc_per_line=True`);
  * JSON Lines (.jsonl / .json): one object per line, the text under `text_field`
    (a list of fields is joined with a newline, e.g. ["title", "text"]);
  * gzip of either (.gz suffix on top of the above);
  * Parquet (.parquet): one document per row, the text in the column(s) named by `text_field`
    (string or binary; several joined with a newline as for JSON Lines, null cells left out; a file
    with none of them is an InputError naming its columns). Read with pyarrow, one row group at a
    time and only those columns; a row group is the shards stage's piece (corpus_tools/pieces.py)
    and a document is known by its row in the file, counted from 0 (`file:row N`).
A folder stands for the files below it, sorted; names starting with "." or "_" are left out
(hidden files, and the _SUCCESS / _metadata files of Spark and Hive datasets).
Every format's text goes through the same `clean` (NFC, control characters, whitespace).
Korean text is only ever NFC-normalized: no NFD, no accent stripping, no lowercasing.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

# ---------------------------------------------------------------------------------------------
# NFC with offsets
# ---------------------------------------------------------------------------------------------

# Conjoining jamo vowels (V) and finals (T) have combining class 0 but compose with what precedes
# them (L+V -> LV, LV+T -> LVT), so they never start a composition-independent chunk.
_JAMO_VT = re.compile(r"[\u1160-\u11FF\uD7B0-\uD7FF]")


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def nfc_with_offsets(text: str) -> tuple[str, list[int] | None, list[int] | None]:
    """NFC-normalize `text`; also return where each NFC character came from.

    Returns (normalized, starts, ends): character i of `normalized` corresponds to
    text[starts[i]:ends[i]]. starts/ends are None when `text` is already NFC (identity map).
    A syllable composed from NFD jamo maps to all of its jamo, so slicing the user's string
    by a mapped span never cuts a syllable in half.
    """
    if unicodedata.is_normalized("NFC", text):
        return text, None, None
    # Split into chunks that NFC can normalize independently: a new chunk starts at every
    # starter (combining class 0) that is not a conjoining vowel/final jamo.
    bounds = [0]
    for i in range(1, len(text)):
        c = text[i]
        if unicodedata.combining(c) == 0 and not _JAMO_VT.match(c):
            bounds.append(i)
    bounds.append(len(text))
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for a, b in zip(bounds, bounds[1:]):
        chunk = nfc(text[a:b])
        out.append(chunk)
        n = len(chunk)
        if n == b - a:  # nothing composed: one-to-one
            starts.extend(range(a, b))
            ends.extend(range(a + 1, b + 1))
        else:  # composed: each char gets one source char, the last one takes the rest
            starts.extend(range(a, a + n))
            ends.extend(list(range(a + 1, a + n)) + [b])
    normalized = "".join(out)
    if normalized != nfc(text):  # a composition across our chunk bounds: map it as one span
        normalized = nfc(text)
        starts = [0] * len(normalized)
        ends = [len(text)] * len(normalized)
    return normalized, starts, ends


# ---------------------------------------------------------------------------------------------
# Cleaning
# ---------------------------------------------------------------------------------------------

# Control and format characters (Unicode Cc, Cf, Cs, Co, Cn) except tab/newline, which are
# whitespace and collapse below. ZWJ (U+200D) and variation selectors are kept: emoji need them.
_KEEP = {"\t", "\n", "\u200d"}
_WS_RUN = re.compile(r"[^\S\n]+")  # whitespace other than newline
_NL_RUN = re.compile(r"\s*\n\s*")


def is_control(c: str) -> bool:
    return c not in _KEEP and unicodedata.category(c)[0] == "C"


# For a fast check that a text holds no character to remove: map the characters that are
# "nonprintable" (Unicode Other/Separator) but kept (tab, newline, ZWJ, the Zs/Zl/Zp spaces) to
# printable ones; then str.isprintable() (C speed) is True exactly when nothing is to be removed.
_KEPT_AS_PRINTABLE = str.maketrans(
    {c: " " for c in "\t\n\u00a0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B)))}
    | {"\u200d": "x"}
)


def has_control(text: str) -> bool:
    """True when `clean` would remove characters (Unicode Cc/Cf/Cs/Co/Cn other than tab, newline, ZWJ)."""
    return not text.isprintable() and not text.translate(_KEPT_AS_PRINTABLE).isprintable()


def clean(text: str, keep_newlines: bool = False) -> str:
    """NFC, control characters removed, whitespace runs collapsed, ends stripped."""
    text = nfc(text)
    if has_control(text):
        text = "".join(c for c in text if not is_control(c))
    if keep_newlines:
        text = _NL_RUN.sub("\n", _WS_RUN.sub(" ", text))
    else:
        text = " ".join(text.split())
    return text.strip()


# ---------------------------------------------------------------------------------------------
# Reading corpora
# ---------------------------------------------------------------------------------------------


class InputError(ValueError):
    """A user mistake in the input (missing file, wrong format): reported without a traceback."""


@dataclass
class ReadStats:
    """Documents in = documents yielded + documents skipped, by reason."""

    files: int = 0
    bytes: int = 0
    documents_in: int = 0
    documents_out: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # reason -> first "file:line" it happened at

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] += 1
        self.examples.setdefault(reason, where)

    def as_dict(self) -> dict:
        return {
            "files": self.files,
            "bytes": self.bytes,
            "documents_in": self.documents_in,
            "documents_used": self.documents_out,
            "documents_skipped": dict(sorted(self.skipped.items())),
            "first_skip_at": dict(sorted(self.examples.items())),
        }


class FirstDocs(type(Path())):  # type: ignore[misc]
    """An input file of which only the first `first` documents are read (spelled `PATH@N`)."""

    first: int = 0


def _slice_spec(spec: str | os.PathLike) -> str | os.PathLike | FirstDocs:
    m = re.fullmatch(r"(.+)@(\d+)", str(spec)) if isinstance(spec, str) else None
    if not m or Path(spec).exists():
        return spec
    p = FirstDocs(m.group(1))
    if not p.is_file():
        raise InputError(f"input not found: {m.group(1)} (from {spec}: PATH@N reads the first N documents of one file)")
    p.first = int(m.group(2))
    if p.first < 1:
        raise InputError(f"{spec}: PATH@N needs N >= 1")
    return p


def expand_inputs(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """Files, directories (all files below, sorted) and globs -> a sorted, de-duplicated list.

    `PATH@N` (a file, e.g. `kowiki.jsonl.gz@15000`) stands for the first N documents of that file:
    a slice of a large corpus without copying it. Manifests record N beside the file's checksum.
    """
    files: list[Path] = []
    for spec in map(_slice_spec, inputs):
        if isinstance(spec, FirstDocs):  # checked by _slice_spec: one existing file
            files.append(spec)
            continue
        p = Path(spec)
        if p.is_dir():
            files += sorted(q for q in p.rglob("*") if q.is_file() and not q.name.startswith((".", "_")))
        elif p.is_file():
            files.append(p)
        else:
            hits = sorted(Path(h) for h in glob.glob(str(spec), recursive=True) if Path(h).is_file())
            if not hits:
                raise InputError(f"input not found: {spec}")
            files += hits
    seen: set[Path] = set()
    unique = [f for f in files if not (f.resolve() in seen or seen.add(f.resolve()))]
    if not unique:
        raise InputError(f"no input files in: {', '.join(map(str, inputs))}")
    return unique


def open_text(path: Path) -> io.BufferedReader:
    raw = open(path, "rb")
    if path.suffix == ".gz":
        return io.BufferedReader(gzip.GzipFile(fileobj=raw))  # type: ignore[arg-type]
    return raw  # type: ignore[return-value]


def format_of(path: Path) -> str:
    if path.suffix == ".parquet":
        return "parquet"
    suffixes = [s for s in path.suffixes if s != ".gz"]
    return "jsonl" if suffixes and suffixes[-1] in (".jsonl", ".json", ".ndjson") else "txt"


def jsonl_text(line: str, fields: Sequence[str]) -> tuple[str, str | None]:
    """One JSON Lines row -> (its text, None), or ("", the skip reason: malformed_json, missing_field).
    Several fields (title + text) are joined by a newline; null ones are left out."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        obj = None
    if type(obj) is not dict:  # not an object (or not JSON)
        return "", "malformed_json"
    values = [obj[f] for f in fields if f in obj]
    if not values:
        return "", "missing_field"
    return join_fields(values), None


def join_fields(values: list) -> str:
    """A row's text from its fields' values (JSON Lines, Parquet): one string as it is; else the
    non-null values written out and joined by a newline (all null: "", an empty document)."""
    if len(values) == 1 and type(values[0]) is str:
        return values[0]
    return "\n".join(str(v) for v in values if v is not None)


# ---------------------------------------------------------------------------------------------
# Parquet
# ---------------------------------------------------------------------------------------------

PARQUET_BATCH_ROWS = 4096  # rows decoded at a time inside a row group (memory: one batch of Python strings)


def open_parquet(path: Path, fields: Sequence[str]):
    """-> (a pyarrow ParquetFile, the `fields` that are its columns, in that order). InputError when
    the file is not readable Parquet, has none of the fields, or one of them holds no text."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        pf = pq.ParquetFile(path)
    except (OSError, ValueError, pa.ArrowException) as e:
        raise InputError(f"{path}: cannot read as Parquet ({e})") from None
    schema = pf.schema_arrow
    columns = [f for f in fields if f in schema.names]
    if not columns:
        raise InputError(
            f"{path}: no column {' or '.join(map(repr, fields))} (its columns: {', '.join(schema.names) or 'none'}; --text-field names them)"
        )
    for c in columns:
        kind = schema.field(c).type
        value = kind.value_type if pa.types.is_dictionary(kind) else kind
        if not any(f(value) for f in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary,
                                      pa.types.is_null, *_view_types(pa))):
            raise InputError(f"{path}: column {c!r} holds {kind}, not text (--text-field names the text columns)")
    return pf, columns


def _view_types(pa) -> list:
    return [getattr(pa.types, n) for n in ("is_string_view", "is_binary_view") if hasattr(pa.types, n)]


def parquet_groups(pf, columns: Sequence[str], first: int = 0) -> list[tuple[int, int, int, int]]:
    """The row groups to read, from the file's footer: (group, its first row, the row it stops
    before, the uncompressed size of its `columns`' pages). first > 0: only the file's first
    `first` rows (`PATH@N`). Groups without rows are left out."""
    md = pf.metadata
    leaves = [i for i in range(md.num_columns) if md.schema.column(i).path in set(columns)]  # text columns are leaves
    out, row = [], 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        n = rg.num_rows
        stop = min(row + n, first) if first else row + n
        if stop > row:
            size = sum(rg.column(i).total_uncompressed_size for i in leaves)
            out.append((g, row, stop, size * (stop - row) // n))
        row += n
        if first and row >= first:
            break
    return out


def parquet_rows(pf, path: Path, columns: Sequence[str], group: int, start: int, stop: int,
                 stats: ReadStats, strict: bool = False) -> Iterator[tuple[int, str, str]]:
    """Yield (row, where, raw_text) for rows [start, stop) of the file, which lie in row group
    `group` (whose first row is `start`); where = "file:row N". A row is a document: its cells of
    `columns` joined as JSON Lines' fields are (`join_fields`; null cells left out, all null is
    an empty document for the caller's filters); a binary cell that is not UTF-8 is counted as
    invalid_utf8 (an InputError with `strict`)."""
    import pyarrow as pa

    row = start
    try:
        for batch in pf.iter_batches(batch_size=min(PARQUET_BATCH_ROWS, stop - start), row_groups=[group], columns=list(columns)):
            cells = [batch.column(c).to_pylist() for c in columns]
            for values in zip(*cells):
                if row >= stop:
                    return
                where = f"{path}:row {row}"
                row += 1
                stats.documents_in += 1
                if len(values) == 1 and type(values[0]) is str:  # the common case: one text column
                    yield row - 1, where, values[0]
                    continue
                try:
                    values = [v.decode("utf-8") if type(v) is bytes else v for v in values]
                except UnicodeDecodeError:
                    if strict:
                        raise InputError(f"{where}: invalid utf8") from None
                    stats.skip("invalid_utf8", where)
                    continue
                yield row - 1, where, join_fields(values)
    except (OSError, pa.ArrowException) as e:
        raise InputError(f"{path}: cannot read row group {group} ({e})") from None


def iter_documents(
    inputs: Sequence[str | os.PathLike],
    text_field: str | Sequence[str] = "text",
    one_doc_per_line: bool = False,
    stats: ReadStats | None = None,
    strict: bool = False,
) -> Iterator[tuple[str, str]]:
    """Yield (where, raw_text) for every document, streaming; where = "file:line".

    Undecodable lines and malformed JSON are counted in `stats` (or raise InputError with
    `strict`). Cleaning and length filters are the caller's business.
    """
    stats = stats if stats is not None else ReadStats()
    fields = [text_field] if isinstance(text_field, str) else list(text_field)
    for path in expand_inputs(inputs):
        stats.files += 1
        fmt = format_of(path)
        if fmt == "parquet":
            pf, columns = open_parquet(path, fields)
            with pf:
                for group, start, stop, size in parquet_groups(pf, columns, path.first if isinstance(path, FirstDocs) else 0):
                    stats.bytes += size
                    yield from ((where, text) for _, where, text in parquet_rows(pf, path, columns, group, start, stop, stats, strict))
            continue
        try:
            fh = open_text(path)
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror}") from None

        def bad(reason: str, where: str) -> None:
            if strict:
                raise InputError(f"{where}: {reason.replace('_', ' ')}")
            stats.documents_in += 1
            stats.skip(reason, where)

        first = path.first if isinstance(path, FirstDocs) else 0
        prefix = f"{path}:"
        taken = stats.documents_in  # documents of this file so far = documents_in - taken
        with fh:
            buf: list[str] = []
            start = 0
            try:
                for lineno, raw in enumerate(fh, 1):
                    if first and stats.documents_in - taken >= first:
                        break
                    stats.bytes += len(raw)
                    where = f"{prefix}{lineno}"
                    try:
                        line = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        bad("invalid_utf8", where)
                        continue
                    if fmt == "jsonl":
                        if not line.strip():
                            continue
                        text, problem = jsonl_text(line, fields)
                        if problem:
                            bad(problem, where)
                            continue
                        stats.documents_in += 1
                        yield where, text
                    elif one_doc_per_line:
                        stats.documents_in += 1
                        yield where, line.rstrip("\r\n")
                    elif line.strip():
                        if not buf:
                            start = lineno
                        buf.append(line)
                    elif buf:
                        stats.documents_in += 1
                        yield f"{path}:{start}", "".join(buf)
                        buf = []
            except (OSError, EOFError, gzip.BadGzipFile) as e:
                raise InputError(f"{path}: cannot read ({e})") from None
            if buf and not (first and stats.documents_in - taken >= first):
                stats.documents_in += 1
                yield f"{path}:{start}", "".join(buf)


def read_all(inputs: Iterable[str | os.PathLike], **kw) -> list[str]:
    """Convenience for small inputs: the raw texts of every document."""
    return [t for _, t in iter_documents(list(inputs), **kw)]
