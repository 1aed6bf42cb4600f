"""Stage 2: raw text -> BERT pretraining instances (NSP pairs + MLM) in checksummed shards.

    korbert shards --tokenizer runs/vocab --inputs corpus/*.jsonl.gz --out runs/shards

Pipeline, streamed in batches of `batch_chars` characters (memory stays flat, however large the
corpus): read (`iter_documents`) -> `clean` -> filters (every skip counted by reason) ->
`KorBertTokenizer.encode_documents` (ONE Kiwi pass per batch: token ids, sentences, morpheme and
eojeol units) -> BERT's recipe -> columns appended to the shard being written. Pipelined: Kiwi's
threads analyse batch k+1 while Python turns batch k into instances (the output is the same).

The recipe (google-research/bert create_pretraining_data.py, on token slices):
  * a document is a list of Kiwi sentences; sentences are gathered into a chunk until it holds
    `max_seq_len - 3` tokens (with probability `short_seq_prob` a shorter random target is drawn,
    once per document, as BERT does); the chunk is cut at a random sentence boundary into A and B;
  * B is the actual continuation (IsNext, label 0) with probability 0.5, else a random span of
    another document (NotNext, label 1) and the unused sentences go back for the next chunk;
  * a chunk of a single sentence has no sentence boundary to cut at. BERT makes it NotNext, so a
    corpus of one-sentence documents (reviews) gets far fewer than 50% IsNext pairs (21% on the
    shared corpus). `single_sentence` "split" (default) cuts such a sentence at a random eojeol
    (word) boundary instead, or at a random morpheme boundary when it is one eojeol (reviews often
    go without spaces: one eojeol of a whole clause is common): A = the prefix; B = the true rest
    of the sentence (IsNext) with probability 0.5, else a random B as above (NotNext; A is the same
    prefix either way, so its shape does not give the label away, and the unused suffix is dropped:
    counted as `single_sentence_suffix_dropped_tokens`). Only a chunk of one single-morpheme
    sentence ("강추", "ㅋㅋㅋ") is still forced to NotNext (`forced_random_next`). "random" keeps
    BERT's rule exactly;
  * the longer of A/B loses tokens, front or back at random, until the pair fits (a sentence longer
    than the budget is simply truncated with the rest); `[CLS] A [SEP] B [SEP]`;
  * MLM (`mask_tokens`, one function for both modes): round(15%) of the non-special tokens (>= 1),
    whole units (`mask_unit` token|morpheme|eojeol) at a time; each chosen token becomes [MASK] 80%,
    a random *normal* piece 10%, itself 10%. `static` writes `dupe_factor` differently masked
    copies; `dynamic` (default) writes unmasked pairs plus unit ids, and the pretraining loader calls
    `mask_tokens` anew every epoch (see `ShardReader.masked`).

"Random B from another document": BERT draws from the whole corpus, which a stream cannot. Here B
comes from a seeded uniform pick among the *earlier* documents of the same shard and split, a pool
bounded to the last `pool_tokens` tokens (oldest documents dropped first). So negatives come from
nearby documents (often similar topic: somewhat harder NSP than BERT's), shards stay independent of
each other (resume), and the first document of a shard has no partner (a one-sentence chunk there
is dropped and counted as `unpaired_chunks`; a longer one becomes IsNext). Validation documents
only ever pair with validation documents.

Pieces, determinism and resume. The inputs are cut into pieces of about `shard_mb` MB
(corpus_tools/pieces.py: byte ranges of plain files, stretches of a .gz stream), each cut at a
document boundary; one piece is one task and one shard (train + valid). A document is known by
its file's sha256 and the byte offset where it starts (`document_key`): it goes to the validation
split when a hash of (seed, key) falls below `valid_fraction`, and every random choice for it comes
from (seed, key) alone: its first `DRAWS` choices from counter-based uniforms (`_uniforms`:
splitmix64 of seed, key and the draw's number, for a whole batch at once), any further ones (long
documents), the binomials of truncation and the masks from a PCG64 generator seeded with (seed, key)
(`_Draws`; packed and static shards use the generator alone). So a shard's bytes depend only on its
piece: the same inputs + options give byte-identical shards in one process (no option), on a local
Dask cluster (`--workers N`) or on a running one (`--scheduler`), whatever was redone.

The tasks run here one after the other, or on Dask workers (one Kiwi each: Kiwi cannot be
pickled); this process plans the pieces (it decompresses .gz inputs and hands their pieces out)
and records each finished one, with its files' sha256, in `progress.json` (written atomically). A
restarted run skips the recorded pieces whose files are intact and builds the rest; a task whose
worker dies is run again by Dask. `manifest.json` is written last.

The shard format (columns, dtypes, manifest), its reader and the masking: corpus_tools/shard_format.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from bisect import bisect_left, bisect_right
from collections import Counter, deque
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, atomic_write_json, file_record, read_manifest, sha256_file, write_manifest
from corpus_tools.shard_format import (
    GOLDEN, CLS, FORMAT_VERSION, IGNORE, MASK, SEP, SPLITS, TOKENIZER_DIR, UNK, MaskConfig, _ShardWriter, _tokenizer_dir,
    mask_stats, mask_tokens, mix64, open_shards, shard_columns, special_mask_of, to_unit,
)
from corpus_tools.shard_format import ShardReader, first_normal_id  # noqa: F401  (still importable from here, as before the move)
from corpus_tools.morph import default_threads
from corpus_tools.pieces import Piece, document_key, file_id, is_streamed, ranged_pieces, read_piece, stream_pieces
from corpus_tools.text import InputError, ReadStats, clean, expand_inputs

SAMPLE = Path(__file__).resolve().parent.parent / "korbert" / "sample_data"
# dynamic masking: the statistics draw masks for the instances of a sample of the documents (the draws cost CPU
# on short texts): every document of a shard until DYNAMIC_STATS_FIRST instances are measured, then every DYNAMIC_STATS_EVERY-th
DYNAMIC_STATS_FIRST, DYNAMIC_STATS_EVERY = 2048, 64
PROGRESS = "progress.json"
DRAWS = 8  # document instances: a document's first 8 random choices come from counter-based uniforms (`_Draws`)


@dataclass
class ShardsConfig:
    """Turn raw text into BERT pretraining instances (NSP pairs + MLM) in checksummed shards."""

    tokenizer: str = C.field("runs/vocab", "tokenizer folder (the output of `korbert vocab`)")
    inputs: list[str] = C.field(
        [str(SAMPLE / "reviews.jsonl.gz"), str(SAMPLE / "petitions.jsonl.gz")],
        "text files, folders or globs: .txt (blank line between documents), .jsonl, optionally .gz",
    )
    out: str = C.field("runs/shards", "output folder (shards + manifest.json)")
    max_seq_len: int = C.field(128, "tokens per instance, [CLS]/[SEP] included")
    short_seq_prob: float = C.field(0.1, "probability of a shorter random target length (per document)")
    masking: str = C.field("dynamic", "static: masks written into the shards; dynamic: the loader masks", choices=["static", "dynamic"])
    dupe_factor: int = C.field(5, "static masking: copies of every document, each with other pairs and masks")
    mask_prob: float = C.field(0.15, "share of non-special tokens to predict")
    mask_unit: str = C.field("morpheme", "mask whole units: token, morpheme or eojeol", choices=["token", "morpheme", "eojeol"])
    single_sentence: str = C.field(
        "split", "a chunk of one sentence: split: cut it at a random eojeol (else morpheme) boundary into A + B, "
        "50%% IsNext; random: always NotNext with a random B (BERT)", choices=["split", "random"],
    )
    instances: str = C.field(
        "document", "document: BERT's instances, each from one document; packed: consecutive sentences across document "
        "boundaries ([SEP] between documents) fill every instance up to max_seq_len (RoBERTa / Cramming)",
        choices=["document", "packed"],
    )
    nsp: bool = C.field(True, "NSP pairs: segments A + B and an IsNext label; --no-nsp (with --instances packed): one segment per instance, no label, for --objective mlm")
    valid_fraction: float = C.field(0.01, "share of documents held out for validation (by a hash of position and seed)")
    shard_mb: float = C.field(
        8.0, "input MB per piece: a piece (a byte range of a file, or a stretch of a .gz stream, cut at a document "
        "boundary) is one task and one shard, the unit of work and of resume"
    )
    pool_tokens: int = C.field(1_000_000, "tokens of recent documents kept to draw random B segments from")
    text_field: list[str] = C.field(["title", "text"], "JSON Lines field(s) holding the text (joined by a newline)")
    one_doc_per_line: bool = C.field(False, "plain text: every line is a document (default: blank-line separated)")
    min_chars: int = C.field(2, "skip documents shorter than this after cleaning (too_short)")
    max_doc_chars: int = C.field(
        100_000, "skip longer documents (too_long): Kiwi is quadratic on long runs without spaces (1 MB: ~9 min)"
    )
    strict: bool = C.field(False, "fail on the first unusable document instead of counting it")
    seed: int = C.field(0, "seed for every random choice")
    workers: int = C.field(0, "build the pieces on a local Dask cluster of this many worker processes, one Kiwi each (0: this process alone)")
    scheduler: str = C.field("", "build the pieces on a running Dask cluster (tcp://HOST:8786); input and --out must be on a filesystem every worker sees")
    kiwi_threads: int = C.field(0, "Kiwi threads per process (0: all cores alone, cores / --workers on a local cluster, 1 per worker thread on --scheduler)")
    batch_chars: int = C.field(262_144, "characters per Kiwi batch (speed only: the output does not depend on it)")
    batch_docs: int = C.field(2048, "at most this many documents per Kiwi batch (speed only)")
    force: bool = C.field(False, "rebuild from scratch, discarding what `out` holds")
    replace: bool = C.field(False, "when `out` holds shards made with other options or inputs, rebuild instead of refusing (same options: kept or resumed)")
    show: int = C.field(2, "print this many decoded training instances at the end")

    def batch_full(self, docs: int, chars: int) -> bool:
        """Whether a batch of this many documents and characters goes to Kiwi (2,048 reviews, ~180 petitions)."""
        return chars >= self.batch_chars or docs >= self.batch_docs


# ---------------------------------------------------------------------------------------------
# The BERT recipe on token slices
# ---------------------------------------------------------------------------------------------


class _Doc:
    """One encoded document: ids int32 [n]; starts: list of sentences + 1 ints, sentence s =
    ids[starts[s]:starts[s+1]]; units int32 [n] (morpheme/eojeol index) or None; eojeol and
    morpheme int32 [n] (unit indices, non-decreasing: where a one-sentence chunk may be split);
    ecuts: where an eojeol starts, but the first (a list; None until `_word_cut` needs it).
    may_spell_specials=False: the caller checked that no id is special (but [UNK]) already.
    cuts: (sentence starts, eojeol starts or None) after the first, as `_docs` computes them for a
    whole batch; None: computed here."""

    __slots__ = ("ids", "starts", "sentences", "units", "eojeol", "morpheme", "replaced", "ecuts")

    def __init__(self, enc: dict, mask_unit: str, may_spell_specials: bool = True, cuts: tuple[list, list | None] | None = None):
        ids = enc["ids"]
        self.replaced = 0
        if may_spell_specials and ids.min() <= MASK:  # the text may spell a special token ("[SEP]"): it must not look like structure
            specials = (ids <= MASK) & (ids != UNK)
            self.replaced = int(specials.sum())
            ids = np.where(specials, UNK, ids).astype(np.int32)
        self.ids = ids
        if cuts is None:
            sent = enc["sentence"]
            cut = (np.flatnonzero(sent[1:] != sent[:-1]) + 1).tolist() if sent[-1] != sent[0] else []
            self.ecuts = None
        else:
            cut, self.ecuts = cuts
        self.starts = [0, *cut, len(ids)]  # a Python list: the recipe below does scalar work on it
        self.sentences = len(self.starts) - 1
        self.units = None if mask_unit == "token" else enc[mask_unit]
        self.eojeol, self.morpheme = enc["eojeol"], enc["morpheme"]


def _docs(encs: list[dict], mask_unit: str, may_spell_specials: bool) -> list[_Doc | None]:
    """[_Doc(enc, mask_unit, may_spell_specials), or None for a document without tokens] for a
    batch, with the per-document numpy work done once over the whole batch: where sentences change,
    and for one-sentence documents (reviews: `_word_cut` needs them all) where eojeols do. On short
    documents that work costs more than the recipe's own choices."""
    if not encs:
        return []
    lens = np.fromiter(map(len, (e["ids"] for e in encs)), np.int64, len(encs))
    ends = np.cumsum(lens)
    lo = ends - lens
    inner = np.ones(int(ends[-1]), dtype=bool)  # not a document's first token
    inner[lo[lens > 0]] = False
    every = np.arange(len(encs) + 1)

    def changes(name: str, keep: np.ndarray | None = None) -> tuple[list[int], list[int]]:
        """Where `name` changes inside a document (positions in it; only in documents where `keep`),
        and each document's range of them."""
        x = np.concatenate([e[name] for e in encs])
        at = np.flatnonzero(x[1:] != x[:-1]) + 1
        at = at[inner[at]]
        doc = np.searchsorted(ends, at, side="right")
        if keep is not None:
            at, doc = at[keep[doc]], doc[keep[doc]]
        return (at - lo[doc]).tolist(), np.searchsorted(doc, every).tolist()

    s_at, s_of = changes("sentence")
    e_at, e_of = changes("eojeol", keep=np.diff(s_of) == 0)
    return [
        _Doc(enc, mask_unit, may_spell_specials, (s_at[s_of[j] : s_of[j + 1]], e_at[e_of[j] : e_of[j + 1]] if s_of[j] == s_of[j + 1] else None))
        if n else None
        for j, (enc, n) in enumerate(zip(encs, lens.tolist()))
    ]


def _truncate(la: int, lb: int, max_tokens: int, rng) -> tuple[int, int, int, int]:
    """BERT's truncate_seq_pair in closed form: (a_front, a_back, b_front, b_back) tokens to drop.

    BERT removes one token at a time from the longer segment (B on ties), front or back at random;
    the same counts: the longer loses the difference first, then both alternate."""
    excess = la + lb - max_tokens
    if excess <= 0:
        return 0, 0, 0, 0
    d = min(excess, abs(la - lb))
    da, db = (d, 0) if la > lb else (0, d)
    e = excess - d
    da, db = da + e // 2, db + (e + 1) // 2
    fa, fb = int(rng.binomial(da, 0.5)) if da else 0, int(rng.binomial(db, 0.5)) if db else 0
    return fa, da - fa, fb, db - fb


def _word_cut(doc: _Doc, a0: int, a1: int, rng) -> tuple[int, bool] | None:
    """Where to split the one-sentence chunk doc.ids[a0:a1]: (cut, by_morpheme) with cut a random
    eojeol boundary strictly inside it (the first token of an eojeol other than the first) or, when
    it is a single eojeol (reviews often go without spaces: "볼만했지만중간중간엉킴과..."), a random
    morpheme boundary; None when it is a single morpheme ("강추", "ㅋㅋㅋ")."""
    if a1 - a0 < 2:
        return None
    if doc.ecuts is None:
        e = doc.eojeol
        doc.ecuts = (np.flatnonzero(e[1:] != e[:-1]) + 1).tolist()
    lo, hi = bisect_right(doc.ecuts, a0), bisect_left(doc.ecuts, a1)
    if hi > lo:  # eojeol boundaries inside: pick one
        return doc.ecuts[lo + int(rng.integers(hi - lo))], False
    units = doc.morpheme  # unit ids never decrease along a document
    if units[a0] != units[a1 - 1]:
        cuts = (units[a0 + 1 : a1] != units[a0 : a1 - 1]).nonzero()[0]
        return a0 + 1 + int(cuts[int(rng.integers(cuts.size))]), True
    return None


def document_pairs(
    doc: _Doc, pool: deque, rng, max_tokens: int, short_seq_prob: float, counts: Counter, split_single: bool = True
) -> list[tuple]:
    """create_instances_from_document on slices: [(a0, a1, b_doc, b0, b1, nsp)] with A = doc.ids[a0:a1],
    B = b_doc.ids[b0:b1], both truncated to max_tokens together; pool: earlier documents; rng: a
    numpy Generator or a `_Draws` (random, integers, binomial).
    split_single: a chunk of one sentence is cut at a random eojeol boundary (A = the prefix, the
    rest is the true B) instead of always taking a random B (BERT)."""
    target = max_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_tokens + 1))
    starts, s = doc.starts, doc.sentences
    out = []
    first = 0  # first sentence of the current chunk
    i = 0
    while i < s:
        if i == s - 1 or starts[i + 1] - starts[first] >= target:
            n_seg = i + 1 - first
            a_end = first + (int(rng.integers(1, n_seg)) if n_seg >= 2 else 1)  # sentences [first, a_end) are A
            a0, a1, c1 = starts[first], starts[a_end], starts[i + 1]  # the true B: [a1, c1)
            free = n_seg >= 2
            if not free and split_single:
                cut = _word_cut(doc, a0, a1, rng)
                if cut is not None:  # A = a prefix of the sentence, the true B = the rest of it
                    a1, free = cut[0], True
                    counts["single_sentence_split"] += 1
                    counts["single_sentence_split_by_morpheme"] += cut[1]
            if not free or rng.random() < 0.5:
                if pool:
                    other: _Doc = pool[int(rng.integers(len(pool)))]
                    r = int(rng.integers(other.sentences))
                    b0 = other.starts[r]
                    k = bisect_left(other.starts, b0 + target - (a1 - a0))  # B: sentences r.. until target
                    b1 = other.starts[min(max(k, r + 1), other.sentences)]
                    pair = [a0, a1, other, b0, b1, 1]
                    counts["forced_random_next"] += not free
                    if n_seg == 1 and free:
                        counts["single_sentence_suffix_dropped_tokens"] += c1 - a1
                    i = a_end - 1  # the unused sentences of the chunk go back
                elif free:  # no other document yet (start of a shard): keep the true next
                    pair = [a0, a1, doc, a1, c1, 0]
                    counts["isnext_fallback"] += 1
                else:
                    counts["unpaired_chunks"] += 1
                    pair = None
            else:
                pair = [a0, a1, doc, a1, c1, 0]
            if pair is not None:
                fa, ba, fb, bb = _truncate(pair[1] - pair[0], pair[4] - pair[3], max_tokens, rng)
                pair[0] += fa; pair[1] -= ba; pair[3] += fb; pair[4] -= bb  # noqa: E702
                counts["truncated"] += (fa + ba + fb + bb) > 0
                out.append(tuple(pair))
            first = i + 1
        i += 1
    return out


class _Draws:
    """The random choices of one document, with a numpy Generator's methods: its first choices
    from a row of counter-based uniforms (`_uniforms`, made for a whole batch at once), any
    further ones, and every binomial, from the document's PCG64 generator, made on first use
    (most reviews never need it: seeding one costs more than the choices themselves)."""

    __slots__ = ("u", "i", "make", "gen")

    def __init__(self, u: list[float], make: Callable[[], np.random.Generator]):
        self.u, self.i, self.make, self.gen = u, 0, make, None

    def generator(self) -> np.random.Generator:
        if self.gen is None:
            self.gen = self.make()
        return self.gen

    def random(self) -> float:
        if self.i < len(self.u):
            self.i += 1
            return self.u[self.i - 1]
        return self.generator().random()

    def integers(self, low: int, high: int | None = None) -> int:
        """Uniform in [low, high) (one argument: [0, low)), as Generator.integers."""
        if high is None:
            low, high = 0, low
        k = high - low
        return low + min(int(self.random() * k), k - 1)

    def binomial(self, n: int, p: float) -> int:
        return int(self.generator().binomial(n, p))


def _uniforms(seed: int, index: np.ndarray, k: int) -> np.ndarray:
    """float64 [len(index), k] in [0, 1): uniform j of document i is splitmix64 of a counter made
    from (seed, i, j), a pure function of the three (no generator state), for a batch at once."""
    base = np.uint64(int.from_bytes(hashlib.blake2b(f"u:{seed}".encode(), digest_size=8).digest(), "little"))
    with np.errstate(over="ignore"):
        z = (index.astype(np.uint64)[:, None] * np.uint64(k) + np.arange(k, dtype=np.uint64)) * GOLDEN + base
    return to_unit(mix64(z))


def build_instance(
    doc: _Doc, a0: int, a1: int, other: _Doc, b0: int, b1: int, ids_dtype: str, units_dtype: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """ids [la + lb + 3] = [CLS] A [SEP] B [SEP]; units [same] or None: the document's unit ids
    shifted to start at 0 in A and past A's last one in B (so A and B never share a unit), -1 on
    the specials. Only runs of equal ids matter to `mask_tokens`. The dtypes are the shard
    columns' (`shard_columns`): the instance is built as it is stored."""
    la, lb = a1 - a0, b1 - b0
    ids = np.empty(la + lb + 3, dtype=ids_dtype)
    ids[0], ids[la + 1], ids[-1] = CLS, SEP, SEP
    ids[1 : la + 1] = doc.ids[a0:a1]
    ids[la + 2 : -1] = other.ids[b0:b1]
    if doc.units is None:
        return ids, None
    ua, ub = doc.units[a0:a1], other.units[b0:b1]
    shift_b = int(ub[0]) - (int(ua[-1]) - int(ua[0])) - 1
    units = np.empty(la + lb + 3, dtype=units_dtype)
    if int(ub[-1]) - shift_b > np.iinfo(units.dtype).max:  # units without tokens left gaps: renumber the runs compactly
        u = np.concatenate((ua, ub + (1 << 30)))
        runs = np.cumsum(np.r_[0, u[1:] != u[:-1]])
        units[1 : la + 1], units[la + 2 : -1] = runs[:la], runs[la:]
    else:
        units[1 : la + 1] = ua - ua[0]
        units[la + 2 : -1] = ub - shift_b
    units[0] = units[la + 1] = units[-1] = -1
    return ids, units


_CLS, _SEP, _NONE = np.array([CLS], np.int32), np.array([SEP], np.int32), np.array([-1], np.int32)  # the pieces between the slices


def build_instances(pairs: list[tuple], ids_dtype: str, units_dtype: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """`build_instance` over many pairs at once: (ids, units or None, lengths), ids and units the
    instances' columns concatenated in order. The same values as `build_instance` pair by pair,
    with one concatenation for the lot instead of a dozen small numpy calls per instance.
    pairs: [(doc, a0, a1, other, b0, b1, ...)], at least one, both segments non-empty."""
    if not pairs:  # (whether units exist is read off the first pair's document)
        raise ValueError("build_instances: no pairs")
    pieces, upieces, la, lb = [], [], [], []
    with_units = pairs[0][0].units is not None
    for doc, a0, a1, other, b0, b1, *_ in pairs:
        pieces += (_CLS, doc.ids[a0:a1], _SEP, other.ids[b0:b1], _SEP)
        if with_units:
            upieces += (_NONE, doc.units[a0:a1], _NONE, other.units[b0:b1], _NONE)
        la.append(a1 - a0)
        lb.append(b1 - b0)
    la_, lb_ = np.asarray(la, np.int64), np.asarray(lb, np.int64)
    lengths = la_ + lb_ + 3
    ids = np.concatenate(pieces).astype(ids_dtype, copy=False)
    if not with_units:
        return ids, None, lengths
    raw = np.concatenate(upieces).astype(np.int64)
    start = np.cumsum(lengths) - lengths  # each instance's [CLS]
    a_first, a_last, b_first, b_last = raw[start + 1], raw[start + la_], raw[start + la_ + 2], raw[start + lengths - 2]
    shift_b = b_first - (a_last - a_first) - 1  # B's units continue right after A's (see build_instance)
    shifts = np.zeros((len(pairs), 5), np.int64)
    shifts[:, 1], shifts[:, 3] = a_first, shift_b
    sizes = np.ones((len(pairs), 5), np.int64)
    sizes[:, 1], sizes[:, 3] = la_, lb_
    units = raw - np.repeat(shifts.ravel(), sizes.ravel())  # the specials were -1 and stay so
    over = np.flatnonzero(b_last - shift_b > np.iinfo(units_dtype).max)
    units = units.astype(units_dtype)
    for i in over.tolist():  # units without tokens left gaps: build_instance renumbers them compactly
        units[start[i] : start[i] + lengths[i]] = build_instance(*pairs[i][:6], ids_dtype, units_dtype)[1]
    return ids, units, lengths


class _Pool(deque):
    """Recent documents to draw random B segments from, bounded to `limit` tokens (oldest dropped
    first, the newest always kept)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.tokens = limit, 0

    def add(self, doc: _Doc) -> None:
        self.append(doc)
        self.tokens += len(doc.ids)
        while self.tokens > self.limit and len(self) > 1:
            self.tokens -= len(self.popleft().ids)


# ---------------------------------------------------------------------------------------------
# Packed instances: documents joined into one stream per split and shard
# ---------------------------------------------------------------------------------------------

PACK_GROUP = 32  # --instances packed with NSP: documents are joined into groups of >= 32 instances' worth of tokens


def _join(docs: list[_Doc]) -> _Doc:
    """One document made of several: a [SEP] opens the first sentence of every document after the
    first (it shares that token's units, so no cut falls between them). Unit ids are shifted to
    stay increasing across documents."""
    v = _Doc.__new__(_Doc)
    ids, starts, cols = [], [0], {"units": [], "eojeol": [], "morpheme": []}
    n, base = 0, 0
    for k, d in enumerate(docs):
        sep = k > 0
        if sep:
            ids.append(np.array([SEP], dtype=d.ids.dtype))
        ids.append(d.ids)
        for name, arrs in cols.items():
            u = getattr(d, name)
            if u is not None:
                u = u.astype(np.int64) + base
                arrs.append(np.concatenate((u[:1], u)) if sep else u)
        starts.extend(st + n + sep for st in d.starts[1:])
        n += len(d.ids) + sep
        base += max(int(d.eojeol[-1]), int(d.morpheme[-1]), int(d.units[-1]) if d.units is not None else 0) + 1
    v.ids = np.concatenate(ids)
    v.starts, v.sentences, v.replaced, v.ecuts = starts, len(starts) - 1, 0, None
    v.units = np.concatenate(cols["units"]) if cols["units"] else None
    v.eojeol, v.morpheme = np.concatenate(cols["eojeol"]), np.concatenate(cols["morpheme"])
    return v


class _Packer:
    """The packed instances of one split of one shard. Documents arrive in order; every instance
    is filled with consecutive sentences up to max_seq_len, across document boundaries.

    Without NSP: [CLS] sentences [SEP], a [SEP] between documents, one segment, no label (-1).
    Every token of every document is in exactly one instance, in order: a sentence that does not
    fit the room left starts the next instance, and one longer than an instance is cut token-wise.
    With NSP: documents are joined (`_join`) into groups of at least PACK_GROUP instances' worth of
    tokens and BERT's recipe (`document_pairs`) runs on each group as on one document: A/B cut at a
    random sentence (or document) boundary, B the true continuation or a random span of an earlier
    group. A [SEP] that would open or close A or B is dropped (the pair's own [SEP]s separate them)."""

    def __init__(self, cfg: ShardsConfig, dtypes: tuple[str, str], counts: Counter):
        self.cfg, self.dtypes, self.counts = cfg, dtypes, counts
        self.budget = cfg.max_seq_len - (3 if cfg.nsp else 2)
        self.ids: list[np.ndarray] = []  # no NSP: the current instance's pieces
        self.units: list[np.ndarray] = []
        self.n = 0
        self.base = 0  # no NSP: unit ids shifted per document so documents never share one
        self.group: list[_Doc] = []  # NSP: documents waiting for their group to fill
        self.group_tokens = 0
        self.pool = _Pool(cfg.pool_tokens)  # NSP: earlier groups, for random B segments

    def add(self, doc: _Doc, rng) -> list[tuple]:
        """-> finished instances [(ids, units, b_start, nsp)]."""
        if self.cfg.nsp:
            self.group.append(doc)
            self.group_tokens += len(doc.ids) + 1
            return self._pairs(rng) if self.group_tokens >= PACK_GROUP * self.budget else []
        out = []
        units = None if doc.units is None else doc.units.astype(np.int64) + self.base
        if units is not None:
            self.base = int(units[-1]) + 1
        first = True  # the document's first token is still to place
        for s in range(doc.sentences):
            a, b = doc.starts[s], doc.starts[s + 1]
            while a < b:
                sep = first and self.n > 0  # a document boundary inside the instance
                room = self.budget - self.n - sep
                if b - a > room and self.n > 0 and (b - a <= self.budget or room <= 0):
                    out.append(self._emit())  # the sentence goes whole into the next instance
                    continue
                take = min(b - a, room)  # all of it, or (longer than an instance) as much as fits
                if sep:
                    self.ids.append(np.array([SEP], dtype=doc.ids.dtype))
                    self.units.append(np.array([-1]))
                    self.n += 1
                    self.counts["document_separators"] += 1
                self.ids.append(doc.ids[a : a + take])
                self.units.append(units[a : a + take] if units is not None else np.zeros(take, np.int64))
                self.n += take
                a += take
                first = False
                if self.n == self.budget:
                    out.append(self._emit())
        return out

    def finish(self, rng) -> list[tuple]:
        if self.cfg.nsp:
            return self._pairs(rng) if self.group else []
        return [self._emit()] if self.n else []

    def _emit(self) -> tuple:
        ids_dtype, units_dtype = self.dtypes
        inner = np.concatenate(self.ids)
        ids = np.empty(len(inner) + 2, dtype=ids_dtype)
        ids[0], ids[-1], ids[1:-1] = CLS, SEP, inner
        u = np.concatenate(self.units)
        runs = np.cumsum(np.r_[0, u[1:] != u[:-1]])  # compact: 0, 1, ... per run of equal unit ids
        units = np.full(len(ids), -1, dtype=units_dtype)
        units[1:-1] = np.where(u < 0, -1, runs)
        self.ids, self.units, self.n = [], [], 0
        return ids, (units if self.cfg.mask_unit != "token" else None), len(ids), -1

    def _pairs(self, rng) -> list[tuple]:
        v = _join(self.group)
        self.group, self.group_tokens = [], 0
        out = []
        split_single = self.cfg.single_sentence == "split"
        for a0, a1, other, b0, b1, nsp in document_pairs(v, self.pool, rng, self.budget, self.cfg.short_seq_prob, self.counts, split_single):
            if a1 > a0:  # truncation may leave a separator at either end of a segment
                a0 += bool(v.ids[a0] == SEP)
                a1 -= bool(a1 > a0 and v.ids[a1 - 1] == SEP)
            if b1 > b0:
                b0 += bool(other.ids[b0] == SEP)
                b1 -= bool(b1 > b0 and other.ids[b1 - 1] == SEP)
            if a1 <= a0 or b1 <= b0:  # a segment was only the [SEP]
                self.counts["empty_segment_dropped"] += 1
                continue
            ids, units = build_instance(v, a0, a1, other, b0, b1, *self.dtypes)
            out.append((ids, units, a1 - a0 + 2, nsp))
        self.pool.add(v)
        return out


# ---------------------------------------------------------------------------------------------
# Writing shards (the columns themselves: corpus_tools/shard_format.py)
# ---------------------------------------------------------------------------------------------


def _is_valid(seed: int, index: int, fraction: float) -> bool:
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2**64 < fraction


_LOW128 = (1 << 128) - 1


class _DocRng:
    """The random generator of document i: PCG64 set to a state hashed from (seed, i).

    The same stream as a fresh generator per document, at a fifth of the cost of
    np.random.default_rng([seed, i]) (whose seeding dominates on corpora of short documents)."""

    def __init__(self, seed: int):
        self.prefix, self.bits = f"rng:{seed}:", np.random.PCG64(0)
        self.gen = np.random.Generator(self.bits)
        self.inner = {"state": 0, "inc": 1}
        self.state = {"bit_generator": "PCG64", "state": self.inner, "has_uint32": 0, "uinteger": 0}

    def __call__(self, index: int | str) -> np.random.Generator:
        x = int.from_bytes(hashlib.blake2b(f"{self.prefix}{index}".encode(), digest_size=32).digest(), "little")
        self.inner["state"], self.inner["inc"] = x & _LOW128, (x >> 128) | 1  # (the hash's first 16 bytes, its last 16)
        self.bits.state = self.state
        return self.gen


class _Chunk:
    """The documents of one shard (its train and valid halves): takes encoded batches, writes
    instances, counts everything; close() -> the record progress.json and the manifest keep."""

    def __init__(self, name: str, folder: Path, cfg: ShardsConfig, mcfg: MaskConfig, columns: dict[str, str]):
        self.name, self.folder, self.cfg, self.mcfg, self.columns = name, folder, cfg, mcfg, columns
        self.pools = {s: _Pool(cfg.pool_tokens) for s in SPLITS}
        self.writers: dict[str, _ShardWriter] = {}
        self.counts = {s: Counter() for s in SPLITS}
        self.docs = Counter()  # documents_in, documents_used, sentences, document_tokens
        self.skipped, self.first_skip = Counter(), {}
        self.rng = _DocRng(cfg.seed)
        self.measured = 0  # instances whose masks the statistics have drawn
        self.dtypes = columns["tokens"], columns.get("units", "int16")  # static: units only steer the masks
        self.packers = {s: _Packer(cfg, self.dtypes, self.counts[s]) for s in SPLITS} if cfg.instances == "packed" else {}

    def skip(self, reason: str, where: str) -> None:
        if self.cfg.strict:
            raise InputError(f"{where}: {reason.replace('_', ' ')}")
        self.skipped[reason] += 1
        self.first_skip.setdefault(reason, where)

    def add(self, batch: list[tuple[int, str, str, str]], encs: list[dict]) -> None:
        """batch: [(document index, where, split, cleaned text)]; encs: tok.encode_documents(texts)."""
        cfg = self.cfg
        static = cfg.masking == "static"
        copies = cfg.dupe_factor if static else 1
        max_tokens, split_single = cfg.max_seq_len - 3, cfg.single_sentence == "split"
        out = self._new_columns()
        batched = not static and not self.packers  # the instances are built at the end, all at once (build_instances)
        pairs: dict[str, list] = {s: [] for s in SPLITS}
        # one check for the batch instead of one per document: does any text spell a special token?
        specials = bool(encs) and int(np.concatenate([e["ids"] for e in encs]).min(initial=MASK + 1)) <= MASK
        used, sentences, tokens = 0, 0, 0
        uniforms = _uniforms(cfg.seed, np.fromiter((b[0] for b in batch), np.int64, len(batch)), DRAWS).tolist() if batched else None
        for j, ((g, where, split, _), doc) in enumerate(zip(batch, _docs(encs, cfg.mask_unit, specials))):
            if doc is None:
                self.skip("no_tokens", where)
                continue
            used += 1
            sentences += doc.sentences
            tokens += len(doc.ids)
            counts, pool = self.counts[split], self.pools[split]
            counts["documents"] += 1
            counts["special_ids_in_text"] += doc.replaced
            measure = static or self.measured < DYNAMIC_STATS_FIRST or g % DYNAMIC_STATS_EVERY == 0
            if batched:  # the first choices from the batch's uniforms, a generator only when more are needed
                draws = _Draws(uniforms[j], lambda g=g: self.rng(g))
                for pair in document_pairs(doc, pool, draws, max_tokens, cfg.short_seq_prob, counts, split_single):
                    pairs[split].append((doc, *pair))
                    if measure:  # the statistics' draw, from the document's generator
                        self._measure(out[split], *build_instance(doc, *pair[:5], *self.dtypes), draws.generator())
                pool.add(doc)
                continue
            rng = self.rng(g)
            if self.packers:
                for inst in self.packers[split].add(doc, rng):
                    self._put(out, split, *inst, rng, measure)
                continue
            for _ in range(copies):
                for a0, a1, other, b0, b1, nsp in document_pairs(doc, pool, rng, max_tokens, cfg.short_seq_prob, counts, split_single):
                    ids, units = build_instance(doc, a0, a1, other, b0, b1, *self.dtypes)
                    self._put(out, split, ids, units, a1 - a0 + 2, nsp, rng, measure)
            pool.add(doc)
        if used:
            self.docs.update(documents_used=used, sentences=sentences, document_tokens=tokens)
        if batched:
            for split, ps in pairs.items():
                if ps:
                    ids, units, lengths = build_instances(ps, *self.dtypes)
                    cols = out[split]
                    cols["flat"] = (lengths, {"tokens": ids, "units": units})
                    cols["b_start"] = [p[2] - p[1] + 2 for p in ps]
                    cols["nsp"] = [p[6] for p in ps]
        self._write(out)

    def _new_columns(self) -> dict:
        return {s: {"tokens": [], "units": [], "labels": [], "b_start": [], "nsp": [], "seen": ([], [], [])} for s in SPLITS}

    def _measure(self, cols: dict, ids, units, rng) -> tuple[np.ndarray, np.ndarray]:
        """One mask_tokens draw on an instance, kept for the statistics; -> (masked ids, labels)."""
        special = special_mask_of(ids)  # [CLS], the [SEP]s (document text never holds these ids: see _Doc)
        masked, labels = mask_tokens(ids, special, units, rng, self.mcfg)
        for lst, x in zip(cols["seen"], (masked, labels, special)):
            lst.append(x)
        self.measured += 1
        return masked, labels

    def _put(self, out: dict, split: str, ids, units, b_start: int, nsp: int, rng, measure: bool) -> None:
        cols = out[split]
        static = self.cfg.masking == "static"
        if measure:  # static: the masks written; dynamic: one draw, for the statistics only
            masked, labels = self._measure(cols, ids, units, rng)
        cols["tokens"].append(masked if static else ids)
        cols["labels"].append(labels if static else None)
        cols["units"].append(units)
        cols["b_start"].append(b_start)
        cols["nsp"].append(nsp)

    def _write(self, out: dict) -> None:
        for split, cols in out.items():
            if not cols["nsp"]:
                continue
            counts, seen, flat = self.counts[split], cols.pop("seen"), cols.pop("flat", None)
            counts["instances"] += len(cols["nsp"])
            counts["random_next"] += sum(x > 0 for x in cols["nsp"])
            counts["tokens"] += int(flat[0].sum()) if flat else sum(map(len, cols["tokens"]))
            if seen[0]:
                counts.update(mask_stats(*(np.concatenate(x) for x in seen), self.mcfg.mask_id))
            if split not in self.writers:
                self.writers[split] = _ShardWriter(self.folder, f"{split}-{self.name}", self.columns)
            if flat:
                self.writers[split].append_flat(flat[0], {**flat[1], "b_start": cols["b_start"], "nsp": cols["nsp"]})
            else:
                self.writers[split].append(cols)

    def close(self) -> dict:
        if self.packers:  # the instances still open at the end of the shard
            out = self._new_columns()
            rng = self.rng(f"end-{self.name}")
            for split, packer in self.packers.items():
                for inst in packer.finish(rng):
                    self._put(out, split, *inst, rng, self.cfg.masking == "static")
            self._write(out)
        shards = {s: w.close() for s, w in self.writers.items()}
        return {
            "documents": dict(self.docs),
            "skipped": dict(self.skipped),
            "first_skip_at": self.first_skip,
            "splits": {s: dict(c) for s, c in self.counts.items()},
            "shards": shards,
        }


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------


def _check(cfg: ShardsConfig) -> None:
    problems = [
        (cfg.max_seq_len < 8 or cfg.max_seq_len > 32767, f"--max-seq-len must be in 8..32767, not {cfg.max_seq_len}"),
        (not 0 <= cfg.short_seq_prob <= 1, "--short-seq-prob must be in [0, 1]"),
        (not 0 < cfg.mask_prob < 1, "--mask-prob must be in (0, 1)"),
        (not 0 <= cfg.valid_fraction < 1, "--valid-fraction must be in [0, 1)"),
        (cfg.dupe_factor < 1, "--dupe-factor must be >= 1"),
        (min(cfg.batch_docs, cfg.batch_chars) < 1, "--batch-docs and --batch-chars must be >= 1"),
        (not cfg.shard_mb > 0, "--shard-mb must be > 0"),
        (cfg.workers < 0 or cfg.kiwi_threads < 0, "--workers and --kiwi-threads must be >= 0"),
        (bool(cfg.workers and cfg.scheduler), "--workers starts a cluster, --scheduler uses a running one: pass one of them"),
        (cfg.instances == "packed" and cfg.masking == "static", "--instances packed needs --masking dynamic (static copies are not packed)"),
        (not cfg.nsp and cfg.instances != "packed", "--no-nsp needs --instances packed (a document's instances without NSP: pack them)"),
    ]
    for bad, msg in problems:
        if bad:
            raise InputError(msg)


def _load_tokenizer(folder: str):
    try:
        tm = read_manifest(folder, "vocab")
    except (FileNotFoundError, ValueError) as e:
        raise InputError(f"--tokenizer {folder}: {e}") from None
    from korbert.tokenizer import KorBertTokenizer

    tok = KorBertTokenizer.from_pretrained(folder)
    if tok.fingerprint != tm["tokenizer_hash"]:
        raise InputError(f"--tokenizer {folder}: files differ from its manifest.json (hash {tok.fingerprint[:12]} != {tm['tokenizer_hash'][:12]})")
    return tok, tm


def _copy_tokenizer(src: str, tm: dict, dest: Path) -> list[str]:
    names = sorted(tm["files"]) + ["manifest.json"]
    for name in names:
        target = dest / TOKENIZER_DIR / name
        data = Path(src, name).read_bytes()
        if not target.is_file() or target.read_bytes() != data:
            atomic_write_bytes(target, data)
    return [f"{TOKENIZER_DIR}/{n}" for n in names]


def _shard_files(folder: Path) -> list[Path]:
    return [p for p in folder.glob("*-*.*.npy") if p.name.split("-")[0] in SPLITS]


_SPLIT_INTS = (
    "documents", "instances", "tokens", "random_next", "forced_random_next", "single_sentence_split",
    "single_sentence_split_by_morpheme", "single_sentence_suffix_dropped_tokens", "isnext_fallback", "unpaired_chunks",
    "truncated", "special_ids_in_text", "document_separators", "empty_segment_dropped",
)
_MASK_INTS = ("candidate_tokens", "masked", "as_mask", "as_random", "as_keep")


def _split_summary(c: Counter, nsp: bool = True) -> dict:
    """Integer counts of one split -> the manifest's counts, shares included (no NSP: no IsNext shares)."""
    n, free, m = c["instances"], c["instances"] - c["forced_random_next"], c["masked"]
    share = lambda x, y: round(x / y, 4) if y and nsp else None  # noqa: E731
    mshare = lambda x, y: round(x / y, 4) if y else None  # noqa: E731
    return {
        **{k: c[k] for k in _SPLIT_INTS},
        "tokens_per_instance": round(c["tokens"] / n, 2) if n else None,
        "isnext": n - c["random_next"] if nsp else None,
        "isnext_share": share(n - c["random_next"], n),
        "isnext_share_when_free": share(n - c["random_next"], free),  # leaving out the chunks forced to NotNext
        "forced_random_next_share": share(c["forced_random_next"], n),
        "masking": {
            **{k: c[k] for k in _MASK_INTS},
            "masked_share": mshare(m, c["candidate_tokens"]),  # of non-special tokens
            "mask_share": mshare(c["as_mask"], m),
            "random_share": mshare(c["as_random"], m),
            "keep_share": mshare(c["as_keep"], m),
        },
    }


def _summarize(chunks: list[dict], skipped: Counter, first: dict, nsp: bool = True) -> dict:
    """Totals over chunk records (+ the reader's own skips): documents in = used + skipped, always."""
    docs, skipped, first = Counter(documents_in=sum(skipped.values())), Counter(skipped), dict(first)
    splits = {s: Counter() for s in SPLITS}
    for ch in chunks:
        docs.update(ch["documents"])
        skipped.update(ch["skipped"])
        for r, w in ch["first_skip_at"].items():
            first.setdefault(r, w)
        for s in SPLITS:
            splits[s].update(ch["splits"][s])
    if docs["documents_in"] != docs["documents_used"] + sum(skipped.values()):  # every document is accounted for
        raise AssertionError(f"documents in {docs['documents_in']} != used {docs['documents_used']} + skipped {dict(skipped)}")
    return {
        "documents_in": docs["documents_in"],
        "documents_used": docs["documents_used"],
        "documents_skipped": dict(sorted(skipped.items())),
        "first_skip_at": dict(sorted(first.items())),
        "sentences": docs["sentences"],
        "document_tokens": docs["document_tokens"],
        **{s: _split_summary(c, nsp) for s, c in splits.items()},
    }


def _existing(folder: Path, key: str, force: bool) -> tuple[dict | None, dict]:
    """What `folder` already holds: (its manifest if it is finished with this key, None) and the
    progress to resume (finished shards whose files are intact). Anything else is refused."""
    if force and folder.is_dir():
        for p in _shard_files(folder) + [folder / PROGRESS, folder / "manifest.json"]:
            p.unlink(missing_ok=True)
    progress: dict = {"key": key, "chunks": {}}
    if (folder / "manifest.json").is_file():
        old = read_manifest(folder, "shards")
        if old.get("key") == key:
            return old, progress
        raise InputError(f"{folder} holds shards made with other options, inputs or shard format; pass --force to replace them, or choose another --out")
    if (folder / PROGRESS).is_file():
        old = json.loads((folder / PROGRESS).read_text(encoding="utf-8"))
        if old.get("key") != key:
            raise InputError(f"{folder} holds an unfinished run with other options, inputs or shard format; pass --force to replace it, or choose another --out")
        for k, rec in old["chunks"].items():  # keep a recorded shard only if its files are intact
            files = [(folder / n, d) for sh in rec["shards"].values() for n, d in sh["files"].items()]
            if all(p.is_file() and sha256_file(p) == d for p, d in files):
                progress["chunks"][k] = rec
        print(f"{folder}: resuming, {len(progress['chunks'])} shard(s) already done", file=sys.stderr)
    elif folder.is_dir() and _shard_files(folder):
        raise InputError(f"{folder} holds shard files but no progress.json or manifest.json; pass --force to replace them")
    return None, progress


KEYS = 2  # how documents are keyed: 2 = (file sha256, byte offset), in pieces; 1 = by global index (before Dask)


@dataclass(frozen=True)
class _Job:
    """What every task needs besides its piece (pickled to Dask workers once per task: small)."""

    cfg: ShardsConfig
    folder: str
    kiwi_threads: int  # 0: all cores (one process alone)


@lru_cache(maxsize=2)
def _task_tokenizer(folder: str, threads: int):
    from corpus_tools.morph import set_kiwi_threads
    from korbert.tokenizer import KorBertTokenizer

    set_kiwi_threads(threads)
    return KorBertTokenizer.from_pretrained(folder)


def build_piece(job: _Job, piece: Piece, data: bytes | None = None, on_batch: Callable[[int], None] | None = None) -> dict:
    """The task: read one piece, analyse it with Kiwi, write its train/valid shard; -> its record
    (counts, files with sha256, CPU seconds by part). Runs in this process or on a Dask worker;
    the output depends on the piece alone."""
    from korbert.tokenizer import gc_paused

    cfg = job.cfg
    threads = job.kiwi_threads
    if not threads and _on_dask_worker():
        threads = 1  # --scheduler: one Kiwi thread per worker thread (start one worker process per core)
    tok = _task_tokenizer(str(Path(job.folder) / TOKENIZER_DIR), threads)
    mcfg = MaskConfig.from_tokenizer(tok, cfg.mask_prob)
    columns = shard_columns(len(tok), cfg.max_seq_len, cfg.masking, cfg.mask_unit != "token")
    chunk = _Chunk(piece.name, Path(job.folder), cfg, mcfg, columns)
    stats = ReadStats()
    cpu = Counter()
    process0 = time.process_time()
    batch: list[tuple[int, str, str, str]] = []
    chars = 0
    pending: list = []  # at most one batch under analysis while the one before it becomes instances

    def flush(drain: bool = False) -> None:
        nonlocal chars
        if batch:
            t = time.thread_time()
            pending.append((batch.copy(), tok.encode_documents_async([x[3] for x in batch])))
            cpu["tokenize"] += time.thread_time() - t
            batch.clear()
            chars = 0
        while len(pending) > (0 if drain else 1):
            done, finish = pending.pop(0)
            t = time.thread_time()
            encs = finish()
            t2 = time.thread_time()
            with gc_paused():  # the recipe keeps ~10 small objects per document alive: no collector passes over them
                chunk.add(done, encs)
            cpu["tokenize"] += t2 - t
            cpu["recipe"] += time.thread_time() - t2
            cpu["documents"] += len(done)
            if on_batch is not None:
                on_batch(len(done))

    t = time.thread_time()
    for offset, where, raw in read_piece(piece, data, cfg.text_field, cfg.one_doc_per_line, stats, cfg.strict):
        text = clean(raw)
        if not text:
            chunk.skip("empty", where)
        elif len(text) < cfg.min_chars:
            chunk.skip("too_short", where)
        elif len(text) > cfg.max_doc_chars:
            chunk.skip("too_long", where)
        else:
            g = document_key(piece.file_id, offset)
            batch.append((g, where, "valid" if _is_valid(cfg.seed, g, cfg.valid_fraction) else "train", text))
            chars += len(text)
            if cfg.batch_full(len(batch), chars):
                cpu["read"] += time.thread_time() - t
                flush()
                t = time.thread_time()
    cpu["read"] += time.thread_time() - t
    flush(drain=True)
    record = chunk.close()
    if on_batch is not None:  # and the documents skipped before Kiwi, for the progress bar
        on_batch(stats.documents_in - cpu.pop("documents", 0))
    record["documents"]["documents_in"] = stats.documents_in
    record["skipped"] = dict(Counter(record["skipped"]) + stats.skipped)
    record["first_skip_at"] = {**stats.examples, **record["first_skip_at"]}
    record["bytes"] = piece.bytes
    cpu.pop("documents", None)
    record["cpu_seconds"] = {**{k: round(v, 3) for k, v in cpu.items()}, "process": round(time.process_time() - process0, 3)}
    return record


def _on_dask_worker() -> bool:
    if "distributed" not in sys.modules:
        return False
    from distributed import get_worker

    try:
        get_worker()
        return True
    except ValueError:
        return False


def _pieces(files: list[Path], inputs: list[dict], cfg: ShardsConfig) -> Iterator[tuple[Piece, bytes | None]]:
    """Every piece of the inputs, in order: ranged ones from the files' sizes, streamed ones as the
    .gz (or PATH@N) files are read."""
    piece_bytes = max(1, int(cfg.shard_mb * 1e6))
    for f, (path, rec) in enumerate(zip(files, inputs)):
        fid = file_id(rec["sha256"])
        if is_streamed(path):
            yield from stream_pieces(f, path, fid, piece_bytes, cfg.one_doc_per_line)
        else:
            yield from ((p, None) for p in ranged_pieces(f, path, rec["bytes"], fid, piece_bytes))


def _run_here(job: _Job, todo: Iterator[tuple[Piece, bytes | None]], bar) -> Iterator[tuple[Piece, dict]]:
    for piece, data in todo:
        yield piece, build_piece(job, piece, data, on_batch=bar.update)


def _run_dask(job: _Job, todo: Iterator[tuple[Piece, bytes | None]], cfg: ShardsConfig, bar) -> Iterator[tuple[Piece, dict]]:
    """The pieces as tasks on a Dask cluster: a local one of --workers processes, or --scheduler's.
    At most a few tasks per worker are queued (a streamed piece carries its bytes: memory stays
    bounded); a task whose worker dies is run again by Dask; records come back as tasks finish."""
    try:
        from concurrent.futures import CancelledError

        from distributed import Client, KilledWorker, LocalCluster, as_completed
    except ImportError:
        raise InputError("--workers/--scheduler need Dask's distributed package: pip install 'distributed>=2024.8'") from None
    import uuid

    import dask

    cluster = None
    if cfg.workers:
        # The workers started here run without two Dask defaults that cost this CPU-bound work: the
        # nanny's MALLOC_TRIM_THRESHOLD_=65536 (memory handed back to the OS and faulted in again: twice
        # the system time, ~5% of the wall time on 2 cores, measured) and the profiler that samples
        # every task's stack each 10 ms. A cluster of your own: see docs/shards.md.
        environ = {k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items() if k != "MALLOC_TRIM_THRESHOLD_"}
        with dask.config.set({"distributed.worker.profile.enabled": False, "distributed.nanny.pre-spawn-environ": environ}):
            cluster = LocalCluster(
                n_workers=cfg.workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                memory_limit=0, silence_logs=40,
            )
    try:
        client = Client(cluster if cluster is not None else cfg.scheduler, timeout="60s")
    except OSError as e:
        if cluster is not None:
            cluster.close()
        raise InputError(f"--scheduler {cfg.scheduler}: cannot connect ({e})") from None
    run = uuid.uuid4().hex[:8]
    try:
        workers = len(client.scheduler_info()["workers"]) or 1
        print(f"shards: {workers} Dask worker(s) at {client.scheduler.address}", file=sys.stderr)
        queue = as_completed()
        inflight: dict[str, tuple[Piece, bytes | None, int]] = {}  # a streamed piece's bytes stay here until it is done

        def submit(piece: Piece, data: bytes | None, attempt: int = 0) -> None:
            # scattered bytes go straight to a worker, not through the scheduler; if that worker dies
            # they are lost with it, and the piece is sent again from here
            arg = client.scatter(data, hash=False) if data is not None else None
            inflight[piece.name] = (piece, data, attempt)
            queue.add(client.submit(build_piece, job, piece, arg, key=f"korbert-piece-{piece.name}-{run}-{attempt}", pure=False))

        def submit_next() -> None:
            nxt = next(todo, None)
            if nxt is not None:
                submit(*nxt)

        for _ in range(2 * workers + 1):
            submit_next()
        for future in queue:
            name = "-".join(future.key.split("-")[2:4])
            piece, data, attempt = inflight[name]
            try:
                record = future.result()  # a task's InputError (--strict, unreadable file) is raised here
            except (CancelledError, KilledWorker) as e:  # its worker died (with its input, or too often)
                if attempt >= 3:
                    raise RuntimeError(f"piece {name} of {piece.path}: lost its worker {attempt + 1} times; giving up") from e
                print(f"shards: piece {name} lost its worker ({type(e).__name__}); running it again", file=sys.stderr)
                submit(piece, data, attempt + 1)
                continue
            del inflight[name]
            bar.update(record["documents"].get("documents_in", 0))
            future.release()
            yield piece, record
            submit_next()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def main(cfg: ShardsConfig, on_piece: Callable[[str], None] | None = None, ready_only: bool = False) -> dict:
    """Build the shards. on_piece(name) is called after a piece is recorded (tests simulate kills
    with it). ready_only: never build; an InputError when `cfg.out` does not hold these shards."""
    from tqdm import tqdm

    _check(cfg)
    t0 = time.time()
    tok, tm = _load_tokenizer(cfg.tokenizer)
    mcfg = MaskConfig.from_tokenizer(tok, cfg.mask_prob)
    columns = shard_columns(len(tok), cfg.max_seq_len, cfg.masking, cfg.mask_unit != "token")
    del tok  # the tasks load their own (a Dask worker its own Kiwi: Kiwi cannot be pickled)
    files = expand_inputs(cfg.inputs)
    inputs = [file_record(f) for f in files]
    folder = Path(cfg.out)
    config = C.to_dict(cfg)
    for k in ("out", "show", "force", "replace", "workers", "scheduler", "kiwi_threads"):
        config.pop(k)
    if cfg.masking == "dynamic":
        config["dupe_factor"] = 1
    ident = {k: v for k, v in config.items() if k not in ("batch_docs", "batch_chars")}
    for k, default in (("instances", "document"), ("nsp", True)):  # options added later: at their defaults the key is as before
        if ident[k] == default:
            del ident[k]
    key = hashlib.sha256(json.dumps([ident, tm["tokenizer_hash"], inputs, FORMAT_VERSION, KEYS], sort_keys=True).encode()).hexdigest()

    if ready_only:
        finished = read_manifest(folder, "shards") if (folder / "manifest.json").is_file() else None
        if finished is None or finished.get("key") != key:
            raise InputError(f"{folder}: no shards built from these inputs and options yet")
        return finished
    try:
        finished, progress = _existing(folder, key, cfg.force)
    except InputError:
        if not cfg.replace:
            raise
        print(f"{folder}: holds shards made with other options, inputs or shard format; rebuilding", file=sys.stderr)
        finished, progress = _existing(folder, key, True)
    if finished is not None:
        print(f"{folder}: shards up to date ({finished['counts']['train']['instances']} training instances); --force rebuilds them")
        show(folder, cfg.show)
        return finished
    folder.mkdir(parents=True, exist_ok=True)
    for p in list(folder.glob(".*.partial")) + list(folder.glob(".*.tmp")):
        p.unlink()  # leftovers of a killed run
    tok_files = _copy_tokenizer(cfg.tokenizer, tm, folder)

    done = progress["chunks"]
    todo = ((p, d) for p, d in _pieces(files, inputs, cfg) if p.name not in done)
    threads = cfg.kiwi_threads or (max(1, default_threads() // cfg.workers) if cfg.workers else 0)
    job = _Job(cfg, str(folder.resolve()), threads)
    bar = tqdm(desc="shards", unit="doc", unit_scale=True, disable=None, file=sys.stderr)
    built, mb = 0, 0.0
    runner = _run_dask(job, todo, cfg, bar) if cfg.workers or cfg.scheduler else _run_here(job, todo, bar)
    for piece, record in runner:
        done[piece.name] = record
        atomic_write_json(folder / PROGRESS, progress)
        built += 1
        mb += piece.bytes / 1e6
        bar.set_postfix_str(f"{built} pieces, {mb:.0f} MB, {mb / max(time.time() - t0, 1e-9):.2f} MB/s")
        if on_piece is not None:
            on_piece(piece.name)
    bar.close()
    for p in list(folder.glob(".*.partial")) + list(folder.glob(".*.tmp")):
        p.unlink(missing_ok=True)  # what killed attempts of a task left behind

    chunks = [done[k] for k in sorted(done)]
    counts = {"files": len(files), "bytes": sum(ch["bytes"] for ch in chunks), "pieces": len(chunks), **_summarize(chunks, Counter(), {}, cfg.nsp)}
    counts["masking_measured_on"] = (
        "every instance as written" if cfg.masking == "static"
        else f"one mask_tokens draw on the instances of every shard's first documents (until {DYNAMIC_STATS_FIRST} instances) "
        f"and of every {DYNAMIC_STATS_EVERY}th document after them"
    )
    if counts["train"]["instances"] == 0:
        raise InputError(
            f"no training instances from {', '.join(map(str, cfg.inputs))}: {counts['documents_in']} documents read, "
            f"skipped {counts['documents_skipped'] or 'none'}"
        )
    shards = {s: [{**ch["shards"][s], "path": ch["shards"][s]["name"]} for ch in chunks if s in ch["shards"]] for s in SPLITS}
    names = [n for s in SPLITS for sh in shards[s] for n in sh["files"]]
    cpu = Counter()
    for ch in chunks:
        cpu.update(ch["cpu_seconds"])
    manifest = write_manifest(
        folder, "shards", FORMAT_VERSION, files=names + tok_files,
        key=key, document_keys=KEYS, config=config, inputs=inputs, tokenizer_hash=tm["tokenizer_hash"], tokenizer_path=str(cfg.tokenizer),
        mask_config=vars(mcfg), dtypes=columns, counts=counts, shards=shards,
        run={
            "shards_built": built, "shards_reused": len(chunks) - built, "seconds": round(time.time() - t0, 1),
            "engine": f"dask, {cfg.workers} local workers" if cfg.workers else f"dask at {cfg.scheduler}" if cfg.scheduler else "one process",
            "cpu_seconds": {k: round(v, 1) for k, v in sorted(cpu.items())},  # summed over the pieces' tasks (main thread: read, tokenize, recipe)
        },
    )
    (folder / PROGRESS).unlink(missing_ok=True)
    report(folder, manifest, time.time() - t0)
    show(folder, cfg.show)
    return manifest


def report(folder: Path, m: dict, seconds: float) -> None:
    c, tr = m["counts"], m["counts"]["train"]
    skipped = sum(c["documents_skipped"].values())
    mk = tr["masking"]
    if m["config"].get("single_sentence", "random") == "split":
        nsp = f"{tr['forced_random_next']} one-morpheme chunks forced to NotNext, {tr['single_sentence_split']} one-sentence chunks split in two"
    else:
        nsp = f"{tr['forced_random_next']} one-sentence chunks forced to NotNext"
    cfg = m["config"]
    mode = f"{cfg.get('instances', 'document')} instances, {tr.get('tokens_per_instance')} tokens each on average"
    pairs = (
        f"IsNext {tr['isnext_share']} of all pairs ({tr['isnext_share_when_free']} of those free to be either; {nsp})"
        if cfg.get("nsp", True) else "no NSP (one segment per instance)"
    )
    print(
        f"shards: {tr['instances']} training / {c['valid']['instances']} validation instances "
        f"({tr['tokens']} / {c['valid']['tokens']} tokens) in {len(m['shards']['train'])} + {len(m['shards']['valid'])} shards\n"
        f"  documents: {c['documents_in']} in = {c['documents_used']} used + {skipped} skipped"
        f"{': ' + str(c['documents_skipped']) if skipped else ''}"
        f"{' (first at ' + str(c['first_skip_at']) + ')' if skipped else ''}\n"
        f"  {mode}; {pairs}; "
        f"masked {mk['masked_share']} of non-special tokens, as [MASK]/random/kept {mk['mask_share']}/{mk['random_share']}/{mk['keep_share']}"
        f" ({m['config']['masking']} masking, by {m['config']['mask_unit']})\n"
        f"  {seconds:.1f}s -> {folder} (tokenizer {m['tokenizer_hash'][:12]})"
    )


def show(folder: str | os.PathLike, n: int, split: str = "train") -> None:
    """Print n decoded instances: segments A/B, NSP label, [MASK]s visible (dynamic: one draw)."""
    if n <= 0:
        return
    from korbert.tokenizer import KorBertTokenizer

    reader = open_shards(folder, split=split, verify=False)
    tok = KorBertTokenizer.from_pretrained(_tokenizer_dir(Path(folder)))
    rng = np.random.default_rng(0)
    for i in range(min(n, len(reader))):
        item = reader.masked(i, rng)
        ids, labels, tt = item["input_ids"], item["labels"], item["token_type_ids"]
        b = int(np.argmax(tt)) if tt.any() else len(ids)
        nsp = {0: "IsNext", 1: "NotNext (random B)"}.get(item["next_sentence_label"], "no NSP label")
        print(f"[{split} {i}] {nsp}, {len(ids)} tokens, {int((labels != IGNORE).sum())} to predict ({reader.masking} masking)")
        print(f"  A: {tok.decode(ids[:b].tolist())}")
        if b < len(ids):
            print(f"  B: {tok.decode(ids[b:].tolist())}")
        targets = [f"{tok.convert_ids_to_tokens(int(labels[p]))}" for p in np.flatnonzero(labels != IGNORE)]
        print(f"  targets: {' '.join(targets)}")


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(ShardsConfig, argv, prog="korbert shards"))
