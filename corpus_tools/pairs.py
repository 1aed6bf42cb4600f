"""BERT's recipe on token slices: encoded documents -> NSP pairs (or packed rows) -> instance arrays.

The shards stage's task (corpus_tools/shard_task.py) feeds it one piece's documents at a time.

The recipe (google-research/bert create_pretraining_data.py, on token slices):
  * a document is a list of Kiwi sentences; sentences are gathered into a chunk until it holds
    `max_seq_len - 3` tokens (with probability `short_seq_prob` a shorter random target is drawn,
    once per document, as BERT does); the chunk is cut at a random sentence boundary into A and B;
  * B is the actual continuation (IsNext, label 0) with probability 0.5, else a random span of
    another document (NotNext, label 1) and the unused sentences go back for the next chunk;
  * a chunk of a single sentence has no sentence boundary to cut at. BERT makes it NotNext, so a
    corpus of one-sentence documents (reviews) gets far fewer than 50% IsNext pairs (docs/shards.md
    has the measured share). `single_sentence` "split" (default) cuts such a sentence at a random eojeol
    (word) boundary instead, or at a random morpheme boundary when it is one eojeol (reviews often
    go without spaces: one eojeol of a whole clause is common): A = the prefix; B = the true rest
    of the sentence (IsNext) with probability 0.5, else a random B as above (NotNext; A is the same
    prefix either way, so its shape does not give the label away, and the unused suffix is dropped:
    counted as `single_sentence_suffix_dropped_tokens`). Only a chunk of one single-morpheme
    sentence ("강추", "ㅋㅋㅋ") is still forced to NotNext (`forced_random_next`). "random" keeps
    BERT's rule exactly;
  * the longer of A/B loses tokens, front or back at random, until the pair fits (a sentence longer
    than the budget is simply truncated with the rest); `[CLS] A [SEP] B [SEP]`;
  * MLM (`corpus_tools.masking.mask_batch`, one function for both modes): round(15%) of the
    non-special tokens (>= 1), whole units (`mask_unit` token|morpheme|eojeol) at a time; each chosen
    token becomes [MASK] 80%, a random *normal* piece 10%, itself 10%. `static` writes `dupe_factor`
    differently masked copies; `dynamic` (default) writes unmasked pairs plus unit ids, and the
    pretraining loader calls `mask_batch` anew every epoch (korbert/data.py).

"Random B from another document": BERT draws from the whole corpus, which a stream cannot. Here B
comes from a seeded uniform pick among the *earlier* documents of the same shard and split, a pool
bounded to the last `pool_tokens` tokens (oldest documents dropped first). So negatives come from
nearby documents (often similar topic: somewhat harder NSP than BERT's), shards stay independent of
each other (resume), and the first document of a shard has no partner (a one-sentence chunk there
is dropped and counted as `unpaired_chunks`; a longer one becomes IsNext). Validation documents
only ever pair with validation documents.

Every random choice of a document comes from (seed, its key):
`draw_uniforms` for its first DRAWS choices, then `DocRng`'s PCG64 (`Draws` hands out both).
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right
from collections import Counter, deque
from typing import Callable

import numpy as np

from corpus_tools.shard_format import CLS, GOLDEN, MASK, SEP, UNK, mix64, to_unit
from corpus_tools.shards_config import ShardsConfig


DRAWS = 8  # document instances: a document's first 8 random choices come from counter-based uniforms (`Draws`)

class Doc:
    """One encoded document: ids int32 [n]; starts: list of sentences + 1 ints, sentence s =
    ids[starts[s]:starts[s+1]]; units int32 [n] (morpheme/eojeol index) or None; eojeol and
    morpheme int32 [n] (unit indices, non-decreasing: where a one-sentence chunk may be split);
    ecuts: where an eojeol starts, but the first (a list; None until `_word_cut` needs it).
    may_spell_specials=False: the caller checked that no id is special (but [UNK]) already.
    cuts: (sentence starts, eojeol starts or None) after the first, as `encoded_docs` computes them for a
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


def encoded_docs(encs: list[dict], mask_unit: str, may_spell_specials: bool) -> list[Doc | None]:
    """[Doc(enc, mask_unit, may_spell_specials), or None for a document without tokens] for a
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
        Doc(enc, mask_unit, may_spell_specials, (s_at[s_of[j] : s_of[j + 1]], e_at[e_of[j] : e_of[j + 1]] if s_of[j] == s_of[j + 1] else None))
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


def _word_cut(doc: Doc, a0: int, a1: int, rng) -> tuple[int, bool] | None:
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
    doc: Doc, pool: deque, rng, max_tokens: int, short_seq_prob: float, counts: Counter, split_single: bool = True
) -> list[tuple]:
    """create_instances_from_document on slices: [(a0, a1, b_doc, b0, b1, nsp)] with A = doc.ids[a0:a1],
    B = b_doc.ids[b0:b1], both truncated to max_tokens together; pool: earlier documents; rng: a
    numpy Generator or a `Draws` (random, integers, binomial).
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
                    other: Doc = pool[int(rng.integers(len(pool)))]
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


class Draws:
    """The random choices of one document, with a numpy Generator's methods: its first choices
    from a row of counter-based uniforms (`draw_uniforms`, made for a whole batch at once), any
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


def draw_uniforms(seed: int, index: np.ndarray, k: int) -> np.ndarray:
    """float64 [len(index), k] in [0, 1): uniform j of document i is splitmix64 of a counter made
    from (seed, i, j), a pure function of the three (no generator state), for a batch at once."""
    base = np.uint64(int.from_bytes(hashlib.blake2b(f"u:{seed}".encode(), digest_size=8).digest(), "little"))
    with np.errstate(over="ignore"):
        z = (index.astype(np.uint64)[:, None] * np.uint64(k) + np.arange(k, dtype=np.uint64)) * GOLDEN + base
    return to_unit(mix64(z))


def build_instance(
    doc: Doc, a0: int, a1: int, other: Doc, b0: int, b1: int, ids_dtype: str, units_dtype: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """ids [la + lb + 3] = [CLS] A [SEP] B [SEP]; units [same] or None: the document's unit ids
    shifted to start at 0 in A and past A's last one in B (so A and B never share a unit), -1 on
    the specials. Only runs of equal ids matter to `mask_batch`. The dtypes are the shard
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


class Pool(deque):
    """Recent documents to draw random B segments from, bounded to `limit` tokens (oldest dropped
    first, the newest always kept)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.tokens = limit, 0

    def add(self, doc: Doc) -> None:
        self.append(doc)
        self.tokens += len(doc.ids)
        while self.tokens > self.limit and len(self) > 1:
            self.tokens -= len(self.popleft().ids)


# ---------------------------------------------------------------------------------------------
# Packed instances: documents joined into one stream per split and shard
# ---------------------------------------------------------------------------------------------

PACK_GROUP = 32  # --instances packed with NSP: documents are joined into groups of >= 32 instances' worth of tokens


def _join(docs: list[Doc]) -> Doc:
    """One document made of several: a [SEP] opens the first sentence of every document after the
    first (it shares that token's units, so no cut falls between them). Unit ids are shifted to
    stay increasing across documents."""
    v = Doc.__new__(Doc)
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


class Packer:
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
        self.group: list[Doc] = []  # NSP: documents waiting for their group to fill
        self.group_tokens = 0
        self.pool = Pool(cfg.pool_tokens)  # NSP: earlier groups, for random B segments

    def add(self, doc: Doc, rng) -> list[tuple]:
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


def is_valid(seed: int, index: int, fraction: float) -> bool:
    h = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2**64 < fraction


_LOW128 = (1 << 128) - 1


class DocRng:
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
