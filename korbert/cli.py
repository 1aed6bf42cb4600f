"""The `korbert` command: one subcommand per stage, each a thin wrapper over that stage's main(cfg).

    korbert vocab     raw text -> Kiwi morphemes -> SentencePiece vocabulary -> tokenizer folder
    korbert tokenize  show how a tokenizer folder splits text (tokens, ids, offsets)
    korbert shards    raw text -> BERT pretraining instances (NSP pairs + MLM) in checksummed shards
    korbert pretrain  shards -> BERT (MLM + NSP) with checkpoints/resume -> an exported final/ folder
    korbert eval      fine-tune and score a model: `korbert eval nsmc|korquad|baseline ...`
    korbert data      the evaluation sets and corpora from their public sources: `korbert data get all`, verified, resumable
    korbert run       the whole recipe: corpus -> vocab -> shards -> pretrain -> NSMC + KorQuAD -> report
    korbert fill-mask top-k completions of each [MASK] in a text or a pair
    korbert embed     a file of texts -> sentence (and token/morpheme/eojeol) vectors: .npy + .jsonl index
    korbert attention a PNG grid of every layer x head, an HTML viewer and the raw attention as JSON
    korbert serve     an HTTP JSON embedding / fill-mask service with dynamic batching

`korbert SUBCOMMAND --help` explains each one's options.
"""

from __future__ import annotations

import argparse
import json
import sys


def _vocab(argv: list[str]) -> None:
    from corpus_tools.vocab import cli

    cli(argv)


def _shards(argv: list[str]) -> None:
    from corpus_tools.shards import cli

    cli(argv)


def _pretrain(argv: list[str]) -> None:
    from korbert.pretrain import cli

    cli(argv)


def _eval(argv: list[str]) -> None:
    from evals.cli import main

    main(argv)


def _data(argv: list[str]) -> None:
    from korbert.data_get import cli

    cli(argv)


def _run(argv: list[str]) -> None:
    from korbert.recipe import cli

    cli(argv)


def _tokenize(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="korbert tokenize", description="Print tokens, ids and offsets for text.")
    ap.add_argument("tokenizer", help="tokenizer folder (the output of `korbert vocab`)")
    ap.add_argument("text", nargs="*", help="text to tokenize (default: read lines from stdin)")
    ap.add_argument("--pair", help="a second segment (tokenized as [CLS] A [SEP] B [SEP])")
    ap.add_argument("--json", action="store_true", help="one JSON object per input instead of a table")
    a = ap.parse_args(argv)
    from korbert import foreign

    tok = foreign.load(a.tokenizer, a.tokenizer)  # korbert's, or any fast tokenizer (the plain kind)
    texts = [" ".join(a.text)] if a.text else [line.rstrip("\n") for line in sys.stdin]
    for text in texts:
        enc = tok(text, a.pair, return_offsets_mapping=True)
        tokens = tok.convert_ids_to_tokens(enc["input_ids"])
        seq = enc.sequence_ids()
        rows = []
        for t, i, (s, e), q in zip(tokens, enc["input_ids"], enc["offset_mapping"], seq):
            src = "" if q is None else (text if q == 0 else a.pair)
            rows.append({"token": t, "id": i, "start": s, "end": e, "text": src[s:e] if src else ""})
        if a.json:
            print(json.dumps({"text": text, "tokens": rows}, ensure_ascii=False))
        else:
            print(" ".join(r["token"] for r in rows))
            for r in rows:
                print(f"  {r['id']:>6}  {r['start']:>4}-{r['end']:<4} {r['token']!s:<12} {r['text']!r}")


def _fill_mask(argv: list[str]) -> None:
    from korbert.use import fill_mask_cli

    fill_mask_cli(argv)


def _embed(argv: list[str]) -> None:
    from korbert.embed import embed_cli

    embed_cli(argv)


def _attention(argv: list[str]) -> None:
    from korbert.attention import cli

    cli(argv)


def _serve(argv: list[str]) -> None:
    from korbert.serve import cli

    cli(argv)


COMMANDS = {
    "vocab": _vocab, "tokenize": _tokenize, "shards": _shards,
    "pretrain": _pretrain, "eval": _eval, "data": _data, "run": _run,
    "fill-mask": _fill_mask, "embed": _embed, "attention": _attention, "serve": _serve,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nkorbert: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    from corpus_tools.config import run_command

    return run_command(argv[0], COMMANDS[argv[0]], argv[1:])

if __name__ == "__main__":
    sys.exit(main())
