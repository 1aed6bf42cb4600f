"""The GPU lease's helpers that run without a GPU: how many step configurations share a card
(benchmarks/gpu_step_ab.py) and the training loop's medians (benchmarks/loop_rows.py)."""

import json
import subprocess
import sys
from pathlib import Path

from conftest import load_benchmark as load

ROOT = Path(__file__).resolve().parent.parent


def test_parallel_configurations_fit_the_card():
    """Four BERT-base processes at once ran out of memory on an 80-GB H100 (sixth lease); the default now
    follows the card's memory: two there, four on a 141-GB H200, one on a small card, never more than four."""
    auto = load("gpu_step_ab").auto_parallel
    gib = 2**30
    assert auto(81559 * 2**20) == 2  # nvidia-smi's memory.total of the H100 80GB HBM3 (MiB)
    assert auto(143771 * 2**20) == 4  # and of the H200
    assert auto(24 * gib) == 1 and auto(0) == 1
    assert auto(400 * gib) == 4


def test_loop_rows_medians_leave_out_the_first_interval(tmp_path):
    rows = [
        {"step": 100, "seq_len": 128, "tokens_per_s": 1000.0, "mfu": 0.01, "data_wait": 0.5},  # start-up: left out
        {"step": 200, "seq_len": 128, "tokens_per_s": 3000.0, "mfu": 0.30, "data_wait": 0.10},
        {"step": 300, "seq_len": 128, "tokens_per_s": 2000.0, "mfu": 0.20, "data_wait": 0.20},
        {"step": 400, "seq_len": 128, "tokens_per_s": 4000.0, "mfu": 0.40, "data_wait": 0.05},
        {"step": 500, "seq_len": 512, "tokens_per_s": 900.0, "mfu": 0.35, "data_wait": 0.0},
    ]
    s = load("loop_rows").summarize(rows)
    assert s["128"]["rows"] == 4 and s["128"]["rows_in_medians"] == 3
    assert s["128"]["median_tokens_per_s"] == 3000.0 and s["128"]["median_data_wait"] == 0.10 and s["128"]["max_data_wait"] == 0.20
    assert s["512"]["rows_in_medians"] == 1 and s["512"]["median_tokens_per_s"] == 900.0  # one row: kept
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "summary.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "loop_rows.py"), str(log), "--json", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["by_seq_len"]["128"]["median_tokens_per_s"] == 3000.0
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "loop_rows.py"), str(empty)], capture_output=True, text=True)
    assert p.returncode != 0 and "no logged steps" in p.stderr


def test_driver_cut_off_keeps_a_partial_record(tmp_path, shards_dir):
    """A lease's timeout sends the driver SIGTERM: it stops the configuration that runs, records it as
    terminated and the one not started as skipped, writes the JSON and exits 143 (before, it died with
    nothing written and the configuration's log left on the machine)."""
    import os
    import signal
    import time

    work, out = tmp_path / "ab", tmp_path / "ab.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_step_ab.py"), "--shards", str(shards_dir), "--before", str(ROOT),
           "--device", "cpu", "--size", "tiny", "--steps", "2", "--warmup", "1", "--batches", "2", "--tokens-per-batch", "1024",
           "--configs", "lean", "now-defaults", "--out", str(out), "--work", str(work)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.time() + 120
        while not (work / "lean.log").exists() and time.time() < deadline and p.poll() is None:
            time.sleep(0.1)
        assert (work / "lean.log").exists(), p.stdout.read() if p.poll() is not None else "no configuration started"
        p.send_signal(signal.SIGTERM)  # the configuration is still importing torch: it is running
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert rc == 128 + signal.SIGTERM
    rec = json.loads(out.read_text())
    assert rec["partial"] is True and rec["parallel"] == 1 and rec["results"] == {}
    assert str(rec["failed"]["lean"]["rc"]).startswith("terminated by signal 15") and rec["skipped"] == ["now-defaults"]
