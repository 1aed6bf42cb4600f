"""The embedding service (korbert/serve.py), over real HTTP on localhost. Skipped only when the
`serve` extra (FastAPI + uvicorn) is not installed; the `dev` extra installs it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install 'korbert[serve]'")
uvicorn = pytest.importorskip("uvicorn", reason="the serve extra is not installed: pip install 'korbert[serve]'")

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ["나는 학교에 갔다", "영화가 정말 재미있었어요", "오늘은 날씨가 좋아서 공원에 산책을 나갔는데 사람이 아주 많았다", "짧다", "배우의 연기가 좋았다"]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, vocab_dir) -> Path:
    """A tiny random BertForPreTraining (4 layers, hidden 32) saved with the korbert tokenizer."""
    from transformers import BertConfig, BertForPreTraining

    from korbert.tokenizer import KorBertTokenizer

    out = tmp_path_factory.mktemp("serve") / "model"
    tok = KorBertTokenizer.from_pretrained(vocab_dir)
    tok.save_pretrained(out)
    torch.manual_seed(1)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64, max_position_embeddings=130)
    BertForPreTraining(cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def enc(model_folder):
    from korbert.use import Encoder

    return Encoder(model_folder, device="cpu", max_length=128)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """uvicorn serving an app in a thread of this process."""

    def __init__(self, app):
        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        for _ in range(400):
            if self.server.started:
                return
            time.sleep(0.05)
        raise RuntimeError("server did not start")

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)


def request(port: int, method: str, path: str, body=None, raw: bytes | None = None, timeout: float = 120):
    """(status, headers, parsed JSON or None) of one HTTP request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data is not None else {})
    r = conn.getresponse()
    payload = r.read()
    conn.close()
    try:
        parsed = json.loads(payload)
    except ValueError:
        parsed = None
    return r.status, dict(r.getheaders()), parsed


@pytest.fixture(scope="module")
def server(enc):
    from korbert.serve import ServeConfig, create_app

    cfg = ServeConfig(max_batch=16, max_wait_ms=100, max_queue=512, max_texts=32, max_chars=300, max_body=64 << 10)
    s = _Server(create_app(enc, cfg))
    yield s
    s.stop()


def test_concurrent_clients_get_the_in_process_answers(server, enc):
    from korbert.use import sentence_vectors

    jobs = [((TEXTS[i % 5 :] + TEXTS[: i % 5])[: 1 + i % 5], ("cls", "mean")[i % 2], (-1, "concat4", "sum4", 0)[i % 4]) for i in range(12)]
    results: dict[int, tuple] = {}
    start = threading.Barrier(len(jobs))

    def client(i, texts, pooling, layer):
        start.wait()
        results[i] = request(server.port, "POST", "/embed", {"texts": texts, "pooling": pooling, "layer": layer})

    threads = [threading.Thread(target=client, args=(i, *job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (texts, pooling, layer) in enumerate(jobs):
        status, _, body = results[i]
        assert status == 200, body
        got = np.asarray(body["vectors"], dtype=np.float32)
        np.testing.assert_allclose(got, sentence_vectors(enc, texts, pooling, layer), atol=1e-5, rtol=0)
        assert body["dim"] == (128 if layer == "concat4" else 32)
    _, _, health = request(server.port, "GET", "/health")
    assert health["status"] == "ok" and health["texts"] >= sum(len(j[0]) for j in jobs)
    assert health["batches"] < len(jobs)  # requests of one kind were merged


def test_fill_mask_endpoint_equals_in_process(server, enc):
    from korbert.use import fill_mask

    body = {"texts": ["영화가 정말 [MASK]", "나는 [MASK]에 갔다"], "pairs": ["[MASK] 좋았다", "그리고 왔다"], "top_k": 3}
    status, _, got = request(server.port, "POST", "/fill-mask", body)
    assert status == 200
    want = fill_mask(enc, body["texts"], body["pairs"], 3)
    for g, w in zip(got["results"], want):
        assert g["filled"] == w["filled"] and len(g["masks"]) == len(w["masks"])
        for gm, wm in zip(g["masks"], w["masks"]):
            assert [c["id"] for c in gm["candidates"]] == [c["id"] for c in wm["candidates"]]
            np.testing.assert_allclose([c["prob"] for c in gm["candidates"]], [c["prob"] for c in wm["candidates"]], atol=1e-6)


def test_bad_input_is_answered_not_crashed(server):
    p = server.port
    cases = [
        ("/embed", None, b"{not json", 422),
        ("/embed", {"texts": "하나의 문자열"}, None, 422),
        ("/embed", {"texts": ["좋다", 3]}, None, 422),
        ("/embed", {"texts": []}, None, 422),
        ("/embed", {"texts": ["좋다"], "pooling": "max"}, None, 422),
        ("/embed", {"texts": ["좋다"], "layer": 9}, None, 422),
        ("/embed", {"texts": ["좋다"], "layer": True}, None, 422),
        ("/embed", {"texts": ["좋다"], "extra": 1}, None, 422),
        ("/fill-mask", {"texts": ["마스크가 없다"]}, None, 422),
        ("/fill-mask", {"texts": ["[MASK] 좋다"], "pairs": ["a", "b"]}, None, 422),
        ("/embed", {"texts": ["좋다"] * 33}, None, 413),
        ("/embed", {"texts": ["가" * 301]}, None, 413),
        ("/embed", None, b'{"texts": ["' + "가".encode() * 30000 + b'"]}', 413),
    ]
    for path, body, raw, want in cases:
        status, _, got = request(p, "POST", path, body, raw)
        assert status == want, (path, body if raw is None else raw[:40], status, got)
        assert got and "detail" in got
    assert request(p, "GET", "/nowhere")[0] == 404
    status, _, got = request(p, "POST", "/embed", {"texts": ["아직 살아 있다"]})
    assert status == 200 and len(got["vectors"]) == 1


def test_overload_gets_503_with_retry_after(enc):
    """A flood past the queue bound: the excess is refused at once; every accepted request is right."""
    from korbert.serve import ServeConfig, create_app
    from korbert.use import sentence_vectors

    cfg = ServeConfig(max_batch=8, max_wait_ms=300, max_queue=8, max_texts=8)
    s = _Server(create_app(enc, cfg))
    try:
        texts = TEXTS[:4]
        want = sentence_vectors(enc, texts, "mean", -1)
        out: list = [None] * 12
        start = threading.Barrier(12)

        def client(i):
            start.wait()
            out[i] = request(s.port, "POST", "/embed", {"texts": texts})

        threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = [o[0] for o in out]
        assert set(codes) == {200, 503} and codes.count(200) >= 2, codes
        for status, headers, body in out:
            if status == 503:
                assert int(headers["retry-after"]) >= 1
            else:
                np.testing.assert_allclose(np.asarray(body["vectors"], np.float32), want, atol=1e-5, rtol=0)
        _, _, health = request(s.port, "GET", "/health")
        assert health["rejected"] == codes.count(503) and health["queued_texts"] == 0
    finally:
        s.stop()


def test_graceful_shutdown_finishes_requests_in_flight(model_folder, enc, tmp_path):
    """SIGTERM while a request is being computed: it is answered in full, then the process exits 0."""
    from korbert.use import sentence_vectors

    port = _free_port()
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "korbert.cli", "serve", str(model_folder), "--port", str(port), "--max-batch", "2", "--forward-batch", "2", "--max-texts", "256", "--device", "cpu"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        for _ in range(600):
            try:
                if request(port, "GET", "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError((tmp_path / "serve.log").read_text())
        texts = [t * 6 for t in TEXTS] * 16  # 80 long texts in batches of 2: long enough to be caught in flight
        result: dict = {}
        t = threading.Thread(target=lambda: result.update(r=request(port, "POST", "/embed", {"texts": texts})))
        t.start()
        for _ in range(600):
            _, _, h = request(port, "GET", "/health", timeout=60)
            if h["computing_texts"] == len(texts):
                break
            time.sleep(0.01)
        else:
            raise AssertionError(f"the request was never seen in flight: {h}")
        proc.send_signal(signal.SIGTERM)
        assert "r" not in result  # still being computed when the signal arrived
        t.join(120)
        status, _, body = result["r"]
        assert status == 200
        np.testing.assert_allclose(np.asarray(body["vectors"], np.float32), sentence_vectors(enc, texts, "mean", -1), atol=1e-5, rtol=0)
        assert proc.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
        assert "requests in flight were answered" in (tmp_path / "serve.log").read_text()
        with pytest.raises(OSError):  # no longer listening
            request(port, "GET", "/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
