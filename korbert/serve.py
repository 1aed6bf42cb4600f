"""An HTTP JSON embedding / fill-mask service with dynamic batching (FastAPI + uvicorn: `pip install 'korbert[serve]'`).

    korbert serve runs/demo/pretrain/final --port 8080

    POST /embed      {"texts": ["문장", ...], "pooling": "mean" | "cls", "layer": -1 | 0..L | "concat4" | "sum4"}
                  -> {"vectors": [[...], ...], "dim": D, "pooling": ..., "layer": ...}
    POST /fill-mask  {"texts": ["영화가 정말 [MASK]"], "pairs": null | [...], "top_k": 5}
                  -> {"results": [what korbert.use.fill_mask returns per text]}
    GET  /health  -> {"status": "ok", "queued_texts", "in_flight", "batches", "texts", ...}

How requests are served: each request's texts join one queue; a single worker thread takes the
oldest request and every other waiting request of the same kind (same task, pooling and layer)
until the batch holds `max_batch` texts or `max_wait_ms` has passed since the oldest arrived, sorts
those texts by length, runs them in forward passes of `forward_batch`, and hands each request its
rows. The answers are those of the in-process
functions (`korbert.use.sentence_vectors`, `fill_mask`): padding does not change a vector.

Limits, each answered at once and never crashing the server:
- the queue holds at most `max_queue` texts: past it, 503 with `Retry-After` (seconds, from the
  measured rate);
- more than `max_texts` texts, a text over `max_chars` characters, or a body over `max_body` bytes: 413;
- bad JSON, wrong types, an unknown pooling or layer, fill-mask without [MASK]: 422.
Shutdown (SIGINT / SIGTERM): uvicorn stops accepting, the requests in flight are finished and
answered, then the worker stops (and uvicorn re-raises the signal: exit status 128 + signal).
"""

# (no `from __future__ import annotations`: FastAPI reads the request models of create_app from live annotations)

import asyncio
import json
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field



@dataclass
class ServeConfig:
    model: str = ""
    host: str = "127.0.0.1"
    port: int = 8080
    max_batch: int = 128  # texts merged from waiting requests per worker cycle (the defaults: the best of a sweep,
    # benchmarks/serve_throughput.py)
    forward_batch: int = 32  # texts per forward pass: a cycle's texts are sorted by length and run in batches of this size
    max_wait_ms: float = 10.0  # how long the oldest request may wait for company
    max_queue: int = 1024  # texts waiting; past it: 503
    max_texts: int = 256  # per request; past it: 413
    max_chars: int = 2000  # per text; past it: 413
    max_body: int = 4 << 20  # bytes per request body; past it: 413
    max_length: int = 128  # tokens per text (longer ones are truncated, as in `korbert embed`)
    device: str = ""
    threads: int = 0  # torch intra-op threads of the worker (0: torch's default, one per core; 1 can be faster on a machine busy with other jobs)
    graceful_s: float = 30.0  # how long shutdown waits for the requests in flight


class Overloaded(Exception):
    def __init__(self, retry_after: int):
        self.retry_after = retry_after


@dataclass
class _Item:
    key: tuple
    texts: list[str]
    pairs: list[str] | None
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.perf_counter)


class Batcher:
    """One worker thread; requests of the same kind are merged into batches (see the module docstring)."""

    def __init__(self, enc, max_batch: int, max_wait_ms: float, max_queue: int, forward_batch: int = 32, threads: int = 0):
        import torch

        self.enc, self.max_batch, self.max_wait, self.max_queue = enc, max_batch, max_wait_ms / 1000, max_queue
        self.forward_batch = forward_batch
        # OpenMP's thread count is per calling thread: a new thread would run torch on one core unless told
        self.threads = threads or torch.get_num_threads()
        self.cv = threading.Condition()
        self.items: deque[_Item] = deque()
        self.queued = 0  # texts waiting
        self.computing = 0  # texts in the forward pass now
        self.closing = False
        self.batches = self.texts = self.rejected = 0
        self.busy_s = 0.0
        self.rate = 0.0  # texts/s while busy (moving average), for Retry-After
        self.thread = threading.Thread(target=self._run, name="korbert-batcher", daemon=True)
        self.thread.start()

    def submit(self, key: tuple, texts: list[str], pairs: list[str] | None = None) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self.cv:
            if self.closing or self.queued + len(texts) > self.max_queue:
                self.rejected += 1
                raise Overloaded(max(1, math.ceil(self.queued / self.rate)) if self.rate > 0 else 1)
            self.items.append(_Item(key, texts, pairs, fut, loop))
            self.queued += len(texts)
            self.cv.notify()
        return fut

    def _take(self) -> list[_Item] | None:
        """Wait for a batch: the oldest item plus waiting items of its kind, up to max_batch texts
        or until max_wait after the oldest arrived. None when closed and drained."""
        with self.cv:
            while not self.items:
                if self.closing:
                    return None
                self.cv.wait()
            first = self.items[0]
            deadline = first.arrived + self.max_wait
            while not self.closing:
                n = sum(len(it.texts) for it in self.items if it.key == first.key)
                left = deadline - time.perf_counter()
                if n >= self.max_batch or left <= 0:
                    break
                self.cv.wait(left)
            batch, n, rest = [], 0, deque()
            for it in self.items:
                if it.key == first.key and (not batch or n + len(it.texts) <= self.max_batch):
                    batch.append(it)
                    n += len(it.texts)
                else:
                    rest.append(it)
            self.items = rest
            self.queued -= n
            return batch

    def _run(self) -> None:
        import torch

        torch.set_num_threads(1)  # torch skips a call that repeats its process-wide count, but OpenMP's
        torch.set_num_threads(self.threads)  # count is per thread: without this pair, this thread runs on one core
        while (batch := self._take()) is not None:
            t0 = time.perf_counter()
            self.computing = sum(len(it.texts) for it in batch)
            try:
                results = self._compute(batch)
            except Exception as e:  # noqa: BLE001 - every waiting request gets the error, the worker lives on
                results = [e] * len(batch)
            dt = time.perf_counter() - t0
            n = sum(len(it.texts) for it in batch)
            with self.cv:
                self.computing = 0
                self.batches += 1
                self.texts += n
                self.busy_s += dt
                self.rate = n / dt if self.rate == 0 else 0.8 * self.rate + 0.2 * n / max(dt, 1e-6)
            for it, r in zip(batch, results):
                setter = it.future.set_exception if isinstance(r, Exception) else it.future.set_result
                it.loop.call_soon_threadsafe(_settle, it.future, setter, r)

    def _compute(self, batch: list[_Item]) -> list:
        from korbert.use import fill_mask, sentence_vectors

        key = batch[0].key
        texts = [t for it in batch for t in it.texts]
        if key[0] == "embed":
            _, pooling, layer = key
            vecs = sentence_vectors(self.enc, texts, pooling, layer, batch_size=self.forward_batch)  # sorted by length
            out, a = [], 0
            for it in batch:
                out.append(vecs[a : a + len(it.texts)])
                a += len(it.texts)
            return out
        _, top_k, paired = key
        pairs = [p for it in batch for p in it.pairs] if paired else None
        res = []
        for a in range(0, len(texts), self.forward_batch):
            res += fill_mask(self.enc, texts[a : a + self.forward_batch], pairs[a : a + self.forward_batch] if paired else None, top_k)
        out, a = [], 0
        for it in batch:
            out.append(res[a : a + len(it.texts)])
            a += len(it.texts)
        return out

    def close(self, timeout: float | None = None) -> None:
        """Finish what is queued, then stop the worker."""
        with self.cv:
            self.closing = True
            self.cv.notify_all()
        self.thread.join(timeout)

    def stats(self) -> dict:
        with self.cv:
            return {
                "queued_texts": self.queued, "queued_requests": len(self.items), "computing_texts": self.computing, "batches": self.batches, "texts": self.texts,
                "rejected": self.rejected, "busy_s": round(self.busy_s, 3), "mean_batch": round(self.texts / max(self.batches, 1), 2),
            }


def _settle(fut: asyncio.Future, setter, value) -> None:
    if not fut.done():  # the client may have gone away
        setter(value)


def create_app(enc, cfg: ServeConfig):
    """The FastAPI application around a loaded `korbert.use.Encoder`."""
    from contextlib import asynccontextmanager
    from typing import Literal, Union

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

    from korbert.use import check_layer

    class EmbedRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        texts: list[StrictStr] = Field(min_length=1)
        pooling: Literal["cls", "mean"] = "mean"
        layer: Union[StrictInt, Literal["concat4", "sum4"]] = -1

    class FillMaskRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        texts: list[StrictStr] = Field(min_length=1)
        pairs: list[StrictStr] | None = None
        top_k: StrictInt = Field(default=5, ge=1, le=100)

    state: dict = {"in_flight": 0}

    @asynccontextmanager
    async def lifespan(app):
        state["batcher"] = Batcher(enc, cfg.max_batch, cfg.max_wait_ms, cfg.max_queue, cfg.forward_batch, cfg.threads)
        yield
        # uvicorn has finished the requests in flight; stop the worker
        b = state["batcher"]
        await asyncio.get_running_loop().run_in_executor(None, b.close, cfg.graceful_s)
        st = b.stats()
        print(f"korbert serve: stopped; the requests in flight were answered ({st['texts']} texts in {st['batches']} batches, {st['rejected']} requests refused)", flush=True)

    app = FastAPI(title="korbert", lifespan=lifespan)

    def error(status: int, msg: str, headers: dict | None = None):
        return JSONResponse({"detail": msg}, status_code=status, headers=headers)

    @app.middleware("http")
    async def limits(request: Request, call_next):
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > cfg.max_body:
            return error(413, f"request body of {size} bytes; the limit is {cfg.max_body}")
        state["in_flight"] += 1
        try:
            return await call_next(request)
        finally:
            state["in_flight"] -= 1

    def check_sizes(texts: list[str], pairs: list[str] | None = None):
        if len(texts) > cfg.max_texts:
            return error(413, f"{len(texts)} texts; the limit is {cfg.max_texts} per request")
        for t in texts + (pairs or []):
            if len(t) > cfg.max_chars:
                return error(413, f"a text of {len(t)} characters; the limit is {cfg.max_chars}")
        return None

    async def run(key, texts, pairs=None):
        try:
            fut = state["batcher"].submit(key, texts, pairs)
        except Overloaded as e:
            return error(503, "overloaded: the queue is full, retry later", {"Retry-After": str(e.retry_after)})
        return await fut

    @app.post("/embed")
    async def embed(req: EmbedRequest):
        if (r := check_sizes(req.texts)) is not None:
            return r
        try:
            layer = check_layer(req.layer, enc.layers)
        except ValueError as e:
            return error(422, str(e))
        out = await run(("embed", req.pooling, layer), req.texts)
        if isinstance(out, Response):
            return out
        body = {"vectors": out.tolist(), "dim": int(out.shape[1]), "pooling": req.pooling, "layer": layer}
        return Response(json.dumps(body), media_type="application/json")  # no per-float encoder pass

    @app.post("/fill-mask")
    async def fill(req: FillMaskRequest):
        if (r := check_sizes(req.texts, req.pairs)) is not None:
            return r
        if req.pairs is not None and len(req.pairs) != len(req.texts):
            return error(422, "pairs must have one entry per text")
        mask = enc.tok.mask_token
        for i, t in enumerate(req.texts):
            if mask not in t and (req.pairs is None or mask not in req.pairs[i]):
                return error(422, f"text {i} has no {mask}")
        out = await run(("fill", req.top_k, req.pairs is not None), req.texts, req.pairs)
        if isinstance(out, Response):
            return out
        return Response(json.dumps({"results": out}, ensure_ascii=False), media_type="application/json")

    @app.get("/health")
    async def health():
        b = state.get("batcher")
        return {
            "status": "ok", "model": str(enc.folder), "dim": enc.hidden, "layers": enc.layers, "in_flight": state["in_flight"] - 1,
            "max_batch": cfg.max_batch, "forward_batch": cfg.forward_batch, "threads": b.threads if b else None, "max_wait_ms": cfg.max_wait_ms, "max_queue": cfg.max_queue, **(b.stats() if b else {}),
        }

    return app


def build(cfg: ServeConfig):
    """Load the model and make the app (what `korbert serve` runs; tests and the benchmark call it)."""
    import torch

    from korbert.use import Encoder

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    from korbert.use import encode_batch

    enc = Encoder(cfg.model, device=cfg.device or None, max_length=cfg.max_length)
    encode_batch(enc, ["모델을 미리 한 번 실행합니다"], "mean", -1)  # loads Kiwi and warms torch before the first request
    return create_app(enc, cfg)


def main(cfg: ServeConfig) -> None:
    try:
        import uvicorn
    except ImportError:
        raise SystemExit("korbert serve needs FastAPI and uvicorn: pip install 'korbert[serve]'") from None
    app = build(cfg)
    print(f"korbert serve: {cfg.model} on http://{cfg.host}:{cfg.port} (max batch {cfg.max_batch} in passes of {cfg.forward_batch}, wait {cfg.max_wait_ms} ms, queue {cfg.max_queue} texts)", flush=True)
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning", timeout_graceful_shutdown=cfg.graceful_s)


def cli(argv: list[str]) -> None:
    import argparse
    import dataclasses

    ap = argparse.ArgumentParser(prog="korbert serve", description="HTTP JSON embeddings and fill-mask with dynamic batching (see korbert/serve.py).")
    ap.add_argument("model", help="exported model folder (e.g. runs/demo/pretrain/final)")
    for f in dataclasses.fields(ServeConfig):
        if f.name != "model":
            ap.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default, help=f"(default {f.default})")
    a = vars(ap.parse_args(argv))
    main(ServeConfig(**a))
