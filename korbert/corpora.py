"""The pretraining corpora `korbert data get` derives from what it downloaded (korbert/data_get.py
fetches and verifies; these functions read the downloads and write `corpus/*.jsonl.gz`), each with
the evaluation text taken out and counted:

  * reviews: the NSMC crawl minus every NSMC test review (by id, and by letters and digits alone);
  * petitions: every month of the archive (korbert/petitions.py);
  * kowiki: Wikipedia minus KorQuAD dev's articles (by title) and every article sharing a 48-character
    run with a dev context.

With KLUE's dev files in the data folder (`korbert data get klue`), the reviews and kowiki also lose
every document that holds KLUE dev text, by the eval-text guard's rules (corpus_tools/guard.py:
equal by letters and digits, a whole text of 20 characters or more, or a shared 48-character run).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
import tarfile
from pathlib import Path
from typing import Callable

# the crawl behind NSMC, as counted when this project's NSMC-R was rebuilt from it (../shared/data/README.md)
CRAWL_REVIEWS = 712_404


def klue_dev(folder: Path) -> list[Path]:
    """The KLUE dev files the data folder holds (none: nothing of KLUE's is taken out)."""
    from evals.klue_data import dev_files

    return list(dev_files(folder).values())


def _write_jsonl_gz(path: Path, rows) -> None:
    """Rows as JSON Lines, gzip (mtime 0: the same rows give the same bytes), atomically (a failure
    while writing leaves the file there before untouched)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            buf = io.BufferedWriter(gz, 1 << 20)
            for row in rows:
                buf.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
            buf.flush()
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _tar_members(path: Path, keep: Callable[[str], bool]):
    """(name, bytes) of the archive's regular files that `keep`, sorted by name (archive order is GitHub's)."""
    with tarfile.open(path, "r:gz") as tar:
        members = sorted((m for m in tar.getmembers() if m.isfile() and keep(m.name)), key=lambda m: m.name)
        for m in members:
            yield m.name, tar.extractfile(m).read()


def _progress(total: int | None, unit: str, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=desc, unit_scale=True, disable=None, file=sys.stderr)


def derive_reviews(folder: Path, downloads: dict[str, Path]) -> dict:
    """The crawl's reviews minus every NSMC test review: by id, and by letters and digits alone; and
    minus every review that holds KLUE dev text, when the folder has KLUE's dev files."""
    from corpus_tools.guard import EvalText

    test = folder / "nsmc" / "ratings_test.txt"
    guard = EvalText(nsmc_test=[test], klue=klue_dev(folder))
    with open(test, encoding="utf-8") as fh:
        next(fh)
        test_ids = {line.split("\t", 1)[0] for line in fh}
    counts = {"crawl_reviews": 0, "empty": 0, "nsmc_test_id": 0, "nsmc_test_text": 0, "klue_review": 0, "klue_text": 0,
              "duplicate_id": 0, "documents": 0}
    seen: set[str] = set()

    def rows():
        bar = _progress(None, " files", "reviews")
        for _, data in _tar_members(downloads["crawl"], lambda n: re.search(r"/raw/[^/]+\.json$", n) is not None):
            bar.update(1)
            for r in json.loads(data):
                counts["crawl_reviews"] += 1
                rid, text = str(r.get("review_id", "")), (r.get("review") or "").strip()
                if not text:
                    counts["empty"] += 1
                elif rid in test_ids:
                    counts["nsmc_test_id"] += 1
                elif guard.is_review(text):
                    counts["nsmc_test_text"] += 1
                elif kind := guard.check(text):  # (KLUE's: the NSMC and KorQuAD tests were made above)
                    counts[kind] += 1
                elif rid in seen:
                    counts["duplicate_id"] += 1
                else:
                    seen.add(rid)
                    counts["documents"] += 1
                    yield {"id": f"review-{rid}", "text": text}
        bar.close()

    _write_jsonl_gz(folder / "corpus" / "reviews.jsonl.gz", rows())
    if counts["crawl_reviews"] != CRAWL_REVIEWS:  # the archive has no checksum the code carries: what it holds is compared
        counts["warning"] = (f"{downloads['crawl']}: the crawl holds {counts['crawl_reviews']:,} reviews, not the {CRAWL_REVIEWS:,} "
                             f"counted in e9t/nsmc raw/ when this project's NSMC-R was rebuilt from it")
        print(f"WARNING: {counts['warning']}", file=sys.stderr)
    return counts


def derive_petitions(folder: Path, downloads: dict[str, Path]) -> dict:
    """Every month of the archive, each checked against its `files` list (korbert/petitions.py)."""
    from korbert.petitions import months

    counts = {"months": 0, "months_listed": 0, "petitions": 0, "empty": 0, "documents": 0}

    def rows():
        for month, data in months(downloads["archive"], counts):
            for i, line in enumerate(data.decode("utf-8").split("\n")):  # not splitlines(): U+2028 may sit inside a string
                if not line.strip():
                    continue
                p = json.loads(line)
                counts["petitions"] += 1
                text = (p.get("content") or "").strip()
                if not text:
                    counts["empty"] += 1
                    continue
                counts["documents"] += 1
                yield {"id": f"{month}-{i}", "title": (p.get("title") or "").strip(), "text": text}

    _write_jsonl_gz(folder / "corpus" / "petitions.jsonl.gz", rows())
    return counts


def derive_kowiki(folder: Path, downloads: dict[str, Path]) -> dict:
    """Wikipedia's articles, one paragraph a line, minus KorQuAD dev's articles and its copied text, and
    minus every article that holds KLUE dev text, when the folder has KLUE's dev files."""
    import unicodedata

    import pyarrow.parquet as pq

    from corpus_tools.guard import EvalText

    guard = EvalText(korquad=[folder / "korquad" / "KorQuAD_v1.0_dev.json"], klue=klue_dev(folder))
    counts = {"articles": 0, "empty": 0, "korquad_title": 0, "korquad_context": 0, "klue_review": 0, "klue_text": 0, "documents": 0}
    files = [downloads[k] for k in sorted(downloads, key=lambda k: int(k.removeprefix("part")))]
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)

    def rows():
        bar = _progress(total, " articles", "kowiki")
        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(columns=["id", "title", "text"], batch_size=2048):
                for aid, title, text in zip(*(batch.column(c).to_pylist() for c in ("id", "title", "text"))):
                    bar.update(1)
                    counts["articles"] += 1
                    text = "\n".join(line.strip() for line in (text or "").splitlines() if line.strip())
                    title = unicodedata.normalize("NFC", (title or "").strip())
                    if not text:
                        counts["empty"] += 1
                    elif guard.is_title(title):
                        counts["korquad_title"] += 1
                    elif kind := guard.check(text):  # a KorQuAD context's run, or KLUE's text
                        counts[kind] += 1
                    else:
                        counts["documents"] += 1
                        yield {"id": aid, "title": title, "text": text}
        bar.close()

    _write_jsonl_gz(folder / "corpus" / "kowiki.jsonl.gz", rows())
    return counts
