"""Token rows from each distinct word's cached tokens: the fast route of KorBertTokenizer's calls.

A word's tokens do not depend on its neighbours, so each distinct word goes to the `tokenizers`
backend once and is remembered (`PieceCache`); a call then gathers every occurrence's tokens with
numpy. `CachedEncoding` holds the methods that do it (KorBertTokenizer inherits them):

- `_encode_fast`: a tokenizer call with one sequence per row and no overflow windows (what
  `datasets.map`, feature extraction and the embedding tools send) -> the same BatchEncoding HF's
  backend call gives; the backend's `Encoding`s are made only when first asked for
  (`LazyEncodings`). `_fast_options` decides which calls may take it; `_row_one` is the
  plain-Python route for one short string.
- `_finish_documents`: corpus encoding for the shards stage (`KorBertTokenizer.encode_documents`)
  -> per-token arrays (ids, sentence, morpheme, eojeol, offsets).

The tests compare both routes with HF's own backend call (`KorBertTokenizer._fast_path = False`).
"""

from __future__ import annotations

import gc
import threading
from bisect import bisect_left
from contextlib import contextmanager
from itertools import chain, repeat
from typing import Any

import numpy as np
from transformers.tokenization_utils_base import BatchEncoding, PaddingStrategy, TruncationStrategy

from corpus_tools.text import nfc_with_offsets

class CachedEncoding:
    """The word-cache route as methods of KorBertTokenizer (a mixin of that class, which owns the
    backend `_tokenizer`, the `_segmenter`, `_word_cache()` and `_encode_words()` they use)."""

    # kwargs of HF's `_encode_plus` the word-cache path knows; any other goes HF's way
    _FAST_KWARGS = frozenset({
        "add_special_tokens", "padding_strategy", "truncation_strategy", "max_length", "stride", "is_split_into_words",
        "pad_to_multiple_of", "padding_side", "return_tensors", "return_token_type_ids", "return_attention_mask",
        "return_overflowing_tokens", "return_special_tokens_mask", "return_offsets_mapping", "return_length",
        "verbose", "split_special_tokens",
    })  # fmt: skip
    _fast_path = True  # False: every call goes HF's way (the reference the tests compare with)
    _ONE_MAX_CHARS = 2000  # one string per call up to this long: `_row_one`, not numpy

    def _fast_options(self, text, text_pair, kw: dict) -> tuple[int, int | None] | None:
        """(number of special tokens per row, tokens kept by truncation or None) when the call can
        take the word-cache path; None sends it HF's way. Truncation there is a plain cut of one
        sequence (tokenizers' longest_first/only_first, no stride); padding any of HF's."""
        if not self._fast_path or text_pair is not None or not kw.keys() <= self._FAST_KWARGS:
            return None
        if isinstance(text, (list, tuple)):
            if not text or not all(isinstance(t, str) for t in text):
                return None
        elif not isinstance(text, str):
            return None
        split = kw.get("split_special_tokens")
        if kw.get("return_overflowing_tokens") or split or (split is None and self.split_special_tokens):
            return None
        n_special = 2 if kw.get("add_special_tokens", True) else 0
        max_length = kw.get("max_length")
        keep = None
        trunc = kw.get("truncation_strategy", TruncationStrategy.DO_NOT_TRUNCATE)
        if trunc != TruncationStrategy.DO_NOT_TRUNCATE:
            if (
                trunc not in (TruncationStrategy.LONGEST_FIRST, TruncationStrategy.ONLY_FIRST)
                or max_length is None or max_length <= n_special or kw.get("stride", 0)
                or self.truncation_side not in ("left", "right")
            ):
                return None
            keep = max_length - n_special
        pad = kw.get("padding_strategy", PaddingStrategy.DO_NOT_PAD)
        if pad != PaddingStrategy.DO_NOT_PAD:
            side = kw.get("padding_side") or self.padding_side
            if pad not in (PaddingStrategy.LONGEST, PaddingStrategy.MAX_LENGTH) or side not in ("left", "right"):
                return None
            if pad == PaddingStrategy.MAX_LENGTH and max_length is None:
                return None
        return n_special, keep

    def _row_one(self, cache, words, starts, spaced, keep, left_cut, want_offsets, nfc_starts, nfc_ends):
        """One row of `_encode_fast` (without [CLS]/[SEP]) for the words of one text, in Python:
        (ids, offsets or None). The same values as the numpy assembly."""
        wid, u_count, u_first, u_ids, u_rel = cache.lookup(words, self._encode_words)
        cnt, first = u_count[wid].tolist(), u_first[wid].tolist()
        src = list(chain.from_iterable(map(range, first, map(int.__add__, first, cnt))))
        ids = u_ids[src].tolist()
        cut = slice(None) if keep is None else slice(-keep, None) if left_cut else slice(keep)
        if keep is not None and len(ids) > keep:
            ids = ids[cut]
        if not want_offsets:
            return ids, None
        offs = []
        for (r0, r1), st, sp in zip(u_rel[src].tolist(), chain.from_iterable(map(repeat, starts, cnt)), chain.from_iterable(map(repeat, spaced, cnt))):
            a = st + r0 + (sp and r0 == 0 and r1 - r0 > 1)
            offs.append((a, st + r1))
        if keep is not None and len(offs) > keep:
            offs = offs[cut]
        if nfc_starts is not None:  # NFC changed the text: map back to the user's string
            offs = [(nfc_starts[a], nfc_ends[b - 1]) for a, b in offs]
        return ids, offs

    def _encode_fast(self, text, kw: dict, n_special: int, keep: int | None) -> BatchEncoding:
        """The word-cache path of `_encode_plus`: the same BatchEncoding HF's backend call gives
        (keys in its order, lists of ints, offsets as tuples), built from each word's cached tokens.
        Per token: offsets = where its word starts + its word-relative offsets, minus the "▁" of a
        spaced word (a token that starts on it and is longer than it), then NFC -> the user's string."""
        batched = isinstance(text, (list, tuple))
        norm = [nfc_with_offsets(t) for t in (text if batched else [text])]
        cache = self._word_cache()
        want_offsets = kw.get("return_offsets_mapping", False)
        left_cut = self.truncation_side == "left"
        cls_id, sep_id = self.cls_token_id, self.sep_token_id
        ids_rows: list[list[int]] = []
        offs_rows: list[list[tuple[int, int]]] = []
        word_chunks: list[tuple[list[str], list[int]]] = []  # per chunk: its words and where each row's end
        changed = [i for i, (_, starts, _) in enumerate(norm) if starts is not None]  # NFC changed the text
        one = None
        if not batched and len(norm[0][0]) <= self._ONE_MAX_CHARS:
            one = self._segmenter.one(norm[0][0], self.added_tokens_encoder)
        if one is not None:  # one short string: plain Python, no numpy
            words, starts, spaced = one
            ids, offs = self._row_one(cache, words, starts, spaced, keep, left_cut, want_offsets, *norm[0][1:])
            if n_special:
                ids = [cls_id, *ids, sep_id]
                offs = [(0, 0), *offs, (0, 0)] if want_offsets else offs
            ids_rows.append(ids)
            offs_rows.append(offs)
            word_chunks.append((words, [len(words)]))
        for lo, hi, b in self._segmenter.pipeline([n for n, _, _ in norm], self.added_tokens_encoder) if one is None else ():
            wid, u_count, u_first, u_ids, u_rel = cache.lookup(b.words, self._encode_words)
            n_per_word = u_count[wid]
            total = int(n_per_word.sum())
            word = np.repeat(np.arange(len(wid), dtype=np.int64), n_per_word)
            src = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(n_per_word) - n_per_word, n_per_word) + np.repeat(u_first[wid], n_per_word)
            doc = b.doc[word]
            cnt = np.bincount(doc, minlength=hi - lo)
            first_tok = np.cumsum(cnt) - cnt
            at = np.arange(total, dtype=np.int64) - first_tok[doc]  # index of the token in its row
            if keep is not None and (cnt > keep).any():
                kept = at >= (cnt[doc] - keep) if left_cut else at < keep
                at = at[kept] - (np.maximum(cnt - keep, 0)[doc[kept]] if left_cut else 0)
                word, src, doc = word[kept], src[kept], doc[kept]
                cnt = np.minimum(cnt, keep)
            ids = u_ids[src]
            if want_offsets:
                rel = u_rel[src]
                start = b.start[word]
                fa, fe = start + rel[:, 0], start + rel[:, 1]
                fa += b.spaced[word] & (rel[:, 0] == 0) & (rel[:, 1] - rel[:, 0] > 1)
                for d in changed[bisect_left(changed, lo) : bisect_left(changed, hi)]:  # map back to the user's string
                    sel = doc == d - lo
                    fa[sel] = np.asarray(norm[d][1], dtype=np.int64)[fa[sel]]
                    fe[sel] = np.asarray(norm[d][2], dtype=np.int64)[fe[sel] - 1]
            lens = cnt + n_special
            row0 = np.cumsum(lens) - lens
            pos = row0[doc] + n_special // 2 + at
            flat = np.empty(int(lens.sum()), dtype=np.int64)
            if n_special:
                flat[row0] = cls_id
                flat[row0 + lens - 1] = sep_id
            flat[pos] = ids
            flat_l, r0, ln = flat.tolist(), row0.tolist(), lens.tolist()
            ids_rows += [flat_l[r : r + n] for r, n in zip(r0, ln)]
            if want_offsets:
                oa, oe = np.zeros(len(flat), dtype=np.int64), np.zeros(len(flat), dtype=np.int64)
                oa[pos], oe[pos] = fa, fe
                offs = _offset_pairs(oa, oe)
                offs_rows += [offs[r : r + n] for r, n in zip(r0, ln)]
            word_chunks.append((b.words, np.cumsum(b.n_words).tolist()))

        # the rows as HF's _convert_encoding lists them, padded as tokenizers pads a batch
        lengths = [len(r) for r in ids_rows]
        pad = kw.get("padding_strategy", PaddingStrategy.DO_NOT_PAD)
        max_length = kw.get("max_length")
        target = None
        if pad != PaddingStrategy.DO_NOT_PAD:
            target = max_length if pad == PaddingStrategy.MAX_LENGTH else max(lengths)
            multiple = kw.get("pad_to_multiple_of")
            if multiple and target % multiple:
                target += multiple - target % multiple
        left_pad = (kw.get("padding_side") or self.padding_side) == "left"

        def padded(rows, value):
            if target is None:
                return rows
            if left_pad:
                return [[value] * (target - len(r)) + r if len(r) < target else r for r in rows]
            return [r + [value] * (target - len(r)) if len(r) < target else r for r in rows]

        type_ids = kw.get("return_token_type_ids")
        attention = kw.get("return_attention_mask")
        data: dict[str, Any] = {"input_ids": padded(ids_rows, self.pad_token_id)}
        if type_ids or (type_ids is None and "token_type_ids" in self.model_input_names):
            data["token_type_ids"] = padded([[0] * n for n in lengths], self.pad_token_type_id)
        if attention or (attention is None and "attention_mask" in self.model_input_names):
            data["attention_mask"] = padded([[1] * n for n in lengths], 0)
        if kw.get("return_special_tokens_mask"):
            inner = [[0] * (n - n_special) for n in lengths]
            data["special_tokens_mask"] = padded([[1] + r + [1] for r in inner] if n_special else inner, 1)
        if want_offsets:
            data["offset_mapping"] = padded(offs_rows, (0, 0))
        if kw.get("return_length"):
            data["length"] = [len(r) for r in data["input_ids"]]
        for row in data["input_ids"]:
            self._eventual_warn_about_too_long_sequence(row, max_length, kw.get("verbose", True))

        settings = {k: kw.get(k) for k in ("padding_strategy", "truncation_strategy", "max_length", "pad_to_multiple_of", "padding_side")}
        settings["stride"] = kw.get("stride", 0)
        add_special = bool(n_special)

        def make_encodings() -> list:  # exactly HF's backend call of this request
            words_rows = [words[a:e] for words, ends in word_chunks for a, e in zip([0] + ends[:-1], ends)]
            with self._words_mode():
                self.set_truncation_and_padding(**settings)
                if self._tokenizer.encode_special_tokens:
                    self._tokenizer.encode_special_tokens = False
                return self._tokenizer.encode_batch(words_rows, add_special_tokens=add_special, is_pretokenized=True)

        out = BatchEncoding(data, LazyEncodings(len(ids_rows), make_encodings), n_sequences=1)
        if not batched:
            out = BatchEncoding(
                {k: (v[0] if len(v) > 0 and isinstance(v[0], list) else v) for k, v in out.items()}, out.encodings, n_sequences=1
            )
        tensors = kw.get("return_tensors")
        if tensors is not None:  # one text stays a batch of one, as in HF (pipelines rely on it)
            out.convert_to_tensors(tensors, prepend_batch_axis=not batched)
        return out

    def _finish_documents(self, texts: list[str], plans: list[list], analyses) -> list[dict]:
        """The rest of `encode_documents`: Kiwi's analyses -> words (`Segmenter.batch`) ->
        backend -> per-token arrays, computed for the whole batch at once.

        Each distinct word goes to the backend once (a word's pieces do not depend on its
        neighbours) and is remembered across batches (`PieceCache`); its tokens are then
        gathered for every occurrence. Each word comes
        from one surface segment, so a token's morpheme (segment) and eojeol are those of its
        word; its sentence is found from where it starts (a token starting on the whitespace of
        a "▁", i.e. at the start of a "▁" word, looks one character right)."""
        b = self._segmenter.batch(texts, plans, analyses)
        cache = self._word_cache()
        wid, u_count, u_first, u_ids_a, u_rel_a = cache.lookup(b.words, self._encode_words)
        # every occurrence of every word -> its tokens
        n_per_word = u_count[wid]
        total = int(n_per_word.sum())
        word = np.repeat(np.arange(len(wid), dtype=np.int64), n_per_word)
        src = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(n_per_word) - n_per_word, n_per_word) + np.repeat(u_first[wid], n_per_word)
        rel_offsets = u_rel_a[src]
        doc = b.doc[word]
        offsets = rel_offsets + b.start[word][:, None]
        start_on_space = b.spaced[word] & (rel_offsets[:, 0] == 0)
        key = (doc << 32) + offsets[:, 0] + start_on_space
        sentence = np.searchsorted(b.sent_keys, key, side="right") - 1 - b.first_sent[doc]
        cols = np.empty((4, total), dtype=np.int32)  # one block per batch; documents get row slices
        cols[0] = u_ids_a[src]
        cols[1] = np.maximum(sentence, 0)
        cols[2] = b.seg[word]
        cols[3] = b.eoj[word]
        offsets = offsets.astype(np.int32)
        ends = np.cumsum(np.bincount(doc, minlength=len(texts))).tolist()
        out = []
        for a, e in zip([0] + ends[:-1], ends):
            out.append({"ids": cols[0, a:e], "sentence": cols[1, a:e], "morpheme": cols[2, a:e], "eojeol": cols[3, a:e], "offsets": offsets[a:e]})
        return out


class PieceCache:
    """word -> its backend tokens (ids, word-relative offsets), kept across `encode_documents`
    calls in growing numpy buffers. Bounded: cleared when it holds LIMIT words (memory stays
    flat on any corpus). `key` identifies the backend's vocabulary and added tokens: a change
    starts a new cache. Thread-safe; a pickled or copied tokenizer gets an empty cache."""

    LIMIT = 300_000
    GROUP = 4096

    def __init__(self, key):
        self.key = key
        self.lock = threading.Lock()
        self._clear()

    def __reduce__(self):
        return (PieceCache, (self.key,))

    def _clear(self) -> None:
        self.index: dict[str, int] = {}
        self.count = np.zeros(1024, dtype=np.int64)  # per word: its number of tokens,
        self.first = np.zeros(1024, dtype=np.int64)  # and where they start in ids / rel
        self.ids = np.zeros(4096, dtype=np.int64)
        self.rel = np.zeros((4096, 2), dtype=np.int64)
        self.n_tokens = 0

    def lookup(self, words: list[str], encode) -> tuple[np.ndarray, ...]:
        """(index of every word, count, first, ids, rel) — the arrays as of this call (later calls
        only write past them or replace them). New words are encoded with `encode(words)`; they
        join the index only once encoded, so an interrupted call leaves the cache as it was."""
        with self.lock:
            if len(self.index) + len(words) > self.LIMIT:
                self._clear()
            n0 = len(self.index)
            wid = np.fromiter(map(self.index.get, words, repeat(-1)), dtype=np.int64, count=len(words))  # C-level loop
            new: dict[str, int] = {}
            for j in np.flatnonzero(wid < 0).tolist():
                wid[j] = new.setdefault(words[j], n0 + len(new))
            if new:
                words_new = list(new)
                self._add(n0, words_new, encode(words_new))
                self.index.update(new)
            return wid, self.count, self.first, self.ids, self.rel

    def _add(self, n0: int, words: list[str], encodings) -> None:
        ids: list[int] = []
        rel: list[tuple[int, int]] = []
        count = np.zeros(len(words), dtype=np.int64)
        for j, enc in enumerate(encodings):
            ids += enc.ids
            rel += enc.offsets
            c = np.bincount(np.asarray(enc.word_ids, dtype=np.int64), minlength=min(self.GROUP, len(words) - j * self.GROUP))
            count[j * self.GROUP : j * self.GROUP + len(c)] = c
        n1, t0, t1 = n0 + len(words), self.n_tokens, self.n_tokens + len(ids)
        self.count, self.first = _grow(self.count, n1), _grow(self.first, n1)
        self.ids, self.rel = _grow(self.ids, t1), _grow(self.rel, t1)
        self.count[n0:n1] = count
        self.first[n0:n1] = t0 + np.cumsum(count) - count
        self.ids[t0:t1] = ids
        self.rel[t0:t1] = np.asarray(rel, dtype=np.int64).reshape(-1, 2)
        self.n_tokens = t1


def _grow(a: np.ndarray, n: int) -> np.ndarray:
    """`a` with room for at least n rows (doubling), contents kept."""
    if n <= len(a):
        return a
    out = np.zeros((max(n, 2 * len(a)),) + a.shape[1:], dtype=a.dtype)
    out[: len(a)] = a
    return out


class LazyEncodings(list):
    """The backend's `Encoding`s of a word-cache call, made on first use: the call's one backend
    `encode_batch` (same words, same truncation/padding), run when `word_ids()`, `sequence_ids()`,
    `.encodings` or any other reader first touches them. Until then it only knows its length.
    Pickles and copies as a plain list of the made encodings."""

    def __init__(self, n: int, make):
        super().__init__()
        self._n, self._make, self._lock = n, make, threading.Lock()

    def _filled(self) -> "LazyEncodings":
        if self._make is not None:
            with self._lock:
                if self._make is not None:
                    list.extend(self, self._make())
                    self._make = None
        return self

    def __len__(self) -> int:
        return self._n if self._make is not None else list.__len__(self)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __getitem__(self, i):
        return list.__getitem__(self._filled(), i)

    def __iter__(self):
        return list.__iter__(self._filled())

    def __reversed__(self):
        return list.__reversed__(self._filled())

    def __contains__(self, x) -> bool:
        return list.__contains__(self._filled(), x)

    def __eq__(self, other) -> bool:
        return list.__eq__(self._filled(), other)

    __hash__ = None

    def __repr__(self) -> str:
        return list.__repr__(self._filled())

    def __reduce_ex__(self, protocol):
        return (list, (list(self._filled()),))

    def copy(self) -> list:
        return list(self._filled())


_GC_LOCK = threading.Lock()
_GC_HOLDERS = [0, False]  # calls inside, and whether the collector was on when the first came in


@contextmanager
def gc_paused():
    """CPython's cyclic collector off for the duration of an encoding call (or of the shards stage's
    recipe on a batch). A call allocates ~100k small containers that all live until it returns
    (its output rows, offset tuples): the generational collector then rescans the whole heap again
    and again (on 20,000 NSMC-R reviews 0.55 of the 1.9 CPU-s korbert adds to Kiwi). The code
    inside makes no reference cycles; the collector is back on when the last concurrent call leaves."""
    with _GC_LOCK:
        if _GC_HOLDERS[0] == 0:
            _GC_HOLDERS[1] = gc.isenabled()
            gc.disable()
        _GC_HOLDERS[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_HOLDERS[0] -= 1
            if _GC_HOLDERS[0] == 0 and _GC_HOLDERS[1]:
                gc.enable()


_PAIR_STARTS, _PAIR_LENGTHS = 1024, 16
_PAIRS: list[tuple[int, int]] = []  # (a, a + k) at a * _PAIR_LENGTHS + k, built on first use


def _offset_pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """list(zip(a.tolist(), b.tolist())), with the tuples of short spans near the start of a text
    taken from one shared table instead of made anew: the same values (tuples are immutable), but
    ~20 fewer tracked objects per review for the collector to scan when `gc_paused` ends."""
    global _PAIRS
    k = b - a
    ok = (a < _PAIR_STARTS) & (k >= 0) & (k < _PAIR_LENGTHS)
    n_miss = len(a) - int(np.count_nonzero(ok))
    if n_miss * 4 > len(a):  # mostly far into long texts: plain tuples
        return list(zip(a.tolist(), b.tolist()))
    if not _PAIRS:
        _PAIRS = [(i, i + j) for i in range(_PAIR_STARTS) for j in range(_PAIR_LENGTHS)]
    out = list(map(_PAIRS.__getitem__, np.where(ok, a * _PAIR_LENGTHS + k, 0).tolist()))
    if n_miss:
        miss = np.flatnonzero(~ok)
        for i, x, y in zip(miss.tolist(), a[miss].tolist(), b[miss].tolist()):
            out[i] = (x, y)
    return out
