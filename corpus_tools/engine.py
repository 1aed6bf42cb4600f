"""Running the shards stage's pieces: here, one after the other, or as tasks on a Dask cluster
(a local one of `--workers` processes, or a running one at `--scheduler`). Either way each piece's
record comes back to the caller, which records it; the pieces' output does not depend on where
they ran (corpus_tools/pieces.py)."""

from __future__ import annotations

import os
import sys
from typing import Callable, Iterator

from corpus_tools.pieces import Piece
from corpus_tools.text import InputError


def run_here(task: Callable, job, todo: Iterator[tuple[Piece, bytes | None]], bar) -> Iterator[tuple[Piece, dict]]:
    """The pieces one after the other in this process; the bar moves per batch."""
    for piece, data in todo:
        yield piece, task(job, piece, data, on_batch=bar.update)


def run_dask(task: Callable, job, todo: Iterator[tuple[Piece, bytes | None]], cfg, bar) -> Iterator[tuple[Piece, dict]]:
    """The pieces as tasks on a Dask cluster: a local one of --workers processes, or --scheduler's.
    At most a few tasks per worker are queued (a streamed piece carries its bytes: memory stays
    bounded); a task whose worker dies is run again by Dask; records come back as tasks finish."""
    try:
        from concurrent.futures import CancelledError

        from distributed import Client, KilledWorker, LocalCluster, as_completed
    except ImportError:
        raise InputError("--workers/--scheduler need Dask's distributed package: pip install 'distributed>=2024.8'") from None
    import uuid

    import dask

    cluster = client = None
    environ_before = dict(os.environ)  # a Nanny sets its workers' variables (OMP_NUM_THREADS=1, ...) in this process too
    try:
        if cfg.workers:
            # The workers started here run without two Dask defaults that cost this CPU-bound work: the
            # nanny's MALLOC_TRIM_THRESHOLD_=65536 (memory handed back to the OS and faulted in again: twice
            # the system time, ~5% of the wall time on 2 cores, measured) and the profiler that samples
            # every task's stack each 10 ms. A cluster of your own: see docs/shards.md.
            environ = {k: v for k, v in dask.config.get("distributed.nanny.pre-spawn-environ", {}).items() if k != "MALLOC_TRIM_THRESHOLD_"}
            try:
                with dask.config.set({"distributed.worker.profile.enabled": False, "distributed.nanny.pre-spawn-environ": environ}):
                    cluster = LocalCluster(
                        n_workers=cfg.workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                        memory_limit=0, silence_logs=40,
                    )
                client = Client(cluster, timeout="60s")
            except Exception as e:  # whatever stopped the scheduler, a nanny or a worker from starting
                raise InputError(f"--workers {cfg.workers}: the local Dask cluster did not start ({_root_cause(e)})") from None
        else:
            try:
                client = Client(cfg.scheduler, timeout="60s")
            except OSError as e:
                raise InputError(f"--scheduler {cfg.scheduler}: cannot connect ({e})") from None
        run = uuid.uuid4().hex[:8]
        workers = len(client.scheduler_info()["workers"]) or 1
        print(f"shards: {workers} Dask worker(s) at {client.scheduler.address}", file=sys.stderr)
        queue = as_completed()
        inflight: dict[str, tuple[Piece, bytes | None, int]] = {}  # by task key; a streamed piece's bytes stay here until it is done

        def submit(piece: Piece, data: bytes | None, attempt: int = 0) -> None:
            # scattered bytes go straight to a worker, not through the scheduler; if that worker dies
            # they are lost with it, and the piece is sent again from here
            arg = client.scatter(data, hash=False) if data is not None else None
            key = f"korbert-piece-{piece.name}-{run}-{attempt}"
            inflight[key] = (piece, data, attempt)
            queue.add(client.submit(task, job, piece, arg, key=key, pure=False))

        def submit_next() -> None:
            nxt = next(todo, None)
            if nxt is not None:
                submit(*nxt)

        for _ in range(2 * workers + 1):
            submit_next()
        for future in queue:
            piece, data, attempt = inflight.pop(future.key)
            try:
                record = future.result()  # a task's InputError (--strict, unreadable file) is raised here
            except (CancelledError, KilledWorker) as e:  # its worker died (with its input, or too often)
                if attempt >= 3:
                    raise RuntimeError(f"piece {piece.name} of {piece.path}: lost its worker {attempt + 1} times; giving up") from e
                print(f"shards: piece {piece.name} lost its worker ({type(e).__name__}); running it again", file=sys.stderr)
                submit(piece, data, attempt + 1)
                continue
            bar.update(record["documents"].get("documents_in", 0))
            future.release()
            yield piece, record
            submit_next()
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        _restore_environ(environ_before)


def _root_cause(e: BaseException) -> str:
    """The first exception of a chain (`raise ... from`), on one line: "ModuleNotFoundError: No module named 'x'"."""
    while e.__cause__ is not None:
        e = e.__cause__
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _restore_environ(before: dict) -> None:
    """os.environ as it was: distributed's Nanny applies `pre-spawn-environ` to its own process before
    spawning a worker and leaves it there, so OMP_NUM_THREADS=1 would put the torch of a later stage
    in this process (`korbert run`'s pretraining and fine-tuning) on one thread."""
    for k in set(os.environ) - set(before):
        del os.environ[k]
    for k, v in before.items():
        if os.environ.get(k) != v:
            os.environ[k] = v
