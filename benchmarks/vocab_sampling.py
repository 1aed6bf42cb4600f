"""`korbert vocab` before and after sampling documents ahead of Kiwi, side by side on the same inputs
and options: wall time (and the manifest's read / Kiwi / SentencePiece split), then the quality of
each vocabulary on held-out text: tokens per character, and the share of [UNK] and byte-fallback
pieces, on NSMC-R test reviews and on kowiki articles (the first N of a file the vocabularies may
have seen: what matters is that both are measured on the same text).

    git worktree add /tmp/old <commit before>
    python benchmarks/vocab_sampling.py --checkouts /tmp/old . --names old new --max-sentences 500000
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402

SHARED = default_folder()


def build(checkout: str, a, out: Path) -> dict:
    out = out.resolve()  # the command runs in the checkout
    env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}
    cmd = [sys.executable, "-m", "korbert.cli", "vocab", "--inputs", *(str(Path(i).resolve()) for i in a.inputs), "--out", str(out), "--max-sentences", str(a.max_sentences),
           "--vocab-size", str(a.vocab_size), "--force", "--show", "0"]
    t = time.time()
    p = subprocess.run(cmd, env=env, cwd=checkout, capture_output=True, text=True)
    wall = time.time() - t
    if p.returncode != 0:
        raise SystemExit(f"{checkout}: {p.stderr[-2000:]}")
    c = json.loads((out / "manifest.json").read_text())["counts"]
    keep = ("characters", "characters_sampled", "documents_used", "documents_sampled", "sentences", "sentences_trained_on",
            "seconds_read", "seconds_kiwi", "seconds_sentencepiece")
    return {"wall_seconds": round(wall, 1), **{k: c[k] for k in keep if k in c}}


def held_out(a) -> dict[str, list[str]]:
    reviews = [line.split("\t")[1] for line in Path(a.nsmc_test).read_text(encoding="utf-8").splitlines()[1:] if line.count("\t") == 2]
    with gzip.open(a.kowiki, "rt", encoding="utf-8") as f:
        wiki = [json.loads(line)["text"] for _, line in zip(range(a.wiki_articles), f)]
    return {"nsmc_r_test": [r for r in reviews if r.strip()], f"kowiki_first_{a.wiki_articles}": wiki}


def quality(folder: Path, texts: dict[str, list[str]]) -> dict:
    from korbert.tokenizer import KorBertTokenizer

    tok = KorBertTokenizer.from_pretrained(folder)
    pieces = tok.convert_ids_to_tokens(list(range(len(tok))))
    byte = {i for i, p in enumerate(pieces) if len(p) == 6 and p.startswith("<0x") and p.endswith(">")}
    out = {}
    for name, docs in texts.items():
        n = unk = fallback = chars = 0
        for i in range(0, len(docs), 1000):
            part = docs[i : i + 1000]
            for ids in tok(part, add_special_tokens=False)["input_ids"]:
                n += len(ids)
                unk += sum(1 for x in ids if x == tok.unk_token_id)
                fallback += sum(1 for x in ids if x in byte)
            chars += sum(map(len, part))
        out[name] = {"tokens_per_char": round(n / chars, 5), "unk_rate": round(unk / n, 6), "byte_fallback_rate": round(fallback / n, 6), "characters": chars}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkouts", nargs=2, required=True, help="the baseline checkout, then the new one")
    ap.add_argument("--names", nargs=2, default=["old", "new"])
    ap.add_argument("--inputs", nargs="+", default=[str(SHARED / "corpus" / n) for n in ("reviews.jsonl.gz", "petitions.jsonl.gz", "kowiki.jsonl.gz")])
    ap.add_argument("--max-sentences", type=int, default=500_000)
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--nsmc-test", default=str(SHARED / "nsmc" / "ratings_test.txt"))
    ap.add_argument("--kowiki", default=str(SHARED / "corpus" / "kowiki.jsonl.gz"))
    ap.add_argument("--wiki-articles", type=int, default=1000)
    ap.add_argument("--work", default="runs/vocab-sampling")
    ap.add_argument("--out", default="benchmarks/results/vocab-sampling.json")
    a = ap.parse_args()
    load = [os.getloadavg()[0]]
    runs = {}
    for name, checkout in zip(a.names, a.checkouts):
        runs[name] = build(checkout, a, Path(a.work) / name)
        print(f"{name}: {json.dumps(runs[name])}", flush=True)
    load.append(os.getloadavg()[0])
    texts = held_out(a)
    for name in a.names:
        runs[name]["quality"] = quality(Path(a.work) / name, texts)
        print(f"{name} quality: {json.dumps(runs[name]['quality'])}", flush=True)
    old, new = (runs[n] for n in a.names)
    out = {
        "stage": "vocab", "what": "korbert vocab: Kiwi over the whole corpus (old) vs over a seeded sample of documents (new)",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "load_average_1min_before_after_builds": load,
        "inputs": a.inputs, "max_sentences": a.max_sentences, "vocab_size": a.vocab_size, "runs": runs,
        f"ratio_{a.names[1]}_vs_{a.names[0]}_speed": round(old["wall_seconds"] / new["wall_seconds"], 3),
        **{f"ratio_{a.names[1]}_vs_{a.names[0]}_tokens_per_char_{k}": round(new["quality"][k]["tokens_per_char"] / old["quality"][k]["tokens_per_char"], 4)
           for k in texts},
    }
    atomic_write_json(a.out, out)
    print(json.dumps({k: v for k, v in out.items() if k.startswith("ratio")}), f"load {load} -> {a.out}")


if __name__ == "__main__":
    main()
