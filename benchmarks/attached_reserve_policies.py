"""Other ways to spend the morpheme-attached kind's reserve (issue 45), measured on held-out text before
any of them becomes a vocabulary version: tokens per character, lone "▁" share and KorQuAD answer
alignment for each policy, against the morpheme kind's.

    python benchmarks/attached_reserve_policies.py --corpus runs/tk-sample/corpus.jsonl --vocab-size 8000 \
        --out benchmarks/results/tokenizer-attached-policies-coverage-sample.json

A policy is EXTRA:COVERAGE; today's kind (ATTACH_VERSION 3) is 0.10:0.995. Version 2's (0.02:1): a `▁`+c fallback for every single-character piece c, in a
reserve sized as the fallbacks plus EXTRA = 2% of the vocabulary; what the fallbacks leave of it goes to
`▁` + longer pieces (the smaller SentencePiece model needs more fallbacks than the first sizing counted, so
little is left). COVERAGE < 1 keeps a fallback only for the most frequent word-start characters that
together begin that share of the training lines' words (a smaller reserve: more SentencePiece pieces; a
word that starts with another character pays a lone `▁`); a larger EXTRA trades SentencePiece's own
pieces for more `▁` + longer pieces. (The results measured at d018e5b and before name EXTRA:MIN_STARTS,
a count of word starts, instead.) The training lines come from `korbert vocab --kind morpheme-attached` itself (Kiwi
once, cached under --work); each policy then runs `corpus_tools.vocab.reserve_markers`, the kind's own code, with its knobs.
The baseline is the morpheme kind's tokens/char from `korbert vocab --kind morpheme` on the same corpus
(--morpheme-vocab, or built here).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

SHARED = default_folder()


class _Captured(Exception):
    pass


def training_lines(corpus: list[str], content: list, vocab_size: int, cache: Path):
    """(lines, cfg, threads) exactly as `korbert vocab --kind morpheme-attached` hands them to attach_markers;
    cached for these inputs' bytes (`content`) and vocabulary size only."""
    import corpus_tools.vocab as V
    from corpus_tools.artifacts import atomic_write_bytes

    key = {"inputs": content, "vocab_size": vocab_size}
    if cache.exists():
        got = pickle.loads(cache.read_bytes())
        if isinstance(got, dict) and got.get("key") == key:
            return got["lines"], got["cfg"], got["threads"]

    def capture(lines, cfg, threads):
        atomic_write_bytes(cache, pickle.dumps({"key": key, "lines": lines, "cfg": cfg, "threads": threads}))
        raise _Captured()

    real, V.attach_markers = V.attach_markers, capture
    try:
        V.main(V.C.parse(V.VocabConfig, ["--inputs", *corpus, "--vocab-size", str(vocab_size), "--kind", "morpheme-attached",
                                          "--out", str(cache.with_suffix(".vocab")), "--force"], prog="korbert vocab"))
    except _Captured:
        pass
    finally:
        V.attach_markers = real
    got = pickle.loads(cache.read_bytes())
    return got["lines"], got["cfg"], got["threads"]


def parse_policy(ap: argparse.ArgumentParser, spec: str) -> tuple[float, float]:
    """EXTRA:COVERAGE -> (extra, coverage), or a usage error."""
    try:
        extra, cover = (float(x) for x in spec.split(":"))
    except ValueError:
        ap.error(f"policy {spec!r}: expected EXTRA:COVERAGE, e.g. 0.10:0.995")
    if not (0 <= extra < 0.5 and 0 < cover <= 1):
        ap.error(f"policy {spec!r}: EXTRA must be in [0, 0.5) and COVERAGE in (0, 1]")
    return extra, cover


def check_morpheme_baseline(mdir: Path, content: list, cfg) -> dict:
    """The morpheme kind's manifest in `mdir`, or exit: it must be built from the inputs `content`
    ([sha256, first_documents] each) at cfg's vocabulary size and sampling."""
    mm = json.loads((mdir / "manifest.json").read_text())
    same = all(mm["config"].get(k) == getattr(cfg, k) for k in ("vocab_size", "max_sentences", "seed", "num_unused", "model_type"))
    if (not same or mm["config"].get("kind", "morpheme") != "morpheme"
            or [[i["sha256"], i.get("first_documents")] for i in mm["inputs"]] != content):
        sys.exit(f"{mdir} is not the morpheme kind built from these inputs at vocabulary size {cfg.vocab_size} with the "
                 f"same sampling (its manifest says otherwise)")
    return mm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, nargs="+",
                    help="korbert vocab --inputs: e.g. benchmarks/tokenizer_kinds.py's corpus.jsonl, or the cpu preset's three files")
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument("--policies", nargs="+", default=["0.02:1", "0.10:0.995"],
                    help="EXTRA:COVERAGE, COVERAGE in (0, 1]; 0.02:1 is version 2's, 0.10:0.995 today's")
    ap.add_argument("--morpheme-vocab", help="the morpheme kind's vocabulary on the same corpus (default: built under --work)")
    ap.add_argument("--work", default="runs/attached-policies")
    ap.add_argument("--korquad", default=str(SHARED / "korquad" / "KorQuAD_v1.0_dev.json"))
    ap.add_argument("--nsmc", default=str(SHARED / "nsmc" / "ratings_test.txt"))
    ap.add_argument("--out", default="benchmarks/results/tokenizer-attached-policies.json")
    a = ap.parse_args()
    policies = {spec: parse_policy(ap, spec) for spec in a.policies}

    import corpus_tools.vocab as V
    from corpus_tools.artifacts import atomic_write_json, file_record, machine, sha256_file
    from corpus_tools.text import expand_inputs
    from evals.tokenizer_metrics import answer_alignment, text_stats
    from korbert.tokenizer import KorBertTokenizer
    from tokenizer_kinds import held_out

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    texts, answers = held_out(Path(a.korquad), Path(a.nsmc))

    def measure(tok) -> dict:
        return {**{k: text_stats(tok, t) for k, t in texts.items()}, "aligned": answer_alignment(tok, answers)}

    mdir = Path(a.morpheme_vocab) if a.morpheme_vocab else work / f"morpheme-{a.vocab_size}"
    if not a.morpheme_vocab:
        V.main(V.C.parse(V.VocabConfig, ["--inputs", *a.corpus, "--vocab-size", str(a.vocab_size), "--out", str(mdir)], prog="korbert vocab"))
    records = [file_record(f) for f in expand_inputs(a.corpus)]
    content = [[r["sha256"], r.get("first_documents")] for r in records]
    mm = check_morpheme_baseline(mdir, content, V.VocabConfig(vocab_size=a.vocab_size))  # the sampling korbert vocab's defaults give
    base = measure(KorBertTokenizer.from_pretrained(str(mdir)))
    lines, cfg, threads = training_lines(a.corpus, content, a.vocab_size, work / f"lines-{a.vocab_size}.pkl")
    full = {}  # every policy's reserve_markers trains the same full-size model first: train it once
    train_spm = V.train_spm

    def train_once(lines_, cfg_, threads_, suffix=False):
        if not (lines_ is lines and cfg_ == cfg and threads_ == threads and not suffix):
            return train_spm(lines_, cfg_, threads_, suffix=suffix)
        if "model" not in full:
            full["model"] = train_spm(lines_, cfg_, threads_)
        return full["model"]
    res = {
        "stage": "tokenizer", "what": "morpheme-attached reserve policies (EXTRA:COVERAGE; 0.02:1 is version 2's) against the morpheme kind, "
        "on the KorQuAD dev contexts and the NSMC-R test reviews", "policy_form": "EXTRA:COVERAGE", "command": "python " + " ".join(sys.argv), "machine": machine(),
        "corpus": a.corpus, "inputs": records, "vocab_size": a.vocab_size, "training_lines": len(lines),
        "morpheme_vocab": str(mdir), "morpheme_tokenizer_hash": mm.get("tokenizer_hash"), "morpheme": base, "policies": {},
    }
    for spec, (extra, cover) in policies.items():
        V.train_spm = train_once
        try:
            model, added, n_fb, reserve = V.reserve_markers(lines, cfg, threads, extra, cover)
        finally:
            V.train_spm = train_spm
        spm_path = work / f"policy-{spec.replace(':', '_')}.model"  # what was measured, kept: the model and its entries
        spm_path.write_bytes(model)
        spm_path.with_suffix(".added.json").write_text(json.dumps(added, ensure_ascii=False, indent=0))
        m = measure(KorBertTokenizer.from_spm(spm_path, "unigram", dict(V.DEFAULT_KIWI), attached=added))
        m.update({"fallbacks": n_fb, "longer_pieces": len(added) - n_fb, "reserve": reserve, "added": len(added),
                  "sentencepiece_pieces": a.vocab_size - reserve, "model_sha256": sha256_file(spm_path),
                  "added_sha256": sha256_file(spm_path.with_suffix(".added.json"))})
        for text in ("korquad_contexts", "nsmc_test_reviews"):
            m[f"ratio_vs_morpheme_tokens_per_char_{text}"] = round(m[text]["tokens_per_char"] / base[text]["tokens_per_char"], 3)
        res["policies"][spec] = m
        res[f"ratio_{spec}_vs_morpheme_tokens_per_char_korquad_contexts"] = m["ratio_vs_morpheme_tokens_per_char_korquad_contexts"]
        res[f"ratio_{spec}_vs_morpheme_tokens_per_char_nsmc_test_reviews"] = m["ratio_vs_morpheme_tokens_per_char_nsmc_test_reviews"]
        atomic_write_json(Path(a.out), res)
        print(f"{spec}: fallbacks {n_fb}, reserve {reserve}; tokens/char contexts {m['korquad_contexts']['tokens_per_char']} "
              f"({m['ratio_vs_morpheme_tokens_per_char_korquad_contexts']}x), reviews {m['nsmc_test_reviews']['tokens_per_char']} "
              f"({m['ratio_vs_morpheme_tokens_per_char_nsmc_test_reviews']}x); lone {m['korquad_contexts']['lone_marker_share_of_tokens']}; "
              f"aligned {m['aligned']['aligned_share']}", flush=True)
    print(f"morpheme: contexts {base['korquad_contexts']['tokens_per_char']}, reviews {base['nsmc_test_reviews']['tokens_per_char']} -> {a.out}")


if __name__ == "__main__":
    main()
