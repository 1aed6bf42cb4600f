"""Shards stage end to end (raw text -> finished shards) against bare Kiwi, side by side in one run.

    python benchmarks/shards_throughput.py --tokenizer runs/vocab-full          # throughput vs Kiwi
    python benchmarks/shards_throughput.py --tokenizer runs/vocab-full --full   # whole corpus, memory

Throughput (default): on petitions.jsonl.gz and on the first --reviews-lines lines of
reviews.jsonl.gz (written to a temp file), time `korbert shards` end to end (read, clean, Kiwi,
tokenize, BERT recipe, write, checksums, manifest) and bare Kiwi = `get_kiwi(T).tokenize(texts)` on
the same cleaned texts with the same thread count (Kiwi's analysis is the physical limit of any
Kiwi-based pipeline). MB/s counts uncompressed input bytes. Rounds alternate the order; the median
is reported. Writes benchmarks/results/shards-throughput.json.

--full: the whole shared corpus (both files) into --out with the default options; reports peak RSS
(ru_maxrss) and the RSS after each finished shard (to show memory stays flat), instance counts and
the recipe statistics from the manifest. Writes benchmarks/results/shards-full-corpus.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

from corpus_tools.artifacts import machine  # noqa: E402
CORPUS = default_folder() / "corpus"


def rss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def cleaned_texts(path: Path, fields: list[str]) -> tuple[list[str], int]:
    """The texts the stage will see (same reader, same cleaning, same filters) and the input bytes."""
    from corpus_tools.shards_config import ShardsConfig
    from corpus_tools.text import ReadStats, clean, iter_documents

    d = ShardsConfig()
    stats = ReadStats()
    texts = []
    for _, raw in iter_documents([path], text_field=fields, stats=stats):
        t = clean(raw)
        if d.min_chars <= len(t) <= d.max_doc_chars:
            texts.append(t)
    return texts, stats.bytes


def throughput(a) -> dict:
    from corpus_tools.morph import default_threads, get_kiwi, kiwi_version
    from corpus_tools.shards import main
    from corpus_tools.shards_config import ShardsConfig
    from korbert.tokenizer import KorBertTokenizer

    threads = default_threads()
    tok = KorBertTokenizer.from_pretrained(a.tokenizer)
    kiwi = get_kiwi(threads, **tok.kiwi_options)  # the very instance the tokenizer uses
    tmp = Path(tempfile.mkdtemp(prefix="shards-bench-"))
    reviews = tmp / f"reviews-{a.reviews_lines}.jsonl"
    with gzip.open(a.reviews, "rt", encoding="utf-8") as f, open(reviews, "w", encoding="utf-8") as out:
        for _, line in zip(range(a.reviews_lines), f):
            out.write(line)
    # warm-up, so neither side pays one-time costs (Kiwi model pages, imports) in a timed run
    warm = tmp / "warm.jsonl"
    warm.write_text(json.dumps({"text": "형태소 분석기를 데웁니다. 두 문장입니다."}, ensure_ascii=False) + "\n", encoding="utf-8")
    main(ShardsConfig(tokenizer=a.tokenizer, inputs=[str(warm)], out=str(tmp / "warm"), show=0))

    results = {}
    for name, path in (("petitions", Path(a.petitions)), (f"reviews_{a.reviews_lines // 1000}k", reviews)):
        texts, nbytes = cleaned_texts(path, ["title", "text"])
        chars = sum(map(len, texts))
        print(f"{name}: {len(texts)} documents, {chars:,} characters, {nbytes / 1e6:.1f} MB; {threads} threads")

        def run_kiwi() -> None:
            for _ in kiwi.tokenize(texts):
                pass

        def run_encode() -> None:  # the tokenizer's share: encode_documents alone, batches as the stage makes them
            d, batch, chars = ShardsConfig(), [], 0
            for t in texts:
                batch.append(t)
                chars += len(t)
                if d.batch_full(len(batch), chars):
                    tok.encode_documents(batch)
                    batch, chars = [], 0
            if batch:
                tok.encode_documents(batch)

        def run_shards() -> None:
            main(ShardsConfig(tokenizer=a.tokenizer, inputs=[str(path)], out=str(tmp / name), show=0, force=True))

        times = {"kiwi": [], "encode_documents": [], "shards": []}
        cpu = {w: [] for w in times}
        loads = [os.getloadavg()[0]]
        for r in range(a.rounds):
            order = (("kiwi", run_kiwi), ("encode_documents", run_encode), ("shards", run_shards))
            for what, fn in order if r % 2 == 0 else order[::-1]:
                w, c = time.perf_counter(), time.process_time()  # CPU seconds, all threads: robust to other load
                fn()
                times[what].append(time.perf_counter() - w)
                cpu[what].append(time.process_time() - c)
                print(f"  round {r + 1} {what:16s} {nbytes / 1e6 / times[what][-1]:6.2f} MB/s  {times[what][-1]:6.1f} s  ({cpu[what][-1]:6.1f} CPU-s)")
        loads.append(os.getloadavg()[0])
        k, e, s = (statistics.median(times[w]) for w in ("kiwi", "encode_documents", "shards"))
        kc, ec, sc = (statistics.median(cpu[w]) for w in ("kiwi", "encode_documents", "shards"))
        m = json.loads((tmp / name / "manifest.json").read_text(encoding="utf-8"))
        results[name] = {
            "documents": len(texts), "characters": chars, "bytes": nbytes,
            "kiwi_MB_per_s": round(nbytes / 1e6 / k, 3), "shards_MB_per_s": round(nbytes / 1e6 / s, 3),
            "kiwi_chars_per_s": round(chars / k), "shards_chars_per_s": round(chars / s),
            "ratio": round(k / s, 3),
            "ratio_cpu_time": round(kc / sc, 3),
            # each round's own ratio (its Kiwi and shards runs side by side, the order alternating), median over
            # rounds: steadier than the ratio of medians when the machine's speed drifts between rounds
            "ratio_paired_median": round(statistics.median(a / b for a, b in zip(times["kiwi"], times["shards"])), 3),
            "ratio_cpu_time_paired_median": round(statistics.median(a / b for a, b in zip(cpu["kiwi"], cpu["shards"])), 3),
            "ratio_encode_documents_to_kiwi": round(k / e, 3),  # the tokenizer alone: a ceiling for the stage
            "ratio_encode_documents_to_kiwi_cpu_time": round(kc / ec, 3),
            "seconds": {w: [round(x, 2) for x in v] for w, v in times.items()},
            "cpu_seconds": {w: [round(x, 2) for x in v] for w, v in cpu.items()},
            "load_average_1min_before_after": [round(x, 2) for x in loads],
            "train_instances": m["counts"]["train"]["instances"],
        }
        print(
            f"  bare Kiwi {nbytes / 1e6 / k:6.2f} MB/s   shards {nbytes / 1e6 / s:6.2f} MB/s   ratio {k / s:.3f} (median / median)"
            f"   [encode_documents alone: ratio {k / e:.3f}]\n"
            f"  per-round ratios {[round(a / b, 3) for a, b in zip(times['kiwi'], times['shards'])]}: median "
            f"{results[name]['ratio_paired_median']:.3f} (CPU time {results[name]['ratio_cpu_time_paired_median']:.3f})\n"
            f"  CPU-time ratio {kc / sc:.3f} (Kiwi CPU-s / shards CPU-s; encode_documents alone {kc / ec:.3f}); "
            f"1-min load average {loads[0]:.2f} -> {loads[1]:.2f}"
        )
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return {
        **{f"ratio_{n}": r["ratio"] for n, r in results.items()},
        "stage": "shards",
        "what": "end-to-end throughput (raw text -> finished shards) vs bare Kiwi morpheme analysis, same texts, same threads; "
        "encode_documents alone (the tokenizer's part) for reference",
        "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
        "machine": machine(),
        "threads": threads,
        "rounds": a.rounds,
        "kiwipiepy": kiwi_version(),
        "tokenizer": {"path": a.tokenizer, "hash": tok.fingerprint, "vocab_size": len(tok)},
        "config": "korbert shards defaults (dynamic masking, by morpheme, max_seq_len 128)",
        **results,
    }


def full(a) -> dict:
    from corpus_tools.shards import main
    from corpus_tools.shards_config import ShardsConfig

    cfg = ShardsConfig(tokenizer=a.tokenizer, inputs=[a.reviews, a.petitions], out=a.out, show=2, force=True)
    with gzip.open(a.reviews, "rb") as f1, gzip.open(a.petitions, "rb") as f2:
        total_bytes = sum(len(line) for line in f1) + sum(len(line) for line in f2)
    pieces = -(-total_bytes // int(cfg.shard_mb * 1e6))  # about: each file's last piece is shorter
    samples = []
    load0 = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    rss0 = rss_mb()

    def on_piece(name: str) -> None:
        samples.append({
            "piece": name, "share_done": round(min((len(samples) + 1) / pieces, 1.0), 3), "seconds": round(time.perf_counter() - t0, 1),
            "rss_MB": round(rss_mb()), "peak_rss_MB": round(peak_rss_mb()),
        })
        print(f"  piece {name}: ~{samples[-1]['share_done']:.0%} of the input, RSS {samples[-1]['rss_MB']} MB", file=sys.stderr)

    m = main(cfg, on_piece=on_piece)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    rss_after = rss_mb()
    at = {}
    for q in (0.25, 0.5, 0.75, 1.0):
        s = min(samples, key=lambda x: abs(x["share_done"] - q))
        at[f"{int(q * 100)}%"] = s["rss_MB"]
    c = m["counts"]
    tr = c["train"]
    result = {
        "peak_rss_MB": round(peak_rss_mb()),
        "rss_MB_at_share_of_documents": at,
        "rss_MB_before_run": round(rss0),
        "rss_MB_after_run": round(rss_after),
        "rss_note": "about 600 MB is the Kiwi model + tokenizer; writing the manifest imports torch (artifacts.versions), ~130 MB",
        "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
        "machine": machine(),
        "out": a.out,
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu_seconds, 1),
        "MB_per_s": round(c["bytes"] / 1e6 / seconds, 3),
        "load_average_1min_before_after": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "config": m["config"],
        "tokenizer_hash": m["tokenizer_hash"],
        "documents_in": c["documents_in"], "documents_used": c["documents_used"], "documents_skipped": c["documents_skipped"],
        "sentences": c["sentences"],
        "train": tr, "valid": c["valid"],
        "mean_train_instance_tokens": round(tr["tokens"] / tr["instances"], 1),
        "shards": {s: len(v) for s, v in m["shards"].items()},
        "rss_samples": samples,
    }
    mk = tr["masking"]
    print(
        f"full corpus: {c['bytes'] / 1e6:.1f} MB in {seconds:.0f} s ({result['MB_per_s']:.2f} MB/s, {cpu_seconds:.0f} CPU-s, "
        f"1-min load {result['load_average_1min_before_after']}); "
        f"peak RSS {result['peak_rss_MB']} MB; RSS at 25/50/75/100%: {list(at.values())} MB\n"
        f"  documents {c['documents_in']} in = {c['documents_used']} used + {sum(c['documents_skipped'].values())} skipped {c['documents_skipped']}\n"
        f"  instances: train {tr['instances']:,} ({tr['tokens']:,} tokens, mean {result['mean_train_instance_tokens']}), "
        f"valid {c['valid']['instances']:,}\n"
        f"  IsNext {tr['isnext_share']} (free chunks: {tr['isnext_share_when_free']}; {tr['forced_random_next']:,} forced NotNext, "
        f"{tr.get('single_sentence_split', 0):,} one-sentence chunks split, {m['config'].get('single_sentence', 'random')} mode); "
        f"masked {mk['masked_share']}; "
        f"[MASK]/random/kept {mk['mask_share']}/{mk['random_share']}/{mk['keep_share']}"
    )
    return result


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=str(ROOT / "runs" / "vocab-full"))
    ap.add_argument("--petitions", default=str(CORPUS / "petitions.jsonl.gz"))
    ap.add_argument("--reviews", default=str(CORPUS / "reviews.jsonl.gz"))
    ap.add_argument("--reviews-lines", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--full", action="store_true", help="build the whole corpus and report memory + statistics")
    ap.add_argument("--out", default=str(ROOT / "runs" / "shards-full"), help="--full: where the shards go")
    ap.add_argument("--result", default=None, help="result JSON (default benchmarks/results/shards-{throughput,full-corpus}.json)")
    a = ap.parse_args()
    result = full(a) if a.full else throughput(a)
    out = Path(a.result or ROOT / "benchmarks" / "results" / ("shards-full-corpus.json" if a.full else "shards-throughput.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    print(f"-> {out}")
    return result


if __name__ == "__main__":
    main()
