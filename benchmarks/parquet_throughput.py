"""Parquet inputs against JSON Lines (plain and .gz) on the same documents: the reader, and the shards stage.

    python benchmarks/parquet_throughput.py --tokenizer runs/vocab

The first --docs lines of --reviews are written, in a temp folder, as a plain .jsonl, a .jsonl.gz
(gzip's default level) and a .parquet (pyarrow's defaults: snappy; --row-group-rows rows per row
group), the same rows in each. Then, rounds in alternating order:

  * reader: corpus_tools' reading path up to the cleaned text, no Kiwi: `text.iter_documents`
    (JSON decoding or Parquet row groups, `--text-field title text` as the stages' default) then
    `text.clean` (NFC, control characters, whitespace) on every document. Documents/s and MB/s, MB
    being the plain .jsonl's bytes for every format (the same documents, one denominator). Before
    timing, the three formats' cleaned texts are checked to be the same, in the same order.
  * shards (with --tokenizer): `korbert shards` end to end in this process (defaults; one process,
    Kiwi on every core) on the first --shards-docs documents, written as the same three files, after
    a warm-up.

Every ratio is parquet's throughput over JSON Lines' (> 1: Parquet is faster), of the medians and
of each round's pair. Writes benchmarks/results/shards-parquet.json (machine, command, load
average before and after, every `ratio…`).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402

SHARED = default_folder() / "corpus" / "reviews.jsonl.gz"
FIELDS = ["title", "text"]  # the stages' default --text-field


def write_inputs(src: Path, docs: int, folder: Path, row_group_rows: int) -> dict[str, Path]:
    """The first `docs` lines of src as .jsonl, .jsonl.gz and .parquet (columns of its objects' keys)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with gzip.open(src, "rb") if src.suffix == ".gz" else open(src, "rb") as f:
        lines = [line for _, line in zip(range(docs), f)]
    plain = folder / "reviews.jsonl"
    plain.write_bytes(b"".join(lines))
    gz = folder / "reviews.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    rows = [json.loads(line) for line in lines]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    table = pa.table({k: pa.array([r.get(k) for r in rows]) for k in keys})
    parquet = folder / "reviews.parquet"
    pq.write_table(table, parquet, row_group_size=row_group_rows)
    return {"jsonl": plain, "jsonl_gz": gz, "parquet": parquet}


def read_clean(path: Path | str) -> tuple[int, int]:
    """The reader: every document read and cleaned, as `korbert vocab` and `korbert shards` do -> (documents kept, characters)."""
    from corpus_tools.text import clean, iter_documents

    n = chars = 0
    for _, raw in iter_documents([path], text_field=FIELDS):
        text = clean(raw)
        if text:
            n += 1
            chars += len(text)
    return n, chars


def cleaned(path: Path | str) -> list[str]:
    from corpus_tools.text import clean, iter_documents

    return [clean(raw) for _, raw in iter_documents([path], text_field=FIELDS)]


def timed(fn, rounds: int, names: list[str]) -> tuple[dict, dict]:
    """fn(name) for every name, rounds times, the order reversed every other round -> (wall, CPU) seconds per name."""
    wall = {n: [] for n in names}
    cpu = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            w, c = time.perf_counter(), time.process_time()
            fn(name)
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)
    return wall, cpu


def ratios(prefix: str, wall: dict, cpu: dict) -> dict:
    """Parquet's throughput over each JSON Lines form's: median over median, per-round pairs, CPU time."""
    out = {}
    for other in ("jsonl", "jsonl_gz"):
        p, o = wall["parquet"], wall[other]
        out[f"ratio_{prefix}_parquet_vs_{other}"] = round(statistics.median(o) / statistics.median(p), 3)
        out[f"ratio_{prefix}_parquet_vs_{other}_paired_median"] = round(statistics.median(b / a for a, b in zip(p, o)), 3)
        out[f"ratio_{prefix}_parquet_vs_{other}_cpu_time"] = round(statistics.median(cpu[other]) / statistics.median(cpu["parquet"]), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reviews", default=str(SHARED) if SHARED.is_file() else str(ROOT / "corpus_tools" / "sample_data" / "reviews.jsonl.gz"))
    ap.add_argument("--docs", type=int, default=200_000, help="documents for the reader")
    ap.add_argument("--row-group-rows", type=int, default=50_000, help="rows per Parquet row group")
    ap.add_argument("--rounds", type=int, default=5, help="reader rounds")
    ap.add_argument("--tokenizer", default="", help="a tokenizer folder: also time `korbert shards` end to end")
    ap.add_argument("--shards-docs", type=int, default=10_000, help="documents for the shards runs")
    ap.add_argument("--shards-rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "shards-parquet.json"))
    a = ap.parse_args()

    import pyarrow

    loads = [os.getloadavg()]
    tmp = Path(tempfile.mkdtemp(prefix="parquet-bench-"))
    try:
        files = write_inputs(Path(a.reviews), a.docs, tmp, a.row_group_rows)
        names = list(files)
        mb = files["jsonl"].stat().st_size / 1e6
        texts = {n: cleaned(p) for n, p in files.items()}  # untimed: the same documents, or no comparison
        if not texts["parquet"] == texts["jsonl"] == texts["jsonl_gz"]:
            raise SystemExit("the formats' cleaned documents differ: no comparison")
        docs = sum(1 for t in texts["jsonl"] if t)
        del texts
        print(f"{docs} documents, {mb:.1f} MB as .jsonl; files: "
              + ", ".join(f"{n} {p.stat().st_size / 1e6:.1f} MB" for n, p in files.items()) + f"; load {loads[0][0]:.2f}")

        wall, cpu = timed(lambda n: read_clean(files[n]), a.rounds, names)
        reader = {
            n: {
                "file_MB": round(files[n].stat().st_size / 1e6, 2),
                "seconds": [round(x, 3) for x in wall[n]], "cpu_seconds": [round(x, 3) for x in cpu[n]],
                "documents_per_s": round(docs / statistics.median(wall[n])),
                "MB_per_s": round(mb / statistics.median(wall[n]), 2),
            }
            for n in names
        }
        for n in names:
            print(f"  reader {n:9s} {reader[n]['documents_per_s']:>9,} docs/s  {reader[n]['MB_per_s']:7.2f} MB/s  (median of {a.rounds})")
        result = {**ratios("reader", wall, cpu)}
        for other in ("jsonl", "jsonl_gz"):
            print(f"  reader parquet/{other}: {result[f'ratio_reader_parquet_vs_{other}']:.3f}  "
                  f"(paired {result[f'ratio_reader_parquet_vs_{other}_paired_median']:.3f}, CPU time {result[f'ratio_reader_parquet_vs_{other}_cpu_time']:.3f})")

        shards = None
        if a.tokenizer:
            from corpus_tools.shards import main as shards_main
            from corpus_tools.shards_config import ShardsConfig

            (tmp / "shards").mkdir()
            small = write_inputs(Path(a.reviews), a.shards_docs, tmp / "shards", a.row_group_rows)  # whole files: plain .jsonl in byte ranges

            def run(name: str) -> None:
                with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the stage's report, every run
                    shards_main(ShardsConfig(tokenizer=a.tokenizer, inputs=[str(small[name])], out=str(tmp / f"shards-{name}"), show=0, force=True))

            run("jsonl")  # warm-up: Kiwi's model, imports
            swall, scpu = timed(run, a.shards_rounds, names)
            manifests = {n: json.loads((tmp / f"shards-{n}" / "manifest.json").read_text(encoding="utf-8")) for n in names}
            counts = {n: m["counts"] for n, m in manifests.items()}
            same = ("documents_in", "documents_used", "documents_skipped", "sentences", "document_tokens")
            smb = small["jsonl"].stat().st_size / 1e6
            shards = {
                "documents": a.shards_docs, "MB_as_jsonl": round(smb, 2),
                "same_document_counts": all({k: counts[n][k] for k in same} == {k: counts["jsonl"][k] for k in same} for n in names),
                **{n: {"seconds": [round(x, 2) for x in swall[n]], "cpu_seconds": [round(x, 2) for x in scpu[n]],
                       "MB_per_s": round(smb / statistics.median(swall[n]), 3), "pieces": counts[n]["pieces"],
                       # the last round's tasks, by part (read: reading and cleaning; process: all threads, Kiwi's included)
                       "tasks_cpu_seconds": manifests[n]["run"]["cpu_seconds"]} for n in names},
            }
            result.update(ratios("shards", swall, scpu))
            for n in names:
                print(f"  shards {n:9s} {statistics.median(swall[n]):6.2f} s  {shards[n]['MB_per_s']:.3f} MB/s  (median of {a.shards_rounds}); "
                      f"last run's tasks: {shards[n]['tasks_cpu_seconds']} CPU-s")
            for other in ("jsonl", "jsonl_gz"):
                print(f"  shards parquet/{other}: {result[f'ratio_shards_parquet_vs_{other}']:.3f}  "
                      f"(paired {result[f'ratio_shards_parquet_vs_{other}_paired_median']:.3f}, CPU time {result[f'ratio_shards_parquet_vs_{other}_cpu_time']:.3f})")
        loads.append(os.getloadavg())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    out = {
        **result,
        "stage": "shards",
        "what": "Parquet vs JSON Lines (plain, .gz) inputs on the same documents: corpus_tools' reader up to the cleaned text "
        "(no Kiwi), and `korbert shards` end to end; ratios are Parquet's throughput over JSON Lines' (> 1: Parquet faster)",
        "command": "python " + " ".join([sys.argv[0], *sys.argv[1:]]),
        "machine": machine(),
        "load_average_before": [round(x, 2) for x in loads[0]],
        "load_average_after": [round(x, 2) for x in loads[-1]],
        "pyarrow": pyarrow.__version__,
        "input": {"source": a.reviews, "documents": a.docs, "documents_kept": docs, "MB_as_jsonl": round(mb, 2),
                  "parquet": f"pyarrow.parquet.write_table defaults (snappy), {a.row_group_rows} rows per row group",
                  "jsonl_gz": "gzip.compress defaults", "text_field": FIELDS},
        "reader": {"rounds": a.rounds, "MB_means": "the plain .jsonl's bytes, for every format", **reader},
        **({"shards": {"rounds": a.shards_rounds, "tokenizer": a.tokenizer, **shards}} if shards else {}),
    }
    atomic_write_json(a.out, out)
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
