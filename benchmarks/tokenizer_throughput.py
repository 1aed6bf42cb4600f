"""Tokenizer throughput against bare Kiwi, side by side in one run; [UNK] rate; tokens per char.

    python benchmarks/tokenizer_throughput.py --tokenizer runs/vocab-full

Bare Kiwi = `Kiwi(num_workers=T).tokenize(texts)` on the same texts with the same thread count:
Kiwi's analysis is the physical limit of a Kiwi-based tokenizer. korbert = KorBertTokenizer on the
same texts in batches of --batch (as `datasets.map(batched=True)` calls it), offsets included.
Rounds alternate the two so neither gets a warmer machine; the median round is reported.
Writes benchmarks/results/tokenizer-throughput.json.
"""

from __future__ import annotations

import argparse
import os
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus_tools.artifacts import machine  # noqa: E402


def nsmc_docs(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[1] for line in lines if line.count("\t") == 2]


def jsonl_texts(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=str(ROOT / "runs" / "vocab-full"))
    ap.add_argument("--nsmc-test", default=str(ROOT.parent / "shared" / "data" / "nsmc" / "ratings_test.txt"))
    ap.add_argument("--petitions", default=str(ROOT.parent / "shared" / "data" / "corpus" / "petitions.jsonl.gz"))
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tokenizer-throughput.json"))
    a = ap.parse_args()

    from corpus_tools.artifacts import read_manifest
    from corpus_tools.morph import default_threads, get_kiwi, kiwi_version
    from korbert.tokenizer import KorBertTokenizer

    threads = default_threads()  # the tokenizer's Kiwi uses all cores
    tok = KorBertTokenizer.from_pretrained(a.tokenizer)
    kiwi = get_kiwi(threads, **tok.kiwi_options)  # the very instance the tokenizer uses
    docs = nsmc_docs(Path(a.nsmc_test))
    chars = sum(map(len, docs))
    print(f"NSMC-R test: {len(docs)} documents, {chars} characters; {threads} threads; batch {a.batch}")

    def timed(fn) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this process, all threads: robust to other load)."""
        w, c = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - w, time.process_time() - c

    def run_kiwi() -> tuple[float, float]:
        return timed(lambda: [None for _ in kiwi.tokenize(docs)])

    def run_korbert() -> tuple[float, float]:
        return timed(lambda: [tok(docs[i : i + a.batch], return_offsets_mapping=True) for i in range(0, len(docs), a.batch)])

    run_kiwi(), run_korbert()  # warm-up: model pages, caches
    times = {"kiwi": [], "korbert": []}
    cpu = {"kiwi": [], "korbert": []}
    for r in range(a.rounds):
        for name, fn in (("kiwi", run_kiwi), ("korbert", run_korbert)) if r % 2 == 0 else (("korbert", run_korbert), ("kiwi", run_kiwi)):
            wall, cpu_s = fn()
            times[name].append(wall)
            cpu[name].append(cpu_s)
            print(f"  round {r + 1} {name:8s} {chars / wall:>12,.0f} chars/s   {chars / cpu_s:>10,.0f} chars/CPU-s")
    kiwi_cps = chars / statistics.median(times["kiwi"])
    korbert_cps = chars / statistics.median(times["korbert"])
    cpu_ratio = statistics.median(cpu["kiwi"]) / statistics.median(cpu["korbert"])
    load = os.getloadavg()[0]

    def quality(texts: list[str]) -> dict:
        n_tok = n_unk = n_byte = n_char = 0
        for i in range(0, len(texts), a.batch):
            for ids in tok(texts[i : i + a.batch], add_special_tokens=False)["input_ids"]:
                n_tok += len(ids)
                n_unk += ids.count(tok.unk_token_id)
                n_byte += sum(1 for t in ids if 5 <= t and tok.convert_ids_to_tokens(t).startswith("<0x"))
            n_char += sum(len(t) for t in texts[i : i + a.batch])
        return {
            "documents": len(texts), "characters": n_char, "tokens": n_tok,
            "unk_rate": n_unk / n_tok, "byte_fallback_token_share": n_byte / n_tok, "tokens_per_char": n_tok / n_char,
        }

    q_nsmc = quality(docs)
    q_pet = quality(jsonl_texts(Path(a.petitions)))
    manifest = read_manifest(a.tokenizer, "vocab")
    result = {
        "stage": "tokenizer",
        "what": "throughput vs bare Kiwi; [UNK] rate; tokens per character",
        "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
        "machine": machine(),
        "threads": threads,
        "batch": a.batch,
        "rounds": a.rounds,
        "kiwipiepy": kiwi_version(),
        "tokenizer": {"path": a.tokenizer, "hash": tok.fingerprint, "vocab_size": len(tok), "config": manifest["config"]},
        "nsmc_test_characters": chars,
        "kiwi_chars_per_s": round(kiwi_cps),
        "korbert_chars_per_s": round(korbert_cps),
        "ratio_korbert_to_kiwi": round(korbert_cps / kiwi_cps, 3),
        "ratio_korbert_to_kiwi_cpu_time": round(cpu_ratio, 3),
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "cpu_seconds": {k: [round(x, 3) for x in v] for k, v in cpu.items()},
        "load_average_1min_at_end": round(load, 2),
        "nsmc_test": q_nsmc,
        "petitions": q_pet,
    }
    print(f"bare Kiwi   {kiwi_cps:>12,.0f} chars/s")
    print(f"korbert     {korbert_cps:>12,.0f} chars/s   ratio {korbert_cps / kiwi_cps:.3f} (target >= 0.8)")
    print(f"CPU-time ratio {cpu_ratio:.3f} (Kiwi CPU-s / korbert CPU-s); 1-min load average {load:.2f}")
    for name, q in (("NSMC-R test", q_nsmc), ("petitions", q_pet)):
        print(f"{name:12s} [UNK] rate {q['unk_rate']:.6f}  tokens/char {q['tokens_per_char']:.3f}  byte-fallback share {q['byte_fallback_token_share']:.5f}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"-> {a.out}")
    return result


if __name__ == "__main__":
    main()
