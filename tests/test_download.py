"""korbert.download against a real HTTP server on 127.0.0.1 (nothing leaves the machine).

The server serves bytes each test puts in `server.files` and can be told, per path, to misbehave
the way real servers and links do: answer 404 (or any status), cut the connection after K bytes
on the first request, ignore Range, fail with 503 once, or stall. With `etag`, it sends that ETag
and honours If-Range as RFC 9110 says (another validator: the whole file, 200). Every request's path and Range header is
recorded, so a test asserts what the client asked for, not just what it ended up with.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from korbert.download import DownloadError, fetch, file_digests, git_blob_id, http_get_json

FAST = {"backoff": 0.01, "progress": False}  # retries wait 10 ms, 20 ms, ...
# Enough bytes that the client reads in several chunks; Korean text first so a garbled byte shows.
DATA = "아버지가 방에 들어가신다\n".encode() * 1000 + os.urandom(200_000)


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass

    def do_GET(self):
        st = self.server.state
        rng = self.headers.get("Range")
        with st.lock:
            st.requests.append((self.path, rng, self.headers.get("User-Agent")))
            st.if_range.setdefault(self.path, []).append(self.headers.get("If-Range"))
            seen = sum(p == self.path for p, _, _ in st.requests)
        how = st.how.get(self.path, {})
        body = st.files.get(self.path)
        if body is None or how.get("404"):
            return self.send_error(404)
        if how.get("status"):
            return self.send_error(how["status"])
        if how.get("503_once") and seen == 1:
            return self.send_error(503)
        start, etag = 0, how.get("etag")
        if self.headers.get("If-Range") is not None and self.headers.get("If-Range") != etag:
            rng = None  # RFC 9110: a validator that does not match means the whole, current file
        if rng and not how.get("ignore_range"):
            start = int(rng.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                return self.end_headers()
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        if etag:
            self.send_header("ETag", etag)
        rest = body[start:]
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        if "drop_after" in how and seen == 1:
            # Promise the whole body, send K bytes, hang up: a link that died mid-file.
            self.wfile.write(rest[: how["drop_after"]])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if "stall" in how and seen == 1:
            self.wfile.write(rest[:1000])
            self.wfile.flush()
            time.sleep(how["stall"])  # longer than the client's timeout
            return
        self.wfile.write(rest)


class _State:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.files: dict[str, bytes] = {}
        self.how: dict[str, dict] = {}
        self.requests: list[tuple[str, str | None, str | None]] = []
        self.if_range: dict[str, list[str | None]] = {}  # path -> the If-Range header of each request
        self.lock = threading.Lock()

    def serve(self, path: str, body: bytes, **how) -> str:
        self.files[path], self.how[path] = body, how
        return self.base + path

    def ranges(self, path: str) -> list[str | None]:
        return [r for p, r, _ in self.requests if p == path]


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.state = _State(srv.server_address[1])
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv.state
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _blob(b: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()


def _no_part(dest) -> bool:
    return not list(dest.parent.glob(dest.name + ".part*"))  # the .part and whatever records its source


def _interrupted(server, path: str, body: bytes, dest, **how) -> str:
    """A first run cut after 100,000 bytes, with no retry: its .part is left behind, as a killed
    process or a dead link leaves it."""
    url = server.serve(path, body, drop_after=100_000, **how)
    with pytest.raises(DownloadError):
        fetch(url, dest, retries=0, **FAST)
    assert dest.with_name(dest.name + ".part").stat().st_size == 100_000
    return url


# -- digests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", DATA], ids=["empty", "korean+binary"])
def test_git_blob_id_matches_git(tmp_path, content):
    f = tmp_path / "f.bin"
    f.write_bytes(content)
    git = subprocess.run(["git", "hash-object", str(f)], capture_output=True, text=True, check=True).stdout.strip()
    assert git_blob_id(f) == git
    assert file_digests(f) == {"bytes": len(content), "sha256": _sha(content), "git_blob": git}


# -- plain downloads and verification -------------------------------------------------------------


def test_download_verifies_and_lands_atomically(server, tmp_path):
    url = server.serve("/nsmc/ratings.txt", DATA)
    dest = tmp_path / "a" / "b" / "ratings.txt"  # parents are created
    out = fetch(url, dest, git_blob=_blob(DATA), sha256=_sha(DATA), size=len(DATA), **FAST)
    assert dest.read_bytes() == DATA and _no_part(dest)
    assert out == {"url": url, "bytes": len(DATA), "sha256": _sha(DATA), "git_blob": _blob(DATA), "downloaded": True}
    assert server.ranges("/nsmc/ratings.txt") == [None]
    assert server.requests[0][2].startswith("korbert-download/")


@pytest.mark.parametrize("which", ["sha256", "git_blob", "size"])
def test_checksum_mismatch_is_refused_and_nothing_kept(server, tmp_path, which):
    url = server.serve("/x.txt", DATA)
    other = DATA + b"!"
    want = {"sha256": _sha(other), "git_blob": _blob(other), "size": len(other)}[which]
    dest = tmp_path / "x.txt"
    with pytest.raises(DownloadError) as e:
        fetch(url, dest, **{which: want}, **FAST)
    msg = str(e.value)
    assert f"{which} mismatch" in msg and f"expected {want}" in msg and "got " in msg and "\n" not in msg
    assert not dest.exists() and _no_part(dest)


# -- broken links and servers ---------------------------------------------------------------------


def test_dropped_connection_is_resumed_with_range(server, tmp_path):
    k = 100_000
    url = server.serve("/big.bin", DATA, drop_after=k)
    dest = tmp_path / "big.bin"
    out = fetch(url, dest, sha256=_sha(DATA), **FAST)
    assert server.ranges("/big.bin") == [None, f"bytes={k}-"]
    assert dest.read_bytes() == DATA and out["downloaded"] and _no_part(dest)


def test_server_ignoring_range_starts_over(server, tmp_path):
    # No checksum given: only the client's handling of the 200 (truncate, not append) can make
    # the content exact. (An ETag: without a validator an unpinned file is never resumed.)
    url = server.serve("/big.bin", DATA, drop_after=50_000, ignore_range=True, etag='"v1"')
    dest = tmp_path / "big.bin"
    fetch(url, dest, **FAST)
    assert server.ranges("/big.bin") == [None, "bytes=50000-"]
    assert dest.read_bytes() == DATA


def test_stalled_server_times_out_and_resumes(server, tmp_path):
    url = server.serve("/slow.bin", DATA, stall=1.0)
    dest = tmp_path / "slow.bin"
    fetch(url, dest, sha256=_sha(DATA), timeout=0.2, **FAST)
    assert server.ranges("/slow.bin") == [None, "bytes=1000-"]
    assert dest.read_bytes() == DATA


def test_503_once_is_retried(server, tmp_path):
    url = server.serve("/x.txt", DATA, **{"503_once": True})
    dest = tmp_path / "x.txt"
    fetch(url, dest, sha256=_sha(DATA), **FAST)
    assert server.ranges("/x.txt") == [None, None]
    assert dest.read_bytes() == DATA


def test_404_fails_at_once_in_one_line(server, tmp_path):
    url = server.base + "/missing.txt"
    with pytest.raises(DownloadError) as e:
        fetch(url, tmp_path / "missing.txt", retries=5, backoff=1.0, progress=False)
    assert str(e.value) == f"{url}: HTTP 404 Not Found"
    assert len(server.requests) == 1  # no retry: one request (no wall-clock bound on 2 shared cores)
    assert not (tmp_path / "missing.txt").exists() and _no_part(tmp_path / "missing.txt")


def test_refused_connection_gives_up_in_one_line(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    url = f"http://127.0.0.1:{port}/x.txt"
    with pytest.raises(DownloadError) as e:
        fetch(url, tmp_path / "x.txt", retries=2, **FAST)
    msg = str(e.value)
    assert msg.startswith(url) and "refused" in msg.lower() and "3 attempts" in msg and "\n" not in msg
    assert e.value.status is None  # no HTTP answer
    assert not (tmp_path / "x.txt").exists()


# -- an existing file or .part --------------------------------------------------------------------


def test_verified_file_is_not_fetched_again(server, tmp_path):
    url = server.serve("/x.txt", DATA)
    dest = tmp_path / "x.txt"
    fetch(url, dest, git_blob=_blob(DATA), **FAST)
    server.requests.clear()
    out = fetch(url, dest, git_blob=_blob(DATA), **FAST)
    assert server.requests == [] and out["downloaded"] is False and out["sha256"] == _sha(DATA)


def test_file_failing_verification_is_replaced(server, tmp_path):
    url = server.serve("/x.txt", DATA)
    dest = tmp_path / "x.txt"
    dest.write_bytes(b"an older version")
    out = fetch(url, dest, sha256=_sha(DATA), **FAST)
    assert out["downloaded"] and dest.read_bytes() == DATA and _no_part(dest)


def test_file_failing_verification_is_kept_when_download_is_bad(server, tmp_path):
    # The user's file is only replaced by a verified one; a bad download leaves it alone.
    url = server.serve("/x.txt", b"wrong bytes")
    dest = tmp_path / "x.txt"
    dest.write_bytes(b"the user's file")
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        fetch(url, dest, sha256=_sha(DATA), **FAST)
    assert dest.read_bytes() == b"the user's file" and _no_part(dest)


def test_complete_part_file_gets_416_and_is_kept(server, tmp_path):
    dest = tmp_path / "x.txt"
    url = _interrupted(server, "/x.txt", DATA, dest)
    dest.with_name("x.txt.part").write_bytes(DATA)  # every byte there, the run killed before the rename
    fetch(url, dest, sha256=_sha(DATA), **FAST)
    assert server.ranges("/x.txt") == [None, f"bytes={len(DATA)}-"]  # answered 416; nothing refetched
    assert dest.read_bytes() == DATA and _no_part(dest)


def test_too_long_part_file_is_refetched_from_zero(server, tmp_path):
    dest = tmp_path / "x.txt"
    url = _interrupted(server, "/x.txt", DATA, dest, etag='"v1"')
    dest.with_name("x.txt.part").write_bytes(DATA + b"junk")
    fetch(url, dest, **FAST)  # no checksum: the 416's size (for the same ETag) says the .part is wrong
    assert server.ranges("/x.txt") == [None, f"bytes={len(DATA) + 4}-", None]
    assert dest.read_bytes() == DATA


def test_stale_part_file_is_discarded_after_a_mismatch(server, tmp_path):
    # A .part left by an earlier, different version of the file at the same URL, pinned now: the
    # resume completes it, the checksum fails, and the file is fetched once more from byte 0.
    dest = tmp_path / "x.txt"
    url = _interrupted(server, "/x.txt", bytes(reversed(DATA)), dest)
    server.serve("/x.txt", DATA)
    fetch(url, dest, sha256=_sha(DATA), **FAST)
    assert server.ranges("/x.txt") == [None, "bytes=100000-", None]
    assert dest.read_bytes() == DATA and _no_part(dest)


# -- issue 59: a .part is resumed only from its own URL, and an unpinned one only with If-Range ---

OLD, NEW = DATA, bytes(reversed(DATA))  # the same length: only the bytes tell them apart


@pytest.mark.parametrize("etag", [None, 'W/"v1"'], ids=["no-validator", "weak-etag"])
def test_an_unpinned_part_is_not_resumed_without_a_validator_issue_59(server, tmp_path, etag):
    dest = tmp_path / "archive.tar.gz"
    url = _interrupted(server, "/archive.tar.gz", OLD, dest, **({"etag": etag} if etag else {}))
    server.serve("/archive.tar.gz", NEW, **({"etag": 'W/"v2"'} if etag else {}))  # the file changed between the runs
    out = fetch(url, dest, **FAST)  # nothing pins it: no checksum could tell a splice
    assert dest.read_bytes() == NEW and out["sha256"] == _sha(NEW) and _no_part(dest)
    assert server.ranges("/archive.tar.gz") == [None, None]


def test_an_unpinned_part_resumes_with_if_range_and_a_changed_file_comes_whole_issue_59(server, tmp_path):
    dest = tmp_path / "archive.tar.gz"
    url = _interrupted(server, "/archive.tar.gz", OLD, dest, etag='"v1"')
    server.serve("/archive.tar.gz", NEW, etag='"v2"')
    fetch(url, dest, **FAST)
    assert dest.read_bytes() == NEW  # asked for the rest of "v1", given all of "v2"
    assert server.ranges("/archive.tar.gz") == [None, "bytes=100000-"] and server.if_range["/archive.tar.gz"] == [None, '"v1"']
    same = tmp_path / "same.tar.gz"  # the file unchanged: the rest is appended
    url = _interrupted(server, "/same.tar.gz", OLD, same, etag='"v1"')
    fetch(url, same, **FAST)
    assert same.read_bytes() == OLD and server.if_range["/same.tar.gz"] == [None, '"v1"'] and _no_part(same)
    assert server.ranges("/same.tar.gz") == [None, "bytes=100000-"]


def test_a_part_from_another_url_is_not_resumed_issue_59(server, tmp_path):
    # an older pin's URL left the .part; the new pin's URL starts from byte 0, even with the same validator
    dest = tmp_path / "archive.tar.gz"
    _interrupted(server, "/old-commit/archive.tar.gz", OLD, dest, etag='"v1"')
    url = server.serve("/new-commit/archive.tar.gz", NEW, etag='"v1"')
    fetch(url, dest, sha256=_sha(NEW), **FAST)
    assert server.ranges("/new-commit/archive.tar.gz") == [None] and dest.read_bytes() == NEW and _no_part(dest)


@pytest.mark.parametrize("status", [403, 404, 503])
def test_a_download_error_carries_the_http_status_issue_59(server, tmp_path, status):
    url = server.serve("/mirror-2404/korbert-data.json", b"{}", status=status)  # "404" in every message
    with pytest.raises(DownloadError) as e:
        http_get_json(url, retries=1, backoff=0.01)
    assert e.value.status == status and f"HTTP {status}" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DownloadError) as e:
        fetch(url, tmp_path / "x.json", retries=1, **FAST)
    assert e.value.status == status


# -- mirrors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_uri", [False, True], ids=["folder", "file-url"])
def test_mirror_folder_is_copied_and_verified(server, tmp_path, as_uri):
    mirror = tmp_path / "mirror"
    (mirror / "nsmc").mkdir(parents=True)
    (mirror / "nsmc" / "ratings_train.txt").write_bytes(DATA)
    url = server.base + "/e9t/nsmc/master/ratings_train.txt"  # the origin: must not be asked
    dest = tmp_path / "data" / "ratings_train.txt"
    out = fetch(url, dest, sha256=_sha(DATA), mirror=mirror.as_uri() if as_uri else str(mirror),
                rel="nsmc/ratings_train.txt", **FAST)
    assert dest.read_bytes() == DATA and out["downloaded"] and _no_part(dest)
    assert server.requests == []


def test_mirror_folder_with_wrong_content_is_refused(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "ratings_train.txt").write_bytes(b"tampered")
    dest = tmp_path / "ratings_train.txt"
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        fetch("https://example.invalid/nsmc/ratings_train.txt", dest, sha256=_sha(DATA), mirror=str(mirror), **FAST)
    assert not dest.exists() and _no_part(dest)


def test_missing_mirror_file_is_one_line_naming_the_path(tmp_path):
    (tmp_path / "mirror").mkdir()
    with pytest.raises(DownloadError) as e:
        fetch("https://example.invalid/x.txt", tmp_path / "x.txt", mirror=str(tmp_path / "mirror"), rel="nsmc/x.txt", **FAST)
    assert str(tmp_path / "mirror" / "nsmc" / "x.txt") in str(e.value) and "\n" not in str(e.value)


def test_http_mirror_fetches_base_plus_rel(server, tmp_path):
    server.serve("/base/nsmc/x.txt", DATA)
    dest = tmp_path / "x.txt"
    out = fetch("https://example.invalid/x.txt", dest, sha256=_sha(DATA), mirror=server.base + "/base/",
                rel="nsmc/x.txt", **FAST)
    assert [p for p, _, _ in server.requests] == ["/base/nsmc/x.txt"]
    assert out["url"] == server.base + "/base/nsmc/x.txt" and dest.read_bytes() == DATA


# -- small API responses --------------------------------------------------------------------------


def test_http_get_json_retries_then_parses(server):
    doc = {"tree": [{"path": "ratings.txt", "sha": _blob(DATA)}], "이름": "네이버 영화"}
    url = server.serve("/api", json.dumps(doc, ensure_ascii=False).encode(), **{"503_once": True})
    assert http_get_json(url, backoff=0.01) == doc
    assert len(server.requests) == 2
    with pytest.raises(DownloadError, match="HTTP 404"):
        http_get_json(server.base + "/nope", backoff=0.01)


def test_file_url_is_copied_without_a_server(tmp_path):
    src = tmp_path / "src.txt"
    src.write_bytes(DATA)
    out = fetch(src.as_uri(), tmp_path / "out" / "x.txt", git_blob=_blob(DATA), **FAST)
    assert (tmp_path / "out" / "x.txt").read_bytes() == DATA and out["downloaded"]
    with pytest.raises(DownloadError, match="file missing: .*nope.txt"):
        fetch((tmp_path / "nope.txt").as_uri(), tmp_path / "y.txt", **FAST)
