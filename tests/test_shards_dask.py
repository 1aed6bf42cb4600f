"""The shards stage on Dask: the same bytes as one process for any number of workers, on a local
cluster and on separately started scheduler/worker processes; a worker killed mid-task; hostile
input counted across tasks. Every cluster listens on 127.0.0.1 and is stopped by its test."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from distributed.diagnostics.plugin import WorkerPlugin  # noqa: E402

from conftest import SAMPLE, sample_texts, write_jsonl  # noqa: E402
from corpus_tools.artifacts import sha256_file  # noqa: E402
from corpus_tools.shards import main  # noqa: E402
from corpus_tools.shards_config import ShardsConfig  # noqa: E402

SHARD_MB = 0.008  # the .jsonl (~50 KB) is cut into several byte ranges, the .gz stream into several pieces


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> list[str]:
    """A .gz file (sample petitions, first 40), an uncompressed .jsonl and a blank-line separated .txt."""
    d = tmp_path_factory.mktemp("mix")
    gz = d / "petitions.jsonl.gz"
    with gzip.open(SAMPLE / "petitions.jsonl.gz", "rb") as f:
        gz.write_bytes(gzip.compress(b"".join(f.readlines()[:40])))
    jsonl = write_jsonl(d / "reviews.jsonl", sample_texts(450)[150:])
    txt = d / "reviews.txt"
    txt.write_text("\n\n".join(t.strip() for t in sample_texts(150) if t.strip()) + "\n", encoding="utf-8")
    return [str(gz), str(jsonl), str(txt)]


def build(vocab_dir, inputs, out, **kw) -> dict:
    return main(ShardsConfig(tokenizer=str(vocab_dir), inputs=list(inputs), out=str(out), shard_mb=SHARD_MB, valid_fraction=0.1, show=0, **kw))


def files(folder: Path) -> dict[str, str]:
    """Every shard file's sha256, read from disk (not from the manifest)."""
    return {p.name: sha256_file(p) for p in sorted(folder.glob("*.npy"))}


@pytest.fixture(scope="module")
def single(vocab_dir, inputs, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("single")
    return out, build(vocab_dir, inputs, out)


def test_one_process_and_1_2_3_workers_write_the_same_bytes(vocab_dir, inputs, single, tmp_path):
    ref_dir, ref = single
    pieces = {name.split(".")[0].split("-", 1)[1] for name in files(ref_dir)}
    assert {p[:4] for p in pieces} == {"0000", "0001", "0002"} and sum(p.startswith("0001") for p in pieces) >= 3
    assert ref["run"]["engine"] == "one process" and ref["counts"]["pieces"] >= 6
    environ = dict(os.environ)
    for n in (1, 2, 3):
        m = build(vocab_dir, inputs, tmp_path / f"w{n}", workers=n)
        assert dict(os.environ) == environ  # no OMP_NUM_THREADS=1 left by the workers' nannies for this process's later torch
        assert m["run"]["engine"] == f"dask, {n} local workers"
        assert files(tmp_path / f"w{n}") == files(ref_dir), n
        assert m["counts"] == ref["counts"] and m["shards"] == ref["shards"] and m["key"] == ref["key"]
        assert not list((tmp_path / f"w{n}").glob(".*"))  # no partial or temp files left


class _KillOnce(WorkerPlugin):
    """A Dask worker plugin: the first task to start kills its worker process half a second later
    (mid-task: loading Kiwi alone takes longer). A marker file makes it once for the whole cluster."""

    def __init__(self, marker: str):
        self.marker = marker

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or not str(key).startswith("korbert-piece"):
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        threading.Timer(0.5, os._exit, args=(1,)).start()


def test_a_worker_killed_mid_task_loses_and_duplicates_nothing(vocab_dir, inputs, single, tmp_path):
    import cloudpickle
    from distributed import Client, LocalCluster

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    marker = tmp_path / "killed"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None, memory_limit=0) as cluster, \
            Client(cluster) as client:
        client.register_plugin(_KillOnce(str(marker)), name="kill-once")
        m = build(vocab_dir, inputs, tmp_path / "out", scheduler=cluster.scheduler_address)
    assert marker.exists()  # a worker did die
    ref_dir, ref = single
    assert files(tmp_path / "out") == files(ref_dir)
    c = m["counts"]
    assert c == ref["counts"] and c["documents_in"] == c["documents_used"] + sum(c["documents_skipped"].values())


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60) -> None:
    t = time.time()
    while not path.exists():
        if proc.poll() is not None or time.time() - t > seconds:
            raise RuntimeError(f"{proc.args[0]} did not start")
        time.sleep(0.2)


@pytest.mark.slow  # out of CI for the suite's time (run with -m slow)
def test_separately_started_scheduler_and_workers_write_the_same_bytes(vocab_dir, inputs, single, tmp_path):
    from distributed import Client

    bindir = Path(sys.executable).parent
    dask = str(bindir / "dask") if (bindir / "dask").exists() else "dask"
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs = [subprocess.Popen(
        [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(sched_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )]
    try:
        _wait_for(sched_file, procs[0])
        for _ in range(2):
            procs.append(subprocess.Popen(
                [dask, "worker", "--scheduler-file", str(sched_file), "--host", "127.0.0.1", "--nthreads", "1",
                 "--no-dashboard", "--memory-limit", "0"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path,
            ))
        with Client(scheduler_file=str(sched_file), timeout="60s") as client:
            client.wait_for_workers(2, timeout=60)
            address = client.scheduler.address
        m = build(vocab_dir, inputs, tmp_path / "out", scheduler=address)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    assert m["run"]["engine"].startswith("dask at tcp://127.0.0.1:")
    ref_dir, ref = single
    assert files(tmp_path / "out") == files(ref_dir) and m["counts"] == ref["counts"]


def test_hostile_input_is_counted_by_reason_across_tasks(vocab_dir, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    good = [t for t in sample_texts(200) if t.strip()]
    rows = write_jsonl(d / "rows.jsonl", good[:115]).read_bytes().split(b"\n")
    rows[10:10] = [b"{broken", b'{"other": 1}', b"\xff\xfe not utf-8"]
    rows[60:60] = [b"{also broken", b'{"text": "\xea\xb0\x80"}', b'{"text": ""}']  # too short, empty
    (d / "rows.jsonl").write_bytes(b"\n".join(rows))
    (d / "long.txt").write_text("x" * 200_000 + "\n\n" + "\n\n".join(good[120:]) + "\n", encoding="utf-8")
    one = build(vocab_dir, [str(d)], tmp_path / "one")
    two = build(vocab_dir, [str(d)], tmp_path / "two", workers=2)
    assert one["counts"]["pieces"] > 4
    skipped = two["counts"]["documents_skipped"]
    assert skipped == {"empty": 1, "invalid_utf8": 1, "malformed_json": 2, "missing_field": 1, "too_long": 1, "too_short": 1}
    assert two["counts"] == one["counts"] and files(tmp_path / "two") == files(tmp_path / "one")
    c = two["counts"]
    assert c["documents_in"] == c["documents_used"] + sum(skipped.values()) == 115 + 6 + len(good[120:]) + 1


def test_strict_error_from_a_worker_is_one_clear_line(vocab_dir, tmp_path, capsys):
    from korbert.cli import main as korbert

    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "\xec\xa2\x8b\xec\x9d\x80 \xeb\xac\xb8\xec\x84\x9c"}\n{broken\n')
    args = ["shards", "--tokenizer", str(vocab_dir), "--inputs", str(bad), "--out", str(tmp_path / "o"), "--workers", "1", "--strict"]
    assert korbert(args) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2: malformed json" in err and "Traceback" not in err


def test_a_local_cluster_that_fails_to_start_is_one_clear_line(vocab_dir, inputs, tmp_path, capsys):
    """A worker that cannot start (here: a preload module that does not exist) stops the local
    cluster; the error says so in one line, not as a --scheduler it could not reach, and the
    environment the nanny set in this process is restored."""
    import dask

    from korbert.cli import main as korbert

    environ = dict(os.environ)
    args = ["shards", "--tokenizer", str(vocab_dir), "--inputs", *inputs, "--out", str(tmp_path / "o"), "--workers", "1"]
    with dask.config.set({"distributed.worker.preload": ["korbert_no_such_preload_module"]}):
        assert korbert(args) == 2
    assert dict(os.environ) == environ  # no OMP_NUM_THREADS=1 left behind by the nanny
    err = capsys.readouterr().err.splitlines()
    line = next(x for x in err if x.startswith("korbert shards: error:"))
    assert "--workers 1: the local Dask cluster did not start" in line and "--scheduler" not in line, line
