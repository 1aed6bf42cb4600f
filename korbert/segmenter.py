"""Texts -> words (pre-tokens) and where each starts: Kiwi's surface segments, with one batched
Kiwi call. The first step of KorBertTokenizer (korbert/tokenizer.py describes the whole route).

A word is a Kiwi surface segment; when whitespace precedes it, that whitespace char is the word's
first char, spelled "▁" (SentencePiece's marker). Characters the vocabulary does not know are
words of their own (their byte-fallback tokens then carry exactly their span); special tokens
written in the text ("[MASK]") are cut out first and stay whole. `Segmenter.batch` computes the
common case with numpy over a whole batch and the rest word by word, by the same rules;
`Segmenter.one` is the plain-Python route for one short string; `Segmenter.pipeline` keeps Kiwi's
threads analysing the next chunks while the caller works on one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate, chain, islice
from operator import attrgetter

import numpy as np

from corpus_tools.morph import analyse_ahead, get_kiwi, segment_spans

SPACE = "▁"  # U+2581, SentencePiece's whitespace marker
SPACES = frozenset(c for c in map(chr, range(0x3001)) if c.isspace())  # every str.isspace() char
_WS_TABLE: np.ndarray | None = None  # str.isspace() over all code points, built on first use
_START, _END, _SENT = attrgetter("start"), attrgetter("end"), attrgetter("sent_position")  # of Kiwi's tokens


@dataclass
class WordBatch:
    """The words of a batch of texts, in order (`Segmenter.batch`). Per word: its document, where
    it starts in that text, whether it starts with the "▁" of a whitespace char, its unit
    (surface segment; a special token is one) and eojeol, both counted from 0 in its document.
    Per document: how many words; and the Kiwi sentences as (document << 32) + start, with each
    document's first entry."""

    words: list[str]
    doc: np.ndarray
    start: np.ndarray
    spaced: np.ndarray
    seg: np.ndarray
    eoj: np.ndarray
    n_words: np.ndarray
    sent_keys: np.ndarray | None
    first_sent: np.ndarray | None


class Segmenter:
    """Texts -> pre-tokens ("words") and where each starts, with one batched Kiwi call.

    A word is a Kiwi surface segment; when whitespace precedes the segment, that whitespace char
    is the word's first char, spelled "▁". Unknown characters (not in the vocabulary) become words
    of their own, so their byte-fallback tokens carry exactly their span. Special tokens written
    in the text ("[MASK]") are cut out first and stay whole.
    """

    def __init__(self, kiwi_options: dict, known_chars: frozenset[str]):
        self.kiwi_options = kiwi_options
        self.known = known_chars
        self._known_table: np.ndarray | None = None
        self._special: tuple[tuple[str, ...], re.Pattern | None] = ((), None)
        self.vectorized = True  # False: `pipeline` sends every text the per-word way (the tests' reference)

    def __getstate__(self) -> dict:
        # the options and the known characters (sorted: the same bytes in every process, which
        # `datasets` hashes); the lookup tables are rebuilt on first use
        return {"kiwi_options": self.kiwi_options, "known": sorted(self.known), "vectorized": self.vectorized}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["kiwi_options"], frozenset(state["known"]))
        self.vectorized = state["vectorized"]

    def _char_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Boolean tables over all code points: whitespace (str.isspace), and the known chars."""
        global _WS_TABLE
        if _WS_TABLE is None:
            table = np.zeros(0x110000, dtype=bool)
            table[[ord(c) for c in SPACES]] = True
            _WS_TABLE = table
        if self._known_table is None:
            table = np.zeros(0x110000, dtype=bool)
            table[[ord(c) for c in self.known if len(c) == 1]] = True
            self._known_table = table
        return _WS_TABLE, self._known_table

    def special_pattern(self, tokens) -> re.Pattern | None:
        tokens = tuple(tokens)
        if tokens != self._special[0]:
            alts = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))
            self._special = (tokens, re.compile(alts) if alts else None)
        return self._special[1]

    def plan(self, texts: list[str], specials=()) -> tuple[list[list[tuple[int, str, bool]]] | None, list[str]]:
        """Cut special tokens written in the texts out whole. Returns per text its parts
        [(start, chunk, is_special)] and, for Kiwi, every non-special chunk of all texts in order.
        When no text spells a special token (the common case), the plans are None: every text is
        one part, and `plain` is `texts` itself."""
        pattern = self.special_pattern(specials)
        if pattern is None or not any(map(pattern.search, texts)):  # C-level scan, no per-text Python
            return None, texts
        plans, plain = [], []
        for text in texts:
            parts, pos = [], 0
            for m in pattern.finditer(text) if pattern else ():
                if m.start() > pos:
                    parts.append((pos, text[pos : m.start()], False))
                parts.append((m.start(), m.group(), True))
                pos = m.end()
            if pos < len(text) or not parts:
                parts.append((pos, text[pos:], False))
            plans.append(parts)
            plain += [chunk for _, chunk, special in parts if not special]
        return plans, plain

    def words(self, texts: list[str], specials=()) -> list[dict]:
        """Per text: {"words", "starts"} (where each word starts in the text)."""
        out = []
        for _, _, b in self.pipeline(texts, specials):
            ends = np.cumsum(b.n_words).tolist()
            starts = b.start.tolist()
            out += [{"words": b.words[a:e], "starts": starts[a:e]} for a, e in zip([0] + ends[:-1], ends)]
        return out

    def pipeline(self, texts: list[str], specials=(), chunks: int = 8, min_chars: int = 4096):
        """`batch` over `texts` in up to `chunks` consecutive chunks (of at least ~`min_chars`
        characters), with Kiwi running ahead: every chunk's texts are queued to Kiwi's worker threads
        before the first is collected, so while the caller works on chunk k in Python, Kiwi analyses
        chunks k+1, k+2, ... Yields (lo, hi, the WordBatch of texts[lo:hi]) (`analyse_ahead`)."""
        kiwi = get_kiwi(0, **self.kiwi_options)
        queued = []
        for lo, hi in chunk_bounds(texts, chunks, min_chars):
            plans, plain = self.plan(texts[lo:hi], specials)
            if len(plain) == 1:  # one string (batch=1): analysed in this thread, no hand-off to the pool
                queued.append((lo, hi, plans, iter([kiwi.tokenize(plain[0])])))
                continue
            queued.append((lo, hi, plans, analyse_ahead(kiwi, plain)))
        for lo, hi, plans, analyses in queued:
            yield lo, hi, self.batch(texts[lo:hi], plans, analyses, self.vectorized, sentences=False)

    def batch(
        self, texts: list[str], plans: list[list] | None, analyses, vectorized: bool = True, sentences: bool = True
    ) -> "WordBatch":
        """Kiwi's analyses of a batch (one per non-special part of `plans`, in order; plans None:
        one per text) -> its words.

        The common part (every character known, Kiwi's spans covering every non-space character
        and none spanning whitespace) is computed with numpy over the whole batch at once; the
        rest (unknown characters, uncovered characters, special tokens) word by word in Python.
        Both follow the same rules (see `segment_spans` and `pieces`); words are ordered by where
        they start, which is increasing through the batch. `vectorized=False` sends every text
        the per-word way (the reference the tests compare the numpy path with). `sentences=False`
        leaves the sentence fields None (the tokenizer's rows do not use them)."""
        ws_table, known_table = self._char_tables()
        lengths = list(map(len, texts))
        tbase_l = [0, *accumulate(lengths)]
        tbase = np.asarray(tbase_l, dtype=np.int64)
        big = "".join(texts)
        cp = np.frombuffer(big.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        is_ws = ws_table[cp]
        wsc = np.zeros(len(cp) + 1, dtype=np.int64)
        np.cumsum(is_ws, out=wsc[1:])
        ukc = np.zeros(len(cp) + 1, dtype=np.int64)
        np.cumsum(~known_table[cp], out=ukc[1:])

        # the parts: specials go to the slow list; chunks collect their Kiwi tokens
        slow_g: list[int] = []  # per slow word: where it starts (batch coordinates), the word,
        slow_w: list[str] = []
        slow_sp: list[bool] = []  # whether it starts with the "▁" of a whitespace char,
        slow_first: list[bool] = []  # whether it is the first word of its unit (segment),
        slow_eoj: list[bool] = []  # whether that unit starts an eojeol, its document
        slow_doc: list[int] = []
        c_gs: list[int] = []
        c_len: list[int] = []
        c_doc: list[int] = []
        c_morphs: list = []
        if plans is None:  # one part per text, no specials
            c_gs, c_len, c_doc = tbase_l[:-1], lengths, list(range(len(texts)))
            c_morphs = list(islice(analyses, len(texts)))
        for d, parts in enumerate(plans or ()):
            tb = tbase_l[d]
            for off, chunk, special in parts:
                if special:
                    slow_g.append(tb + off)
                    slow_w.append(chunk)
                    slow_sp.append(False)
                    slow_first.append(True)
                    slow_eoj.append(off == 0 or texts[d][off - 1].isspace())
                    slow_doc.append(d)
                    continue
                c_gs.append(tb + off)
                c_len.append(len(chunk))
                c_doc.append(d)
                c_morphs.append(next(analyses))
        K = len(c_gs)
        gs = np.asarray(c_gs, dtype=np.int64)
        ge = gs + np.asarray(c_len, dtype=np.int64)
        cdoc = np.asarray(c_doc, dtype=np.int64)
        counts = np.fromiter(map(len, c_morphs), dtype=np.int64, count=K)
        flat = list(chain.from_iterable(c_morphs))
        n = len(flat)
        P = np.repeat(np.arange(K, dtype=np.int64), counts)
        gsP = gs[P]
        S = np.fromiter(map(_START, flat), dtype=np.int64, count=n) + gsP  # map + attrgetter: no Python frame per token
        E = np.fromiter(map(_END, flat), dtype=np.int64, count=n) + gsP

        sent_keys = first_sent = None
        if sentences:  # a Kiwi sentence starts where its first morpheme does
            SP = np.fromiter(map(_SENT, flat), dtype=np.int64, count=n)
            new_sent = np.ones(n, dtype=bool)
            new_sent[1:] = (P[1:] != P[:-1]) | (SP[1:] != SP[:-1])
            sdoc = cdoc[P[new_sent]]
            sent_keys = (sdoc << 32) + S[new_sent] - tbase[sdoc]
            first_sent = np.searchsorted(sdoc, np.arange(len(texts)), side="left")

        # segments: overlapping morphemes merge; zero-length ones neither start nor extend one
        pos = E > S
        Sp, Ep, Pp = S[pos], E[pos], P[pos]
        R = np.maximum.accumulate((Pp << 32) + Ep) if len(Sp) else Ep
        new = np.ones(len(Sp), dtype=bool)
        new[1:] = (Pp[1:] != Pp[:-1]) | ((Pp[1:] << 32) + Sp[1:] >= R[:-1])
        first_idx = np.flatnonzero(new)
        last_idx = np.append(first_idx[1:] - 1, len(Sp) - 1) if len(first_idx) else first_idx
        seg_s, seg_e, seg_p = Sp[first_idx], R[last_idx] & 0xFFFFFFFF, Pp[first_idx]

        # chunks for the slow path: an unknown character, whitespace inside a segment, or a
        # non-space character no segment covers
        bad = (ukc[ge] - ukc[gs]) > 0
        beyond = seg_e > ge[seg_p]  # (Kiwi spans past the chunk: the per-word path copes)
        inside_ws = wsc[np.minimum(seg_e, ge[seg_p])] - wsc[seg_s] > 0
        bad[seg_p[inside_ws | beyond]] = True
        covered = np.bincount(seg_p, weights=seg_e - seg_s, minlength=K)
        bad |= covered != (ge - gs) - (wsc[ge] - wsc[gs])
        if not vectorized:
            bad[:] = True

        keep = ~bad[seg_p]
        fs, fe, fp = seg_s[keep], seg_e[keep], seg_p[keep]
        fdoc = cdoc[fp]
        before_ws = is_ws[np.maximum(fs - 1, 0)]
        spaced = (fs > gs[fp]) & before_ws
        eoj_start = (fs == tbase[fdoc]) | before_ws
        fg = fs - spaced
        fast_w = _substrings(big, cp, fg, fe, spaced)

        if bad.any():
            spans_of = np.cumsum(counts)
            for k in np.flatnonzero(bad).tolist():
                d, a0 = c_doc[k], c_gs[k]
                chunk = big[a0 : a0 + c_len[k]]
                lo, hi = (spans_of[k - 1] if k else 0), spans_of[k]
                spans = segment_spans(chunk, zip((S[lo:hi] - a0).tolist(), (E[lo:hi] - a0).tolist()))
                plain_chars = ukc[a0 + c_len[k]] == ukc[a0]
                at_text_start = a0 == tbase_l[d] or big[a0 - 1].isspace()
                for a, b in spans:
                    e_start = chunk[a - 1].isspace() if a else at_text_start
                    for j, (pa, pb) in enumerate([(a - (a > 0 and chunk[a - 1].isspace()), b)] if plain_chars else self.pieces(chunk, [(a, b)])):
                        w = chunk[pa:pb]
                        sp = w[0].isspace()
                        slow_g.append(a0 + pa)
                        slow_w.append(SPACE + w[1:] if sp else w)
                        slow_sp.append(sp)
                        slow_first.append(j == 0)
                        slow_eoj.append(e_start and j == 0)
                        slow_doc.append(d)

        words = fast_w
        g = fg
        sp_all, first_all, eoj_all, doc_all = spaced, np.ones(len(fg), dtype=bool), eoj_start, fdoc
        if slow_g:
            g = np.concatenate([fg, np.asarray(slow_g, dtype=np.int64)])
            order = np.argsort(g, kind="stable")
            g = g[order]
            both = fast_w + slow_w
            words = [both[i] for i in order.tolist()]
            sp_all = np.concatenate([spaced, np.asarray(slow_sp, dtype=bool)])[order]
            first_all = np.concatenate([first_all, np.asarray(slow_first, dtype=bool)])[order]
            eoj_all = np.concatenate([eoj_start, np.asarray(slow_eoj, dtype=bool)])[order]
            doc_all = np.concatenate([fdoc, np.asarray(slow_doc, dtype=np.int64)])[order]
        # units (segments) and eojeols, counted from 0 in each document
        w_first = np.searchsorted(doc_all, np.arange(len(texts)), side="left")
        U = np.zeros(len(g) + 1, dtype=np.int64)
        np.cumsum(first_all, out=U[1:])
        Q = np.zeros(len(g) + 1, dtype=np.int64)
        np.cumsum(first_all & eoj_all, out=Q[1:])
        base_u, base_q = U[w_first][doc_all], Q[w_first][doc_all]
        return WordBatch(
            words=words,
            doc=doc_all,
            start=g - tbase[doc_all],
            spaced=sp_all,
            seg=(U[1:] - 1 - base_u).astype(np.int32),
            eoj=(Q[1:] - 1 - base_q).astype(np.int32),
            n_words=np.bincount(doc_all, minlength=len(texts)),
            sent_keys=sent_keys,
            first_sent=first_sent,
        )

    def one(self, text: str, specials=()) -> tuple[list[str], list[int], list[bool]] | None:
        """The words of one text (no special token in it), where each starts, and whether it starts
        with the "▁" of a whitespace char: `batch`'s per-word path in plain Python, with Kiwi run in
        this thread, for one short string per call (no numpy: its fixed cost per call would exceed
        the work). None when the text spells a special token (then `pipeline` takes it)."""
        pattern = self.special_pattern(specials)
        if pattern is not None and pattern.search(text):
            return None
        kiwi = get_kiwi(0, **self.kiwi_options)
        spans = segment_spans(text, [(t.start, t.end) for t in kiwi.tokenize(text)])
        words: list[str] = []
        starts: list[int] = []
        spaced: list[bool] = []
        if self.known.issuperset(text):  # every character known: a word per segment
            for a, b in spans:
                sp = a > 0 and text[a - 1].isspace()
                words.append(SPACE + text[a:b] if sp else text[a:b])
                starts.append(a - sp)
                spaced.append(sp)
        else:
            for a, b in self.pieces(text, spans):
                w = text[a:b]
                sp = w[0].isspace()
                words.append(SPACE + w[1:] if sp else w)
                starts.append(a)
                spaced.append(sp)
        return words, starts, spaced

    def pieces(self, text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Word spans when `text` holds unknown characters: each segment, extended one char to the
        left when whitespace precedes it (that char becomes the "▁"), with every unknown character
        split off as a word of its own."""
        out = []
        for a, b in spans:
            space = a > 0 and text[a - 1].isspace()
            start = a
            for i in range(a, b + 1):
                if i < b and text[i] in self.known:
                    continue
                if start < i:
                    out.append((start - 1 if space else start, i))
                elif space and i < b:  # "▁" before an unknown char stands alone
                    out.append((start - 1, start))
                space = False
                if i < b:
                    out.append((i, i + 1))
                start = i + 1
        return out


class KiwiPreTokenizer:
    """The same segmentation as a `tokenizers` pre-tokenizer, for code that calls the backend
    directly (`tok.backend_tokenizer.encode(text)`). KorBertTokenizer's own calls bypass it: they
    hand the backend ready words, which avoids a Python callback per text inside Rust threads."""

    def __init__(self, segmenter: Segmenter):
        self.segmenter = segmenter

    def split(self, _: int, normalized) -> list:
        text = str(normalized)
        (seg,) = self.segmenter.words([text])
        for ws in {c for c in text if c.isspace()}:  # one char for one char: positions stay
            normalized.replace(ws, SPACE)
        return [normalized[a : a + len(w)] for w, a in zip(seg["words"], seg["starts"])]

    def pre_tokenize(self, pretok) -> None:
        pretok.split(self.split)


_WORD_WIDTH = 12  # words up to this many characters are made by numpy (`_substrings`)


def _substrings(big: str, cp: np.ndarray, a: np.ndarray, b: np.ndarray, spaced: np.ndarray) -> list[str]:
    """[big[a:b] for each span], with the first character spelled "▁" where `spaced` (it is a
    whitespace char; the rest of a span holds none). Spans of up to _WORD_WIDTH characters come
    from numpy arrays of fixed-width strings (`cp` = big's code points), whose `tolist()` makes
    them in C where slicing would run a Python loop. A fixed-width string loses trailing NULs, so
    a span ending in U+0000 is sliced, as are longer spans and every span of a text holding
    surrogate code points."""
    n = len(a)
    lens = b - a
    words: list[str] = []
    if n == 0 or ((cp >= 0xD800) & (cp < 0xE000)).any():
        slow = np.ones(n, dtype=bool)
        words = [""] * n
    else:
        width = min(int(lens.max()), _WORD_WIDTH)
        windows = np.lib.stride_tricks.sliding_window_view(np.concatenate((cp, np.zeros(width, dtype=np.uint32))), width)
        cols = np.arange(width)
        for i in range(0, n, 1 << 16):  # blocks: bounded memory on long documents
            chars = windows[a[i : i + (1 << 16)]]  # a copy: [span, width]
            chars[cols >= lens[i : i + (1 << 16), None]] = 0
            chars[spaced[i : i + (1 << 16)], 0] = ord(SPACE)
            words += chars.view(f"<U{width}").ravel().tolist()
        slow = (lens > width) | (cp[b - 1] == 0)
    if slow.any():
        for i, x, y, sp in zip(*(v.tolist() for v in (np.flatnonzero(slow), a[slow], b[slow], spaced[slow]))):
            words[i] = SPACE + big[x + 1 : y] if sp else big[x:y]
    return words


def chunk_bounds(texts: list[str], chunks: int, min_chars: int) -> list[tuple[int, int]]:
    """Up to `chunks` consecutive (lo, hi) ranges of about equal characters, each of at least
    ~min_chars (one range for a short batch)."""
    n = len(texts)
    if n == 0:
        return [(0, 0)]
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=n))
    k = int(max(1, min(chunks, n, ends[-1] // max(min_chars, 1))))
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, k) / k, side="left") + 1
    bounds = sorted(set(np.clip(cuts, 1, n - 1).tolist())) if k > 1 else []
    return list(zip([0] + bounds, bounds + [n]))
