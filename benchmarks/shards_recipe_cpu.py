"""The shards stage's own Python (BERT's recipe: pairs, instances, columns, statistics) without Kiwi:
CPU seconds to turn pre-encoded batches into a finished shard, for several checkouts of korbert side
by side on the very same encodings (e.g. before and after a change; `git worktree add /tmp/old <commit>`).

The end-to-end benchmark (`shards_throughput.py`) divides by bare Kiwi, whose run-to-run swing on a
small shared machine (±10%) hides a change worth a few percent of the stage; this one times only the
part a change to the recipe touches. The documents are read and cleaned as the stage does, encoded
once by this checkout's `encode_documents` in batches of --batch-docs, and pickled; every checkout
then runs `ShardChunk.add` on the same batches in its own process. Rounds alternate the checkouts; the
median round is reported, and each checkout's ratio to the first one.

    python benchmarks/shards_recipe_cpu.py --tokenizer runs/vocab --checkouts /tmp/old .
"""

from __future__ import annotations

import argparse
import os
import json
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402

WORKER = r"""
import json, pickle, sys, tempfile, time
from corpus_tools import shards as S
from corpus_tools.shard_format import MaskConfig, shard_columns
from korbert.tokenizer import KorBertTokenizer
tokenizer, batches = sys.argv[1], pickle.load(open(sys.argv[2], "rb"))
tok = KorBertTokenizer.from_pretrained(tokenizer)
try:
    from corpus_tools.shards_config import ShardsConfig
except ImportError:  # a revision before the settings had their own module
    ShardsConfig = S.ShardsConfig
cfg = ShardsConfig(tokenizer=tokenizer, inputs=[], out="")
columns = shard_columns(len(tok), cfg.max_seq_len, cfg.masking, True)
with tempfile.TemporaryDirectory(prefix="recipe-bench-") as tmp:
    try:
        from corpus_tools.shard_task import ShardChunk
    except ImportError:  # a checkout before corpus_tools/shard_task.py
        ShardChunk = S._Chunk
    chunk = ShardChunk("0000-00000" if hasattr(S, "build_piece") else 0, __import__("pathlib").Path(tmp), cfg, MaskConfig.from_tokenizer(tok, cfg.mask_prob), columns)
    cpu = time.process_time()
    for batch, encs in batches:
        chunk.add(batch, encs)
    record = chunk.close()
    cpu = time.process_time() - cpu
print(json.dumps({"cpu_seconds": cpu, "instances": record["splits"]["train"]["instances"]}))
"""


def encode(a) -> tuple[Path, int]:
    try:
        from corpus_tools.pairs import is_valid as _is_valid
    except ImportError:  # a checkout from before corpus_tools/pairs.py
        from corpus_tools.shards import _is_valid
    from corpus_tools.shards_config import ShardsConfig
    from corpus_tools.text import clean, iter_documents
    from korbert.tokenizer import KorBertTokenizer

    d = ShardsConfig()
    tok = KorBertTokenizer.from_pretrained(a.tokenizer)
    docs = []
    for g, (where, raw) in enumerate(iter_documents([a.input], text_field=d.text_field)):
        if g >= a.docs:
            break
        text = clean(raw)
        if d.min_chars <= len(text) <= d.max_doc_chars:
            docs.append((g, where, "valid" if _is_valid(d.seed, g, d.valid_fraction) else "train", text))
    batches = [(docs[i : i + a.batch_docs], tok.encode_documents([t for *_, t in docs[i : i + a.batch_docs]]))
               for i in range(0, len(docs), a.batch_docs)]
    path = Path(tempfile.mkdtemp(prefix="recipe-bench-")) / "batches.pkl"
    path.write_bytes(pickle.dumps(batches))
    return path, len(docs)


def one(checkout: str, a, batches: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}
    p = subprocess.run([sys.executable, "-c", WORKER, str(Path(a.tokenizer).resolve()), str(batches)],
                       cwd=checkout, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{checkout}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="a `korbert vocab` folder")
    ap.add_argument("--input", default=str(default_folder() / "corpus" / "reviews.jsonl.gz"))
    ap.add_argument("--docs", type=int, default=20_000, help="the first N documents of --input")
    ap.add_argument("--batch-docs", type=int, default=256)
    ap.add_argument("--checkouts", nargs="+", default=["."], help="korbert checkouts; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/shards-recipe-cpu.json")
    a = ap.parse_args()
    batches, n = encode(a)
    print(f"{n} documents of {a.input}, encoded in batches of {a.batch_docs}")
    load = [os.getloadavg()[0]]
    runs: dict[str, list[dict]] = {c: [] for c in a.checkouts}
    for r in range(a.rounds):
        for c in (a.checkouts if r % 2 == 0 else a.checkouts[::-1]):
            runs[c].append(one(c, a, batches))
            print(f"  round {r + 1} {c}: {runs[c][-1]['cpu_seconds']:.3f} CPU-s, {runs[c][-1]['instances']} instances", flush=True)
    load.append(os.getloadavg()[0])
    med = {c: round(statistics.median(x["cpu_seconds"] for x in v), 3) for c, v in runs.items()}
    base = a.checkouts[0]
    name = lambda c: Path(c).resolve().name  # noqa: E731
    out = {
        "stage": "shards", "what": "CPU seconds of the recipe alone (ShardChunk.add + close on pre-encoded batches), per checkout",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "load_average_1min_before_after": load,
        "input": a.input, "documents": n, "batch_docs": a.batch_docs, "rounds": a.rounds,
        "median_cpu_seconds": med, "us_per_document": {c: round(1e6 * s / n, 1) for c, s in med.items()},
        "cpu_seconds": {c: [round(x["cpu_seconds"], 3) for x in v] for c, v in runs.items()},
        **{f"ratio_cpu_{name(c)}_vs_{name(base)}": round(med[c] / med[base], 3) for c in a.checkouts[1:]},
    }
    for c in a.checkouts:
        print(f"{c}: {med[c]:.3f} CPU-s ({out['us_per_document'][c]} us per document)")
    atomic_write_json(a.out, out)
    print(json.dumps({k: v for k, v in out.items() if k.startswith("ratio")}), f"load {load}", f"-> {a.out}")
    shutil.rmtree(batches.parent)


if __name__ == "__main__":
    main()
