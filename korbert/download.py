"""Downloading a file so that it is either exactly right or absent: resumable, retried, verified.

`fetch(url, dest, git_blob=..., sha256=..., size=...)` is what `korbert data get` calls for each
file. The rules, in the order they apply:

- **Already there.** If `dest` exists and every checksum given matches, nothing is fetched (the
  server sees no request). With no checksum given, an existing file is trusted as it is (unless
  `trust_existing=False`). A `dest` that fails verification is not trusted, but it is not deleted
  either: it is replaced only once a verified download is ready.
- **Partial file.** Bytes go to `<dest>.part`, and `<dest>.part.json` records the URL they came
  from and the server's validator (a strong ETag, else Last-Modified). A `.part` left by an
  interrupted run is resumed with `Range: bytes=N-` only from that same URL, and with `If-Range:
  <validator>` when there is one, so a file that changed on the server comes whole (200) instead of
  as the rest of another version. A file given no checksum (nothing would catch a splice) is
  resumed only with a validator; without one it starts over. A 206 appends; a 200 (the server
  ignored Range, or the file changed) starts over; a 416 (nothing after byte N) means the `.part`
  is complete or too long, so it is verified and, failing that, fetched again from byte 0.
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

from corpus_tools.artifacts import file_digests, git_blob_id  # noqa: F401  (korbert.download's API too)

CHUNK = 1 << 20
USER_AGENT = f"korbert-download/1 Python-urllib/{sys.version_info.major}.{sys.version_info.minor}"
MAX_WAIT = 60.0  # seconds; the cap on one backoff sleep (and on a server's Retry-After)
RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}  # the server may answer differently next time
# Failures of the connection, not of the request: worth retrying. HTTPError (a URLError) is
# sorted by status first; a plain OSError (a full disk, a read-only folder) is not retried.
NETWORK_ERRORS = (URLError, ConnectionError, TimeoutError, http.client.HTTPException, ssl.SSLError)


class DownloadError(Exception):
    """A download that failed for good; the message is one line naming the URL or file. `status`:
    the HTTP status that ended it (404, 403, a 503 retried to the end), None when there was no answer."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


# -- digests --------------------------------------------------------------------------------------


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
                raise DownloadError(f"{url}: {_reason(e)}", e.code) from None
            why, wait, status = _reason(e), _retry_after(e), e.code
        except NETWORK_ERRORS as e:
            if isinstance(e, URLError) and isinstance(e.reason, ssl.SSLCertVerificationError):
                raise DownloadError(f"{url}: {_one_line(e.reason)}") from None  # same answer every time
            why, wait, status = _reason(e), 0.0, None
        failures = 1 if progress() > before else failures + 1
        if failures > retries:
            tries = f"{attempts} attempt" + ("s" if attempts > 1 else "")
            raise DownloadError(f"{url}: {why} (gave up after {tries})", status)
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


def _source(part: Path) -> Path:
    """Where a .part's source is recorded: {"url": the URL its bytes came from, "validator": the
    strong ETag or Last-Modified that came with them, or null}."""
    return part.with_name(part.name + ".json")


def _read_source(part: Path) -> dict:
    try:
        got = json.loads(_source(part).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # absent (a .part of an older korbert), or cut short: nothing known
        return {}
    return got if isinstance(got, dict) else {}


def _drop_part(part: Path) -> None:
    part.unlink(missing_ok=True)
    _source(part).unlink(missing_ok=True)


def _validator(headers) -> str | None:
    """What If-Range may carry (RFC 9110 13.1.5): a strong ETag, else Last-Modified."""
    etag = headers.get("ETag")
    return etag if etag and not etag.startswith("W/") else headers.get("Last-Modified")


def _http_once(url: str, part: Path, timeout: float, bar, pinned: bool) -> bool:
    """One request: resume `part` (or start it) and read the body to its end. Returns whether the
    file's head came from an earlier attempt (a resume). A body cut short raises ConnectionError,
    so that the retry loop resumes it. A .part is resumed only from the URL its source record
    names, with If-Range when a validator came with it; an unpinned file (no checksum to catch a
    splice) only with one."""
    have = _size(part)
    source = _read_source(part) if have else {}
    if have and (source.get("url") != url or not (pinned or source.get("validator"))):
        _drop_part(part)  # another URL's bytes, or no way to tell that the server's file is still theirs
        have = 0
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
        if source.get("validator") and not pinned:  # a pinned file's checksum catches a splice; a CDN's validator may move
            headers["If-Range"] = source["validator"]  # a changed file comes whole (200), never as the rest of another
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
            if first != have or (not pinned and source.get("validator") and _validator(resp.headers) not in (None, source["validator"])):
                _drop_part(part)  # not the range asked for, or of another version: start clean rather than guess
                raise ConnectionError(f"asked for bytes {have}- of {source.get('validator')} and got "
                                      f"{resp.headers.get('Content-Range')} of {_validator(resp.headers)}")
            if total is None and length is not None:
                total = have + length
            mode = "ab"
        else:  # 200: the whole file, whatever Range said
            have, total, mode = 0, length, "wb"
        bar.reset(total=total)
        bar.update(have)
        with open(part, mode) as f:
            if mode == "wb":  # the .part is empty now: record where its bytes come from before any arrive
                tmp = part.with_name(part.name + ".json.tmp")
                tmp.write_text(json.dumps({"url": url, "validator": _validator(resp.headers)}), encoding="utf-8")
                os.replace(tmp, _source(part))
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
    """`_http_once`, plus what a 416 means: the .part already holds every byte the server has (of
    the same version, when If-Range said which). It is kept if it verifies against what is known
    (the checksums, or at least the server's size), otherwise fetched again from byte 0."""
    pinned = git_blob is not None or sha256 is not None
    try:
        return _http_once(url, part, timeout, bar, pinned)
    except _RangeNotSatisfiable as e:
        expected = size if size is not None else e.total
        known = expected is not None or pinned
        if known and _mismatch(file_digests(part), expected, git_blob, sha256) is None:
            return True
        _drop_part(part)
        return _http_once(url, part, timeout, bar, pinned)


def fetch(
    url: str, dest: Path, *, git_blob: str | None = None, sha256: str | None = None, size: int | None = None,
    mirror: str | None = None, rel: str | None = None, retries: int = 5, backoff: float = 1.0,
    timeout: float = 60.0, progress: bool = True, trust_existing: bool = True,
) -> dict:
    """Make `dest` a verified copy of `url` (rules in the module docstring). Returns
    {"url", "bytes", "sha256", "git_blob", "downloaded"}; "url" is where the bytes came from (the
    mirror's, when one is given), or would have, when "downloaded" is False. `timeout` bounds each
    socket operation (connect, one read), not the whole download: a slow but steady transfer goes on.
    `trust_existing=False`: with no checksum given, an existing `dest` is another file (an older
    pin's), replaced once the new download is complete."""
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

    if dest.is_file() and (trust_existing or git_blob is not None or sha256 is not None):
        d = file_digests(dest)  # a verified file needs no source: a re-run works with the mirror gone
        if _mismatch(d, size, git_blob, sha256) is None:
            _drop_part(part)
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
                    _drop_part(part)
                    _copy_local(local, part, bar, "mirror file" if mirror is not None else "file")
                    resumed = False
                else:
                    once = partial(_resume_or_restart, src_url, part, timeout, bar, size, git_blob, sha256)
                    resumed = _retrying(src_url, once, retries=retries, backoff=backoff, progress=lambda: _size(part))
                d = file_digests(part)
                bad = _mismatch(d, size, git_blob, sha256)
                if bad is None:
                    break
                _drop_part(part)
                if last_try or not resumed:
                    raise DownloadError(f"{src_url}: {bad}; not saved")
                # else: the head of the file came from a .part that may have been stale; once more from 0
            with open(part, "r+b") as f:
                os.fsync(f.fileno())  # the bytes are on disk before the name points at them
            os.replace(part, dest)
            _source(part).unlink(missing_ok=True)
        except OSError as e:  # the local side: a full disk, a folder we may not write
            raise DownloadError(f"{dest}: {_reason(e)}") from None
    return {"url": src_url, **d, "downloaded": True}

