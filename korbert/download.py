"""Downloading a file so that it is either exactly right or absent: resumable, retried, verified.

`fetch(url, dest, git_blob=..., sha256=..., size=...)` is what `korbert data get` calls for each
file. The rules, in the order they apply:

- **Already there.** If `dest` exists and every checksum given matches, nothing is fetched (the
  server sees no request). With no checksum given, an existing file is trusted as it is. A `dest`
  that fails verification is not trusted, but it is not deleted either: it is replaced only once a
  verified download is ready.
- **Partial file.** Bytes go to `<dest>.part`. A `.part` left by an interrupted run is resumed with
  `Range: bytes=N-`: a 206 appends; a 200 (the server ignored Range) starts over; a 416 (nothing
  after byte N) means the `.part` is complete or too long, so it is verified and, failing that,
  fetched again from byte 0.
- **Retries.** Connection errors, timeouts, a body cut short, HTTP 429 and 5xx are retried with
  exponential backoff, each retry resuming from the bytes already in `.part`. `retries` counts
  failures in a row: an attempt that added bytes resets the count, so a long download over a flaky
  link is not given up while it still makes progress. Any other 4xx (404, 403) fails at once.
- **Verification.** After the body: size, git blob id, sha256 (whichever are given). A mismatch
  deletes the `.part` (a bad file is neither kept under the final name nor resumed later) and raises
  `DownloadError` with expected and got. If some of the bytes came from a resume, the mismatch may
  be the stale `.part`'s fault rather than the server's, so the file is fetched once more from
  byte 0 before giving up.
- **Commit.** fsync, then `os.replace(part, dest)`: `dest` is the old file or the verified new one,
  never a mix, even if the process is killed.
- **Mirror.** `mirror` replaces the origin: a folder (or a `file://` URL) is copied from
  `mirror/rel`; an http(s) URL is fetched from `mirror/rel`. Both take the same `.part` + verify +
  rename path. `rel` defaults to the URL's last path component.

The git blob id (`git_blob_id`) is the sha1 git and GitHub show for a file's content, which makes
it the checksum to pin for files taken from a GitHub repository at a commit: it can be read off
the repository's tree API without downloading the file.

Every failure is a `DownloadError` whose message is one line naming the URL or file and what went
wrong, fit to print as it is. Only the standard library is imported at module level (tqdm is
imported when a download starts).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import ssl
import sys
import time
from functools import partial
from pathlib import Path, PurePosixPath
from urllib.error import HTTPError, URLError
from urllib.parse import quote, unquote, urlparse
from urllib.request import Request, url2pathname, urlopen

CHUNK = 1 << 20
USER_AGENT = f"korbert-download/1 Python-urllib/{sys.version_info.major}.{sys.version_info.minor}"
MAX_WAIT = 60.0  # seconds; the cap on one backoff sleep (and on a server's Retry-After)
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}  # the server may answer differently next time
# Failures of the connection, not of the request: worth retrying. HTTPError (a URLError) is
# sorted by status first; a plain OSError (a full disk, a read-only folder) is not retried.
NETWORK_ERRORS = (URLError, ConnectionError, TimeoutError, http.client.HTTPException, ssl.SSLError)


class DownloadError(Exception):
    """A download that failed for good; the message is one line naming the URL or file."""


# -- digests --------------------------------------------------------------------------------------


def _digests(path, with_sha256: bool) -> dict:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        blob = hashlib.sha1(b"blob %d\0" % size)  # git's object header: the size comes first
        sha = hashlib.sha256() if with_sha256 else None
        n = 0
        while chunk := f.read(CHUNK):
            n += len(chunk)
            blob.update(chunk)
            if sha is not None:
                sha.update(chunk)
    if n != size:  # the header promised `size` bytes; the blob id would be wrong
        raise DownloadError(f"{path}: changed while being read ({size} bytes, then {n})")
    out = {"bytes": n, "git_blob": blob.hexdigest()}
    if sha is not None:
        out["sha256"] = sha.hexdigest()
    return out


def git_blob_id(path) -> str:
    """The id `git hash-object` gives the file: sha1(b"blob <size>\\0" + content), streamed."""
    return _digests(path, with_sha256=False)["git_blob"]


def file_digests(path) -> dict:
    """{"bytes": n, "sha256": hex, "git_blob": hex}, in one streaming pass over the file."""
    d = _digests(path, with_sha256=True)
    return {"bytes": d["bytes"], "sha256": d["sha256"], "git_blob": d["git_blob"]}


def _mismatch(d: dict, size: int | None, git_blob: str | None, sha256: str | None) -> str | None:
    """What is wrong with digests `d` against the expected values given, or None if all match."""
    if size is not None and d["bytes"] != size:
        return f"size mismatch: expected {size} bytes, got {d['bytes']}"
    for name, want in (("git_blob", git_blob), ("sha256", sha256)):
        if want is not None and d[name] != want.strip().lower():
            return f"{name} mismatch: expected {want.strip().lower()}, got {d[name]}"
    return None


# -- retries --------------------------------------------------------------------------------------


def _one_line(text) -> str:
    return " ".join(str(text).split())


def _reason(e: BaseException) -> str:
    """A short, human reason for a failure ("HTTP 404 Not Found", "Connection refused", "timed out")."""
    if isinstance(e, HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, URLError):  # urllib wraps the socket error of the connect step, or says why in words
        if not isinstance(e.reason, BaseException):
            return _one_line(e.reason)
        e = e.reason
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return _one_line(e) or type(e).__name__


def _retry_after(e: HTTPError) -> float:
    try:
        return min(float(e.headers.get("Retry-After", 0)), MAX_WAIT)
    except (TypeError, ValueError):  # an HTTP date instead of seconds: fall back to our backoff
        return 0.0


def _retrying(url: str, once, *, retries: int, backoff: float, progress=lambda: 0):
    """Call `once()` until it returns, retrying network failures, 429 and 5xx with exponential
    backoff. `progress()` is read before and after each attempt; when it grew (a download added
    bytes), the count of failures in a row starts again."""
    failures = attempts = 0
    while True:
        before = progress()
        attempts += 1
        try:
            return once()
        except HTTPError as e:
            e.close()  # an HTTPError holds the response's socket
            if e.code not in RETRY_STATUS:
                raise DownloadError(f"{url}: {_reason(e)}") from None
            why, wait = _reason(e), _retry_after(e)
        except NETWORK_ERRORS as e:
            if isinstance(e, URLError) and isinstance(e.reason, ssl.SSLCertVerificationError):
                raise DownloadError(f"{url}: {_one_line(e.reason)}") from None  # same answer every time
            why, wait = _reason(e), 0.0
        failures = 1 if progress() > before else failures + 1
        if failures > retries:
            tries = f"{attempts} attempt" + ("s" if attempts > 1 else "")
            raise DownloadError(f"{url}: {why} (gave up after {tries})")
        time.sleep(max(wait, min(backoff * 2 ** (failures - 1), MAX_WAIT)))


def http_get_json(url: str, *, timeout: float = 60.0, retries: int = 5, backoff: float = 1.0):
    """GET a small JSON document (an API response) with `fetch`'s retry policy."""

    def once():
        req = Request(url, headers={"User-Agent": USER_AGENT, "Accept": "application/json"})
        with urlopen(req, timeout=timeout) as resp:
            return resp.read()  # read() with no size raises IncompleteRead on a cut body

    body = _retrying(url, once, retries=retries, backoff=backoff)
    try:
        return json.loads(body)
    except ValueError as e:
        raise DownloadError(f"{url}: not JSON ({_one_line(e)})") from None


# -- one download ---------------------------------------------------------------------------------


class _RangeNotSatisfiable(Exception):
    """The server has nothing after the .part's last byte (HTTP 416)."""

    def __init__(self, total: int | None):
        self.total = total


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) from a Content-Range header: "bytes 10-99/100", "bytes */100"."""
    try:
        unit, spec = value.split(None, 1)
        span, total = spec.split("/")
        first = None if span == "*" else int(span.split("-")[0])
        return first, (None if total == "*" else int(total))
    except (AttributeError, ValueError):
        return None, None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _http_once(url: str, part: Path, timeout: float, bar) -> bool:
    """One request: resume `part` (or start it) and read the body to its end. Returns whether the
    file's head came from an earlier attempt (a resume). A body cut short raises ConnectionError,
    so that the retry loop resumes it."""
    have = _size(part)
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urlopen(Request(url, headers=headers), timeout=timeout)
    except HTTPError as e:
        if e.code == 416 and have:
            total = _content_range(e.headers.get("Content-Range"))[1]
            e.close()
            raise _RangeNotSatisfiable(total) from None
        raise
    with resp:
        length = resp.headers.get("Content-Length")
        length = int(length) if length and length.isdigit() else None
        if have and resp.status == 206:
            first, total = _content_range(resp.headers.get("Content-Range"))
            if first != have:  # not the range asked for: start clean rather than guess
                part.unlink()
                raise ConnectionError(f"asked for bytes {have}- and got {resp.headers.get('Content-Range')}")
            if total is None and length is not None:
                total = have + length
            mode = "ab"
        else:  # 200: the whole file, whatever Range said
            have, total, mode = 0, length, "wb"
        bar.reset(total=total)
        bar.update(have)
        with open(part, mode) as f:
            # read1: whatever has arrived, at most one socket read. With read(), a timeout or a reset
            # would throw away the part of a chunk already received instead of saving it to resume.
            while chunk := resp.read1(CHUNK):
                f.write(chunk)
                bar.update(len(chunk))
    got = _size(part)
    # http.client returns a short body without complaint when the server closes early (it only
    # raises IncompleteRead for read() with no size), so the length is checked here.
    if total is not None and got < total:
        raise ConnectionError(f"connection closed after {got} of {total} bytes")
    return have > 0


def _copy_local(src: Path, part: Path, bar, what: str) -> None:
    if not src.is_file():
        raise DownloadError(f"{what} missing: {src}")
    bar.reset(total=src.stat().st_size)
    with open(src, "rb") as fi, open(part, "wb") as fo:
        while chunk := fi.read(CHUNK):
            fo.write(chunk)
            bar.update(len(chunk))


def local_path(location: str) -> Path | None:
    """The folder or file a mirror (or URL) names on this machine, or None for a remote one."""
    if location.startswith("file:"):
        return Path(url2pathname(urlparse(location).path))
    if "://" not in location:
        return Path(location)
    return None


def _resume_or_restart(url, part, timeout, bar, size, git_blob, sha256) -> bool:
    """`_http_once`, plus what a 416 means: the .part already holds every byte the server has. It
    is kept if it verifies against what is known (the checksums, or at least the server's size),
    otherwise fetched again from byte 0."""
    try:
        return _http_once(url, part, timeout, bar)
    except _RangeNotSatisfiable as e:
        expected = size if size is not None else e.total
        known = expected is not None or git_blob is not None or sha256 is not None
        if known and _mismatch(file_digests(part), expected, git_blob, sha256) is None:
            return True
        part.unlink()
        return _http_once(url, part, timeout, bar)


def fetch(
    url: str, dest: Path, *, git_blob: str | None = None, sha256: str | None = None, size: int | None = None,
    mirror: str | None = None, rel: str | None = None, retries: int = 5, backoff: float = 1.0,
    timeout: float = 60.0, progress: bool = True,
) -> dict:
    """Make `dest` a verified copy of `url` (rules in the module docstring). Returns
    {"url", "bytes", "sha256", "git_blob", "downloaded"}; "url" is where the bytes came from (the
    mirror's, when one is given), or would have, when "downloaded" is False. `timeout` bounds each
    socket operation (connect, one read), not the whole download: a slow but steady transfer goes on."""
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    src_url, local = url, local_path(url) if url.startswith("file:") else None
    if mirror is not None:
        rel = rel if rel is not None else unquote(PurePosixPath(urlparse(url).path).name)
        local = local_path(mirror)
        if local is not None and local.is_dir():
            local = local / rel
            src_url = local.resolve().as_uri()
        elif local is None and urlparse(mirror).scheme in ("http", "https"):
            src_url = mirror.rstrip("/") + "/" + quote(rel)
        else:
            src_url = None

    if dest.is_file():  # a verified file needs no source: a re-run works with the mirror gone
        d = file_digests(dest)
        if _mismatch(d, size, git_blob, sha256) is None:
            dest.with_name(dest.name + ".part").unlink(missing_ok=True)
            return {"url": src_url, **d, "downloaded": False}
    if src_url is None:
        raise DownloadError(f"mirror {mirror}: no such folder" if local is not None
                            else f"mirror {mirror}: not a folder nor an http(s):// or file:// URL")

    from tqdm.auto import tqdm

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tqdm(desc=dest.name, unit="B", unit_scale=True, unit_divisor=1024, leave=False,
              disable=None if progress else True) as bar:
        try:
            for last_try in (False, True):
                if local is not None:
                    _copy_local(local, part, bar, "mirror file" if mirror is not None else "file")
                    resumed = False
                else:
                    once = partial(_resume_or_restart, src_url, part, timeout, bar, size, git_blob, sha256)
                    resumed = _retrying(src_url, once, retries=retries, backoff=backoff, progress=lambda: _size(part))
                d = file_digests(part)
                bad = _mismatch(d, size, git_blob, sha256)
                if bad is None:
                    break
                part.unlink()
                if last_try or not resumed:
                    raise DownloadError(f"{src_url}: {bad}; not saved")
                # else: the head of the file came from a .part that may have been stale; once more from 0
            with open(part, "r+b") as f:
                os.fsync(f.fileno())  # the bytes are on disk before the name points at them
            os.replace(part, dest)
        except OSError as e:  # the local side: a full disk, a folder we may not write
            raise DownloadError(f"{dest}: {_reason(e)}") from None
    return {"url": src_url, **d, "downloaded": True}

