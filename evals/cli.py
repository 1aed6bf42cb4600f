"""`korbert eval`: fine-tune and score models on the Korean benchmarks, and the baselines.

    korbert eval nsmc      --model DIR [--control] ...   NSMC sentiment: fine-tune, test accuracy
    korbert eval korquad   --model DIR [--control] ...   KorQuAD 1.0: fine-tune, EM / F1 (official scorer)
    korbert eval baseline  [--analyzer char|morph|both]  NSMC: TF-IDF + logistic regression (char / Kiwi morpheme n-grams)
    korbert eval klue-nli  --model DIR --dev-file F [--train-file F]   KLUE-NLI: fine-tune, accuracy (klue-sts, klue-ner, ynat alike)
    korbert eval positions --model DIR --texts FILE      MLM accuracy by position in 512-token windows vs 128-token ones
    korbert eval positions-texts --corpus F --tokenizer DIR   held-out texts of >= 512 tokens for it

Each writes results.json (metrics, resolved config, data sha256s, device, seconds, examples/s),
its predictions and manifest.json to --out. `korbert eval TASK --help` lists the options; the
defaults read the embedded sample data, pass the full files by path (e.g. in the folder `korbert data get` fills).
"""

from __future__ import annotations

import sys


def _nsmc(argv: list[str]) -> dict:
    from evals.nsmc import cli

    return cli(argv)


def _korquad(argv: list[str]) -> dict:
    from evals.korquad import cli

    return cli(argv)


def _baseline(argv: list[str]) -> dict:
    from evals.baseline import cli

    return cli(argv)


def _positions(argv: list[str]) -> dict:
    from evals.positions import cli

    return cli(argv)


def _positions_texts(argv: list[str]) -> dict:
    from evals.positions import texts_cli

    return texts_cli(argv)


def _klue(task: str):
    def run(argv: list[str]) -> dict:
        from evals.klue import cli

        return cli(task, argv)

    return run


TASKS = {"nsmc": _nsmc, "korquad": _korquad, "baseline": _baseline, "positions": _positions, "positions-texts": _positions_texts,
         **{t: _klue(t) for t in ("klue-nli", "klue-sts", "klue-ner", "ynat")}}


def main(argv: list[str] | None = None) -> dict | None:
    """Dispatch `korbert eval TASK ...`; user errors raise corpus_tools.text.InputError."""
    from corpus_tools.text import InputError

    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return None
    if argv[0] not in TASKS:
        raise InputError(f"unknown eval task {argv[0]!r}: choose one of {', '.join(TASKS)} (korbert eval --help)")
    return TASKS[argv[0]](argv[1:])
