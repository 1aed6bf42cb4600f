"""GPU pretraining throughput and MFU: `korbert pretrain` against transformers' BertForPreTraining.

On one GPU, for each model size (default BERT-small and BERT-base, sequence length 128, bf16):

  korbert eager / compiled   the real `korbert pretrain` loop (Trainer: DataLoader workers,
                             --tokens-per-batch packed rows, sparse MLM head, fused AdamW), steady
                             state read from its log after the compile/warm-up steps
  hf eager / compiled        BertForPreTraining as a competent user trains it: length-grouped
                             batches of --hf-batch rows with dynamic padding, HF's dense head and loss,
                             bf16 autocast, fused AdamW, TF32; the same shards

tokens/s counts real (non-padding) tokens; MFU = model FLOPs (korbert.model.step_flops: encoder on
real tokens, attention over each instance, the MLM head at the predicted positions) / time / the
device's bf16 dense peak (korbert.pretrain.peak_flops). Peak memory is torch's max allocated.
Runs stop early when --max-seconds is near (the rest are recorded as skipped).

    python benchmarks/pretrain_gpu.py --shards runs/cpu/shards --out $OUT/pretrain-gpu-throughput.json
    python benchmarks/pretrain_gpu.py --shards /tmp/shards --device cpu --sizes tiny --steps 6   # smoke test
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
from korbert.pretrain import PretrainConfig, main as pretrain, peak_flops  # noqa: E402
from pretrain_throughput import dense, stats  # noqa: E402


def run_korbert(a, size: str, compiled: bool, workdir: Path) -> dict:
    """The real loop for a.steps steps; the steady state is the last log interval (after compile)."""
    torch._dynamo.reset()  # each configuration compiles (and counts its graphs) from scratch
    if a.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    out = workdir / f"korbert-{size}-{'compiled' if compiled else 'eager'}"
    t = time.time()
    third = max(1, a.steps // 3)  # three log intervals; the last one is the steady state
    pretrain(PretrainConfig(
        shards=a.shards, out=str(out), model_size=size, tokens_per_batch=a.tokens_per_batch, pack=True, max_steps=3 * third,
        log_every=third, eval_every=0, eval_instances=64, save_every=10**9, device=a.device, compile=compiled,
        lr=1e-4, force=True, num_workers=a.workers,
    ))
    last = json.loads((out / "log.jsonl").read_text().splitlines()[-1])
    return {
        "tokens_per_s": last["tokens_per_s"], "mfu": last.get("mfu"), "model_tflops_per_s": last["tflops"], "padding_share": last["padding"],
        "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if a.device == "cuda" else None,
        "compiled_graphs": last.get("compiled_graphs"), "wall_seconds_with_setup": round(time.time() - t, 1),
        "tokens_per_step": a.tokens_per_batch, "steady_steps": third,
    }


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
        "rows_per_step": a.hf_batch, "steady_steps": len(batches) - warm,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True, help="shards folder (no Kiwi needed to read it)")
    ap.add_argument("--sizes", nargs="+", default=["small", "base"])
    ap.add_argument("--steps", type=int, default=60, help="steps per configuration; the first third warms up (and compiles)")
    ap.add_argument("--tokens-per-batch", type=int, default=65536, help="korbert: tokens per optimizer step, packed rows")
    ap.add_argument("--hf-batch", type=int, default=256, help="transformers: rows per step, length-grouped, dynamic padding")
    ap.add_argument("--workers", type=int, default=4)
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
    plan = BatchPlan(instance_lengths(reader), 0, max_len, rows_per_step=a.hf_batch)
    grouped = [ds[plan(s)] for s in range(a.steps)]
    hf_batches = [dense(b) for b in grouped]
    if a.device == "cuda":
        hf_batches = [{k: v.pin_memory() for k, v in b.items()} for b in hf_batches]
    metas = [stats(b) for b in grouped]
    print(f"{name} (bf16 peak {peak / 1e12 if peak else float('nan'):.0f} TFLOP/s); shards {a.shards}: {len(reader)} instances, vocab {vocab}", flush=True)
    results, skipped = {}, []

    def write(partial: bool) -> None:  # after every configuration: a run cut short keeps what it measured
        out = {
            "stage": "pretrain", "what": "GPU pretraining throughput (bf16, seq 128): korbert pretrain vs transformers BertForPreTraining",
            "command": "python " + " ".join(sys.argv), "machine": machine(), "device": name, "peak_bf16_flops": peak, "torch": torch.__version__,
            "shards": a.shards, "max_seq_len": max_len, "vocab_size": vocab, "results": results, "skipped": skipped, "partial": partial,
            "seconds": round(time.time() - t0, 1),
            **{f"ratio_korbert_vs_hf_{k}_{s}": r[f"ratio_korbert_vs_hf_{k}"] for s, r in results.items() for k in ("eager", "compiled")
               if f"ratio_korbert_vs_hf_{k}" in r},
        }
        atomic_write_json(a.out, out)

    with tempfile.TemporaryDirectory() as tmp:
        for size in a.sizes:
            res = {}
            for label, fn in (
                ("korbert_eager", lambda: run_korbert(a, size, False, Path(tmp))),
                ("korbert_compiled", lambda: run_korbert(a, size, True, Path(tmp))),
                ("hf_eager", lambda: run_hf(a, size, False, hf_batches, metas, vocab, max_len, peak)),
                ("hf_compiled", lambda: run_hf(a, size, True, hf_batches, metas, vocab, max_len, peak)),
            ):
                if time.time() - t0 > a.max_seconds:
                    skipped.append(f"{size}/{label}")
                    continue
                res[label] = fn()
                r = res[label]
                mfu = f", MFU {r['mfu']:.1%}" if r.get("mfu") is not None else ""
                mem = f", peak {r['peak_memory_gb']} GB" if r.get("peak_memory_gb") is not None else ""
                print(f"BERT-{size} {label}: {r['tokens_per_s']:,.0f} tok/s{mfu}{mem} ({time.time() - t0:.0f} s so far)", flush=True)
                for k in ("eager", "compiled"):
                    if f"korbert_{k}" in res and f"hf_{k}" in res:
                        res[f"ratio_korbert_vs_hf_{k}"] = round(res[f"korbert_{k}"]["tokens_per_s"] / res[f"hf_{k}"]["tokens_per_s"], 3)
                results[size] = res
                write(partial=True)
    write(partial=False)
    print(f"-> {a.out}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
