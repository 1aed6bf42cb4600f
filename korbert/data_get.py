"""`korbert data get NAME...`: the evaluation sets and pretraining corpora, from their public sources.

    korbert data get all                      # into the data folder (--out, else $KORBERT_DATA, else ~/.cache/korbert/data)
    korbert data get nsmc korquad --out DIR
    korbert data get all --mirror /mnt/korbert-data   # an air-gapped cluster: another data folder, or its URL
    korbert data list                         # what each name is, and what the data folder holds

The data folder's layout is what the presets read:

    nsmc/ratings_train.txt, nsmc/ratings_test.txt        NSMC v1.0 (e9t/nsmc): the official split
    korquad/KorQuAD_v1.0_train.json, ..._dev.json        KorQuAD 1.0 (korquad.github.io)
    klue/klue-nli-v1.1_train.json, ..._dev.json, ...     KLUE v1.1 NLI, STS, NER (.tsv) and YNAT (KLUE-benchmark/KLUE)
    corpus/reviews.jsonl.gz                              the NSMC crawl (e9t/nsmc raw/) minus the NSMC test reviews
    corpus/petitions.jsonl.gz                            lovit/petitions_archive
    corpus/kowiki.jsonl.gz                               Korean Wikipedia (wikimedia/wikipedia, 20231101.ko) minus
                                                         the KorQuAD dev articles (titles compared with `_` as a
                                                         space) and every article sharing a 48-character run
                                                         with a dev context; both corpora also minus KLUE's dev
                                                         text where klue/ holds it (korbert/corpora.py)
    downloads/                                           what the corpora were derived from (kept: re-runs and mirrors)
    korbert-data.json                                    the manifest: sources, revisions, bytes, checksums, counts

Integrity. Every download is checked before it takes its final name:
  * the evaluation files (NSMC, KorQuAD, KLUE) against the git blob ids the code carries (the id GitHub shows);
  * the Wikipedia parquet files against the sha256 of their LFS pointers at the pinned Hub commit
    (the commit id fixes the pointers, and so the sha256);
  * the GitHub archives of the two crawls at pinned commits: GitHub does not promise byte-stable
    archives, so the code carries no checksum for them; the first download's sha256 goes into the
    manifest. The crawl's review count is compared with the 712,404 counted when this project's
    NSMC-R was rebuilt from it: a difference is a warning (printed, and in the manifest's counts),
    not an error, since that count was not taken by this code; the petitions have no such check.
A mirror is another data folder (a directory, or an http(s) URL serving one): the same relative
paths, and its korbert-data.json vouches for the files the code has no checksum for.

A re-run finds verified files and does nothing; an interrupted download resumes (HTTP Range, from
the same URL; an archive nothing pins only with If-Range). A file fetched under an earlier pin is
kept until its replacement is verified. An archive nothing pins whose derivation fails is removed
with its record, so that the next run fetches it again.
A file in the folder that this command did not write (no record in korbert-data.json) is used
when it is the pinned file, and otherwise refused and left as it is (--replace replaces it).
The corpora are written once their inputs verify, atomically, and re-derived only when an input
changed. Nothing here runs at import: tests serve these files from 127.0.0.1 through `--mirror`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from corpus_tools.artifacts import atomic_write_json, sha256_file
from corpus_tools.text import InputError
from evals.data import KORQUAD_GIT_BLOBS
from evals.klue_data import KLUE_COMMIT, KLUE_FILES, KLUE_GIT_BLOBS
from korbert.corpora import derive_kowiki, derive_petitions, derive_reviews, klue_dev

MANIFEST = "korbert-data.json"
HUB = "https://huggingface.co"
NSMC_COMMIT = "b6232e69290a826104357381560e18adbad23473"  # e9t/nsmc, with raw/ (the crawl)
# lovit/petitions_archive, 2017-08 to 2019-08, every month as text and in its `files` list (at f032f9e,
# 2019-01 was a .zip and the list ended there)
PETITIONS_COMMIT = "03dc3f3d69e03a0a4885350c6991e328fc0a6b81"
WIKI_REPO, WIKI_REVISION, WIKI_CONFIG = "wikimedia/wikipedia", "41e6bc09f9122942bcda3499cdbf38a97cb835cc", "20231101.ko"
WIKI_FILES = [f"{WIKI_CONFIG}/train-{i:05d}-of-00003.parquet" for i in range(3)]
# each corpus's filtering rules below: a change re-derives that corpus (kowiki 2: titles compared with `_` as a space;
# petitions 2: months in any form, checked against the archive's `files` list)
DERIVATION = {"reviews": 1, "petitions": 2, "kowiki": 2}
UNPINNED = "nothing (a GitHub archive: its sha256 is recorded on first download)"  # a record's pinned_by


@dataclass(frozen=True)
class Remote:
    rel: str  # its path in the data folder (and on a mirror)
    url: str
    git_blob: str | None = None
    sha256: str | None = None
    revision: str | None = None
    hub: tuple[str, str, str] | None = None  # (dataset repo, revision, path): checksum from the Hub at that commit


@dataclass
class Dataset:
    name: str
    about: str
    remotes: list[Remote]
    outputs: list[str]  # paths in the data folder a preset reads
    needs: list[str] = field(default_factory=list)  # other datasets its derivation reads
    derive: Callable | None = None  # derive(folder, remotes' paths) -> counts
    reads_if_there: Callable | None = None  # folder -> other files its derivation reads where the folder has them


def _gh(repo: str, path: str, ref: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{ref}/{path}"


DATASETS: dict[str, Dataset] = {}


def _register(d: Dataset) -> Dataset:
    DATASETS[d.name] = d
    return d


# --- the evaluation sets: the files themselves, pinned by git blob id -------------------------

_register(Dataset(
    "nsmc", "NSMC v1.0, the official ratings_train.txt / ratings_test.txt (e9t/nsmc, CC0)",
    [Remote("nsmc/ratings_train.txt", _gh("e9t/nsmc", "ratings_train.txt", NSMC_COMMIT), git_blob="ac0dba272895dc1d0b3dd5f11afbeaeb7abe7876",
            revision=NSMC_COMMIT),
     Remote("nsmc/ratings_test.txt", _gh("e9t/nsmc", "ratings_test.txt", NSMC_COMMIT), git_blob="b6cfcd8cd1557bcd9bf06617b0e429ed73e9a367",
            revision=NSMC_COMMIT)],
    ["nsmc/ratings_train.txt", "nsmc/ratings_test.txt"],
))
_register(Dataset(
    "korquad", "KorQuAD 1.0 train and dev (korquad.github.io, CC BY-ND 2.0 KR)",
    [Remote("korquad/KorQuAD_v1.0_train.json", "https://korquad.github.io/dataset/KorQuAD_v1.0_train.json",
            git_blob=KORQUAD_GIT_BLOBS[0]),
     Remote("korquad/KorQuAD_v1.0_dev.json", "https://korquad.github.io/dataset/KorQuAD_v1.0_dev.json",
            git_blob=KORQUAD_GIT_BLOBS[1])],
    ["korquad/KorQuAD_v1.0_train.json", "korquad/KorQuAD_v1.0_dev.json"],
))


_register(Dataset(
    "klue", f"KLUE v1.1 train and dev of NLI, STS, NER and YNAT (KLUE-benchmark/KLUE at {KLUE_COMMIT[:7]}, CC BY-SA 4.0)",
    [Remote(f"klue/{name}", _gh("KLUE-benchmark/KLUE", f"klue_benchmark/{name.rsplit('_', 1)[0]}/{name}", KLUE_COMMIT),
            git_blob=KLUE_GIT_BLOBS[name], revision=KLUE_COMMIT)
     for stem, ext in KLUE_FILES.values() for name in (f"{stem}_train.{ext}", f"{stem}_dev.{ext}")],
    [f"klue/{stem}_{split}.{ext}" for stem, ext in KLUE_FILES.values() for split in ("train", "dev")],
))


# --- the pretraining corpora: derived, with the evaluation text taken out (korbert/corpora.py) ---

_register(Dataset(
    "reviews", f"the NSMC crawl (e9t/nsmc raw/ at {NSMC_COMMIT[:7]}) minus every NSMC test review",
    [Remote("downloads/nsmc-crawl.tar.gz", f"https://github.com/e9t/nsmc/archive/{NSMC_COMMIT}.tar.gz", revision=NSMC_COMMIT)],
    ["corpus/reviews.jsonl.gz"], needs=["nsmc"], derive=derive_reviews, reads_if_there=klue_dev,
))
_register(Dataset(
    "petitions", f"lovit/petitions_archive at {PETITIONS_COMMIT[:7]} (every month in it)",
    [Remote("downloads/petitions-archive.tar.gz", f"https://github.com/lovit/petitions_archive/archive/{PETITIONS_COMMIT}.tar.gz",
            revision=PETITIONS_COMMIT)],
    ["corpus/petitions.jsonl.gz"], derive=derive_petitions,
))
_register(Dataset(
    "kowiki", f"Korean Wikipedia as plain text: {WIKI_REPO} {WIKI_CONFIG} at {WIKI_REVISION[:7]}, minus KorQuAD 1.0 dev",
    [Remote(f"downloads/wikipedia/{f}", f"{HUB}/datasets/{WIKI_REPO}/resolve/{WIKI_REVISION}/{f}", revision=WIKI_REVISION,
            hub=(WIKI_REPO, WIKI_REVISION, f)) for f in WIKI_FILES],
    ["corpus/kowiki.jsonl.gz"], needs=["korquad"], derive=derive_kowiki, reads_if_there=klue_dev,
))
_DOWNLOAD_KEYS = {"reviews": ["crawl"], "petitions": ["archive"], "kowiki": [f"part{i}" for i in range(len(WIKI_FILES))]}


# --- the data folder --------------------------------------------------------------------------

def default_folder() -> Path:
    """$KORBERT_DATA; else ~/.cache/korbert/data ($XDG_CACHE_HOME/korbert/data where that is set).
    Never a folder found beside the code: a checkout knows nothing of where its user keeps data."""
    if os.environ.get("KORBERT_DATA"):
        return Path(os.environ["KORBERT_DATA"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "korbert" / "data"


def provider(rel: str) -> str | None:
    """The dataset whose `korbert data get` brings this data-folder path."""
    for d in DATASETS.values():
        if rel in d.outputs:
            return d.name
    return None


def _read_manifest(folder: Path) -> dict:
    return {"files": {}, "datasets": {}, **_read_json(folder / MANIFEST)}


def _mirror_manifest(mirror: str) -> dict:
    """The files the mirror's korbert-data.json records ({} when it has none); read only when a
    checksum must come from it."""
    from korbert.download import DownloadError, http_get_json, local_path

    local = local_path(mirror)
    if local is None:
        url = mirror.rstrip("/") + "/" + MANIFEST
        try:
            return http_get_json(url).get("files", {})
        except DownloadError as e:
            if e.status == 404:  # the status, not the message: the mirror's URL may hold "404"
                return {}
            raise InputError(f"mirror {mirror}: cannot read its {MANIFEST} ({e})") from None
    return _read_json(local / MANIFEST).get("files", {})


def _read_json(path: Path) -> dict:
    """A manifest ({} when absent); an unreadable one is one line naming it."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a readable {MANIFEST} ({type(e).__name__}: {e}); move it away to start the folder afresh") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a {MANIFEST} (a JSON object is expected)")
    return data


def _expected(r: Remote, mirror: str | None, mirrored: Callable[[], dict]) -> dict:
    """The checksums a download must match, and where they come from."""
    if r.git_blob or r.sha256:
        return {"git_blob": r.git_blob, "sha256": r.sha256, "pinned_by": "the code"}
    if mirror:
        rec = mirrored().get(r.rel)
        other = bool(rec) and any(k in rec and rec[k] != getattr(r, k) for k in ("url", "revision"))
        if rec and rec.get("sha256") and not other:  # (another pin's file: its checksum says nothing of this one)
            return {"sha256": rec["sha256"], "size": rec.get("bytes"), "pinned_by": "the mirror's manifest"}
        if r.hub:
            said = "records it for another revision" if other else "records no sha256 for it"
            raise InputError(f"{r.rel}: the mirror's {MANIFEST} {said}, and without one the file cannot be verified")
        return {"pinned_by": UNPINNED}
    if r.hub:
        from huggingface_hub import HfApi

        repo, rev, path = r.hub
        try:
            info = HfApi().get_paths_info(repo, [path], revision=rev, repo_type="dataset")
        except Exception as e:  # network, auth or a vanished revision: one line, not a traceback
            raise InputError(f"{HUB}/datasets/{repo} at {rev[:7]}: cannot read {path}'s checksum ({type(e).__name__}: "
                             f"{' '.join(str(e).split())})") from None
        if not info or not getattr(info[0], "lfs", None):
            raise InputError(f"{HUB}/datasets/{repo} at {rev[:7]}: no LFS file {path}")
        return {"sha256": info[0].lfs.sha256, "size": info[0].lfs.size, "pinned_by": f"the Hub's LFS pointer at {rev[:7]}"}
    return {"pinned_by": UNPINNED}


def _foreign(folder: Path, rel: str, manifest: dict, expected: dict | None = None) -> None:
    """A file already at `rel` that this command did not write (its manifest has no record of it),
    and that is not the pinned file either: refused, never replaced (without --replace)."""
    path = folder / rel
    if not path.is_file() or rel in manifest["files"]:
        return
    if expected and (expected.get("git_blob") or expected.get("sha256")):
        from korbert.download import file_digests

        d = file_digests(path)
        if all(d[k] == expected[k] for k in ("git_blob", "sha256") if expected.get(k)):
            return  # the pinned file, put there by someone else: used as it is
    raise InputError(f"{path}: already there, not written by `korbert data get` ({MANIFEST} has no record of it) and not the "
                     "pinned file: left as it is; pass --replace to replace it, or choose another --out")


def get(names: list[str], folder: Path, mirror: str | None = None, progress: bool = True, replace: bool = False) -> dict:
    """Fetch and verify each dataset (and what it needs), derive the corpora, write the manifest.
    A file already in the folder that this command did not write is used when it is the pinned
    file, else refused (`replace`: replaced)."""
    unknown = [n for n in names if n != "all" and n not in DATASETS]
    if unknown:
        raise InputError(f"unknown dataset {unknown[0]!r}: choose among {', '.join(DATASETS)} or all")
    want: list[str] = []

    def add(n: str) -> None:
        for dep in DATASETS[n].needs:
            add(dep)
        if n not in want:
            want.append(n)

    order = list(DATASETS)  # the registry's order: the evaluation sets (KLUE's too) before the corpora filtered by them
    for n in sorted(set(order) if "all" in names else set(names), key=order.index):
        add(n)
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        manifest = _get(want, folder, mirror, progress, replace)
    changed = {n: [p for p in d.reads_if_there(folder) if manifest["datasets"][n].get("inputs", {}).get(p.relative_to(folder).as_posix()) != sha256_file(p)]
               for n, d in DATASETS.items() if d.reads_if_there and n in manifest["datasets"] and n not in want}
    stale = [n for n, files in changed.items() if files]
    if stale:  # e.g. KLUE's dev files fetched (or changed) after the corpora were derived: their text is still in them
        files = sorted({p.name for n in stale for p in changed[n]})
        print(f"{', '.join(stale)}: derived before files they are filtered by ({', '.join(files)}) were here as they are now: "
              f"`korbert data get {' '.join(stale)}` derives them again without that text", file=sys.stderr)
    return manifest


@contextmanager
def _locked(folder: Path):
    """One `korbert data get` at a time per data folder (a shared filesystem: the manifest is read,
    changed and written back)."""
    import fcntl

    with open(folder / ".korbert-data.lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{folder}: another `korbert data get` is filling this folder; waiting for it", file=sys.stderr)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _get(want: list[str], folder: Path, mirror: str | None, progress: bool, replace: bool) -> dict:
    from korbert.download import DownloadError, fetch, file_digests

    manifest = _read_manifest(folder)
    cache: dict = {}

    def mirrored() -> dict:
        if "files" not in cache:
            cache["files"] = _mirror_manifest(mirror)
        return cache["files"]

    for n in want:
        d = DATASETS[n]
        paths: dict[str, Path] = {}
        for i, r in enumerate(d.remotes):
            dest = folder / r.rel
            known = manifest["files"].get(r.rel, {})
            stale = bool(known) and (known.get("url"), known.get("revision")) != (r.url, r.revision)
            if stale:  # fetched under an earlier pin: another file now, kept until the new one is verified
                known = {}
            exp = _expected_cached(r, known, dest, mirror, mirrored)
            if not replace:
                _foreign(folder, r.rel, manifest, exp)
            elif r.rel not in manifest["files"] and dest.is_file() and not (exp.get("git_blob") or exp.get("sha256")):
                dest.unlink()  # --replace: a file this command did not write, with nothing to verify it by
            print(f"{n}: {r.rel}", file=sys.stderr)
            try:
                got = fetch(r.url, dest, git_blob=exp.get("git_blob"), sha256=exp.get("sha256"), size=exp.get("size"),
                            mirror=mirror, rel=r.rel, progress=progress, trust_existing=not stale)
            except DownloadError as e:
                raise InputError(str(e)) from None
            manifest["files"][r.rel] = {
                "url": r.url, "revision": r.revision, "bytes": got["bytes"], "sha256": got["sha256"], "git_blob": got["git_blob"],
                "pinned_by": exp["pinned_by"], **({"fetched_from": got["url"]} if got.get("downloaded") else
                                                  {"fetched_from": known.get("fetched_from", got.get("url"))}),
            }
            atomic_write_json(folder / MANIFEST, manifest)
            keys = _DOWNLOAD_KEYS.get(n)
            paths[keys[i] if keys else r.rel] = dest
        if d.derive:
            inputs = {"derivation": DERIVATION[n], **{r.rel: manifest["files"][r.rel]["sha256"] for r in d.remotes}}
            inputs.update({rel: manifest["files"][rel]["sha256"] for dep in d.needs for rel in DATASETS[dep].outputs})
            if d.reads_if_there:  # (KLUE's dev files: none there, the inputs are as before them)
                inputs.update({p.relative_to(folder).as_posix(): sha256_file(p) for p in d.reads_if_there(folder)})
            old = manifest["datasets"].get(n, {})
            fresh = old.get("inputs") == inputs and all(
                (folder / rel).is_file() and sha256_file(folder / rel) == old.get("outputs", {}).get(rel) for rel in d.outputs)
            if fresh:
                print(f"{n}: up to date ({', '.join(d.outputs)})", file=sys.stderr)
                continue
            if not replace:
                for rel in d.outputs:
                    _foreign(folder, rel, manifest)
            t0 = time.time()
            try:
                counts = d.derive(folder, paths)
            except (tarfile.TarError, EOFError, OSError, ValueError, KeyError, zlib.error) as e:  # a bad archive or parquet: one line
                # an input that nothing but its first download vouches for, and that does not decode, may be a bad download:
                # dropped, fetched again next run (not for disk errors, nor for content that decodes: a refetch gets it again)
                undecodable = isinstance(e, (tarfile.TarError, EOFError, zlib.error, zipfile.BadZipFile)) or (isinstance(e, OSError) and e.errno is None)
                dropped = [r.rel for r in d.remotes if manifest["files"][r.rel].get("pinned_by") == UNPINNED] if undecodable else []
                for rel in dropped:
                    del manifest["files"][rel]
                    (folder / rel).unlink(missing_ok=True)
                atomic_write_json(folder / MANIFEST, manifest)
                kind = type(e).__name__ if type(e).__module__ == "builtins" else f"{type(e).__module__}.{type(e).__name__}"
                note = f" (removed {', '.join(dropped)}, which nothing pins: the next run fetches it again)" if dropped else ""
                raise InputError(f"{n}: cannot derive {', '.join(d.outputs)} from {', '.join(str(p) for p in paths.values())}{note} "
                                 f"({kind}: {' '.join(str(e).split())})") from None
            digests = {rel: file_digests(folder / rel) for rel in d.outputs}
            manifest["datasets"][n] = {
                "about": d.about, "inputs": inputs, "counts": counts, "seconds": round(time.time() - t0, 1),
                "outputs": {rel: dg["sha256"] for rel, dg in digests.items()},
            }
            for rel, dg in digests.items():
                manifest["files"][rel] = {**dg, "derived_from": sorted(k for k in inputs if k != "derivation"), "pinned_by": "derived here"}
            atomic_write_json(folder / MANIFEST, manifest)
            print(f"{n}: {json.dumps(counts, ensure_ascii=False)}", file=sys.stderr)
        else:
            manifest["datasets"][n] = {"about": d.about, "outputs": {rel: manifest["files"][rel]["sha256"] for rel in d.outputs}}
            atomic_write_json(folder / MANIFEST, manifest)
    return manifest


def _expected_cached(r: Remote, known: dict, dest: Path, mirror: str | None, mirrored: Callable[[], dict]) -> dict:
    """A file fetched before (`known`: its record, from this same URL and revision) and still on
    disk is held to what was recorded for it: no network to re-check it (the Hub's checksum was
    read when it was fetched)."""
    if not (r.git_blob or r.sha256) and known.get("sha256") and dest.is_file():
        return {"sha256": known["sha256"], "size": known.get("bytes"), "pinned_by": known.get("pinned_by", "the manifest")}
    return _expected(r, mirror, mirrored)


# --- which protocol an NSMC pair is ------------------------------------------------------------

# NSMC-R: this project's rebuild from the same crawl (../shared/data/README.md), by sha256
_NSMC_R = ("1d3c17274efdd33a9b9e0acadfbae8faa7e15e04e54c2cf0bc3d08cd1013b4d7", "09ce3c72d9c12c8702969cbb113eb64352fc26a991a4d099c2a07f1d9e4f717e")  # (train, test)


def nsmc_protocol(train: str | Path, test: str | Path) -> str:
    """"official" (NSMC v1.0's own split), "NSMC-R" (the rebuild), "NSMC-R sample" (the embedded
    demo files) or "custom", by content."""
    from corpus_tools import SAMPLE_DATA
    from korbert.download import git_blob_id

    if (git_blob_id(train), git_blob_id(test)) == tuple(r.git_blob for r in DATASETS["nsmc"].remotes):  # (train, test), in order
        return "official"
    pair = (sha256_file(train), sha256_file(test))
    if pair == _NSMC_R:
        return "NSMC-R"
    if pair == (sha256_file(SAMPLE_DATA / "nsmc_train.txt"), sha256_file(SAMPLE_DATA / "nsmc_test.txt")):
        return "NSMC-R sample"
    return "custom"


NSMC_NAMES = {
    "official": "NSMC v1.0, official split", "NSMC-R": "NSMC-R (rebuilt from the crawl; not the official split)",
    "NSMC-R sample": "NSMC-R sample (the embedded demo files)", "custom": "NSMC-format files (not the official split)",
}


# --- the command ------------------------------------------------------------------------------

def _list(folder: Path) -> None:
    manifest = _read_manifest(folder)
    print(f"data folder: {folder}")
    from korbert.download import git_blob_id

    def state(d: Dataset) -> str:
        there = [(folder / rel).is_file() for rel in d.outputs]
        if not any(there):
            return "missing"
        if not all(there):
            return "partial"
        pinned = [r for r in d.remotes if r.git_blob and r.rel in d.outputs]
        if any(git_blob_id(folder / r.rel) != r.git_blob for r in pinned):
            return "other"  # e.g. NSMC-R where the official NSMC would be: not these sources
        return "present"

    for d in DATASETS.values():
        print(f"  {d.name:<10} {state(d):<8} {d.about}")
        for r in d.remotes:
            pin = f"git blob {r.git_blob}" if r.git_blob else (f"revision {r.revision}" if r.revision else "")
            print(f"  {'':<19} {r.url}  ({pin})")
        if d.name in manifest["datasets"] and manifest["datasets"][d.name].get("counts"):
            print(f"  {'':<19} {json.dumps(manifest['datasets'][d.name]['counts'], ensure_ascii=False)}")


def cli(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="korbert data", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    g = sub.add_parser("get", help="download, verify and derive datasets into the data folder")
    g.add_argument("names", nargs="+", metavar="NAME", help=f"{', '.join(DATASETS)} or all (a corpus brings the evaluation set it is filtered by)")
    g.add_argument("--out", type=Path, default=None, help="the data folder (default: $KORBERT_DATA, else ~/.cache/korbert/data)")
    g.add_argument("--mirror", default=None, help="fetch from this data folder (a directory or an http(s) URL) instead of the origins")
    g.add_argument("--quiet", action="store_true", help="no progress bars")
    g.add_argument("--replace", action="store_true", help="replace files in the data folder that this command did not write "
                   "(by default they are refused, unless they are the pinned files)")
    ls = sub.add_parser("list", help="the datasets, their pinned sources, and what the data folder holds (present, partial, "
                        "missing, or other: files that are not these pinned ones)")
    ls.add_argument("--out", type=Path, default=None, help="the data folder")
    a = ap.parse_args(argv)
    folder = a.out or default_folder()
    if a.what == "list":
        _list(folder)
        return
    get(a.names, folder, mirror=a.mirror, progress=not a.quiet, replace=a.replace)
    print(f"data folder: {folder} (korbert run --data {folder} ...)")


if __name__ == "__main__":
    from corpus_tools.config import run_command

    sys.exit(run_command("data", cli, sys.argv[1:]))
