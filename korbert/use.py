"""Using a pretrained model: fill-mask and contextual embeddings (sentence and token vectors).

    enc = Encoder("runs/demo/pretrain/final")              # any exported model folder
    fill_mask(enc, ["영화가 정말 [MASK]"])                   # top-k per [MASK], with probabilities
    sentence_vectors(enc, texts, pooling="mean", layer=-1)   # (N, H) float32
    token_vectors(enc, texts, unit="morpheme")               # per text: spans into the text + (n, H)

The `korbert embed` command (a file of texts -> .npy + index.jsonl, streamed) is korbert/embed.py.

Sentence vectors: `pooling` "cls" (the [CLS] token's vector) or "mean" (over the non-padding
tokens, [CLS] and [SEP] included); `layer` says which vector a token has: a hidden layer
(-1 the last, 0 the embeddings' output, 1..L), or "concat4" / "sum4": the concatenation (4H wide)
or the sum of the last four layers, BERT's feature-based approach (Devlin et al., table 7).

Token vectors are aligned to the user's characters through the tokenizer's offsets (they index
the string passed in, NFD included). `unit="morpheme"` averages the tokens of each Kiwi surface
segment, `unit="eojeol"` those of each whitespace-separated word; a lone "▁" token (the
whitespace before a segment) belongs to no unit. Every span slices the original text.

Texts longer than `max_length` tokens are truncated (the index says so). A text and the same
text inside a padded batch get the same vector (attention masks padding; tested to 1e-5).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from dataclasses import dataclass

import numpy as np

POOLINGS = ("cls", "mean")
COMBINED = ("concat4", "sum4")
UNITS = ("token", "morpheme", "eojeol")
_WORD = re.compile(r"\S+")


@contextlib.contextmanager
def _quiet_transformers():
    """transformers prints a load report for heads a checkpoint has and the model lacks (the NSP head)."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


class Encoder:
    """A model folder loaded once: the korbert tokenizer and a BertForMaskedLM (encoder + MLM head), or for an
    ELECTRA export the discriminator's encoder and its generator/ (the MLM head fill-mask uses).

    Checks what `korbert eval` checks: config.json, weights, tokenizer files beside them, and that
    the tokenizer is the one manifest.json says the model was trained with."""

    def __init__(self, folder: str | os.PathLike, device: str | None = None, max_length: int | None = None, attention: bool = False):
        import torch
        from safetensors import safe_open
        from transformers import BertForMaskedLM

        from corpus_tools.text import InputError
        from korbert.folders import open_model_folder

        path, self.tok, _, config = open_model_folder(str(folder), label=str(folder))
        weights = path / "model.safetensors"
        if not weights.is_file():  # the MLM head's presence is read from the safetensors index
            raise InputError(f"{folder}: no model.safetensors")
        self.folder = path
        if config.model_type not in ("bert", "electra"):
            raise InputError(f"{folder}: model_type {config.model_type!r}, expected 'bert' or 'electra'")
        if attention:
            config._attn_implementation = "eager"  # attention probabilities are returned by the eager kernel only
        # BERT: one BertForMaskedLM (its encoder for vectors, its head for fill-mask). ELECTRA: the discriminator's
        # encoder for vectors and attention, the generator (generator/, korbert's export) for fill-mask
        generator = path / "generator"
        with safe_open(str(weights), "pt") as f:
            keys = list(f.keys())
        generator_itself = any(k.startswith("generator_lm_head.") for k in keys)  # (a generator/ folder given on its own)
        self.has_mlm_head = any(k.startswith("cls.predictions.") for k in keys) if config.model_type == "bert" else (
            generator_itself or (generator / "model.safetensors").is_file())
        with _quiet_transformers():
            if config.model_type == "bert":
                self.model = BertForMaskedLM.from_pretrained(path, config=config, local_files_only=True)
                self.encoder, self.mlm = self.model.bert, self.model
            elif generator_itself:
                from transformers import ElectraForMaskedLM

                self.model = self.mlm = ElectraForMaskedLM.from_pretrained(path, config=config, local_files_only=True)
                self.encoder = self.model.electra
            else:
                from transformers import ElectraForMaskedLM, ElectraModel

                self.model = self.encoder = ElectraModel.from_pretrained(path, config=config, local_files_only=True)
                self.mlm = ElectraForMaskedLM.from_pretrained(generator, local_files_only=True) if self.has_mlm_head else None
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        for m in {self.model, self.mlm} - {None}:
            m.to(self.device).eval()
        self.config = config
        self.max_length = min(max_length or config.max_position_embeddings, config.max_position_embeddings)
        self.hidden = config.hidden_size
        self.layers = config.num_hidden_layers

    def batch(self, texts: list[str], pairs: list[str] | None = None, offsets: bool = False):
        """Tokenize a batch (padded, truncated to max_length); returns (BatchEncoding, tensors on the device)."""
        enc = self.tok(
            list(texts), list(pairs) if pairs is not None else None, padding=True, truncation=True,
            max_length=self.max_length, return_offsets_mapping=offsets,
        )
        import torch

        names = ("input_ids", "token_type_ids", "attention_mask")
        return enc, {k: torch.tensor(enc[k], dtype=torch.long, device=self.device) for k in names}

    def hidden_states(self, inputs: dict, attentions: bool = False):
        """All layers' outputs: a tuple of L+1 tensors (B, T, H) (index 0: the embeddings)."""
        import torch

        with torch.inference_mode():
            out = self.encoder(**inputs, output_hidden_states=True, output_attentions=attentions, return_dict=True)
        return out

    def width(self, layer) -> int:
        return 4 * self.hidden if layer == "concat4" else self.hidden


def check_layer(layer, layers: int):
    """`layer` as given on a command line or in JSON -> an int in [-(L+1), L] or 'concat4' / 'sum4'."""
    if isinstance(layer, str) and layer in COMBINED:
        if layers < 4:
            raise ValueError(f"layer {layer}: the model has only {layers} layers")
        return layer
    try:
        n = int(layer)
    except (TypeError, ValueError):
        raise ValueError(f"layer must be an integer (-1 = last, 0 = embeddings) or one of {', '.join(COMBINED)}; got {layer!r}") from None
    if isinstance(layer, bool) or not -(layers + 1) <= n <= layers:
        raise ValueError(f"layer {layer}: the model has layers 0..{layers} (negative counts from the last)")
    return n


def token_states(hs: tuple, layer):
    """(B, T, H or 4H) per-token vectors from all layers' outputs `hs`."""
    import torch

    if layer == "concat4":
        return torch.cat(hs[-4:], dim=-1)
    if layer == "sum4":
        return torch.stack(hs[-4:]).sum(0)
    return hs[layer]


def pool(x, attention_mask, pooling: str):
    """(B, T, D) token vectors -> (B, D): [CLS]'s vector, or the mean over non-padding tokens."""
    if pooling == "cls":
        return x[:, 0]
    if pooling == "mean":
        m = attention_mask.unsqueeze(-1).to(x.dtype)
        return (x * m).sum(1) / m.sum(1).clamp(min=1)
    raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}")


# -- fill-mask -----------------------------------------------------------------------------------


def fill_mask(enc: Encoder, texts: list[str], pairs: list[str] | None = None, top_k: int = 5) -> list[dict]:
    """Per text (or pair): every [MASK] with its top-k completions and their probabilities.

    Returns [{"text", "pair", "masks": [{"segment": 0|1, "start", "end", "candidates":
    [{"token", "id", "text", "prob"}]}], "filled": [text with each mask replaced by its best
    completion, pair likewise]}]. Each mask is predicted independently (as HF's pipeline does)."""
    import torch

    if not enc.has_mlm_head:
        raise ValueError(f"{enc.folder}: the checkpoint has no MLM head (cls.predictions.*, or an ELECTRA export's generator/): "
                         "fill-mask needs a pretrained model folder")
    if pairs is not None and len(pairs) != len(texts):
        raise ValueError("texts and pairs differ in length")
    mask_id = enc.tok.mask_token_id
    b, inputs = enc.batch(texts, pairs, offsets=True)
    with torch.inference_mode():
        logits = enc.mlm(**inputs).logits  # (B, T, V)
    ids = inputs["input_ids"]
    where = (ids == mask_id).nonzero().tolist()
    probs = torch.softmax(logits[ids == mask_id].float(), dim=-1) if where else None
    k = max(1, min(top_k, logits.shape[-1]))
    top = torch.topk(probs, k, dim=-1) if where else None
    results = [{"text": t, "pair": pairs[i] if pairs is not None else None, "masks": []} for i, t in enumerate(texts)]
    for j, (i, pos) in enumerate(where):
        seq = b.sequence_ids(i)[pos]
        start, end = b["offset_mapping"][i][pos]
        cands = []
        for p, c in zip(top.values[j].tolist(), top.indices[j].tolist()):
            cands.append({"token": enc.tok.convert_ids_to_tokens(c), "id": c, "text": enc.tok.decode([c]), "prob": p})
        results[i]["masks"].append({"segment": seq, "start": start, "end": end, "candidates": cands})
    for i, r in enumerate(results):
        if not r["masks"]:
            raise ValueError(f"no {enc.tok.mask_token} in {r['text']!r}" + (f" / {r['pair']!r}" if r["pair"] is not None else ""))
        filled = [r["text"], r["pair"]]
        for m in sorted(r["masks"], key=lambda m: -m["start"]):  # right to left: earlier offsets stay valid
            s = filled[m["segment"]]
            filled[m["segment"]] = s[: m["start"]] + m["candidates"][0]["text"] + s[m["end"] :]
        r["filled"] = filled[0] if r["pair"] is None else filled
    return results


# -- embeddings ----------------------------------------------------------------------------------


def sentence_vectors(enc: Encoder, texts: list[str], pooling: str = "mean", layer=-1, batch_size: int = 32) -> np.ndarray:
    """(N, D) float32 sentence vectors (D = H, or 4H for layer="concat4"), row i for texts[i].
    Texts are batched in order of length (less padding: on 2 CPU cores about twice the
    sentences/s of batches in input order); padding does not change a vector."""
    layer = check_layer(layer, enc.layers)
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}")
    out = np.zeros((len(texts), enc.width(layer)), dtype=np.float32)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for a in range(0, len(texts), batch_size):
        idx = order[a : a + batch_size]
        _, inputs = enc.batch([texts[i] for i in idx])
        hs = enc.hidden_states(inputs).hidden_states
        out[idx] = pool(token_states(hs, layer), inputs["attention_mask"], pooling).float().cpu().numpy()
    return out


@dataclass
class TokenVectors:
    """One text's unit vectors: spans [start, end) into the text, the sliced text, (n, D) vectors."""

    spans: list[tuple[int, int]]
    texts: list[str]
    vectors: np.ndarray
    truncated: bool = False


def _units(enc: Encoder, texts: list[str], b, unit: str) -> list[list[int]]:
    """Per text, per token of `b` (a padded batch with [CLS]/[SEP]): its unit id, or -1 (specials,
    padding, lone "▁" tokens)."""
    out = []
    docs = enc.tok.encode_documents(texts) if unit == "morpheme" else None
    for i, text in enumerate(texts):
        offs, seq = b["offset_mapping"][i], b.sequence_ids(i)
        body = [p for p, s in enumerate(seq) if s == 0]
        ids = [-1] * len(seq)
        if unit == "token":
            for p in body:
                ids[p] = p
        elif unit == "morpheme":
            d = docs[i]
            if not np.array_equal(d["ids"][: len(body)], np.asarray([b["input_ids"][i][p] for p in body])):
                raise RuntimeError("encode_documents and the tokenizer call disagree on ids (please report)")
            for n, p in enumerate(body):
                s, e = offs[p]
                if not text[s:e].isspace():
                    ids[p] = int(d["morpheme"][n])
        else:  # eojeol: whitespace-separated words, found from where each token starts
            starts = np.asarray([m.start() for m in _WORD.finditer(text)])
            for p in body:
                s, e = offs[p]
                if not text[s:e].isspace():
                    ids[p] = int(np.searchsorted(starts, s, side="right")) - 1
        out.append(ids)
    return out


def _group(x: np.ndarray, offsets, ids: list[int], text: str) -> TokenVectors:
    """Average the rows of x (T, D) per unit id (>= 0), in order of first appearance."""
    order: dict[int, list[int]] = {}
    for p, u in enumerate(ids):
        if u >= 0:
            order.setdefault(u, []).append(p)
    spans, vecs = [], []
    for rows in order.values():
        s = min(offsets[p][0] for p in rows)
        e = max(offsets[p][1] for p in rows)
        if len(rows) > 1 and text[s].isspace():  # a "▁piece" token starts on the whitespace before it
            s += 1
        spans.append((s, e))
        vecs.append(x[rows].mean(0))
    v = np.stack(vecs).astype(np.float32) if vecs else np.zeros((0, x.shape[1]), np.float32)
    return TokenVectors(spans, [text[s:e] for s, e in spans], v)



def encode_batch(enc: Encoder, texts: list[str], pooling: str | None = "mean", layer=-1, unit: str | None = None):
    """One batch -> (sentence vectors (B, D) or None, [TokenVectors] or None, per text: n_tokens, truncated)."""
    b, inputs = enc.batch(texts, offsets=unit is not None)
    hs = enc.hidden_states(inputs).hidden_states
    x = token_states(hs, layer)
    sent = pool(x, inputs["attention_mask"], pooling).float().cpu().numpy() if pooling else None
    n_tokens = inputs["attention_mask"].sum(1).tolist()
    trunc = [bool(e.overflowing) for e in b.encodings]
    toks = None
    if unit is not None:
        xs = x.float().cpu().numpy()
        toks = []
        for i, ids in enumerate(_units(enc, texts, b, unit)):
            tv = _group(xs[i], b["offset_mapping"][i], ids, texts[i])
            tv.truncated = trunc[i]
            toks.append(tv)
    return sent, toks, n_tokens, trunc


def token_vectors(enc: Encoder, texts: list[str], unit: str = "token", layer=-1, batch_size: int = 32) -> list[TokenVectors]:
    """Per text: its tokens' (or morphemes' / eojeols') vectors with spans into the text."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}; got {unit!r}")
    layer = check_layer(layer, enc.layers)
    out: list[TokenVectors] = []
    for a in range(0, len(texts), batch_size):
        out += encode_batch(enc, texts[a : a + batch_size], pooling=None, layer=layer, unit=unit)[1]
    return out


# -- command lines -------------------------------------------------------------------------------


def fill_mask_cli(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="korbert fill-mask", description="Top-k completions of every [MASK] in a text (or a pair).")
    ap.add_argument("model", help="exported model folder (e.g. runs/demo/pretrain/final)")
    ap.add_argument("text", nargs="*", help='text with one or more [MASK] (default: one text per stdin line), e.g. "영화가 정말 [MASK]"')
    ap.add_argument("--pair", help="a second sentence ([CLS] A [SEP] B [SEP]); may hold [MASK]s too")
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="one JSON object per text")
    ap.add_argument("--device", default="")
    a = ap.parse_args(argv)
    enc = Encoder(a.model, device=a.device or None)
    texts = [" ".join(a.text)] if a.text else [line.rstrip("\n") for line in sys.stdin if line.strip()]
    from corpus_tools.text import InputError

    try:
        results = fill_mask(enc, texts, [a.pair] * len(texts) if a.pair is not None else None, a.top_k)
    except ValueError as e:
        raise InputError(str(e)) from None
    for r in results:
        if a.json:
            print(json.dumps(r, ensure_ascii=False))
            continue
        print(r["text"] if r["pair"] is None else f"{r['text']} / {r['pair']}")
        for m, mask in enumerate(r["masks"], 1):
            print(f"  [MASK] {m} (segment {'AB'[mask['segment']]}, chars {mask['start']}-{mask['end']}):")
            for c in mask["candidates"]:
                print(f"    {c['prob']:7.4f}  {c['token']!s:<12} {c['text']!r}")
        print(f"  -> {r['filled'] if r['pair'] is None else ' / '.join(r['filled'])}")
