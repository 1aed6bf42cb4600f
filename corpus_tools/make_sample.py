"""Rebuild the embedded sample data (corpus_tools/sample_data/) from the full shared data.

    python -m corpus_tools.make_sample --data ../shared/data

The sample is what the `demo` defaults and the tests read, so nothing needs ../shared to run.
It is a seeded random subset, taken unmodified line by line (reviews, petitions, NSMC-R rows)
or article by article (KorQuAD 1.0 dev), so its formats are exactly the official ones:

    reviews.jsonl.gz     {"id", "text"} per line           (pretraining corpus sample)
    petitions.jsonl.gz   {"id", "title", "text"} per line  (pretraining corpus sample)
    nsmc_train.txt       id<TAB>document<TAB>label, header (NSMC-R train rows)
    nsmc_test.txt        same format                       (NSMC-R test rows)
    korquad_dev.json     SQuAD v1 JSON                     (whole KorQuAD 1.0 dev articles)

The evaluation files are drawn first; the corpus files are then drawn from the lines whose
document (as the stages read it: title and text joined, cleaned) holds none of the sample's own
evaluation text by corpus_tools.guard's rules (an NSMC test review by letters and digits alone, a
48-character run of a KorQuAD context), so the demo pretrains on none of what it scores. Each file
has its own generator, seeded by (--seed, the file's name): the same data and seed give the same
bytes (gzip with mtime 0), and a change to one file's draw leaves the others as they were.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

from corpus_tools import SAMPLE_DATA as SAMPLE_DIR
from corpus_tools.guard import EvalText
from corpus_tools.text import clean, jsonl_text

SIZES = {"reviews": 20000, "petitions": 150, "nsmc_train": 8000, "nsmc_test": 2000}
KORQUAD_EVERY = 10  # every 10th KorQuAD dev article: 14 of 140


def _sample_lines(lines: list[str], k: int, rng: random.Random) -> list[str]:
    idx = sorted(rng.sample(range(len(lines)), min(k, len(lines))))
    return [lines[i] for i in idx]


def main(data: Path, out: Path = SAMPLE_DIR, seed: int = 0) -> dict:
    def rng(name: str) -> random.Random:
        return random.Random(f"{seed}:{name}")

    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in ("train", "test"):
        lines = (data / "nsmc" / f"ratings_{split}.txt").read_text(encoding="utf-8").splitlines()
        rows = _sample_lines(lines[1:], SIZES[f"nsmc_{split}"], rng(f"nsmc_{split}"))
        (out / f"nsmc_{split}.txt").write_text("\n".join([lines[0], *rows]) + "\n", encoding="utf-8")
        counts[f"nsmc_{split}"] = len(rows)
    squad = json.loads((data / "korquad" / "KorQuAD_v1.0_dev.json").read_text(encoding="utf-8"))
    articles = [a for i, a in enumerate(squad["data"]) if i % KORQUAD_EVERY == 0]
    (out / "korquad_dev.json").write_text(
        json.dumps({"version": squad["version"], "data": articles}, ensure_ascii=False), encoding="utf-8"
    )
    counts["korquad_articles"] = len(articles)
    counts["korquad_questions"] = sum(len(p["qas"]) for a in articles for p in a["paragraphs"])
    guard = EvalText(nsmc_test=[out / "nsmc_test.txt"], korquad=[out / "korquad_dev.json"])
    for name in ("reviews", "petitions"):
        with gzip.open(data / "corpus" / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
            lines = [x for x in f.read().splitlines() if x.strip()]
        held = {}
        for line in lines:  # the document as `korbert shards` reads it (default --text-field title text)
            if hit := guard.check(clean(jsonl_text(line, ["title", "text"])[0] or "")):
                held[line] = hit
        rows = _sample_lines([x for x in lines if x not in held], SIZES[name], rng(name))
        # mtime=0 keeps the gzip bytes reproducible.
        with open(out / f"{name}.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as g:
            g.write(("\n".join(rows) + "\n").encode("utf-8"))
        counts[name] = len(rows)
        counts[f"{name}_left_out"] = {k: list(held.values()).count(k) for k in sorted(set(held.values()))}
    return counts


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("../shared/data"), help="the full shared data folder")
    ap.add_argument("--out", type=Path, default=SAMPLE_DIR)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(json.dumps(main(a.data, a.out, a.seed), ensure_ascii=False))
