"""What each tokenizer kind does to the same held-out text, and what its preprocessing costs.

    python benchmarks/tokenizer_kinds.py --corpus ../shared/data/corpus/{reviews,petitions,kowiki}.jsonl.gz@... --vocab-size 8000
    python benchmarks/tokenizer_kinds.py --corpus corpus_tools/sample_data/*.jsonl.gz --out benchmarks/results/tokenizer-kinds-sample.json

For each kind (morpheme: korbert's tokenizer; morpheme-attached: the same with a lone word-start
"▁" only before rare first characters; plain: SentencePiece over the NFC text, no Kiwi) a
vocabulary of --vocab-size is built with `korbert vocab --kind K` from the first --corpus-docs
documents of each --corpus file (the same documents, sampling and specials for every kind), then
`korbert shards` runs over the same documents with it. Measured:

  * preprocessing CPU-seconds per MB (the corpus's bytes as JSON Lines): `korbert vocab` and
    `korbert shards`, each in its own process (user + system CPU of that process and its children);
  * on the held-out text (the KorQuAD dev contexts and the NSMC test reviews: evaluation text, never
    pretrained on), without [CLS]/[SEP]:
      - tokens per character;
      - byte fallback: the share of tokens that are byte pieces (<0x..>);
      - lone word-start markers: the share of tokens that are "▁" alone, and the share of word starts
        (tokens beginning with "▁") that stand alone;
  * KorQuAD answer-boundary alignment: the share of dev answers whose first character starts a token
    and whose last character ends one (lone "▁" tokens left out: korbert's spans the space, plain's
    the next character; neither bounds text). Plain also puts a "▁" before a text's first word,
    korbert does not: part of their lone-marker counts.
  * KLUE-NER entity-boundary alignment, where --klue-ner is a file: the same share for the dev set's
    gold entities (`<경찰:OG>은`: the entity ends where the particle begins). A token that straddles
    an entity's edge forces one tag on both sides of it in fine-tuning.

Ratios are each kind's over plain's (the baseline a user without Kiwi would run). Writes
benchmarks/results/tokenizer-kinds.json (machine, command, load average before and after).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402
from evals.tokenizer_metrics import answer_alignment, text_stats  # noqa: E402

SHARED = default_folder()
KINDS = ("morpheme", "morpheme-attached", "plain")


def first_docs(sources: list[str], n: int, dest: Path) -> Path:
    """The first n lines (FILE@N: N) of each .jsonl(.gz), one after the other, as a plain .jsonl
    (every kind reads the same bytes)."""
    with open(dest, "w", encoding="utf-8") as fo:
        for spec in sources:
            name, _, count = spec.partition("@")
            src, n_here = Path(name), int(count) if count else n
            opener = gzip.open if src.suffix == ".gz" else open
            with opener(src, "rt", encoding="utf-8") as fi:
                for i, line in enumerate(fi):
                    if i >= n_here:
                        break
                    fo.write(line)
    return dest


def cpu_of(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds of the child process and its descendants, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def vocabulary(vocab: Path) -> dict:
    """Which vocabulary a kind's numbers belong to: its tokenizer hash and the kind's version as the
    folder's manifest.json records them (`attach_version` for morpheme-attached, `plain_version` for
    plain): results of another version are another arm."""
    m = json.loads((vocab / "manifest.json").read_text(encoding="utf-8"))
    versions = {k: v for k, v in m.get("config", {}).items() if k.endswith("_version")}
    return {"tokenizer_hash": m.get("tokenizer_hash"), **versions}


def held_out(korquad: Path, nsmc_test: Path) -> tuple[dict[str, list[str]], list[tuple[str, int, str]]]:
    """({"korquad_contexts": [...], "nsmc_test_reviews": [...]}, answers: (context, answer_start, answer text))."""
    data = json.loads(korquad.read_text(encoding="utf-8"))["data"]
    contexts, answers = [], []
    for art in data:
        for p in art["paragraphs"]:
            contexts.append(p["context"])
            for qa in p["qas"]:
                for a in qa["answers"][:1]:  # the first answer of each question
                    answers.append((p["context"], a["answer_start"], a["text"]))
    lines = nsmc_test.read_text(encoding="utf-8").splitlines()[1:]
    reviews = [ln.split("\t")[1] for ln in lines if ln.count("\t") >= 2 and ln.split("\t")[1].strip()]
    return {"korquad_contexts": contexts, "nsmc_test_reviews": reviews}, answers


def ner_entities(path: Path) -> list[tuple[str, int, str]]:
    """The gold entities of a KLUE-NER file as (sentence, start, entity text): answer_alignment's input."""
    from evals.data import read_klue_ner
    from evals.klue_metric import entity_spans

    return [(s.text, a, s.text[a:b]) for s in read_klue_ner(path) for _, a, b in entity_spans(s.text, s.tags)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", nargs="+", default=[str(SHARED / "corpus" / f) for f in ("reviews.jsonl.gz", "petitions.jsonl.gz", "kowiki.jsonl.gz")])
    ap.add_argument("--corpus-docs", type=int, default=20_000, help="the first N documents of each --corpus file (FILE@N: N)")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--korquad", default=str(SHARED / "korquad" / "KorQuAD_v1.0_dev.json"))
    ap.add_argument("--nsmc-test", default=str(SHARED / "nsmc" / "ratings_test.txt"))
    ap.add_argument("--klue-ner", default=str(SHARED / "klue" / "klue-ner-v1.1_dev.tsv"), help="KLUE-NER TSV (measured when the file exists)")
    ap.add_argument("--work", default="runs/tokenizer-kinds")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tokenizer-kinds.json"))
    a = ap.parse_args()

    load_before = os.getloadavg()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = first_docs(a.corpus, a.corpus_docs, work / "corpus.jsonl")
    mb = corpus.stat().st_size / 1e6
    texts, answers = held_out(Path(a.korquad), Path(a.nsmc_test))
    entities = ner_entities(Path(a.klue_ner)) if Path(a.klue_ner).is_file() else None
    from korbert import foreign

    results = {}
    for kind in a.kinds:
        vocab, shards = work / f"vocab-{kind}", work / f"shards-{kind}"
        cli = [sys.executable, "-m", "korbert.cli"]
        vocab_cpu, vocab_wall = cpu_of([*cli, "vocab", "--kind", kind, "--inputs", str(corpus), "--out", str(vocab),
                                        "--vocab-size", str(a.vocab_size), "--show", "0", "--force"])
        shards_cpu, shards_wall = cpu_of([*cli, "shards", "--tokenizer", str(vocab), "--inputs", str(corpus), "--out", str(shards),
                                          "--show", "0", "--force"])
        tok = foreign.load(vocab, kind)
        results[kind] = {
            "vocab": str(vocab), "vocab_size": len(tok), "vocabulary": vocabulary(vocab),
            "preprocessing": {"vocab_cpu_s_per_MB": round(vocab_cpu / mb, 3), "shards_cpu_s_per_MB": round(shards_cpu / mb, 3),
                              "vocab_wall_s": round(vocab_wall, 1), "shards_wall_s": round(shards_wall, 1)},
            "held_out": {name: text_stats(tok, t) for name, t in texts.items()},
            "korquad_answer_alignment": answer_alignment(tok, answers),
            **({"klue_ner_entity_alignment": answer_alignment(tok, entities)} if entities else {}),
        }
        r = results[kind]
        for name, h in r["held_out"].items():
            print(f"{kind:>9} {name}: tokens/char {h['tokens_per_char']}, lone ▁ {h['lone_marker_share_of_tokens']} of tokens, "
                  f"bytes {h['byte_fallback_share']}")
        if entities:
            print(f"{kind:>9}: aligned KLUE-NER entities {r['klue_ner_entity_alignment']['aligned_share']}")
        print(f"{kind:>9}: aligned answers {r['korquad_answer_alignment']['aligned_share']}, "
              f"CPU-s/MB vocab {r['preprocessing']['vocab_cpu_s_per_MB']} shards {r['preprocessing']['shards_cpu_s_per_MB']}")

    out = {}
    if "plain" in results:
        base = results["plain"]
        for kind, r in results.items():
            if kind == "plain":
                continue
            for name in r["held_out"]:
                out[f"ratio_{kind}_vs_plain_tokens_per_char_{name}"] = round(
                    r["held_out"][name]["tokens_per_char"] / base["held_out"][name]["tokens_per_char"], 3)
            out[f"ratio_{kind}_vs_plain_aligned_share"] = round(
                r["korquad_answer_alignment"]["aligned_share"] / base["korquad_answer_alignment"]["aligned_share"], 3)
            if entities:
                out[f"ratio_{kind}_vs_plain_klue_ner_aligned_share"] = round(
                    r["klue_ner_entity_alignment"]["aligned_share"] / base["klue_ner_entity_alignment"]["aligned_share"], 3)
            for stage in ("vocab", "shards"):
                k = f"{stage}_cpu_s_per_MB"
                out[f"ratio_{kind}_vs_plain_{stage}_cpu"] = round(r["preprocessing"][k] / base["preprocessing"][k], 2)
    if "morpheme" in results and "morpheme-attached" in results:
        m, t = results["morpheme"], results["morpheme-attached"]
        for name in t["held_out"]:
            out[f"ratio_morpheme-attached_vs_morpheme_tokens_per_char_{name}"] = round(
                t["held_out"][name]["tokens_per_char"] / m["held_out"][name]["tokens_per_char"], 3)
    for k, v in out.items():
        print(f"  {k}: {v}")
    atomic_write_json(Path(a.out), {
        **out, "stage": "tokenizer", "what": "tokenizer kinds on the same held-out text (KorQuAD dev contexts + NSMC test "
        "reviews) and their preprocessing CPU on the same corpus documents; ratios are each kind's over plain's",
        "command": "python benchmarks/" + Path(__file__).name + " " + " ".join(sys.argv[1:]),
        "machine": machine(), "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "corpus": {"sources": a.corpus, "documents_each": a.corpus_docs, "MB": round(mb, 2)},
        "held_out": {"korquad": a.korquad, "nsmc_test": a.nsmc_test, **{name: len(t) for name, t in texts.items()}, "answers": len(answers),
                     **({"klue_ner": a.klue_ner, "klue_ner_entities": len(entities)} if entities else {})},
        "vocab_size": a.vocab_size, "kinds": results,
    })
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
