"""The artifact format every stage shares: a folder of files + manifest.json.

manifest.json = {"kind", "format_version", "config", "counts", "files": {name: sha256},
                 "tokenizer_hash", "versions", ...}. A stage writes it last (atomically), so a
folder with a manifest is complete; the next stage calls `read_manifest` and checks what it needs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_record(path: str | os.PathLike) -> dict:
    """How a manifest names an input file: path, size and sha256 (the content is what counts)."""
    p = Path(path)
    record = {"path": str(p), "bytes": p.stat().st_size, "sha256": sha256_file(p)}
    if getattr(path, "first", 0):  # text.FirstDocs: only the first N documents are read
        record["first_documents"] = path.first
    return record


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, rename: readers never see a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n").encode("utf-8"))


def versions() -> dict:
    """Versions of the libraries whose behaviour shapes an artifact: a loaded module's own
    `__version__`, else the installed package's metadata. Nothing is imported for it: importing
    torch only to name its version added ~0.7 s to a shards run that never uses torch."""
    out = {"python": platform.python_version()}
    for mod in ("kiwipiepy", "sentencepiece", "tokenizers", "transformers", "torch"):
        version = getattr(sys.modules.get(mod), "__version__", None)
        if version is None:
            try:
                version = importlib.metadata.version(mod)
            except importlib.metadata.PackageNotFoundError:
                continue
        out[mod] = str(version)
    return out


def cpuinfo(field: str) -> str | None:
    """The first `field` line of /proc/cpuinfo ("model name", "flags", ...), None where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(field)), None)
    except OSError:
        return None


def machine() -> dict:
    """The machine a number was measured on (benchmarks record it beside every result)."""
    cpu = cpuinfo("model name") or "unknown"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu, "cores": cores, "python": platform.python_version(), "platform": platform.platform()}


def write_manifest(folder: str | os.PathLike, kind: str, format_version: int, files: list[str], **fields) -> dict:
    folder = Path(folder)
    manifest = {
        "kind": kind,
        "format_version": format_version,
        **fields,
        "files": {name: sha256_file(folder / name) for name in sorted(files)},
        "versions": versions(),
    }
    atomic_write_json(folder / "manifest.json", manifest)
    return manifest


def read_manifest(folder: str | os.PathLike, kind: str, verify: bool = False) -> dict:
    """Load a stage's manifest; a missing or foreign folder is a clear error, not a traceback."""
    path = Path(folder) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no manifest.json (not a finished korbert {kind} folder)")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("kind") != kind:
        raise ValueError(f"{folder}: manifest says kind {manifest.get('kind')!r}, expected {kind!r}")
    if verify:
        for name, digest in manifest.get("files", {}).items():
            if sha256_file(Path(folder) / name) != digest:
                raise ValueError(f"{folder}/{name}: sha256 differs from manifest.json (corrupt or edited)")
    return manifest
