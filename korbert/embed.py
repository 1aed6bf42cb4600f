"""`korbert embed`: a file of texts -> sentence (and token) vectors in .npy files + index.jsonl, streamed.

    korbert embed runs/demo/pretrain/final --input texts.txt --out runs/vectors --unit morpheme

The vectors are korbert/use.py's (`encode_batch`): see that module for pooling, layers and units.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from korbert.use import POOLINGS, UNITS, Encoder, check_layer, encode_batch

FORMAT_VERSION = 1


def read_texts(path: str | os.PathLike, text_field: str = "text") -> Iterator[str]:
    """Input file format: `.txt`: one text per line (every line, empty ones too, is one row);
    `.jsonl`: one JSON object per line with a `text_field`; either optionally gzipped."""
    from corpus_tools.text import InputError

    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    jsonl = p.name.removesuffix(".gz").endswith((".jsonl", ".json"))
    with opener(p, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not jsonl:
                yield line
                continue
            try:
                obj = json.loads(line)
                text = obj[text_field]
            except (ValueError, KeyError, TypeError):
                raise InputError(f"{path}:{n}: not a JSON object with a {text_field!r} string") from None
            if not isinstance(text, str):
                raise InputError(f"{path}:{n}: {text_field!r} is not a string")
            yield text


def _count_lines(path: Path) -> int | None:
    if path.suffix == ".gz":
        return None
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


@dataclass
class EmbedConfig:
    model: str = field(default="", metadata={"help": "exported model folder (e.g. runs/demo/pretrain/final)"})
    input: str = field(default="", metadata={"help": ".txt (one text per line) or .jsonl (a text field), optionally .gz"})
    out: str = field(default="", metadata={"help": "output folder: sentences.npy, [tokens.npy,] index.jsonl, manifest.json"})
    pooling: str = field(default="mean", metadata={"help": "sentence vector: cls | mean (non-padding tokens)"})
    layer: str = field(default="-1", metadata={"help": "token vectors from: a layer (-1 last, 0 embeddings) | concat4 | sum4 (last four layers)"})
    unit: str = field(default="", metadata={"help": "also write token vectors: token | morpheme | eojeol (averaged per unit)"})
    text_field: str = "text"
    batch_size: int = 32
    max_length: int = 128
    device: str = ""
    progress: bool = True


def main(cfg: EmbedConfig) -> dict:
    """A file of texts -> out/sentences.npy (N, D) float32 (row i = line i), optionally
    out/tokens.npy (M, D), and out/index.jsonl, one line per text:
    {"row", "n_tokens", "truncated"[, "tokens": [first, end) rows of tokens.npy, "spans": [[s, e], ...]]}.
    Streams: texts are read, sorted by length in chunks (less padding), encoded and written in
    batches, so memory does not grow with the file."""
    from tqdm import tqdm

    from corpus_tools.artifacts import write_manifest
    from corpus_tools.text import InputError

    if cfg.unit and cfg.unit not in UNITS:
        raise InputError(f"--unit must be one of {', '.join(UNITS)}")
    if cfg.pooling not in POOLINGS:
        raise InputError(f"--pooling must be one of {', '.join(POOLINGS)}")
    src = Path(cfg.input)
    if not src.is_file():
        raise InputError(f"--input {cfg.input}: no such file")
    enc = Encoder(cfg.model, device=cfg.device or None, max_length=cfg.max_length)
    try:
        layer = check_layer(cfg.layer, enc.layers)
    except ValueError as e:
        raise InputError(f"--layer: {e}") from None
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    width = enc.width(layer)
    from corpus_tools.artifacts import NpyWriter

    sent_w = NpyWriter(out / "sentences.npy", np.float32, width)
    tok_w = NpyWriter(out / "tokens.npy", np.float32, width) if cfg.unit else None
    index = open(out / "index.jsonl", "w", encoding="utf-8")
    n = truncated = 0
    bar = tqdm(total=_count_lines(src), unit="text", disable=not cfg.progress, desc="embed")
    chunk = cfg.batch_size * 16
    try:
        for texts in _chunks(read_texts(src, cfg.text_field), chunk):
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            sent = np.zeros((len(texts), width), np.float32)
            toks: list = [None] * len(texts)
            meta: list = [None] * len(texts)
            for a in range(0, len(order), cfg.batch_size):
                idx = order[a : a + cfg.batch_size]
                s, tv, nt, tr = encode_batch(enc, [texts[i] for i in idx], cfg.pooling, layer, cfg.unit or None)
                sent[idx] = s
                for j, i in enumerate(idx):
                    meta[i] = (nt[j], tr[j])
                    if tv is not None:
                        toks[i] = tv[j]
                bar.update(len(idx))
            sent_w.append(sent)
            for i in range(len(texts)):
                rec = {"row": n + i, "n_tokens": meta[i][0], "truncated": meta[i][1]}
                truncated += meta[i][1]
                if tok_w is not None:
                    rec["tokens"] = [tok_w.rows, tok_w.rows + len(toks[i].spans)]
                    rec["spans"] = [list(s) for s in toks[i].spans]
                    tok_w.append(toks[i].vectors)
                index.write(json.dumps(rec) + "\n")
            n += len(texts)
    finally:
        bar.close()
        sent_w.close()
        if tok_w is not None:
            tok_w.close()
        index.close()
    files = ["sentences.npy", "index.jsonl"] + (["tokens.npy"] if tok_w is not None else [])
    result = {
        "texts": n, "truncated": truncated, "dim": width, "tokens": tok_w.rows if tok_w is not None else None,
        "model": str(enc.folder), "tokenizer_hash": enc.tok.fingerprint, "pooling": cfg.pooling, "layer": layer,
        "unit": cfg.unit or None, "max_length": enc.max_length, "input": str(src),
    }
    write_manifest(out, "embeddings", FORMAT_VERSION, files=files, **result)
    return result


def _chunks(it: Iterable[str], n: int) -> Iterator[list[str]]:
    buf: list[str] = []
    for x in it:
        buf.append(x)
        if len(buf) == n:
            yield buf
            buf = []
    if buf:
        yield buf


# -- command line ---------------------------------------------------------------------------------


def embed_cli(argv: list[str]) -> dict:
    import argparse

    ap = argparse.ArgumentParser(prog="korbert embed", description=main.__doc__.split("\n")[0] + " (see korbert/embed.py)")
    ap.add_argument("model")
    for f in ("input", "out"):
        ap.add_argument(f"--{f}", required=True, help=EmbedConfig.__dataclass_fields__[f].metadata["help"])
    ap.add_argument("--pooling", default="mean", choices=POOLINGS, help=EmbedConfig.__dataclass_fields__["pooling"].metadata["help"])
    ap.add_argument("--layer", default="-1", help=EmbedConfig.__dataclass_fields__["layer"].metadata["help"])
    ap.add_argument("--unit", default="", choices=("",) + UNITS, help=EmbedConfig.__dataclass_fields__["unit"].metadata["help"])
    ap.add_argument("--text-field", default="text")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--device", default="")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    r = main(EmbedConfig(
        model=a.model, input=a.input, out=a.out, pooling=a.pooling, layer=a.layer, unit=a.unit, text_field=a.text_field,
        batch_size=a.batch_size, max_length=a.max_length, device=a.device, progress=not a.no_progress,
    ))
    print(f"embed: {r['texts']} texts ({r['truncated']} truncated) -> {a.out}/sentences.npy ({r['texts']}, {r['dim']})"
          + (f", tokens.npy ({r['tokens']}, {r['dim']})" if r["tokens"] is not None else "") + ", index.jsonl")
    return r
