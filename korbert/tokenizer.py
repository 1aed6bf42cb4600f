"""KorBertTokenizer: Kiwi morphemes + a SentencePiece vocabulary, as a transformers fast tokenizer.

How a text becomes tokens:

    "나는 학교에 갔다"                      the user's string (any normalization form)
      -> NFC (Python; offsets mapped back exactly, see corpus_tools.text.nfc_with_offsets)
      -> Kiwi surface segments              나 | 는 | 학교 | 에 | 갔다
      -> pre-tokens: a segment that follows whitespace takes that whitespace char as "▁"
                                            나 | 는 | ▁학교 | 에 | ▁갔다
      -> SentencePiece pieces (Unigram Viterbi, or BPE), byte fallback for unknown chars
      -> [CLS] ... [SEP] (pairs: [CLS] A [SEP] B [SEP], token type ids 0/1)

The backend is a real `tokenizers` Tokenizer, so truncation, padding, stride/overflow,
`overflow_to_sample_mapping`, `sequence_ids()` and `word_ids()` are Hugging Face's own code and
behave exactly as for any fast tokenizer. korbert computes the words (pre-tokens) itself, with one
multi-threaded Kiwi call per batch, and hands them to the backend as pretokenized input; the
backend's word-relative offsets are then mapped back to the user's strings. (A Python pre-tokenizer
inside Rust's threads costs a GIL round trip per text: on 10,000 NSMC-R reviews the backend step
took 1.06 s that way against 0.19 s with ready words.) `word_ids()` are
indices of these words.

Speed (benchmarks/tokenizer_throughput.py; Kiwi's analysis is the limit): a batch is cut into
chunks, all queued to Kiwi's worker threads at once, and Python finishes chunk k while Kiwi
analyses the next ones (`Segmenter.pipeline`). For one sequence per row without overflow windows,
the rows come from a cache of each distinct word's tokens (`_PieceCache`), assembled with numpy;
the backend's `Encoding`s are made only if something asks for them (`_LazyEncodings`); one short
string per call takes the same rules in plain Python (`Segmenter.one`, `_row_one`: numpy's fixed
cost per call would exceed the work). Pairs and
stride/overflow windows take HF's own backend call with the same words. BatchEncoding's char_to_token / token_to_chars / word_to_chars see the
word-relative coordinates and are not supported: use `offset_mapping`.

Offsets (`return_offsets_mapping=True`) index the string the user passed: never a piece of
whitespace unless the token is a lone "▁", never overlapping, and byte-fallback tokens of one
character all carry that character's span (unknown characters are isolated before the model sees
them, so byte fallback never widens to a word).

Files of a tokenizer folder: tokenizer.json (backend; its pre-tokenizer entry is a placeholder,
since the Kiwi step cannot be serialized), tokenizer_config.json, spm.model (the SentencePiece
model it was built from) and manifest.json (hash, options, training statistics).

The placeholder is a guard: its Metaspace `replacement` is the sentence `GUARD` instead of one
character, so a loader that would silently split eojeols instead of morphemes (plain `tokenizers`,
or transformers' generic `TokenizersBackend` fallback when korbert is not imported and
`trust_remote_code` is not given) refuses the file and quotes how to load it. This class swaps the
guard for "▁" when it reads the file (`_read_backend`); the fingerprint hashes the plain placeholder,
so folders saved before the guard keep their hash.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import threading
from bisect import bisect_left
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass
from itertools import accumulate, chain, islice, repeat
from operator import attrgetter
from typing import Any

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.pre_tokenizers import PreTokenizer
from transformers import TokenizersBackend
from transformers.tokenization_utils_base import BatchEncoding, PaddingStrategy, TruncationStrategy

from corpus_tools.morph import DEFAULT_KIWI, get_kiwi, segment_spans
from corpus_tools.text import nfc, nfc_with_offsets

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4, always
SPACE = "▁"  # U+2581, SentencePiece's whitespace marker
SPM_FILE = "spm.model"
_SPACES = frozenset(c for c in map(chr, range(0x3001)) if c.isspace())  # every str.isspace() char
FORMAT_VERSION = 1
GUARD = (
    "This is a korbert tokenizer (Kiwi morphemes); a generic tokenizer would split it differently. Load it with "
    "`import korbert` before AutoTokenizer.from_pretrained(folder), or with AutoTokenizer.from_pretrained(folder, "
    "trust_remote_code=True) (pipeline(..., trust_remote_code=True))"
)
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

    def _char_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Boolean tables over all code points: whitespace (str.isspace), and the known chars."""
        global _WS_TABLE
        if _WS_TABLE is None:
            table = np.zeros(0x110000, dtype=bool)
            table[[ord(c) for c in _SPACES]] = True
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
        chunks k+1, k+2, ... Yields (lo, hi, the WordBatch of texts[lo:hi]).

        Kiwi's iterable API by itself keeps only `num_workers * 16` texts in flight, so the texts
        go in as calls of at most that many: each call queues all of its texts at once."""
        kiwi = get_kiwi(0, **self.kiwi_options)
        step = max(1, kiwi.num_workers * 16)
        queued = []
        for lo, hi in _chunk_bounds(texts, chunks, min_chars):
            plans, plain = self.plan(texts[lo:hi], specials)
            if len(plain) == 1:  # one string (batch=1): analysed in this thread, no hand-off to the pool
                queued.append((lo, hi, plans, [[kiwi.tokenize(plain[0])]]))
                continue
            queued.append((lo, hi, plans, [kiwi.tokenize(plain[i : i + step]) for i in range(0, len(plain), step)]))
        for lo, hi, plans, calls in queued:
            yield lo, hi, self.batch(texts[lo:hi], plans, chain.from_iterable(calls), self.vectorized, sentences=False)

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


class KorBertTokenizer(TokenizersBackend):
    """A transformers fast tokenizer for korbert (see the module docstring)."""

    vocab_files_names = {"tokenizer_file": "tokenizer.json"}
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(self, tokenizer_file: str | None = None, kiwi_options: dict | None = None, **kwargs):
        for name, tok in zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"), SPECIAL_TOKENS):
            kwargs.setdefault(name, tok)
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        if tokenizer_file is not None and "tokenizer_object" not in kwargs:
            self._tokenizer = _read_backend(tokenizer_file)  # the base class keeps a backend set before its __init__
            tokenizer_file = None
        super().__init__(tokenizer_file=tokenizer_file, kiwi_options=kiwi_options or dict(DEFAULT_KIWI), **kwargs)
        self.kiwi_options = dict(kiwi_options or DEFAULT_KIWI)
        vocab = self._tokenizer.get_vocab(with_added_tokens=False)
        # Characters that need no isolation: single-char pieces, plus whitespace (it becomes "▁").
        known = frozenset(p for p in vocab if len(p) == 1 and p not in SPECIAL_TOKENS) | _SPACES
        self._segmenter = Segmenter(self.kiwi_options, known)
        self._piece_cache: _PieceCache | None = None
        self._tokenizer.pre_tokenizer = PreTokenizer.custom(KiwiPreTokenizer(self._segmenter))

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *args, **kwargs) -> "KorBertTokenizer":
        """Load a tokenizer folder (written by `korbert vocab` or `save_pretrained`). Local only:
        korbert never downloads at run time."""
        if not Path(folder, "tokenizer.json").is_file():
            raise FileNotFoundError(f"{folder}: not a korbert tokenizer folder (no tokenizer.json)")
        kwargs.setdefault("local_files_only", True)
        return super().from_pretrained(str(folder), *args, **kwargs)

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        # transformers rebuilds subclasses' backends from the bare vocabulary list, which would drop
        # byte fallback, the [UNK] id and the decoder: load tokenizer.json exactly as saved instead.
        if not kwargs.get("tokenizer_file") or not os.path.isfile(kwargs["tokenizer_file"]):
            raise FileNotFoundError(f"{kwargs.get('name_or_path', '?')}: no tokenizer.json (not a korbert tokenizer folder)")
        return dict(kwargs)

    @classmethod
    def from_spm(
        cls, spm_path: str | os.PathLike, model_type: str = "unigram", kiwi_options: dict | None = None
    ) -> "KorBertTokenizer":
        """Build the tokenizer from a SentencePiece model (`model_type` unigram or bpe) trained by
        `corpus_tools.vocab`."""
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(spm_path))
        for i, tok in enumerate(SPECIAL_TOKENS):
            if sp.id_to_piece(i) != tok:
                raise ValueError(f"{spm_path}: id {i} is {sp.id_to_piece(i)!r}, expected {tok!r}")
        n = sp.get_piece_size()
        pieces = [sp.id_to_piece(i) for i in range(n)]
        if model_type == "bpe":
            vocab = {p: i for i, p in enumerate(pieces)}
            model = models.BPE(vocab=vocab, merges=_bpe_merges(sp), unk_token="[UNK]", byte_fallback=True, fuse_unk=False)
        else:
            # Control, unused and byte pieces must never win the Viterbi search on their own
            # spelling (a text containing "<0x41>"); byte fallback finds them by name.
            never = -1e9
            vocab = [
                (p, never if (sp.is_control(i) or sp.is_unused(i) or sp.is_byte(i)) else sp.get_score(i))
                for i, p in enumerate(pieces)
            ]
            model = models.Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=True)
        backend = Tokenizer(model)
        backend.pre_tokenizer = _placeholder_pre_tokenizer()
        backend.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
        cls_id, sep_id = sp.piece_to_id("[CLS]"), sp.piece_to_id("[SEP]")
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
        )
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
        tok = cls(tokenizer_object=backend, kiwi_options=kiwi_options)
        tok._spm_path = str(spm_path)
        return tok

    # -- identity --------------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """sha256 of everything that decides the ids: vocabulary, scores/merges, specials, Kiwi options.

        Shards and models record it; a stage refuses input made with another tokenizer.
        """
        state = json.loads(self._with_placeholder(lambda b: b.to_str()))
        state.pop("truncation", None)
        state.pop("padding", None)
        ident = {"format": FORMAT_VERSION, "backend": state, "kiwi": self.kiwi_options}
        return hashlib.sha256(json.dumps(ident, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    # -- saving ----------------------------------------------------------------------------------

    def _with_placeholder(self, fn):
        """Run fn(backend) with the Kiwi step swapped for a serializable placeholder."""
        custom = self._tokenizer.pre_tokenizer
        self._tokenizer.pre_tokenizer = _placeholder_pre_tokenizer()
        try:
            return fn(self._tokenizer)
        finally:
            self._tokenizer.pre_tokenizer = custom

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        path = os.path.join(str(save_directory), (filename_prefix + "-" if filename_prefix else "") + "tokenizer.json")
        Path(path).write_text(guarded_json(self._with_placeholder(lambda b: b.to_str())), encoding="utf-8")
        spm_src = getattr(self, "_spm_path", None) or _existing(self.name_or_path, SPM_FILE)
        out = (path,)
        if spm_src and Path(spm_src).resolve() != Path(save_directory, SPM_FILE).resolve():
            Path(save_directory, SPM_FILE).write_bytes(Path(spm_src).read_bytes())
            out += (str(Path(save_directory, SPM_FILE)),)
        return file_names + out

    # -- encoding ----------------------------------------------------------------------------------

    @contextmanager
    def _words_mode(self):
        """The backend takes ready words (is_pretokenized): no pre-tokenizer runs inside Rust."""
        custom = self._tokenizer.pre_tokenizer
        self._tokenizer.pre_tokenizer = None
        try:
            yield
        finally:
            self._tokenizer.pre_tokenizer = custom

    # kwargs of HF's `_encode_plus` the word-cache path knows; any other goes HF's way
    _FAST_KWARGS = frozenset({
        "add_special_tokens", "padding_strategy", "truncation_strategy", "max_length", "stride", "is_split_into_words",
        "pad_to_multiple_of", "padding_side", "return_tensors", "return_token_type_ids", "return_attention_mask",
        "return_overflowing_tokens", "return_special_tokens_mask", "return_offsets_mapping", "return_length",
        "verbose", "split_special_tokens",
    })  # fmt: skip
    _fast_path = True  # False: every call goes HF's way (the reference the tests compare with)

    def _encode_plus(self, text, text_pair=None, **kwargs):
        """NFC -> Kiwi, pipelined over chunks of the batch (`Segmenter.pipeline`) -> words -> tokens;
        offsets mapped back to the user's strings.

        Two ways to one output. Calls with one sequence per row and no overflow windows (what
        `datasets.map`, feature extraction and the embedding tools send) take the word cache: every
        distinct word's tokens come from `_PieceCache`, rows are assembled with numpy chunk by chunk
        while Kiwi analyses the next chunk, and the backend's `Encoding`s (behind `word_ids()`,
        `sequence_ids()`, `.encodings`) are only made when first asked for (`_LazyEncodings`).
        Pairs, stride/overflow windows and split_special_tokens go through HF's own backend call
        with ready words (`_encode_with_backend`)."""
        if kwargs.get("is_split_into_words"):
            raise NotImplementedError("KorBertTokenizer segments raw text itself; pass strings, not word lists")
        with gc_paused():
            fast = self._fast_options(text, text_pair, kwargs)
            if fast is not None:
                return self._encode_fast(text, kwargs, *fast)
            return self._encode_with_backend(text, text_pair, kwargs)

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

    def _word_cache(self) -> "_PieceCache":
        """The word cache for the backend's current vocabulary and added tokens."""
        key = (self._tokenizer.get_vocab_size(with_added_tokens=True), repr(self._tokenizer.get_added_tokens_decoder()))
        cache = self._piece_cache
        if cache is None or cache.key != key:
            cache = self._piece_cache = _PieceCache(key)
        return cache

    _ONE_MAX_CHARS = 2000  # one string per call up to this long: `_row_one`, not numpy

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

        out = BatchEncoding(data, _LazyEncodings(len(ids_rows), make_encodings), n_sequences=1)
        if not batched:
            out = BatchEncoding(
                {k: (v[0] if len(v) > 0 and isinstance(v[0], list) else v) for k, v in out.items()}, out.encodings, n_sequences=1
            )
        tensors = kw.get("return_tensors")
        if tensors is not None:  # one text stays a batch of one, as in HF (pipelines rely on it)
            out.convert_to_tensors(tensors, prepend_batch_axis=not batched)
        return out

    def _encode_with_backend(self, text, text_pair, kwargs: dict):
        """HF's own backend call with ready words; offsets mapped back to the user's strings."""
        batched = isinstance(text, (list, tuple))
        norm_a = [nfc_with_offsets(t) for t in (text if batched else [text])]
        norm_b = [nfc_with_offsets(t) for t in (text_pair if batched else [text_pair])] if text_pair is not None else []
        segs = self._segmenter.words([n for n, _, _ in norm_a + norm_b], self.added_tokens_encoder)
        seg_a, seg_b = segs[: len(norm_a)], segs[len(norm_a) :]
        words_a = [s["words"] for s in seg_a]
        words_b = [s["words"] for s in seg_b] if text_pair is not None else None
        tensors = kwargs.pop("return_tensors", None)
        kwargs["is_split_into_words"] = True
        with self._words_mode():
            out = super()._encode_plus(
                words_a if batched else words_a[0],
                (words_b if batched else words_b[0]) if words_b is not None else None,
                **kwargs,
            )
        if kwargs.get("return_offsets_mapping"):
            self._fix_offsets(out, (norm_a, seg_a), (norm_b, seg_b))
        if tensors is not None:  # one text stays a batch of one, as in HF (pipelines rely on it)
            single = not batched and not kwargs.get("return_overflowing_tokens")
            out.convert_to_tensors(tensors, prepend_batch_axis=single)
        return out

    def _fix_offsets(self, out, side_a, side_b) -> None:
        """Word-relative backend offsets -> offsets in the user's original strings."""
        rows = out["offset_mapping"]
        single = bool(rows) and isinstance(rows[0], tuple)
        rows = [rows] if single else rows
        samples = out.get("overflow_to_sample_mapping", range(len(rows)))
        fixed = []
        for offsets, enc, sample in zip(rows, out.encodings, samples):
            sides = [(*norms[sample], segs[sample]["starts"]) for norms, segs in (side_a, side_b) if norms]
            new = []
            for (a, b), seq, w in zip(offsets, enc.sequence_ids, enc.word_ids):
                if w is None:  # [CLS], [SEP], padding
                    new.append((a, b))
                    continue
                text, starts, ends, word_starts = sides[seq]
                base = word_starts[w]
                a, b = base + a, base + b
                if b - a > 1 and text[a].isspace():  # "▁word": the "▁" is the preceding space
                    a += 1
                if starts is not None:  # NFC -> original (NFD input)
                    a, b = starts[a], ends[b - 1]
                new.append((a, b))
            fixed.append(new)
        out["offset_mapping"] = fixed[0] if single else fixed

    def encode_documents(self, texts: list[str]) -> list[dict]:
        """Corpus-scale encoding: one Kiwi pass gives sentences *and* morphemes, then the backend.

        Texts should be cleaned (NFC) already. Returns, per text, numpy int32 arrays over its
        tokens (no [CLS]/[SEP]): `ids`; `sentence` (index of the Kiwi sentence a token belongs
        to); `morpheme` and `eojeol` (unit indices, for whole-morpheme / whole-eojeol masking;
        a lone "▁" belongs to the unit after it); `offsets` (n, 2) into the text.
        The same ids as `tok(text, add_special_tokens=False)`. `encode_documents_async` is the
        same in two steps, for callers that pipeline batches.
        """
        return self.encode_documents_async(texts)()

    def encode_documents_async(self, texts: list[str]):
        """`encode_documents` in two steps: this call hands every text to Kiwi's worker threads
        and returns at once; calling the returned function collects the analyses, finishes the
        encoding and returns what `encode_documents(texts)` returns.

        A caller that starts batch k+1 before finishing batch k keeps Kiwi analysing while
        Python works on batch k (the shards stage does). Kiwi's iterable API by itself keeps
        only `num_workers * 16` texts in flight, so the texts go in as that many calls of at
        most that size: each call queues all of its texts at once.
        """
        from itertools import chain

        texts = [nfc(t) for t in texts]
        plans, plain = self._segmenter.plan(texts, self.added_tokens_encoder)  # special tokens stay whole
        kiwi = get_kiwi(0, **self.kiwi_options)
        step = max(1, kiwi.num_workers * 16)
        queued = [kiwi.tokenize(plain[i : i + step]) for i in range(0, len(plain), step)]  # sentences: sent_position
        analyses = chain.from_iterable(queued)

        def finish() -> list[dict]:
            with gc_paused():
                return self._finish_documents(texts, plans, analyses)

        return finish

    def _encode_words(self, words: list[str]) -> list:
        """Words -> the backend's encodings (one per group of up to 4096 words)."""
        # HF leaves the last call's truncation/padding (and split_special_tokens) set on the backend
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        split_specials = self._tokenizer.encode_special_tokens
        self._tokenizer.encode_special_tokens = False  # a special token written in the text stays whole
        try:
            with self._words_mode():
                return self._tokenizer.encode_batch(
                    [words[i : i + _PieceCache.GROUP] for i in range(0, len(words), _PieceCache.GROUP)],
                    is_pretokenized=True,
                    add_special_tokens=False,
                )
        finally:
            self._tokenizer.encode_special_tokens = split_specials

    def _finish_documents(self, texts: list[str], plans: list[list], analyses) -> list[dict]:
        """The rest of `encode_documents`: Kiwi's analyses -> words (`Segmenter.batch`) ->
        backend -> per-token arrays, computed for the whole batch at once.

        Each distinct word goes to the backend once (a word's pieces do not depend on its
        neighbours) and is remembered across batches (`_PieceCache`); its tokens are then
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


class _LazyEncodings(list):
    """The backend's `Encoding`s of a word-cache call, made on first use: the call's one backend
    `encode_batch` (same words, same truncation/padding), run when `word_ids()`, `sequence_ids()`,
    `.encodings` or any other reader first touches them. Until then it only knows its length.
    Pickles and copies as a plain list of the made encodings."""

    def __init__(self, n: int, make):
        super().__init__()
        self._n, self._make, self._lock = n, make, threading.Lock()

    def _filled(self) -> "_LazyEncodings":
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


def _chunk_bounds(texts: list[str], chunks: int, min_chars: int) -> list[tuple[int, int]]:
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


class _PieceCache:
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
        return (_PieceCache, (self.key,))

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


def _existing(folder: Any, name: str) -> str | None:
    p = Path(str(folder), name) if folder else None
    return str(p) if p and p.is_file() else None


def _bpe_merges(sp) -> list[tuple[str, str]]:
    """Merge rules of a SentencePiece BPE model: every split of a normal piece into two pieces,
    ordered by the merged piece's rank (SentencePiece lists BPE pieces in merge order)."""
    special = (sp.is_unknown, sp.is_control, sp.is_unused, sp.is_byte)
    normal = {sp.id_to_piece(i): i for i in range(sp.get_piece_size()) if not any(f(i) for f in special)}
    ranked = []
    for piece, rank in normal.items():
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in normal and b in normal:
                ranked.append((rank, normal[a], normal[b], a, b))
    return [(a, b) for *_, a, b in sorted(ranked)]


def _placeholder_pre_tokenizer():
    # Stands in for the Kiwi step in the fingerprint, and (guarded) in tokenizer.json.
    return pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)


def guarded_json(backend_json: str) -> str:
    """tokenizer.json text whose placeholder pre-tokenizer carries `GUARD` (see the module doc)."""
    state = json.loads(backend_json)
    if (state.get("pre_tokenizer") or {}).get("type") != "Metaspace":
        raise ValueError("tokenizer.json: expected korbert's Metaspace placeholder pre-tokenizer")
    state["pre_tokenizer"]["replacement"] = GUARD
    return json.dumps(state, ensure_ascii=False, indent=2) + "\n"


def _read_backend(path: str | os.PathLike) -> Tokenizer:
    """Load tokenizer.json, guarded (GUARD) or saved before the guard existed."""
    state = json.loads(Path(path).read_text(encoding="utf-8"))
    pre = state.get("pre_tokenizer") or {}
    if pre.get("type") == "Metaspace" and pre.get("replacement") == GUARD:
        pre["replacement"] = SPACE
    return Tokenizer.from_str(json.dumps(state, ensure_ascii=False))
