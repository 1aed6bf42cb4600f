"""GPU pretraining throughput and MFU: `korbert pretrain` against transformers' BertForPreTraining.

On one GPU, for each model size (default BERT-small and BERT-base, sequence length 128, bf16):

  korbert eager / compiled / cudagraphs
                             the real `korbert pretrain` loop (Trainer: DataLoader workers,
                             --tokens-per-batch packed rows, sparse MLM head, fused AdamW); compiled:
                             fixed shapes, one graph; cudagraphs: the same + --compile-mode
                             reduce-overhead. Steady state read from its log after the warm-up steps
  hf eager / compiled        BertForPreTraining as a competent user trains it: length-grouped
                             batches with dynamic padding, of the same --tokens-per-batch (padded
                             tokens per step <= the budget), HF's dense head and loss, bf16 autocast,
                             fused AdamW, TF32; the same shards
  loader                     what one loader worker makes on this host (tokens/s of finished packed
                             micro-batches, in this process), and korbert compiled at each of
                             --worker-sweep DataLoader workers (the first size only)
  korbert compiled_<variant> --variants: korbert compiled with one change (no dropout, 131,072 tokens
                             per step, max-autotune, the residual stream in bf16) or several, each against
                             korbert compiled (the first size)
  profile                    --profile: 5 steps of the first size's korbert compiled run under
                             torch.profiler: device time by kind (matmul, attention, fused, optimizer),
                             the top kernels, the GPU's busy share (korbert pretrain --profile)

tokens/s counts real (non-padding) tokens; MFU = model FLOPs (korbert.model.step_flops: encoder on
real tokens, attention over each instance, the MLM head at the predicted positions) / time / the
device's bf16 dense peak (korbert.runtime.peak_flops). Peak memory is torch's max allocated.
Runs stop early when --max-seconds is near (the rest are recorded as skipped).

    python benchmarks/pretrain_gpu.py --shards runs/cpu/shards --out $OUT/pretrain-gpu-throughput.json
    python benchmarks/pretrain_gpu.py --shards /tmp/shards --device cpu --sizes tiny --steps 6   # smoke test
    python benchmarks/pretrain_gpu.py --shards ... --sizes base --modes compiled --hf-modes --worker-sweep \
        --profile --variants no-dropout tokens-131072 max-autotune --out $OUT/pretrain-gpu-mfu-probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch._dynamo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402
from corpus_tools.shard_format import open_shards  # noqa: E402
from korbert.data import BatchPlan, PretrainingDataset, instance_lengths  # noqa: E402
from korbert.model import KorBertForPreTraining, bert_config, step_flops  # noqa: E402
from korbert.pretrain import main as pretrain  # noqa: E402
from korbert.pretrain_config import PretrainConfig  # noqa: E402
from korbert.runtime import peak_flops  # noqa: E402
from pretrain_throughput import dense, stats  # noqa: E402


# --variants: korbert compiled with one setting changed, each against korbert compiled (the first size)
NO_DROPOUT = {"override": ["hidden_dropout_prob=0", "attention_probs_dropout_prob=0"]}
MAX_AUTOTUNE = {"compile_mode": "max-autotune"}
BF16_STREAM = {"precision": "bf16-stream"}
VARIANTS = {
    "no-dropout": NO_DROPOUT,
    "no-attention-dropout": {"override": ["attention_probs_dropout_prob=0"]},
    "tokens-131072": {"tokens_per_batch": 131072},
    "max-autotune": MAX_AUTOTUNE,
    "bf16-stream": BF16_STREAM,
    "bf16-stream-no-dropout": {**BF16_STREAM, **NO_DROPOUT},
    "bf16-stream-no-dropout-max-autotune": {**BF16_STREAM, **NO_DROPOUT, **MAX_AUTOTUNE},
}


def run_korbert(a, size: str, mode: str, workdir: Path, workers: int, label: str = "", profile: bool = False, **extra) -> dict:
    """The real loop for a.steps steps (mode: eager, compiled or cudagraphs; `extra`: other PretrainConfig
    fields); the steady state is the last log interval (after compile). With `profile`, 5 steps of the
    middle interval are profiled (never the timed one: needs --steps >= 21): the result gets the
    summary, profile.txt goes beside --out."""
    torch._dynamo.reset()  # each configuration compiles (and counts its graphs) from scratch
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out = workdir / f"korbert-{size}-{mode}-{workers}{label}"
    t = time.time()
    third = max(1, a.steps // 3)  # three log intervals; the last one is the steady state
    if profile and third < 7:
        print(f"--profile: --steps {a.steps} leaves no 5 steps between the compile and the timed interval (21 or more do); not profiled")
    profile = third + 1 if profile and third >= 7 else 0  # steps third+2 .. third+6: the middle interval
    cfg = dict(
        shards=a.shards, out=str(out), model_size=size, tokens_per_batch=a.tokens_per_batch, pack=True, max_steps=3 * third,
        log_every=third, eval_every=0, eval_instances=64, save_every=10**9, device=a.device, compile=mode != "eager",
        compile_mode="reduce-overhead" if mode == "cudagraphs" else "default", lr=1e-4, force=True, num_workers=workers, profile=profile,
    )
    pretrain(PretrainConfig(**{**cfg, **extra}))
    last = json.loads((out / "log.jsonl").read_text().splitlines()[-1])
    prof = {}
    if profile:
        p = json.loads((out / "profile.json").read_text())
        prof = {"profile": {k: p[k] for k in ("steps", "busy_share_of_wall", "by_kind")} | {"top": p["top"][:15]}}
        txt = Path(a.out).with_name(Path(a.out).stem + f"-profile-{size}.txt")
        txt.parent.mkdir(parents=True, exist_ok=True)
        txt.write_text((out / "profile.txt").read_text())
    return {
        "tokens_per_s": last["tokens_per_s"], "mfu": last.get("mfu"), "model_tflops_per_s": last["tflops"], "padding_share": last["padding"],
        "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if a.device == "cuda" else None,
        "compiled_graphs": last.get("compiled_graphs"), "wall_seconds_with_setup": round(time.time() - t, 1),
        "tokens_per_step": extra.get("tokens_per_batch", a.tokens_per_batch), "steady_steps": third, "workers": workers,
        **({"changed": extra} if extra else {}), **prof,
    }


def loader_rate(reader, max_len: int, tokens_per_batch: int, n: int = 30) -> float:
    """Tokens/s of finished packed micro-batches that one loader worker makes on this host."""
    plan = BatchPlan(instance_lengths(reader), 0, max_len, tokens_per_step=tokens_per_batch, pack=True, buckets=True)
    ds = PretrainingDataset(reader, 0, pack=True)
    reqs = [plan(s) for s in range(n + 1)]
    ds[reqs[0]]  # opens the shard files
    t, real = time.perf_counter(), 0
    for q in reqs[1:]:
        real += ds[q]["counts"][2]
    return round(real / (time.perf_counter() - t))


def run_hf(a, size: str, compiled: bool, batches: list[dict], metas: list[tuple], vocab: int, max_len: int, peak: float | None) -> dict:
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch._dynamo.reset()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    mcfg = bert_config(size, vocab, max_len)
    model = KorBertForPreTraining(mcfg).to(dev)  # its forward() is BertForPreTraining's
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda or None)
    fwd = torch.compile(model) if compiled else model
    amp = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else (lambda: torch.autocast("cpu", enabled=False))

    def step(b):
        b = {k: v.to(dev, non_blocking=True) for k, v in b.items()}
        with amp():
            loss = fwd(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    warm = a.steps // 3
    for b in batches[:warm]:
        step(b)
    if cuda:
        torch.cuda.synchronize()
    t = time.perf_counter()
    for b in batches[warm:]:
        step(b)
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    tokens = sum(m[0] for m in metas[warm:])
    flops = sum(step_flops(mcfg, *m) for m in metas[warm:])
    padded = sum(b["input_ids"].numel() for b in batches[warm:])
    return {
        "tokens_per_s": round(tokens / dt, 1), "mfu": round(flops / dt / peak, 4) if peak else None, "model_tflops_per_s": round(flops / dt / 1e12, 4),
        "padding_share": round(1 - tokens / padded, 4), "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "real_tokens_per_step": round(tokens / max(1, len(batches) - warm)), "steady_steps": len(batches) - warm,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="shards folder (no Kiwi needed to read it)")
    ap.add_argument("--sizes", nargs="+", default=["small", "base"])
    ap.add_argument("--steps", type=int, default=60, help="steps per configuration; the first third warms up (and compiles)")
    ap.add_argument("--tokens-per-batch", type=int, default=65536, help="korbert: tokens per optimizer step, packed rows")
    ap.add_argument("--workers", type=int, default=-1, help="DataLoader workers of the korbert runs (-1: korbert's default)")
    ap.add_argument("--worker-sweep", type=int, nargs="*", default=[1, 2], help="also run the first size compiled with these worker counts")
    ap.add_argument("--modes", nargs="+", default=["eager", "compiled", "cudagraphs"], choices=["eager", "compiled", "cudagraphs"])
    ap.add_argument("--hf-modes", nargs="*", default=["eager", "compiled"], choices=["eager", "compiled"], help="transformers' runs")
    ap.add_argument("--variants", nargs="*", default=[], choices=list(VARIANTS), help="korbert compiled with one change each (the first size)")
    ap.add_argument("--profile", action="store_true", help="profile 5 steps of the first size's korbert compiled run (torch.profiler)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--max-seconds", type=float, default=450, help="skip the configurations left when this much time has passed")
    ap.add_argument("--out", default="benchmarks/results/pretrain-gpu-throughput.json")
    a = ap.parse_args()
    t0 = time.time()
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    peak = peak_flops(name) if a.device == "cuda" else None
    reader = open_shards(a.shards, verify=False)
    max_len, vocab = reader.manifest["config"]["max_seq_len"], reader.manifest["mask_config"]["random_high"]
    ds = PretrainingDataset(reader, seed=0)
    # transformers' batches: length-sorted rows, dynamic padding, the same token budget per step as korbert's
    plan = BatchPlan(instance_lengths(reader), 0, max_len, tokens_per_step=a.tokens_per_batch)
    grouped = [ds[plan(s)] for s in range(a.steps)]
    hf_batches = [dense(b) for b in grouped]
    if a.device == "cuda":
        hf_batches = [{k: v.pin_memory() for k, v in b.items()} for b in hf_batches]
    metas = [stats(b) for b in grouped]
    print(f"{name} (bf16 peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s); shards {a.shards}: {len(reader)} instances, vocab {vocab}", flush=True)
    results, skipped = {}, []
    loader = {"one_worker_tokens_per_s": loader_rate(reader, max_len, a.tokens_per_batch), "cpu_cores": len(os.sched_getaffinity(0))}
    print(f"loader: {loader['one_worker_tokens_per_s']:,} tokens/s per worker on this host ({loader['cpu_cores']} cores)", flush=True)

    def write(partial: bool) -> None:  # after every configuration: a run cut short keeps what it measured
        out = {
            "stage": "pretrain", "what": "GPU pretraining throughput (bf16, seq 128): korbert pretrain vs transformers BertForPreTraining",
            "command": "python " + " ".join(sys.argv), "machine": machine(), "device": name, "peak_bf16_flops": peak, "torch": torch.__version__,
            "shards": a.shards, "max_seq_len": max_len, "vocab_size": vocab, "tokens_per_step": a.tokens_per_batch, "loader": loader,
            "results": results, "skipped": skipped, "partial": partial,
            "seconds": round(time.time() - t0, 1),
            **{f"{k}_{s}": v for s, r in results.items() for k, v in r.items() if k.startswith("ratio")},
        }
        atomic_write_json(a.out, out)

    with tempfile.TemporaryDirectory() as tmp:
        runs = []  # (size, label, fn): every size's korbert and transformers runs, then the worker sweep (first size)
        for size in a.sizes:
            runs += [(size, f"korbert_{m}", lambda s=size, m=m: run_korbert(a, s, m, Path(tmp), a.workers, profile=a.profile and m == "compiled" and s == a.sizes[0]))
                     for m in a.modes]
            runs += [(size, f"hf_{m}", lambda s=size, m=m: run_hf(a, s, m == "compiled", hf_batches, metas, vocab, max_len, peak)) for m in a.hf_modes]
        runs += [(a.sizes[0], f"korbert_compiled_{v}", lambda v=v: run_korbert(a, a.sizes[0], "compiled", Path(tmp), a.workers, f"-{v}", **VARIANTS[v]))
                 for v in a.variants]
        runs += [(a.sizes[0], f"korbert_compiled_workers{w}", lambda w=w: run_korbert(a, a.sizes[0], "compiled", Path(tmp), w)) for w in a.worker_sweep]
        for size, label, fn in runs:
            res = results.setdefault(size, {})
            if time.time() - t0 > a.max_seconds:
                skipped.append(f"{size}/{label}")
                continue
            try:
                res[label] = fn()
            except Exception as e:  # one configuration failing (out of memory, a compile error) keeps the others
                res[label] = {"error": f"{type(e).__name__}: {e}"[:2000]}
                print(f"BERT-{size} {label}: failed: {res[label]['error'][:300]}", flush=True)
                write(partial=True)
                continue
            r = res[label]
            mfu = f", MFU {r['mfu']:.1%}" if r.get("mfu") is not None else ""
            mem = f", peak {r['peak_memory_gb']} GB" if r.get("peak_memory_gb") is not None else ""
            print(f"BERT-{size} {label}: {r['tokens_per_s']:,.0f} tok/s{mfu}{mem} ({time.time() - t0:.0f} s so far)", flush=True)
            if label.startswith("korbert_compiled_") and "tokens_per_s" in res.get("korbert_compiled", {}):
                res[f"ratio_{label}_vs_korbert_compiled"] = round(r["tokens_per_s"] / res["korbert_compiled"]["tokens_per_s"], 3)
            for k in ("eager", "compiled", "cudagraphs"):  # each against transformers' eager (its usual form) and compiled
                for base in ("eager", "compiled"):
                    ours, theirs = res.get(f"korbert_{k}", {}), res.get(f"hf_{base}", {})
                    if "tokens_per_s" in ours and "tokens_per_s" in theirs:
                        res[f"ratio_korbert_{k}_vs_hf_{base}"] = round(ours["tokens_per_s"] / theirs["tokens_per_s"], 3)
            write(partial=True)
    write(partial=False)
    print(f"-> {a.out}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
