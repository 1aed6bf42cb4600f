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


def file_digests(path: str | os.PathLike, with_sha256: bool = True) -> dict:
    """{"bytes": n, "sha256": hex, "git_blob": hex} in one streaming pass over the file (sha256 only
    with `with_sha256`). git_blob is the id `git hash-object` gives: sha1(b"blob <size>\\0" + content)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        blob = hashlib.sha1(b"blob %d\0" % size)  # git's object header: the size comes first
        sha = hashlib.sha256() if with_sha256 else None
        n = 0
        while chunk := f.read(1 << 20):
            n += len(chunk)
            blob.update(chunk)
            if sha is not None:
                sha.update(chunk)
    if n != size:  # the header promised `size` bytes; the blob id would be wrong
        raise OSError(f"{path}: changed while being read ({size} bytes, then {n})")
    return {"bytes": n, **({"sha256": sha.hexdigest()} if sha is not None else {}), "git_blob": blob.hexdigest()}


def git_blob_id(path: str | os.PathLike) -> str:
    """The id `git hash-object` gives the file, and GitHub shows for it."""
    return file_digests(path, with_sha256=False)["git_blob"]


def file_record(path: str | os.PathLike) -> dict:
    """How a manifest names an input file: path, size and sha256 (the content is what counts)."""
    p = Path(path)
    record = {"path": str(p), "bytes": p.stat().st_size, "sha256": sha256_file(p)}
    if getattr(path, "first", 0):  # text.FirstDocs: only the first N documents are read
        record["first_documents"] = path.first
    return record


def file_mode() -> int:
    """The mode a plain open() gives a new file under this process's umask (0644 under 022).
    Read from /proc where it can be: setting the umask to read it back would, for that instant,
    give files other threads create the mode 0666."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def plain_modes(folder: str | os.PathLike) -> None:
    """Give every file in `folder` (not below) `file_mode()`: libraries that write through a private
    temporary file (safetensors' save_file) leave 0600, which other users of a shared machine or a
    container cannot read."""
    mode = file_mode()
    for p in Path(folder).iterdir():
        if p.is_file() and not p.is_symlink() and (p.stat().st_mode & 0o777) != mode:
            os.chmod(p, mode)


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
        os.chmod(tmp, file_mode())  # mkstemp makes 0600; give the file the usual mode
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
    # kiwipiepy_model: Kiwi's weights, a package of their own that pip can update apart from kiwipiepy
    for mod in ("kiwipiepy", "kiwipiepy_model", "sentencepiece", "tokenizers", "transformers", "torch"):
        version = package_version(mod)
        if version is not None:
            out[mod] = version
    return out


def package_version(name: str) -> str | None:
    """A loaded module's `__version__`, else the installed package's metadata (nothing imported); None
    where it is not installed."""
    version = getattr(sys.modules.get(name), "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None
    return str(version)


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
    out = {"cpu": cpu, "cores": cores, "python": platform.python_version(), "platform": platform.platform()}
    flags = set((cpuinfo("flags") or "").split())
    if flags:  # one model name covers CPUs with other vector units: the kernels torch picks follow these
        out["simd"] = next((name for flag, name in SIMD_FLAGS if flag in flags), "other")
        out["bf16"] = bool(flags & BF16_FLAGS)
    return out


SIMD_FLAGS = (("avx512f", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4_2"))  # widest first
BF16_FLAGS = {"avx512_bf16", "amx_bf16"}


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX-BF16, read from /proc/cpuinfo).
    Elsewhere torch emulates bf16 matmuls, slower than fp32."""
    return bool(set((cpuinfo("flags") or "").split()) & BF16_FLAGS)


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


class NpyWriter:
    """A .npy file written in appends, its length unknown up front (shards' columns, `korbert
    embed`'s vectors): raw values go to a hidden .partial file beside it; close() writes header +
    data to a temp file, fsyncs and renames it into place (readers never see a partial .npy) and
    returns its sha256. `width` > 0: rows of that many values (shape (rows, width)); 0: one axis.
    Memory stays flat. Every writer has its own temporary names, so a task run twice at once (a
    Dask worker that seemed dead) never shares a file; a killed run leaves only hidden files."""

    def __init__(self, path: str | os.PathLike, dtype, width: int = 0):
        import uuid

        import numpy as np

        self.path, self.dtype, self.width, self.n = Path(path), np.dtype(dtype), width, 0
        self.attempt = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.raw_path = self.path.with_name(f".{self.path.name}.{self.attempt}.partial")
        self.raw = open(self.raw_path, "wb")

    @property
    def rows(self) -> int:
        return self.n // self.width if self.width else self.n

    def append(self, values) -> None:
        import numpy as np

        a = np.ascontiguousarray(values, dtype=self.dtype)
        if self.width and a.size % self.width:
            raise ValueError(f"{self.path.name}: {a.size} values are not rows of {self.width}")
        self.raw.write(a.tobytes())
        self.n += a.size

    def close(self) -> str:
        import io

        import numpy as np

        self.raw.close()
        tmp = self.path.with_name(f".{self.path.name}.{self.attempt}.tmp")
        header = io.BytesIO()
        shape = (self.rows, self.width) if self.width else (self.n,)
        np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape})
        h = hashlib.sha256(header.getvalue())
        with open(tmp, "wb") as out, open(self.raw_path, "rb") as src:
            out.write(header.getvalue())
            while block := src.read(1 << 20):
                h.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, self.path)
        self.raw_path.unlink()
        return h.hexdigest()
