"""The plain tokenizer kind (`korbert vocab --kind plain`): SentencePiece over the NFC text, no Kiwi.

The arm that korbert's morpheme-aware vocabulary is measured against (benchmarks/tokenizer_kinds.py).
Its folder is a standard fast tokenizer: `tokenizer.json` holds the whole pipeline, so
`AutoTokenizer.from_pretrained(folder)` loads it with no korbert and no remote code:

    normalizer      NFC (offsets index the user's string; on text that is not NFC, a span can end inside
                    a decomposed syllable: huggingface/tokenizers#1201. korbert's stages pass NFC text)
    pre-tokenizer   words at whitespace, then a "▁" before each (Metaspace): pieces never cross a space, and
                    a word's offsets never hold one; then each character the vocabulary lacks stands alone
                    (a Split on a class of every other character), so its byte-fallback tokens carry its own
                    span, not a whole run's (SentencePiece merges a run of unknown characters into one).
                    No piece holds such a character, so the ids are SentencePiece's either way
    model           the SentencePiece Unigram (or BPE) model, byte fallback for unknown characters
    post-processor  [CLS] A [SEP] / [CLS] A [SEP] B [SEP], token types 0/1
    decoder         "▁" -> space, bytes -> characters, the leading space dropped

The specials sit at korbert's ids 0..4 ([PAD] [UNK] [CLS] [SEP] [MASK]), so korbert's stages take the
folder like any other fast tokenizer (korbert/foreign.py). `tokenizer_config.json` carries
`"korbert_kind": "plain"`; for such a folder the shards split sentences at punctuation instead of
with Kiwi, so no stage of a plain run imports Kiwi.
"""

from __future__ import annotations

import re
from pathlib import Path

KIND_KEY = "korbert_kind"  # in tokenizer_config.json: "plain" for this kind (absent otherwise)
VERSION = 2  # the sentence splitter and the pipeline below: in tokenizer_config.json, so in the fingerprint
# (2: unknown characters isolated, so byte-fallback offsets are per character)
_SENTENCE_END = re.compile(r"[.!?…。]+[\"'”’)\]]*(?:\s+|$)|\n+")


def is_plain(tok) -> bool:
    """Whether a loaded tokenizer is this kind (its tokenizer_config.json says so)."""
    return getattr(tok, "init_kwargs", {}).get(KIND_KEY) == "plain"


def tokenizer_kind(tok) -> str:
    """"morpheme" or "morpheme-attached" (korbert's tokenizer: its folder's vocab manifest says which),
    "plain" (this kind) or "other" (another model's tokenizer)."""
    if type(tok).__name__ == "KorBertTokenizer":
        import json

        manifest = Path(getattr(tok, "name_or_path", "") or ".", "manifest.json")
        kind = json.loads(manifest.read_text(encoding="utf-8")).get("config", {}).get("kind") if manifest.is_file() else None
        return kind if kind == "morpheme-attached" else "morpheme"
    return "plain" if is_plain(tok) else "other"


def sentence_starts(text: str) -> list[int]:
    """Where each sentence of `text` starts: after a run of . ! ? … (and closing quotes or
    brackets) followed by whitespace, or after line breaks. No Kiwi: the plain kind's splitter."""
    starts = [0]
    for m in _SENTENCE_END.finditer(text):
        if m.end() < len(text):
            starts.append(m.end())
    return starts


def sentences(text: str) -> list[str]:
    """The sentences of `text` (whitespace runs as one space), by `sentence_starts`."""
    cuts = sentence_starts(text) + [len(text)]
    out = (" ".join(text[a:b].split()) for a, b in zip(cuts, cuts[1:]))
    return [s for s in out if s]


def save_plain(spm_model: bytes, model_type: str, out: str | Path):
    """Write a plain tokenizer folder (tokenizer.json, tokenizer_config.json, special_tokens_map.json)
    from a SentencePiece model trained by `corpus_tools.vocab` with --kind plain; -> the tokenizer."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from korbert.tokenizer import spm_backend  # (imports no Kiwi)

    backend = spm_backend(spm_model, model_type)
    backend.normalizer = normalizers.NFC()
    # words at whitespace (their offsets hold no space), then "▁" before each, as SentencePiece trained;
    # then every character no piece holds on its own (after the "▁": it must not get one of its own)
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False),
        pre_tokenizers.Split(Regex(unknown_characters(spm_model)), behavior="isolated")])
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", clean_up_tokenization_spaces=False, model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        **{KIND_KEY: "plain", "korbert_plain_version": VERSION},
    )
    tok.save_pretrained(str(out))
    return tok


def unknown_characters(spm_model: bytes) -> str:
    """A regex (Oniguruma, as tokenizers compiles it) matching one character that no normal piece of
    the model holds: byte fallback encodes it. Code-point ranges, so the class stays short."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=spm_model)
    special = (sp.is_unknown, sp.is_control, sp.is_unused, sp.is_byte)
    known = sorted({ord(c) for i in range(sp.get_piece_size()) if not any(f(i) for f in special) for c in sp.id_to_piece(i)})
    ranges: list[list[int]] = []
    for cp in known:
        if ranges and cp == ranges[-1][1] + 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    return "[^" + "".join(f"\\x{{{a:X}}}" + (f"-\\x{{{b:X}}}" if b > a else "") for a, b in ranges) + "]"
