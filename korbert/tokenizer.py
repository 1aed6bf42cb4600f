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
indices of these words. BatchEncoding's char_to_token / token_to_chars / word_to_chars see the
word-relative coordinates and are not supported: use `offset_mapping`.

Offsets (`return_offsets_mapping=True`) index the string the user passed: never a piece of
whitespace unless the token is a lone "▁", never overlapping, and byte-fallback tokens of one
character all carry that character's span (unknown characters are isolated before the model sees
them, so byte fallback never widens to a word).

Files of a tokenizer folder: tokenizer.json (backend; its pre-tokenizer entry is a placeholder,
since the Kiwi step cannot be serialized), tokenizer_config.json, spm.model (the SentencePiece
model it was built from) and manifest.json (hash, options, training statistics).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.pre_tokenizers import PreTokenizer
from transformers import TokenizersBackend

from corpus_tools.morph import DEFAULT_KIWI, get_kiwi, segment_spans
from corpus_tools.text import nfc, nfc_with_offsets

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4, always
SPACE = "▁"  # U+2581, SentencePiece's whitespace marker
SPM_FILE = "spm.model"
_SPACES = frozenset(c for c in map(chr, range(0x3001)) if c.isspace())  # every str.isspace() char
FORMAT_VERSION = 1


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
        self._special: tuple[tuple[str, ...], re.Pattern | None] = ((), None)

    def special_pattern(self, tokens) -> re.Pattern | None:
        tokens = tuple(tokens)
        if tokens != self._special[0]:
            alts = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))
            self._special = (tokens, re.compile(alts) if alts else None)
        return self._special[1]

    def plan(self, texts: list[str], specials=()) -> tuple[list[list[tuple[int, str, bool]]], list[str]]:
        """Cut special tokens written in the texts out whole. Returns per text its parts
        [(start, chunk, is_special)] and, for Kiwi, every non-special chunk of all texts in order."""
        pattern = self.special_pattern(specials)
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
        plans, plain = self.plan(texts, specials)
        analyses = iter(get_kiwi(0, **self.kiwi_options).tokenize(plain))
        out = []
        for parts in plans:
            words: list[str] = []
            starts: list[int] = []
            for off, chunk, special in parts:
                if special:
                    words.append(chunk)
                    starts.append(off)
                    continue
                morphs = next(analyses)
                spans = segment_spans(chunk, ((m.start, m.end) for m in morphs))
                if self.known.issuperset(chunk):  # common path: no unknown character
                    for a, b in spans:
                        if a and chunk[a - 1].isspace():
                            words.append(SPACE + chunk[a:b])
                            starts.append(off + a - 1)
                        else:
                            words.append(chunk[a:b])
                            starts.append(off + a)
                    continue
                for a, b in self.pieces(chunk, spans):
                    w = chunk[a:b]
                    words.append(SPACE + w[1:] if w[0].isspace() else w)
                    starts.append(off + a)
            out.append({"words": words, "starts": starts})
        return out

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
        super().__init__(tokenizer_file=tokenizer_file, kiwi_options=kiwi_options or dict(DEFAULT_KIWI), **kwargs)
        self.kiwi_options = dict(kiwi_options or DEFAULT_KIWI)
        vocab = self._tokenizer.get_vocab(with_added_tokens=False)
        # Characters that need no isolation: single-char pieces, plus whitespace (it becomes "▁").
        known = frozenset(p for p in vocab if len(p) == 1 and p not in SPECIAL_TOKENS) | _SPACES
        self._segmenter = Segmenter(self.kiwi_options, known)
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
        self._with_placeholder(lambda b: b.save(path))
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

    def _encode_plus(self, text, text_pair=None, **kwargs):
        """NFC + batched Kiwi -> words -> HF's backend call; offsets mapped back to the user's strings."""
        if kwargs.get("is_split_into_words"):
            raise NotImplementedError("KorBertTokenizer segments raw text itself; pass strings, not word lists")
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
        return lambda: self._finish_documents(texts, plans, analyses)

    def _finish_documents(self, texts: list[str], plans: list[list], analyses) -> list[dict]:
        """The rest of `encode_documents`: Kiwi's analyses -> words (as `Segmenter.words` does,
        plus sentences) -> backend -> per-token arrays, computed for the whole batch at once.

        Each word comes from one surface segment, so a token's morpheme (segment) and eojeol are
        those of its word; its sentence is found from where it starts (a token starting on the
        whitespace of a "▁", i.e. at the start of a "▁" word, looks one character right)."""
        import numpy as np

        known, pieces = self._segmenter.known, self._segmenter.pieces
        batch_words: list[list[str]] = []
        w_start: list[int] = []  # per word of the batch: where it starts in its text,
        w_spaced: list[bool] = []  # whether it starts with the "▁" of a whitespace char,
        w_seg: list[int] = []  # its segment (morpheme unit) and eojeol in its document
        w_eoj: list[int] = []
        sent_keys: list[int] = []  # (document << 32) + start of each Kiwi sentence
        first_sent: list[int] = []  # per document: its first entry in sent_keys
        for d, (text, parts) in enumerate(zip(texts, plans)):
            words: list[str] = []
            first_sent.append(len(sent_keys))
            seg = eoj = -1
            for off, chunk, special in parts:
                if special:
                    seg += 1
                    eoj += off == 0 or text[off - 1].isspace()
                    words.append(chunk)
                    w_start.append(off)
                    w_spaced.append(False)
                    w_seg.append(seg)
                    w_eoj.append(eoj)
                    continue
                morphs = next(analyses)
                sent = -1
                for m in morphs:  # a Kiwi sentence starts where its first morpheme does
                    if m.sent_position != sent:
                        sent = m.sent_position
                        sent_keys.append((d << 32) + off + m.start)
                spans = segment_spans(chunk, ((m.start, m.end) for m in morphs))
                plain_chars = known.issuperset(chunk)  # common path: no unknown character
                for a, b in spans:
                    seg += 1
                    if a:  # the segment starts an eojeol when whitespace (or the text's start) precedes it
                        spaced = chunk[a - 1].isspace()
                        eoj += spaced
                    else:
                        spaced = False
                        eoj += off == 0 or text[off - 1].isspace()
                    if plain_chars:
                        words.append(SPACE + chunk[a:b] if spaced else chunk[a:b])
                        w_start.append(off + a - spaced)
                        w_spaced.append(spaced)
                        w_seg.append(seg)
                        w_eoj.append(eoj)
                        continue
                    for pa, pb in pieces(chunk, [(a, b)]):
                        w = chunk[pa:pb]
                        spaced = w[0].isspace()
                        words.append(SPACE + w[1:] if spaced else w)
                        w_start.append(off + pa)
                        w_spaced.append(spaced)
                        w_seg.append(seg)
                        w_eoj.append(eoj)
            batch_words.append(words)
        # HF leaves the last call's truncation/padding set on the backend; whole documents need neither
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        with self._words_mode():
            encodings = self._tokenizer.encode_batch(batch_words, is_pretokenized=True, add_special_tokens=False)
        ids: list[int] = []
        word_ids: list[int] = []
        rel: list[tuple[int, int]] = []
        for enc in encodings:
            ids += enc.ids
            word_ids += enc.word_ids
            rel += enc.offsets
        n_tok = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        doc = np.repeat(np.arange(len(texts), dtype=np.int64), n_tok)
        word_base = np.cumsum([0] + [len(w) for w in batch_words[:-1]], dtype=np.int64)
        word = np.asarray(word_ids, dtype=np.int64) + word_base[doc]
        rel_offsets = np.asarray(rel, dtype=np.int64).reshape(-1, 2)
        offsets = rel_offsets + np.asarray(w_start, dtype=np.int64)[word][:, None]
        start_on_space = np.asarray(w_spaced, dtype=bool)[word] & (rel_offsets[:, 0] == 0)
        key = (doc << 32) + offsets[:, 0] + start_on_space
        sentence = np.searchsorted(np.asarray(sent_keys, dtype=np.int64), key, side="right") - 1 - np.asarray(first_sent, dtype=np.int64)[doc]
        cols = np.empty((4, len(ids)), dtype=np.int32)  # one block per batch; documents get row slices
        cols[0] = ids
        cols[1] = np.maximum(sentence, 0)
        cols[2] = np.asarray(w_seg, dtype=np.int32)[word]
        cols[3] = np.asarray(w_eoj, dtype=np.int32)[word]
        offsets = offsets.astype(np.int32)
        ends = np.cumsum(n_tok).tolist()
        out = []
        for a, b in zip([0] + ends[:-1], ends):
            out.append({"ids": cols[0, a:b], "sentence": cols[1, a:b], "morpheme": cols[2, a:b], "eojeol": cols[3, a:b], "offsets": offsets[a:b]})
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
    # Stands in for the Kiwi step in tokenizer.json. Loading that file without korbert gives
    # eojeol-level, not morpheme-level, tokens: use KorBertTokenizer.from_pretrained.
    return pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="never", split=True)
