"""Another model's own fast tokenizer in korbert's stages, for continued pretraining of a released BERT.

`korbert shards --tokenizer FOLDER` takes a korbert tokenizer or model folder, or any local
transformers folder with a fast tokenizer (WordPiece, BPE or Unigram). For the latter:

- Kiwi still splits the sentences (BERT's pairs are cut at sentence boundaries), except for korbert's
  plain kind (korbert/plain.py), whose sentences end at punctuation: no Kiwi anywhere;
- the tokens are the folder's own (`tok(texts, add_special_tokens=False)`), without Kiwi morphemes;
- whole-unit masking uses the tokenizer's own words (`word_ids`) for `--mask-unit morpheme`, and
  the eojeols of the original spacing for `--mask-unit eojeol`;
- its identity is the sha256 of its tokenizer files (`korbert.folders.tokenizer_files_sha256`), and
  the export copies those files unchanged, so the result loads exactly as the original did.

Shards, the loader and the masking keep [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0..4. A tokenizer
whose specials sit elsewhere (multilingual BERT: [UNK] [CLS] [SEP] [MASK] = 100..103; KoBERT: [UNK]
0, [PAD] 1) gets an id map (`id_map`): its five specials move to 0..4, the ids they displace take
the specials' places, every other id stays. The shards hold the mapped ids; the pretraining moves
the starting model's vocabulary rows the same way (`reorder_vocab`), and the export moves them
back, so the exported model takes the tokenizer's own ids.

Refused, with the reason: a slow (Python-only) tokenizer (offsets and word ids need a fast one),
and one that lacks one of the five specials.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from corpus_tools.text import InputError

_EOJEOL = re.compile(r"\S+")  # a whitespace-separated word of the text
SPECIALS = ("pad", "unk", "cls", "sep", "mask")  # at korbert's ids 0..4, in this order (corpus_tools.shard_format's PAD .. MASK)


def is_korbert(folder: str | Path) -> bool:
    """Whether a folder holds a korbert tokenizer (its tokenizer_config.json names KorBertTokenizer)."""
    cfg = Path(folder, "tokenizer_config.json")
    return cfg.is_file() and json.loads(cfg.read_text(encoding="utf-8")).get("tokenizer_class") == "KorBertTokenizer"


def load(folder: str | Path, where: str):
    """A korbert tokenizer, or the folder's own fast tokenizer, checked (see the module doc)."""
    if is_korbert(folder):
        from korbert.tokenizer import KorBertTokenizer

        return KorBertTokenizer.from_pretrained(folder)
    from korbert.folders import load_auto_tokenizer

    tok = load_auto_tokenizer(Path(folder), where)
    if not tok.is_fast:
        raise InputError(
            f"{where}: {type(tok).__name__} is a slow (Python-only) tokenizer; korbert needs a fast one, whose offsets and "
            "word ids place sentences and whole words (save the folder with its tokenizer.json)"
        )
    ids = special_ids(tok)
    if None in ids.values() or len(set(ids.values())) < len(SPECIALS):
        raise InputError(
            f"{where}: its special tokens have ids {ids}; korbert needs five distinct ones ([PAD] [UNK] [CLS] [SEP] "
            "[MASK]: BERT's), so this tokenizer (incomplete) is not supported"
        )
    pair = tok("가", "나")["input_ids"]  # BERT's frame, which the shards write: [CLS] A [SEP] B [SEP]
    if pair[0] != ids["cls"] or pair[-1] != ids["sep"] or pair.count(ids["sep"]) != 2 or pair[pair.index(ids["sep"]) + 1] == ids["sep"]:
        raise InputError(
            f"{where}: it frames a pair as {tok.convert_ids_to_tokens(pair)}, not BERT's [CLS] A [SEP] B [SEP] (RoBERTa-style); "
            "korbert continues BERT models only"
        )
    return tok


def special_ids(tok) -> dict[str, int | None]:
    """The tokenizer's own ids of [PAD] [UNK] [CLS] [SEP] [MASK]."""
    return {name: getattr(tok, f"{name}_token_id", None) for name in SPECIALS}


def id_map(tok, size: int = 0):
    """int64 [max(len(tok), size)]: the tokenizer's own id -> korbert's (specials at 0..4, see the
    module doc); None when its specials are at 0..4 already (korbert's tokenizer, KLUE-BERT, KcBERT)."""
    own = [special_ids(tok)[name] for name in SPECIALS]
    if own == list(range(len(SPECIALS))):
        return None
    perm = np.arange(max(len(tok), size), dtype=np.int64)
    displaced = [i for i in range(len(SPECIALS)) if i not in own]  # normal ids sitting at 0..4
    perm[own] = np.arange(len(SPECIALS))
    perm[displaced] = sorted(f for f in own if f >= len(SPECIALS))  # take the places the specials left
    return perm


def own_ids(tok, size: int = 0):
    """The inverse of `id_map`: int64 [max(len(tok), size)], the shards' id -> the tokenizer's own;
    None when they are the same."""
    perm = id_map(tok, size)
    return None if perm is None else np.argsort(perm)


def reorder_vocab(model, index) -> None:
    """In place: row i of the word embeddings and of the MLM decoder's weight and bias becomes row
    index[i] (a BertForPreTraining or BertForMaskedLM; tied weights are moved once)."""
    import torch

    index = torch.as_tensor(index, dtype=torch.long)
    seen = set()
    with torch.no_grad():
        head = model.cls.predictions
        for p in (model.get_input_embeddings().weight, head.decoder.weight, head.bias, head.decoder.bias):
            if p is not None and p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                p.copy_(p[index.to(p.device)])


def fingerprint(tok, folder: str | Path) -> str:
    """What shards and models record as the tokenizer's identity."""
    from korbert.folders import tokenizer_files_sha256

    return tok.fingerprint if hasattr(tok, "fingerprint") else tokenizer_files_sha256(Path(folder))


def encoder(tok):
    """The object whose `encode_documents_async(texts)` the shards stage calls."""
    return tok if hasattr(tok, "encode_documents_async") else DocumentEncoder(tok)


class DocumentEncoder:
    """`KorBertTokenizer.encode_documents_async` for another fast tokenizer: per text, int32 arrays
    over its tokens: ids, sentence (Kiwi's; the plain kind's: by punctuation), morpheme (the tokenizer's word), eojeol (whitespace-
    separated word of the text), and offsets (n, 2) into the text."""

    def __init__(self, tok):
        from korbert.plain import is_plain

        self.tok = tok
        self.id_map = id_map(tok)
        self.plain = is_plain(tok)  # korbert's plain kind: sentences at punctuation, and no Kiwi anywhere

    def encode_documents_async(self, texts: list[str]):
        from corpus_tools.text import nfc

        texts = [nfc(t) for t in texts]
        if self.plain:
            analyses = None
        else:
            from corpus_tools.morph import analyse_ahead, get_kiwi

            analyses = analyse_ahead(get_kiwi(0), texts)  # Kiwi's threads start now

        def finish() -> list[dict]:
            from korbert.plain import sentence_starts as punctuation_starts

            enc = self.tok(texts, add_special_tokens=False, return_offsets_mapping=True)
            out = []
            for i, (text, analysis) in enumerate(zip(texts, analyses if analyses is not None else [None] * len(texts))):
                if analysis is None:
                    sentence_starts = punctuation_starts(text)
                else:
                    sentence_starts, last = [], None
                    for t in analysis:  # a sentence starts where its first morpheme does
                        if t.sent_position != last:
                            sentence_starts.append(t.start)
                            last = t.sent_position
                eojeol_starts = [m.start() for m in _EOJEOL.finditer(text)]
                offsets = np.asarray(enc["offset_mapping"][i], dtype=np.int32).reshape(-1, 2)
                first = offsets[:, 0]
                out.append({
                    "ids": self._ids(enc["input_ids"][i]),
                    "sentence": np.maximum(np.searchsorted(sentence_starts, first, side="right") - 1, 0).astype(np.int32),
                    "morpheme": np.asarray([-1 if w is None else w for w in enc.word_ids(i)], dtype=np.int32),
                    "eojeol": np.maximum(np.searchsorted(eojeol_starts, first, side="right") - 1, 0).astype(np.int32),
                    "offsets": offsets,
                })
            return out

        return finish

    def _ids(self, own: list[int]) -> np.ndarray:
        ids = np.asarray(own, dtype=np.int64)
        return (ids if self.id_map is None else self.id_map[ids]).astype(np.int32)

    def encode_documents(self, texts: list[str]) -> list[dict]:
        return self.encode_documents_async(texts)()
