"""Tokenizer throughput against bare Kiwi, side by side in one run; [UNK] rate; tokens per char.

    python benchmarks/tokenizer_throughput.py --tokenizer runs/vocab-full

Two corpora: NSMC-R test (50,000 short reviews) and petitions (3,030 long documents). Bare Kiwi =
`Kiwi(num_workers=T).tokenize(texts)` on the same texts with the same thread count: Kiwi's analysis
is the physical limit of a Kiwi-based tokenizer. korbert = KorBertTokenizer on the same texts in
batches of --batch (as `datasets.map(batched=True)` calls it), offsets included, each batch's
output dropped once made (as datasets.map does after writing it to Arrow).

batch=1: one string per call, as loops and web handlers call it, on the first --one-docs texts of
each corpus; its bare Kiwi is `kiwi.tokenize(text)` per string (what a Kiwi user does per string).

Rounds alternate the order of the two so neither gets a warmer machine; the median round is
reported, as a ratio of wall time and of CPU time (process CPU-seconds, all threads: robust to
other load on the machine). Writes benchmarks/results/tokenizer-throughput.json.
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
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

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
    ap.add_argument("--nsmc-test", default=str(default_folder() / "nsmc" / "ratings_test.txt"))
    ap.add_argument("--petitions", default=str(default_folder() / "corpus" / "petitions.jsonl.gz"))
    ap.add_argument("--petitions-docs", type=int, default=None, help="only the first N petitions (default: all)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one-docs", type=int, nargs=2, default=[5000, 300], metavar=("NSMC", "PETITIONS"),
                    help="batch=1: how many texts of each corpus, one string per call")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tokenizer-throughput.json"))
    a = ap.parse_args()

    from corpus_tools.artifacts import read_manifest
    from corpus_tools.morph import default_threads, get_kiwi, kiwi_version
    from korbert.tokenizer import KorBertTokenizer

    threads = default_threads()  # the tokenizer's Kiwi uses all cores
    tok = KorBertTokenizer.from_pretrained(a.tokenizer)
    kiwi = get_kiwi(threads, **tok.kiwi_options)  # the very instance the tokenizer uses
    corpora = {"nsmc_test": nsmc_docs(Path(a.nsmc_test)), "petitions": jsonl_texts(Path(a.petitions))[: a.petitions_docs]}

    def timed(fn) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this process, all threads: robust to other load)."""
        w, c = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - w, time.process_time() - c

    def compare(docs: list[str], one: bool) -> dict:
        chars = sum(map(len, docs))
        if one:
            def run_kiwi():
                for d in docs:
                    kiwi.tokenize(d)

            def run_korbert():
                for d in docs:
                    tok(d, return_offsets_mapping=True)
        else:
            def run_kiwi():
                for _ in kiwi.tokenize(docs):
                    pass

            def run_korbert():
                for i in range(0, len(docs), a.batch):
                    tok(docs[i : i + a.batch], return_offsets_mapping=True)

        warm = docs[: min(len(docs), 2000)]  # warm-up: model pages, caches
        list(kiwi.tokenize(warm)), tok(warm[:300]) if one else [tok(warm[i : i + a.batch]) for i in range(0, len(warm), a.batch)]
        times = {"kiwi": [], "korbert": []}
        cpu = {"kiwi": [], "korbert": []}
        loads = [os.getloadavg()[0]]
        for r in range(a.rounds):
            pairs = (("kiwi", run_kiwi), ("korbert", run_korbert))
            for name, fn in pairs if r % 2 == 0 else pairs[::-1]:
                wall, cpu_s = timed(fn)
                times[name].append(wall)
                cpu[name].append(cpu_s)
                print(f"  round {r + 1} {name:8s} {chars / wall:>12,.0f} chars/s   {chars / cpu_s:>10,.0f} chars/CPU-s", flush=True)
        loads.append(os.getloadavg()[0])
        k, t = statistics.median(times["kiwi"]), statistics.median(times["korbert"])
        kc, tc = statistics.median(cpu["kiwi"]), statistics.median(cpu["korbert"])
        return {
            "documents": len(docs), "characters": chars,
            "kiwi_chars_per_s": round(chars / k), "korbert_chars_per_s": round(chars / t),
            "ratio_korbert_to_kiwi": round(k / t, 3), "ratio_korbert_to_kiwi_cpu_time": round(kc / tc, 3),
            "seconds": {n: [round(x, 3) for x in v] for n, v in times.items()},
            "cpu_seconds": {n: [round(x, 3) for x in v] for n, v in cpu.items()},
            "load_average_1min_before_after": [round(x, 2) for x in loads],
        }

    speed = {}
    for name, docs in corpora.items():
        for one in (False, True):
            sub = docs[: a.one_docs[name == "petitions"]] if one else docs
            how = "batch=1" if one else f"batch {a.batch}"
            print(f"{name} ({how}): {len(sub)} documents, {sum(map(len, sub)):,} characters; {threads} threads", flush=True)
            r = speed[f"{name}_{'one' if one else 'batched'}"] = compare(sub, one)
            print(f"  ratio {r['ratio_korbert_to_kiwi']:.3f} wall, {r['ratio_korbert_to_kiwi_cpu_time']:.3f} CPU time "
                  f"(bare Kiwi {r['kiwi_chars_per_s']:,} chars/s, korbert {r['korbert_chars_per_s']:,}); "
                  f"1-min load average {r['load_average_1min_before_after']}", flush=True)

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

    q = {name: quality(docs) for name, docs in corpora.items()}
    manifest = read_manifest(a.tokenizer, "vocab")
    result = {
        **{f"ratio_{n}": r["ratio_korbert_to_kiwi"] for n, r in speed.items()},
        **{f"ratio_{n}_cpu_time": r["ratio_korbert_to_kiwi_cpu_time"] for n, r in speed.items()},
        "stage": "tokenizer",
        "what": "KorBertTokenizer throughput vs bare Kiwi (same texts, same threads; offsets included): "
        f"batches of {a.batch} and one string per call; [UNK] rate; tokens per character",
        "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
        "machine": machine(),
        "threads": threads,
        "batch": a.batch,
        "rounds": a.rounds,
        "kiwipiepy": kiwi_version(),
        "tokenizer": {"path": a.tokenizer, "hash": tok.fingerprint, "vocab_size": len(tok), "config": manifest["config"]},
        **speed,
        "quality": q,
    }
    for name, r in speed.items():
        print(f"{name:20s} ratio {r['ratio_korbert_to_kiwi']:.3f} wall  {r['ratio_korbert_to_kiwi_cpu_time']:.3f} CPU time   "
              f"load {r['load_average_1min_before_after']}")
    for name, x in q.items():
        print(f"{name:12s} [UNK] rate {x['unk_rate']:.6f}  tokens/char {x['tokens_per_char']:.3f}  byte-fallback share {x['byte_fallback_token_share']:.5f}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"-> {a.out}")
    return result


if __name__ == "__main__":
    main()
