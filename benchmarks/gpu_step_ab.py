"""GPU pretraining steps side by side: the commit before the attention/QKV/stream change against this one,
each change alone and together, and transformers' BertForPreTraining compiled and eager, in one lease.

Each configuration is its own process running the training step of `korbert pretrain` (the same model,
fused AdamW with the loop's parameter groups, bf16 autocast, clipping at 1.0, torch.compile fullgraph with
fixed shapes, the loss normalizers on the device) over real packed batches of --tokens-per-batch tokens
made by that code's own `korbert.data`, staged on the GPU beforehand. Up to --parallel processes run at
once, so their compiles (CPU work, most of a configuration's wall time) overlap; every step after the
first (the one that compiles; transformers' other shapes compile under the lock) runs under a lock, so
one process at a time uses the GPU for its warm-up, its timed steps and its profile. The timed steps are
two windows of --steps / 2, and the faster one counts: a window that another process's first step
overlapped is thrown away. (The first lease with it, gpu-h200-2026-11-26d, ran transformers' per-shape
steps outside the lock: its README says which timings that disturbed.) Configurations start in the order given until --max-seconds, and each is killed at --kill-seconds.
Each code version pads its fixed-shape lists to its own `fixed_counts`: this commit's cover epochs 0 and 1,
the commit before's epoch 0 only, so this commit's lists can be a little longer.

    python benchmarks/gpu_step_ab.py --shards S --before .gpu/before --out $OUT/pretrain-gpu-ab.json \
        --configs before all hf-compiled sdpa varlen qkv lean small-all small-before hf-eager before-again
    python benchmarks/gpu_step_ab.py --shards S --before .gpu/before --device cpu --size tiny --steps 2 --configs before all-sdpa  # smoke test

Configurations (`CONFIGS`): `before` is the commit before (its code at --before, its defaults: dense mask,
three projections, fp32 residual stream, dropout 0.1); the others are this commit with the change named.
tokens/s counts real tokens; MFU = korbert.model.step_flops / time / the card's dense bf16 peak.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NO_ATTN_DROP = ["attention_probs_dropout_prob=0"]
NO_DROP = ["hidden_dropout_prob=0", "attention_probs_dropout_prob=0"]
# inductor's GEMM autotuning: Triton GEMM templates against cuBLAS, the Triton ones able to take the bias, GELU and
# other pointwise epilogues (the fifth lease's profile: GELU kernels 9.9 ms of an 88-ms lean step); compiles for
# minutes and benchmarks on the GPU while it compiles: run these alone (--parallel 1)
AUTOTUNE = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON,ATEN"}

# name: code ("before" or "now"), size, model overrides, attention, fused QKV, bf16 residual stream, tokens per step (0: --tokens-per-batch)
CONFIGS = {
    "before": dict(code="before"),
    "before-no-attn-dropout": dict(code="before", override=NO_ATTN_DROP),
    "before-no-dropout-stream": dict(code="before", override=NO_DROP, stream=True),
    "before-again": dict(code="before"),  # the baseline timed a second time, by another process: the spread
    "now-defaults": dict(),  # this commit at the loop's defaults (dropout 0.1, SDPA with the mask, three projections)
    "defaults-stream": dict(stream=True),  # the defaults with the bf16 residual stream as the only change (dropout 0.1 kept)
    "defaults-autotune": dict(inductor=AUTOTUNE),  # the defaults with inductor's GEMM autotuning
    "sdpa": dict(override=NO_ATTN_DROP, attention="sdpa", fused=False),  # this encoder, nothing changed: = before-no-attn-dropout
    "varlen": dict(override=NO_ATTN_DROP, attention="varlen", fused=False),
    "flex": dict(override=NO_ATTN_DROP, attention="flex", fused=False),
    "qkv": dict(fused=True, override=NO_ATTN_DROP, attention="sdpa"),
    "stream": dict(override=NO_ATTN_DROP, attention="sdpa", fused=False, stream=True),
    "no-hidden-dropout": dict(override=NO_DROP, attention="sdpa", fused=False),
    "lean": dict(override=NO_DROP, attention="sdpa", fused=False, stream=True),  # the lean stream: bf16 LayerNorm outputs, no dropout
    "varlen-qkv": dict(fused=True, override=NO_ATTN_DROP, attention="varlen"),
    "all": dict(fused=True, override=NO_DROP, attention="varlen", stream=True),  # the three changes together
    "all-flex": dict(fused=True, override=NO_DROP, attention="flex", stream=True),
    "all-sdpa": dict(fused=True, override=NO_DROP, attention="sdpa", stream=True),
    "all-131072": dict(fused=True, override=NO_DROP, attention="varlen", stream=True, tokens=131072),
    "small-before": dict(code="before", size="small"),
    "small-all": dict(fused=True, override=NO_DROP, attention="varlen", stream=True, size="small"),
    "small-lean": dict(override=NO_DROP, attention="sdpa", fused=False, stream=True, size="small"),
    # the lean stream with inductor's coordinate-descent tuning of its Triton kernels' launch configurations
    "lean-cdt": dict(override=NO_DROP, attention="sdpa", fused=False, stream=True, inductor={"coordinate_descent_tuning": True}),
    "lean-autotune": dict(override=NO_DROP, attention="sdpa", fused=False, stream=True, inductor=AUTOTUNE),
    "hf-compiled": dict(hf=True, compiled=True),
    "hf-eager": dict(hf=True, compiled=False),
}


def spec(name: str, a) -> dict:
    return {"code": "now", "size": a.size, "override": [], "attention": "sdpa", "fused": False, "stream": False, "tokens": 0,
            "hf": False, "compiled": True, "inductor": {}, **CONFIGS[name]}


# ---------------------------------------------------------------------------------------------
# one configuration (a process of its own)
# ---------------------------------------------------------------------------------------------


def one(a) -> None:
    s = spec(a.one, a)
    sys.path.insert(0, str(Path(a.before).resolve() if s["code"] == "before" else HERE.parent))
    import torch

    from corpus_tools.shard_format import open_shards
    from korbert.data import BatchPlan, fixed_counts, instance_lengths, make_batch
    from korbert.heldout import MODEL_INPUTS
    from korbert.model import KorBertForPreTraining, bert_config, bf16_residual_stream, parse_overrides, step_flops

    cuda = a.device == "cuda"
    dev = torch.device(a.device)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    reader = open_shards(a.shards, verify=False)
    max_len, vocab = reader.manifest["config"]["max_seq_len"], reader.manifest["mask_config"]["random_high"]
    tokens = s["tokens"] or a.tokens_per_batch
    lengths = instance_lengths(reader)
    n_batches = a.batches
    sys.path.insert(1, str(HERE))  # (after the code path above: korbert is already imported from it)
    from pretrain_throughput import dense, stats

    if s["hf"]:  # length-grouped rows, dynamic padding (to a multiple of 8), the same token budget per step
        plan = BatchPlan(lengths, 0, max_len, tokens_per_step=tokens)
        raw = [make_batch(reader, plan(i)[1], seed=0, epoch=0, packed=False) for i in range(n_batches)]
        batches = [dense(b, -(-b["input_ids"].shape[1] // 8) * 8) for b in raw]
    else:
        plan = BatchPlan(lengths, 0, max_len, tokens_per_step=tokens, pack=True)
        fixed = fixed_counts(plan, reader.mask_config.mask_prob, 1)
        raw = [make_batch(reader, plan(i)[1], max_len, seed=0, epoch=0, packed=True, fixed=fixed) for i in range(n_batches)]
        batches = [{k: b[k] for k in MODEL_INPUTS} for b in raw]
    metas = [stats(b) for b in raw]  # (real tokens, attended, predicted, instances): step_flops' arguments
    batches = [{k: v.to(dev, non_blocking=True) for k, v in b.items()} for b in batches]

    torch.manual_seed(0)
    mcfg = bert_config(s["size"], vocab, max_len, parse_overrides(s["override"]))
    if s["hf"]:
        from transformers import BertForPreTraining

        model = BertForPreTraining(mcfg)  # attn_implementation "sdpa" (bert_config)
    else:
        model = KorBertForPreTraining(mcfg)
    if not s["hf"] and hasattr(KorBertForPreTraining, "attention"):  # this commit's knobs (the commit before has neither)
        model.attention, model.fused_qkv = s["attention"], s["fused"]
    if s["stream"]:
        bf16_residual_stream(model)
    if s["hf"]:
        used_attention = "transformers sdpa (padding mask)"
    elif hasattr(KorBertForPreTraining, "attention"):
        from korbert.model import attention_path

        used_attention = attention_path(s["attention"], dev, torch.bfloat16 if cuda else torch.float32, mcfg.attention_probs_dropout_prob)
    else:
        used_attention = "sdpa (dense mask; the commit before)"
    model.to(dev).train()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in params if p.dim() >= 2 and "LayerNorm" not in n]
    no_decay = [p for n, p in params if not (p.dim() >= 2 and "LayerNorm" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.98), eps=1e-6, fused=cuda or None)
    if s["compiled"]:
        import torch._dynamo

        torch._dynamo.config.recompile_limit = max(16, torch._dynamo.config.recompile_limit)
        if s["inductor"]:
            import torch._inductor.config as inductor_config

            for k, v in s["inductor"].items():
                setattr(inductor_config, k, v)
        fwd = torch.compile(model, fullgraph=not s["hf"], dynamic=False if not s["hf"] else None)
    else:
        fwd = model
    amp = torch.autocast(a.device, dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    norms = [(torch.tensor(float(max(m[2], 1)), device=dev), torch.tensor(float(max(m[3], 1)), device=dev)) for m in metas]

    def step(i: int) -> None:
        b = batches[i % len(batches)]
        with amp:
            if s["hf"]:
                loss = fwd(**b).loss
            else:
                mn, nn_ = norms[i % len(batches)]
                loss = fwd(**b, packed=True, sparse=True, mlm_norm=mn, nsp_norm=nn_).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.time()
    step(0)  # compiles (CPU work) and runs once, outside the lock
    sync()
    compile_s = time.time() - t0
    with open(Path(a.sync) / "gpu.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # alone on the GPU from here, but for other processes' first steps
        waited = time.time() - t0 - compile_s
        t1 = time.time()
        for i in range(1, max(a.warmup, len(batches) if s["hf"] else 0) + 1):  # transformers: its other shapes compile here, in the lock
            step(i)
        compile_s += time.time() - t1
        sync()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        half = max(1, a.steps // 2)
        windows = []
        for w in range(2):
            t = time.perf_counter()
            for i in range(w * half, (w + 1) * half):
                step(i)
            sync()
            windows.append(time.perf_counter() - t)
        best = min(range(2), key=lambda w: windows[w])
        prof = None
        if a.one in a.profile.split(","):
            from korbert.runtime import start_profile, write_profile

            p, started = start_profile(cuda), time.time()
            for i in range(5):
                step(i)
            prof = write_profile(p, Path(a.result).with_suffix(""), 1, 5, started, cuda)
        mem = round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None
    steps = range(best * half, (best + 1) * half)
    used = [metas[i % len(metas)] for i in steps]
    flops = sum(step_flops(mcfg, *m) for m in used)
    real = sum(m[0] for m in used)
    padded = sum(batches[i % len(batches)]["input_ids"].numel() for i in steps)
    dt = windows[best]
    from korbert.runtime import peak_flops

    peak = peak_flops(torch.cuda.get_device_name()) if cuda else None
    res = {
        "config": a.one, **s, "tokens_per_step": tokens, "steps_timed": half, "windows_seconds": [round(w, 4) for w in windows],
        "seconds": round(dt, 4), "waited_for_lock_seconds": round(waited, 1),
        "tokens_per_s": round(real / dt, 1), "model_tflops_per_s": round(flops / dt / 1e12, 3), "mfu": round(flops / dt / peak, 4) if peak else None,
        "padding_share": round(1 - real / padded, 4), "peak_memory_gb": mem, "warmup_and_compile_seconds": round(compile_s, 1),
        "attention_used": used_attention,
        **({"profile": {k: prof[k] for k in ("busy_share_of_wall", "by_kind")} | {"top": prof["top"][:12]}} if prof else {}),
    }
    Path(a.result).write_text(json.dumps(res, indent=1))
    print(f"{a.one}: {res['tokens_per_s']:,.0f} tok/s, MFU {res['mfu']}, compile+warm-up {compile_s:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------
# the driver: a pool of processes, then the table
# ---------------------------------------------------------------------------------------------


def say(line: str) -> None:
    """print, but a closed stdout (the lease's tee, killed with the process group) must not stop the driver:
    from the first failed write on, output goes nowhere (the JSON is the record)"""
    try:
        print(line, flush=True)
    except OSError:
        sys.stdout = open(os.devnull, "w")


def gpu_memory_bytes() -> int:
    """The first GPU's memory, from nvidia-smi (the driver itself takes no CUDA context: that memory is the
    configurations'); 0 when it cannot tell."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
        return int(out.stdout.split()[0]) * 2**20
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return 0


def auto_parallel(total_bytes: int) -> int:
    """Configurations at once when --parallel is 0: one per 32 GiB of GPU memory, 1 to 4 (BERT-base at 65,536
    tokens peaks at about 24 GB, its compile and the CUDA context take more: on an 80-GB H100 four at once ran
    out of memory, two fit; a 141-GB H200 held four)."""
    return max(1, min(4, total_bytes // (32 * 2**30)))


def drive(a) -> None:
    import signal

    from corpus_tools.artifacts import atomic_write_json, machine

    t0 = time.time()
    # cut off from outside (a lease's timeout, which signals the whole process group): the loop below stops the
    # configurations still running and writes what was measured (the handler only records the signal: a handler
    # that waited on a process could deadlock with the loop's own poll)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    if a.parallel <= 0:
        a.parallel = auto_parallel(gpu_memory_bytes()) if a.device == "cuda" else 1
        say(f"--parallel {a.parallel} ({'from the GPU memory' if a.device == 'cuda' else 'on a CPU'})")
    out = Path(a.out)
    work = Path(a.work or out.with_suffix(""))
    work.mkdir(parents=True, exist_ok=True)
    results, skipped, failed = {}, [], {}
    for k in a.configs:
        if k not in CONFIGS:
            raise SystemExit(f"unknown configuration {k!r}: choose from {', '.join(CONFIGS)}")

    def write(partial: bool) -> None:
        base = results.get("before", {}).get("tokens_per_s")
        ratios = {}
        for k, r in results.items():
            if base and k != "before" and not k.startswith("small") and r.get("tokens_per_step") == a.tokens_per_batch:
                ratios[f"ratio_{k}_vs_before"] = round(r["tokens_per_s"] / base, 3)
        for k in ("all", "now-defaults", "lean", "before"):
            for h in ("hf-compiled", "hf-eager"):
                if k in results and h in results:
                    ratios[f"ratio_{k}_vs_{h}"] = round(results[k]["tokens_per_s"] / results[h]["tokens_per_s"], 3)
        for k, ref in (("small-all", "small-before"), ("small-lean", "small-before"), ("lean-cdt", "lean"), ("lean-autotune", "lean"), ("defaults-autotune", "now-defaults"),
                       ("defaults-stream", "now-defaults"), ("varlen", "sdpa"), ("flex", "sdpa"), ("qkv", "sdpa"), ("stream", "sdpa"),
                       ("no-hidden-dropout", "sdpa"), ("lean", "sdpa"), ("all", "sdpa"), ("sdpa", "before-no-attn-dropout"),
                       ("before-no-attn-dropout", "before"), ("before-again", "before")):
            if k in results and ref in results:
                ratios[f"ratio_{k}_vs_{ref}"] = round(results[k]["tokens_per_s"] / results[ref]["tokens_per_s"], 3)
        atomic_write_json(out, {
            "stage": "pretrain", "what": "GPU pretraining step throughput, seq 128, bf16: the commit before (dense mask, three "
            "projections, fp32 residual stream) vs this one, each change alone and together; transformers' BertForPreTraining compiled and eager",
            "command": "python " + " ".join(sys.argv), "machine": machine(), "device_line": a.device_line, "shards": a.shards,
            "tokens_per_step": a.tokens_per_batch, "steps_timed": a.steps // 2, "mfu_definition": "korbert.model.step_flops (encoder on real tokens, "
            "attention within each instance, MLM head at the predicted positions, NSP) / time / the card's dense bf16 peak (989 TFLOP/s for H100 and H200)",
            "method": " ".join(__doc__.split("\n\n")[1].split()), "results": results, "failed": failed, "skipped": skipped,
            "parallel": a.parallel, "partial": partial, "seconds": round(time.time() - t0, 1), **ratios,
        })

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "TORCHINDUCTOR_COMPILE_THREADS": str(a.compile_threads),
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    (work / "gpu.lock").touch()
    queue, running = list(a.configs), {}

    def finish(name: str, rc) -> None:
        if rc == 0 and (work / f"{name}.json").exists():
            results[name] = json.loads((work / f"{name}.json").read_text())
        else:
            failed[name] = {"rc": rc, "log_tail": (work / f"{name}.log").read_text()[-1500:]}
        r = results.get(name)
        say(f"{name:24s} " + (f"{r['tokens_per_s']:>12,.0f} tok/s  MFU {r['mfu'] if r['mfu'] is not None else float('nan'):.3f}  "
                                f"compile {r['warmup_and_compile_seconds']:.0f} s  peak {r['peak_memory_gb']} GB  [{r['attention_used']}]"
                                if r else f"failed: {rc}: {failed[name]['log_tail'][-300:]!r}") + f"  ({time.time() - t0:.0f} s)")
        write(partial=True)

    while queue or running:
        if stop:
            for name, p in list(running.items()):
                rc = p.poll()  # one that had just ended keeps its result; one the group's signal ended is terminated too
                if rc is None:
                    p.kill()
                    p.wait()
                if rc is None or rc < 0:
                    rc = f"terminated by signal {stop[0]} at {time.time() - t0:.0f} s"
                del running[name]
                finish(name, rc)
            skipped += queue
            write(partial=True)
            sys.exit(128 + stop[0])
        while queue and not stop and len(running) < a.parallel and time.time() - t0 < a.max_seconds:
            name = queue.pop(0)
            cmd = [sys.executable, __file__, "--one", name, "--shards", a.shards, "--before", a.before, "--device", a.device, "--size", a.size,
                   "--steps", str(a.steps), "--warmup", str(a.warmup), "--batches", str(a.batches), "--tokens-per-batch", str(a.tokens_per_batch),
                   "--sync", str(work), "--result", str(work / f"{name}.json"), "--profile", a.profile]
            running[name] = subprocess.Popen(cmd, env=env, stdout=open(work / f"{name}.log", "w"), stderr=subprocess.STDOUT)
        if queue and time.time() - t0 >= a.max_seconds:
            skipped += queue
            queue = []
        for name, p in list(running.items()):
            rc = p.poll()
            if rc is None and time.time() - t0 > a.kill_seconds:
                p.kill()
                rc = f"killed at {a.kill_seconds:.0f} s"
                p.wait()
            if isinstance(rc, int) and rc < 0 and stop:
                continue  # ended by the group's signal: the stop branch records it as terminated
            if rc is not None:
                del running[name]
                finish(name, rc)
        time.sleep(0.5)
    write(partial=False)
    say(f"-> {out} ({time.time() - t0:.0f} s)")
    summary = json.loads(out.read_text())
    for k, v in summary.items():
        if k.startswith("ratio"):
            say(f"{k}: {v}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--before", required=True, help="a folder holding the commit before's korbert/ and corpus_tools/ (git archive)")
    ap.add_argument("--configs", nargs="+", default=["before", "all", "hf-compiled", "now-defaults"], help="in the order they start")
    ap.add_argument("--parallel", type=int, default=0, help="processes at once; 0: one per 32 GiB of GPU memory, 1 to 4 (BERT-base at "
                    "65,536 tokens peaks at ~24 GB each); 1 for configurations that autotune on the GPU while compiling")
    ap.add_argument("--compile-threads", type=int, default=4, help="TORCHINDUCTOR_COMPILE_THREADS of each process")
    ap.add_argument("--size", default="base")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per configuration: two windows of half as many, the faster counts")
    ap.add_argument("--warmup", type=int, default=3, help="steps before the clock (the first compiles)")
    ap.add_argument("--batches", type=int, default=8, help="distinct batches staged on the device, cycled")
    ap.add_argument("--tokens-per-batch", type=int, default=65536)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--profile", default="", help="profile 5 steps of these configurations (comma-separated) after their timed steps")
    ap.add_argument("--max-seconds", type=float, default=600, help="start no configuration after this many seconds")
    ap.add_argument("--kill-seconds", type=float, default=700, help="kill the processes still running at this many seconds")
    ap.add_argument("--work", default="", help="folder for the processes' logs, results and profiles (default: --out without .json)")
    ap.add_argument("--device-line", default="", help="the lease's device line, recorded in the JSON")
    ap.add_argument("--out", default="benchmarks/results/pretrain-gpu-ab.json")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--sync", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        one(a)
    else:
        sys.path.insert(0, str(HERE.parent))
        drive(a)


if __name__ == "__main__":
    main()
