"""What a preset leaves out of pretraining as evaluation text, per kind and per input file.

    python benchmarks/eval_text_drops.py --preset cpu --data ../shared/data

The preset's corpus and evaluation files come from `korbert.recipe.stage_configs`, and every corpus
document goes through the vocabulary stage's own read path (`corpus_tools.vocab.sample_documents`:
read, clean, the guard) with a one-sentence sample, so no Kiwi runs and no shards are built. The
shards apply the guard after their length filters (`min_chars`, `max_doc_chars`), so their counts
can differ by the documents those filters skip first. Writes
benchmarks/results/eval-text-drops-<preset>.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.artifacts import atomic_write_json, file_record, machine  # noqa: E402
from corpus_tools.guard import EvalText, Found  # noqa: E402
from corpus_tools.text import ReadStats, expand_inputs  # noqa: E402


def main(preset: str, data: str, out: Path) -> dict:
    from corpus_tools.vocab import sample_documents
    from korbert.recipe import RecipeConfig, stage_configs

    cfg = stage_configs(RecipeConfig(preset=preset, data=data, out="/tmp/eval-text-drops"))["cfgs"]["vocab"]
    files = expand_inputs(cfg.inputs)
    inputs = [file_record(f) for f in files]
    evals = [f for f in (cfg.eval_nsmc_test, cfg.eval_korquad) if f]
    t0 = time.time()
    guard = EvalText(nsmc_test=[cfg.eval_nsmc_test] if cfg.eval_nsmc_test else [], korquad=[cfg.eval_korquad] if cfg.eval_korquad else [])
    stats, found = ReadStats(), Found()
    sample_documents(files, inputs, replace(cfg, max_sentences=1), stats, guard, found)
    seconds = time.time() - t0
    result = {
        "preset": preset, "command": " ".join(["python", *sys.argv]), "machine": machine(), "seconds": round(seconds, 1),
        "policy": "drop (the default; --keep-eval-text keeps them)",
        "corpus": [{k: i[k] for k in ("path", "bytes", "sha256", "first_documents") if k in i} for i in inputs],
        "evaluation_files": [file_record(f) for f in evals],
        "documents_in": stats.documents_in, "documents_left_in": stats.documents_out,
        "documents_skipped": dict(stats.skipped),
        **found.counts(),
    }
    atomic_write_json(out, result)
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--data", default="", help="the data folder (default: the recipe's)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    r = main(a.preset, a.data, a.out or Path(__file__).parent / "results" / f"eval-text-drops-{a.preset}.json")
    print(f"{r['documents_in']:,} documents read in {r['seconds']} s; left out: {r['eval_text'] or 'none'}")
    for f, kinds in r["eval_text_by_file"].items():
        print(f"  {f}: {kinds}")
    print(f"  first: {r['eval_text_first_at']}")
