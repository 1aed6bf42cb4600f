"""`korbert serve` under concurrent load, side by side with the in-process call at the same batch size.

    python benchmarks/serve_throughput.py --model runs/demo/pretrain/final

What runs, all on this machine (the clients share its cores with the server):
1. sweep: for each (max_batch, max_wait_ms) in --configs, a server process (`korbert serve`) and
   --clients closed-loop HTTP clients, each sending POST /embed with 1..32 NSMC-R sentences (mean
   pooling, last layer), for --seconds; sentences/s answered, per-request latency.
2. the best configuration, in --rounds rounds that alternate (so both see the same machine): the
   service for --final-seconds / rounds, then in-process `korbert.use.sentence_vectors` on NSMC-R
   sentences in the benchmark process (the server idle), twice: on chunks of the service's realized
   mean merged batch (the same batch: the service's own work, minus HTTP, JSON and queueing), and on
   the whole sample in one call (sorted by length over all of it, what a user embedding a list
   runs). Both in passes of the same forward_batch. Reported: the median round's sentences/s, p50/p99
   latency over all rounds' requests, ratio_* = service / in-process (median of the rounds' ratios).
   On a shared machine the wall-clock ratio moves with other jobs (the 16 client threads and the
   server get a larger share of the cores than a single in-process thread), so CPU time per
   sentence is reported too: the server process's (its HTTP, JSON and batching included) against
   the in-process call's, ratio_*_cpu_time.
4. overload: an open-loop flood at 4x the measured capacity (16-sentence requests sent on a fixed
   schedule for --flood-seconds, --flood-threads senders): the fraction answered 503 (with
   Retry-After), and every accepted answer checked against the in-process vectors (max abs diff).
Clients read but do not decode the JSON of the throughput runs (a real client would do that on its
own machine); the flood's answers are all decoded and checked.
Writes benchmarks/results/serve-throughput.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from corpus_tools import SAMPLE_DATA
from corpus_tools.artifacts import machine  # noqa: E402


def nsmc_sentences(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[1] for line in lines if line.count("\t") == 2 and line.split("\t")[1].strip()]


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model: str, max_batch: int, forward_batch: int, max_wait_ms: float, max_queue: int, log: Path, threads: int = 0):
        self.port = free_port()
        self.log = open(log, "w")
        cmd = [sys.executable, "-m", "korbert.cli", "serve", model, "--port", str(self.port), "--max-batch", str(max_batch),
               "--forward-batch", str(forward_batch), "--max-wait-ms", str(max_wait_ms), "--max-queue", str(max_queue), "--max-texts", "64", "--device", "cpu", "--threads", str(threads)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(1200):
            try:
                if self.get("/health")["status"] == "ok":
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"server did not start: {log.read_text()}")

    def get(self, path: str) -> dict:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", path)
        out = json.loads(c.getresponse().read())
        c.close()
        return out

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, dict, bytes]:
    conn.request("POST", "/embed", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, dict(r.getheaders()), r.read()


def closed_loop(port: int, texts: list[str], clients: int, seconds: float, seed: int) -> dict:
    """`clients` threads, each: send 1..32 sentences, wait for the answer, repeat, for `seconds`."""
    stop = time.perf_counter() + seconds
    lat: list[float] = []
    sent = [0] * clients
    errors: list = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    def client(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        start.wait()
        while time.perf_counter() < stop:
            n = rng.randint(1, 32)
            a = rng.randrange(0, len(texts) - n)
            body = json.dumps({"texts": texts[a : a + n], "pooling": "mean", "layer": -1}).encode()
            t0 = time.perf_counter()
            status, _, payload = post(conn, body)
            dt = time.perf_counter() - t0
            if status != 200 or not payload.startswith(b'{"vectors"'):
                with lock:
                    errors.append((status, payload[:200]))
                continue
            with lock:
                lat.append(dt)
            sent[k] += n
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat.sort()
    return {
        "sentences": sum(sent), "requests": len(lat), "errors": len(errors), "seconds": round(wall, 2),
        "sentences_per_s": round(sum(sent) / wall, 1), "latency_p50_ms": round(1000 * lat[len(lat) // 2], 1),
        "latency_p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1), "first_errors": errors[:3],
        "latencies": lat,
    }


def flood(port: int, texts: list[str], rate_sentences: float, seconds: float, threads: int, per_request: int = 16) -> dict:
    """Open loop: requests of `per_request` sentences released on a fixed schedule at `rate_sentences`."""
    payloads = [texts[i * per_request : (i + 1) * per_request] for i in range(40)]
    interval = per_request / rate_sentences
    n_req = int(seconds / interval)
    t_start = time.perf_counter() + 0.5
    nxt = [0]
    lock = threading.Lock()
    results: list = []

    def sender() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n_req:
                break
            delay = t_start + i * interval - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            t0 = time.perf_counter()
            try:
                status, headers, body = post(conn, json.dumps({"texts": payloads[i % len(payloads)]}).encode())
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                status, headers, body = -1, {}, str(e).encode()
            with lock:
                results.append((i, status, headers, body, time.perf_counter() - t0))
        conn.close()

    ts = [threading.Thread(target=sender) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t_start
    return {"payloads": payloads, "results": results, "requests": n_req, "seconds": wall}


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "runs" / "demo" / "pretrain" / "final"))
    ap.add_argument("--texts", default=str(SAMPLE_DATA / "nsmc_test.txt"))
    ap.add_argument("--configs", default="32:32:2,64:32:5,128:32:10,64:16:5", help="max_batch:forward_batch:max_wait_ms to sweep")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10, help="per swept configuration")
    ap.add_argument("--final-seconds", type=float, default=30, help="service time of the chosen configuration, split into --rounds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flood-seconds", type=float, default=10)
    ap.add_argument("--flood-threads", type=int, default=96)
    ap.add_argument("--threads", type=int, default=0, help="torch threads of the server's worker and of the in-process call (0: torch's default)")
    ap.add_argument("--max-queue", type=int, default=512, help="server queue bound in texts (16 clients x 32 never exceed it)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "serve-throughput.json"))
    a = ap.parse_args()
    t_all, load_start = time.perf_counter(), os.getloadavg()
    texts = nsmc_sentences(Path(a.texts))
    import torch

    from korbert.use import Encoder

    if a.threads:
        torch.set_num_threads(a.threads)
    enc = Encoder(a.model, device="cpu", max_length=128)
    n_tok = [len(x) for x in enc.tok(texts[:2000])["input_ids"]]
    print(f"{len(texts)} NSMC-R sentences, {statistics.mean(n_tok):.1f} tokens on average ([CLS]/[SEP] included); {a.clients} clients, 1-32 sentences per request")
    import tempfile

    logs = Path(tempfile.mkdtemp(prefix="serve-throughput-"))  # the servers' own output, for a failed start

    sweep = []
    for pair in a.configs.split(","):
        mb, fb, mw = int(pair.split(":")[0]), int(pair.split(":")[1]), float(pair.split(":")[2])
        s = Server(a.model, mb, fb, mw, a.max_queue, logs / f"server-{mb}-{fb}-{mw:g}.log", a.threads)
        try:
            closed_loop(s.port, texts, a.clients, 2, seed=99)  # warm-up
            r = closed_loop(s.port, texts, a.clients, a.seconds, seed=1)
            st = s.get("/health")
        finally:
            s.stop()
        r.pop("latencies")
        r.update(max_batch=mb, forward_batch=fb, max_wait_ms=mw, mean_batch=st["mean_batch"])
        print(f"serve max_batch {mb}, forward batch {fb}, wait {mw} ms: {r['sentences_per_s']:,.0f} sentences/s, p50 {r['latency_p50_ms']} ms, p99 {r['latency_p99_ms']} ms, mean batch {st['mean_batch']}")
        sweep.append(r)
    best = max(sweep, key=lambda r: r["sentences_per_s"])

    # the chosen configuration: rounds alternate the service and the in-process call (same load for both)
    from korbert.use import sentence_vectors

    fb = best["forward_batch"]
    s = Server(a.model, best["max_batch"], fb, best["max_wait_ms"], a.max_queue, logs / "server-final.log", a.threads)
    rounds = []
    try:
        closed_loop(s.port, texts, a.clients, 2, seed=98)
        sentence_vectors(enc, texts[:64], "mean", -1, batch_size=32)  # warm-up of the in-process side
        for k in range(a.rounds):
            h0 = s.get("/health")
            c0, m0 = proc_cpu_s(s.proc.pid), time.process_time()
            r = closed_loop(s.port, texts, a.clients, a.final_seconds / a.rounds, seed=2 + k)
            c1, m1 = proc_cpu_s(s.proc.pid), time.process_time()
            h1 = s.get("/health")
            r["server_cpu_ms_per_sentence"] = round(1000 * (c1 - c0) / r["sentences"], 3)
            r["clients_cpu_ms_per_sentence"] = round(1000 * (m1 - m0) / r["sentences"], 3)
            r["mean_batch"] = round((h1["texts"] - h0["texts"]) / max(1, h1["batches"] - h0["batches"]), 2)
            same = max(1, round(r["mean_batch"]))
            sample = texts[: max(256, int(r["sentences_per_s"] * a.final_seconds / a.rounds / 2))]
            # in-process, the service's work without the service: chunks of its mean merged batch, each
            # sorted and run in passes of forward_batch (same batch); and the whole sample in one call
            # (sorted over all of it: what a user embedding a list runs, the stronger baseline)
            ip, ip_cpu = {}, {}
            for name, chunk in (("same_batch", same), ("whole_list", len(sample))):
                t0, m0 = time.perf_counter(), time.process_time()
                for c in range(0, len(sample), chunk):
                    sentence_vectors(enc, sample[c : c + chunk], "mean", -1, batch_size=fb)
                ip[name] = round(len(sample) / (time.perf_counter() - t0), 1)
                ip_cpu[name] = round(1000 * (time.process_time() - m0) / len(sample), 3)
            r["in_process_sentences_per_s"] = ip
            r["in_process_cpu_ms_per_sentence"] = ip_cpu
            r["in_process_batch_same"] = same
            r["ratio_same_batch"] = round(r["sentences_per_s"] / ip["same_batch"], 3)
            r["ratio_whole_list"] = round(r["sentences_per_s"] / ip["whole_list"], 3)
            r["ratio_cpu_same_batch"] = round(ip_cpu["same_batch"] / r["server_cpu_ms_per_sentence"], 3)
            print(f"round {k + 1}: service {r['sentences_per_s']:,.0f} sentences/s (mean batch {r['mean_batch']}, p50 {r['latency_p50_ms']} ms, p99 {r['latency_p99_ms']} ms); "
                  f"in-process same batch {ip['same_batch']:,.0f}, whole list {ip['whole_list']:,.0f} sentences/s; ratios {r['ratio_same_batch']:.3f} / {r['ratio_whole_list']:.3f}; "
                  f"CPU ms/sentence: server {r['server_cpu_ms_per_sentence']}, clients {r['clients_cpu_ms_per_sentence']}, in-process {ip_cpu['same_batch']} (ratio {r['ratio_cpu_same_batch']:.3f})")
            rounds.append(r)
        capacity = statistics.median(r["sentences_per_s"] for r in rounds)
        fl = flood(s.port, texts, 4 * capacity, a.flood_seconds, a.flood_threads)
        h2 = s.get("/health")
    finally:
        s.stop()
    lat = sorted(x for r in rounds for x in r.pop("latencies"))
    final = {
        "sentences_per_s": round(capacity, 1), "latency_p50_ms": round(1000 * lat[len(lat) // 2], 1),
        "latency_p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1),
        "mean_batch": round(statistics.median(r["mean_batch"] for r in rounds), 2),
    }
    ratio_same = statistics.median(r["ratio_same_batch"] for r in rounds)
    ratio_whole = statistics.median(r["ratio_whole_list"] for r in rounds)
    inproc = {k: statistics.median(r["in_process_sentences_per_s"][k] for r in rounds) for k in ("same_batch", "whole_list")}

    # the flood's answers against the in-process vectors
    refs = [sentence_vectors(enc, p, "mean", -1) for p in fl["payloads"]]
    codes = [r[1] for r in fl["results"]]
    accepted = [r for r in fl["results"] if r[1] == 200]
    worst = 0.0
    for i, _, _, body, _ in accepted:
        got = np.asarray(json.loads(body)["vectors"], dtype=np.float32)
        worst = max(worst, float(np.abs(got - refs[i % len(refs)]).max()))
    refused = [r for r in fl["results"] if r[1] == 503]
    retry = sorted({int(r[2].get("retry-after", r[2].get("Retry-After", 0))) for r in refused})
    other = sorted({c for c in codes if c not in (200, 503)})
    acc_lat = sorted(r[4] for r in accepted)
    ref_lat = sorted(r[4] for r in refused)
    overload = {
        "offered_sentences_per_s": round(4 * capacity, 1), "sentences_per_request": 16, "requests": len(codes),
        "seconds": round(fl["seconds"], 2), "answered_200": len(accepted), "refused_503": len(refused), "other_status": other,
        "fraction_503": round(len(refused) / max(1, len(codes)), 3), "retry_after_values_s": retry,
        "accepted_max_abs_diff_vs_in_process": worst, "client_errors": sorted({r[3][:120].decode(errors="replace") for r in fl["results"] if r[1] == -1})[:3], "accepted_all_correct": bool(accepted) and worst < 1e-4,
        "accepted_latency_p50_ms": round(1000 * acc_lat[len(acc_lat) // 2], 1) if acc_lat else None,
        "refused_latency_p50_ms": round(1000 * ref_lat[len(ref_lat) // 2], 1) if ref_lat else None,
        "server_rejected_count": h2["rejected"], "max_queue_texts": a.max_queue,
        "fraction_503_if_served_at_capacity": round(max(0.0, 1 - (capacity * fl["seconds"] + a.max_queue) / (4 * capacity * fl["seconds"])), 3),
    }
    print(f"flood at 4x capacity ({4 * capacity:,.0f} sentences/s offered): {len(refused)}/{len(codes)} = {overload['fraction_503']:.1%} got 503 "
          f"(Retry-After {retry}); {len(accepted)} accepted, max |diff| vs in-process {worst:.2e}; other statuses {other}")

    print(f"service {final['sentences_per_s']:,.0f} sentences/s (median of {len(rounds)} rounds), p50 {final['latency_p50_ms']} ms, p99 {final['latency_p99_ms']} ms; "
          f"ratio service / in-process at the same batch (median of rounds): {ratio_same:.3f}; / in-process on the whole list: {ratio_whole:.3f}")
    result = {
        "stage": "serve", "what": "korbert serve (FastAPI + uvicorn, dynamic batching) vs in-process sentence_vectors, same machine",
        "command": "bash /tmp/notes/quiet.sh python benchmarks/serve_throughput.py " + " ".join(sys.argv[1:]),
        "machine": machine(), "load_average_at_start": [round(x, 2) for x in load_start],
        "model": a.model, "model_config": {"layers": enc.layers, "hidden": enc.hidden, "vocab": enc.config.vocab_size},
        "texts": f"NSMC-R sample sentences ({len(texts)}), mean {statistics.mean(n_tok):.1f} tokens with [CLS]/[SEP]",
        "torch_threads": torch.get_num_threads(), "clients": a.clients, "sentences_per_request": "uniform 1..32", "pooling": "mean, last layer", "max_length": 128,
        "sweep": sweep, "chosen": {"max_batch": best["max_batch"], "forward_batch": fb, "max_wait_ms": best["max_wait_ms"]},
        "service_sentences_per_s": final["sentences_per_s"], "latency_p50_ms": final["latency_p50_ms"], "latency_p99_ms": final["latency_p99_ms"],
        "service_mean_batch": final["mean_batch"], "rounds": rounds,
        "in_process_sentences_per_s": inproc, "in_process_batch_same": same, "forward_batch": fb,
        "ratio_service_to_in_process_same_batch": round(ratio_same, 3),
        "ratio_service_to_in_process_whole_list": round(ratio_whole, 3),
        "ratio_service_to_in_process_cpu_time_same_batch": statistics.median(r["ratio_cpu_same_batch"] for r in rounds),
        "cpu_time_note": "ratio_*_cpu_time = in-process CPU ms per sentence / the server process's CPU ms per sentence "
        "(its HTTP, JSON and batching included; the clients' CPU, reported per round, excluded): less sensitive to other jobs on a shared machine",
        "note": "clients, server and in-process run on the same 2 cores; in-process rounds alternate with service rounds",
        "overload": overload, "gpu": "none in this session: no serve-gpu.json",
        "seconds_total": round(time.perf_counter() - t_all, 1), "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    Path(a.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"-> {a.out}")
    return result


if __name__ == "__main__":
    main()
