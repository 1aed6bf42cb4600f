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

Three files, one step each: korbert/segmenter.py (Kiwi -> words), korbert/word_cache.py (words ->
token rows from each distinct word's cached tokens), and this file (the transformers class: load,
save, the guard, building from SentencePiece, and which route a call takes).

Speed (benchmarks/tokenizer_throughput.py; Kiwi's analysis is the limit): a batch is cut into
chunks, all queued to Kiwi's worker threads at once, and Python finishes chunk k while Kiwi
analyses the next ones (`Segmenter.pipeline`). For one sequence per row without overflow windows,
the rows come from a cache of each distinct word's tokens (`word_cache.PieceCache`), assembled
with numpy; the backend's `Encoding`s are made only if something asks for them
(`word_cache.LazyEncodings`); one short string per call takes the same rules in plain Python
(`Segmenter.one`, `CachedEncoding._row_one`: numpy's fixed cost per call would exceed the work). Pairs
and stride/overflow windows take HF's own backend call with the same words. BatchEncoding's
char_to_token / token_to_chars / word_to_chars see the word-relative coordinates and are not
supported: use `offset_mapping`.

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

Pickle and deepcopy (`datasets` hashes the tokenizer to key `Dataset.map`'s cache and sends it to
`num_proc` workers): the backend sits in a `_Backend` holder that pickles as its JSON with the
placeholder and puts the Kiwi step back when loaded. A model folder's tokenizer_config.json names
`model_max_length` (korbert.checkpoint.export); for one exported before that, `from_pretrained`
takes `folder_max_length` (the trained positions, else max_position_embeddings).
"""


from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.pre_tokenizers import PreTokenizer
from transformers import TokenizersBackend

from corpus_tools.morph import DEFAULT_KIWI, analyse_ahead, get_kiwi
from corpus_tools.text import nfc, nfc_with_offsets
from korbert.segmenter import SPACE, SPACES, KiwiPreTokenizer, Segmenter
from korbert.word_cache import CachedEncoding, PieceCache, gc_paused

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4, always
SPM_FILE = "spm.model"
FORMAT_VERSION = 1
GUARD = (
    "This is a korbert tokenizer (Kiwi morphemes); a generic tokenizer would split it differently. Load it with "
    "`import korbert` before AutoTokenizer.from_pretrained(folder), or with AutoTokenizer.from_pretrained(folder, "
    "trust_remote_code=True) (pipeline(..., trust_remote_code=True))"
)


class KorBertTokenizer(CachedEncoding, TokenizersBackend):
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
        known = frozenset(p for p in vocab if len(p) == 1 and p not in SPECIAL_TOKENS) | SPACES
        self._segmenter = Segmenter(self.kiwi_options, known)
        self.__dict__["_backend"] = _Backend(self._tokenizer, self._segmenter)  # attaches the Kiwi step

    # The backend lives in a `_Backend` holder, which pickles where a backend with a Python
    # pre-tokenizer cannot; transformers' code reads and sets `self._tokenizer` as usual.
    @property
    def _tokenizer(self) -> Tokenizer | None:
        holder = self.__dict__.get("_backend")
        return None if holder is None else holder.tokenizer

    @_tokenizer.setter
    def _tokenizer(self, backend: Tokenizer) -> None:
        self.__dict__["_backend"] = _Backend(backend, self.__dict__.get("_segmenter"))

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *args, **kwargs) -> "KorBertTokenizer":
        """Load a tokenizer folder (written by `korbert vocab` or `save_pretrained`). Local only:
        korbert never downloads at run time."""
        if not Path(folder, "tokenizer.json").is_file():
            raise FileNotFoundError(f"{folder}: not a korbert tokenizer folder (no tokenizer.json)")
        named = _tokenizer_class(folder)
        if named not in (None, "KorBertTokenizer"):  # e.g. the plain kind: its own pre-tokenizer, not Kiwi's
            raise ValueError(f"{folder}: a {named} folder, not a korbert (Kiwi) tokenizer: load it with AutoTokenizer")
        kwargs.setdefault("local_files_only", True)
        if "model_max_length" not in kwargs and _saved_max_length(folder) is None:
            length = folder_max_length(folder)  # a model folder exported before korbert wrote its length
            if length is not None:
                kwargs["model_max_length"] = length
        tok = super().from_pretrained(str(folder), *args, **kwargs)
        _warn_other_kiwi(folder)
        return tok

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        # transformers rebuilds subclasses' backends from the bare vocabulary list, which would drop
        # byte fallback, the [UNK] id and the decoder: load tokenizer.json exactly as saved instead.
        if not kwargs.get("tokenizer_file") or not os.path.isfile(kwargs["tokenizer_file"]):
            raise FileNotFoundError(f"{kwargs.get('name_or_path', '?')}: no tokenizer.json (not a korbert tokenizer folder)")
        return dict(kwargs)

    @classmethod
    def from_spm(
        cls, spm_path: str | os.PathLike, model_type: str = "unigram", kiwi_options: dict | None = None,
        attached: dict[str, float] | None = None,
    ) -> "KorBertTokenizer":
        """Build the tokenizer from a SentencePiece model (`model_type` unigram or bpe) trained by
        `corpus_tools.vocab`. `attached` (unigram): word-start pieces ("▁" + a piece) appended after
        the model's own, with their scores, and "▁" chosen on its own only where no such piece starts
        the word (the morpheme-attached kind: corpus_tools.vocab.attach_markers)."""
        backend = spm_backend(Path(spm_path).read_bytes(), model_type, attached, where=str(spm_path))
        backend.pre_tokenizer = _placeholder_pre_tokenizer()
        backend.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
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

    def _encode_plus(self, text, text_pair=None, **kwargs):
        """NFC -> Kiwi, pipelined over chunks of the batch (`Segmenter.pipeline`) -> words -> tokens;
        offsets mapped back to the user's strings.

        Two ways to one output. Calls with one sequence per row and no overflow windows (what
        `datasets.map`, feature extraction and the embedding tools send) take the word cache: every
        distinct word's tokens come from `PieceCache`, rows are assembled with numpy chunk by chunk
        while Kiwi analyses the next chunk, and the backend's `Encoding`s (behind `word_ids()`,
        `sequence_ids()`, `.encodings`) are only made when first asked for (`word_cache.LazyEncodings`).
        Pairs, stride/overflow windows and split_special_tokens go through HF's own backend call
        with ready words (`_encode_with_backend`)."""
        if kwargs.get("is_split_into_words"):
            raise NotImplementedError("KorBertTokenizer segments raw text itself; pass strings, not word lists")
        with gc_paused():
            fast = self._fast_options(text, text_pair, kwargs)
            if fast is not None:
                return self._encode_fast(text, kwargs, *fast)
            return self._encode_with_backend(text, text_pair, kwargs)

    def _word_cache(self) -> "PieceCache":
        """The word cache for the backend's current vocabulary and added tokens."""
        key = (self._tokenizer.get_vocab_size(with_added_tokens=True), repr(self._tokenizer.get_added_tokens_decoder()))
        holder = self._backend
        cache = holder.words
        if cache is None or cache.key != key:
            cache = holder.words = PieceCache(key)
        return cache



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
        Python works on batch k (the shards stage does; `analyse_ahead`).
        """
        texts = [nfc(t) for t in texts]
        plans, plain = self._segmenter.plan(texts, self.added_tokens_encoder)  # special tokens stay whole
        analyses = analyse_ahead(get_kiwi(0, **self.kiwi_options), plain)  # sentences: sent_position

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
                    [words[i : i + PieceCache.GROUP] for i in range(0, len(words), PieceCache.GROUP)],
                    is_pretokenized=True,
                    add_special_tokens=False,
                )
        finally:
            self._tokenizer.encode_special_tokens = split_specials


class _Backend:
    """The `tokenizers` backend (`KorBertTokenizer._tokenizer`) with the Kiwi step as its
    pre-tokenizer, and the word cache made from it (`words`).

    tokenizers cannot serialize a Python pre-tokenizer, so this holder pickles (and deep-copies) as
    the backend's JSON with the placeholder in the Kiwi step's place, plus the Segmenter; loading
    puts the Kiwi step back. Left out: the word cache, and the backend's truncation and padding,
    which transformers sets again on every call. So a used tokenizer pickles to the bytes of a
    fresh one, which is what `datasets` hashes to find a map's cache."""

    __slots__ = ("tokenizer", "segmenter", "words")

    def __init__(self, tokenizer: Tokenizer, segmenter: Segmenter | None = None):
        self.tokenizer, self.segmenter, self.words = tokenizer, segmenter, None
        if segmenter is not None:
            tokenizer.pre_tokenizer = PreTokenizer.custom(KiwiPreTokenizer(segmenter))

    def __reduce__(self):
        custom = self.tokenizer.pre_tokenizer
        if self.segmenter is not None:
            self.tokenizer.pre_tokenizer = _placeholder_pre_tokenizer()
        try:
            state = json.loads(self.tokenizer.to_str())
        finally:
            self.tokenizer.pre_tokenizer = custom
        state["truncation"] = state["padding"] = None
        return _backend_from_state, (json.dumps(state, ensure_ascii=False), self.segmenter)


def _backend_from_state(state: str, segmenter: Segmenter | None) -> _Backend:
    return _Backend(Tokenizer.from_str(state), segmenter)


def _saved_max_length(folder) -> int | None:
    """The model_max_length a folder's tokenizer_config.json names, None if none below
    transformers' "no limit" (1e30, what exports before korbert wrote a length saved)."""
    path = Path(folder, "tokenizer_config.json")
    length = json.loads(path.read_text(encoding="utf-8")).get("model_max_length") if path.is_file() else None
    return length if isinstance(length, int) and length < int(1e29) else None


def folder_max_length(folder) -> int | None:
    """The length a model folder's tokenizer should cut at: the longest sequences its pretraining
    trained (manifest.json's `trained_seq_len`, a korbert export), else config.json's
    `max_position_embeddings`; None without config.json (a tokenizer folder: no model, no limit)."""
    config, manifest = Path(folder, "config.json"), Path(folder, "manifest.json")
    if not config.is_file():
        return None
    trained = json.loads(manifest.read_text(encoding="utf-8")).get("trained_seq_len") if manifest.is_file() else None
    return int(trained or json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings") or 0) or None


def _existing(folder: Any, name: str) -> str | None:
    p = Path(str(folder), name) if folder else None
    return str(p) if p and p.is_file() else None


def spm_backend(model_proto: bytes, model_type: str = "unigram", attached: dict[str, float] | None = None,
                where: str = "the SentencePiece model") -> Tokenizer:
    """A `tokenizers` backend from a SentencePiece model trained by `corpus_tools.vocab`: its pieces
    (unigram scores, or bpe merges), byte fallback, BERT's [CLS] A [SEP] / [CLS] A [SEP] B [SEP]
    and the five specials at ids 0..4. The caller sets the normalizer, pre-tokenizer and decoder
    (the morpheme kinds: `KorBertTokenizer.from_spm`; the plain kind: korbert/plain.py).
    `attached` (unigram): pieces appended after the model's own with their scores, and "▁" alone
    chosen only where no piece starts the word (the morpheme-attached kind)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    for i, tok in enumerate(SPECIAL_TOKENS):
        if sp.id_to_piece(i) != tok:
            raise ValueError(f"{where}: id {i} is {sp.id_to_piece(i)!r}, expected {tok!r}")
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if model_type == "bpe":
        if attached:
            raise ValueError("attached word-start pieces need a unigram model")
        model = models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=_bpe_merges(sp), unk_token="[UNK]",
                           byte_fallback=True, fuse_unk=False)
    else:
        # Control, unused and byte pieces must never win the Viterbi search on their own
        # spelling (a text containing "<0x41>"); byte fallback finds them by name.
        never = -1e9
        vocab = [
            (p, never if (sp.is_control(i) or sp.is_unused(i) or sp.is_byte(i) or (attached and p == SPACE)) else sp.get_score(i))
            for i, p in enumerate(pieces)
        ] + list((attached or {}).items())
        model = models.Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=True)
    backend = Tokenizer(model)
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", sp.piece_to_id("[CLS]")), ("[SEP]", sp.piece_to_id("[SEP]"))],
    )
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return backend


_WARNED: set[str] = set()


def _warn_other_kiwi(folder) -> None:
    """One line on stderr when the folder's manifest.json records another Kiwi than the one installed:
    the same ids and fingerprint, but Kiwi may now segment some text otherwise than when the vocabulary
    (or the model) was built. Not an error: the fingerprint names the tokenizer, not the analyzer."""
    import sys

    from corpus_tools.morph import kiwi_differs

    path = Path(folder, "manifest.json")
    seen = str(path.resolve())
    if seen in _WARNED:  # once per folder and process, not on every load (Dask tasks, datasets workers)
        return
    _WARNED.add(seen)
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))["versions"]
    except (OSError, ValueError, KeyError, TypeError):  # no manifest (a folder saved by hand), or none that says
        return
    differs = kiwi_differs(recorded) if isinstance(recorded, dict) else None
    if differs:
        print(f"WARNING: {folder}: built with {differs}; Kiwi may segment some text otherwise", file=sys.stderr)


def _tokenizer_class(folder) -> str | None:
    """The tokenizer_class its tokenizer_config.json names (None: no such file or key)."""
    path = Path(folder, "tokenizer_config.json")
    return json.loads(path.read_text(encoding="utf-8")).get("tokenizer_class") if path.is_file() else None


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
