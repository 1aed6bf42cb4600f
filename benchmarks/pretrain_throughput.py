"""CPU training-step throughput: korbert's pretraining step against transformers' BertForPreTraining.

Same shards, same instances, same model size, same optimizer (AdamW), same process, configurations
interleaved in rounds so that load drift on a shared machine hits them alike:

  hf_dynamic_padding  the baseline a competent user runs: BertForPreTraining with batches padded to
                      their longest instance (length-grouped, as Trainer's group_by_length), HF's
                      dense MLM head (vocabulary logits at every position) and its own loss
  hf_padded           the naive one, beside it: every batch padded to max_seq_len
  korbert             `korbert pretrain`'s step: the same length-grouped batches, MLM logits at the
                      predicted positions only, indices and counts from the CPU collate
  korbert_packed      `--tokens-per-batch --pack`: the same number of tokens per step packed into
                      rows of max_seq_len (block-diagonal attention)

--bf16 adds the same two steps under bfloat16 autocast (`korbert pretrain --precision bf16`, the
default on CPUs with AVX512-BF16/AMX) beside their fp32 runs, the baseline being what `Trainer(bf16=True)`
does on a CPU (the HF step under torch.autocast("cpu", bfloat16)):
  hf_dynamic_padding_bf16, korbert_bf16

Throughput counts real (non-padding) tokens, so padding is cost, not credit. It also reports the
share of this machine's measured fp32 matmul peak (a 2048 x 2048 sgemm) that korbert's step
reaches, counting the model FLOPs of `korbert.model.step_flops`.

    python benchmarks/pretrain_throughput.py --shards runs/cpu/shards --sizes mini small
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402
from corpus_tools.shard_format import open_shards  # noqa: E402
from korbert.data import BatchPlan, PretrainingDataset, instance_lengths  # noqa: E402
from korbert.model import KorBertForPreTraining, bert_config, step_flops  # noqa: E402
from korbert.heldout import MODEL_INPUTS  # noqa: E402
from korbert.runtime import cpu_has_bf16  # noqa: E402


def dense(b: dict, length: int | None = None) -> dict:
    """A korbert batch (one instance per row) as HF's BertForPreTraining takes it, padded to `length`."""
    r, t = b["input_ids"].shape
    t2 = length or t
    pad = lambda x, v=0: torch.nn.functional.pad(x, (0, t2 - t), value=v)  # noqa: E731
    labels = torch.full((r * t,), -100, dtype=torch.long)
    labels[b["mlm_positions"]] = b["mlm_labels"]
    nsp = torch.full((r,), -100, dtype=torch.long)  # an instance without a B segment has no IsNext label
    nsp[b["nsp_positions"] // t] = b["nsp_labels"]
    return {
        "input_ids": pad(b["input_ids"]), "token_type_ids": pad(b["token_type_ids"]), "attention_mask": pad((b["segments"] > 0).long()),
        "labels": pad(labels.view(r, t), -100), "next_sentence_label": nsp,
    }


def stats(b: dict) -> tuple[int, int, int, int]:
    """(non-padding tokens, sum of squared instance lengths, predicted tokens, instances) of a korbert batch."""
    seg = b["segments"]
    instance = (seg + (int(seg.max()) + 1) * torch.arange(seg.shape[0])[:, None])[seg > 0]
    lens = torch.bincount(instance)
    return b["counts"][2], int((lens * lens).sum()), b["counts"][0], b["counts"][1]


def sgemm_gflops(n: int = 2048, reps: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default="runs/cpu/shards")
    ap.add_argument("--sizes", nargs="+", default=["mini", "small"])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per configuration per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--bf16", action="store_true", help="also time korbert and the HF baseline under bfloat16 autocast")
    ap.add_argument("--out", default="benchmarks/results/pretrain-cpu-throughput.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    reader = open_shards(a.shards, verify=False)
    max_len = reader.manifest["config"]["max_seq_len"]
    vocab = reader.manifest["mask_config"]["random_high"]
    ds = PretrainingDataset(reader, seed=0)
    n = a.steps * a.rounds + 2
    lengths = instance_lengths(reader)
    plan = BatchPlan(lengths, 0, max_len, rows_per_step=a.batch_size)
    grouped = [ds[plan(s)] for s in range(n)]
    tokens_per_step = int(np.mean([b["counts"][2] for b in grouped]))
    packed_plan = BatchPlan(lengths, 0, max_len, tokens_per_step=max(max_len, round(tokens_per_step / max_len) * max_len), pack=True)
    packed = [ds[packed_plan(s)] for s in range(n)]
    batches = {
        "hf_padded": [dense(b, max_len) for b in grouped], "hf_dynamic_padding": [dense(b) for b in grouped],
        "korbert": grouped, "korbert_packed": packed,
    }
    if a.bf16:
        batches.update({"hf_dynamic_padding_bf16": batches["hf_dynamic_padding"], "korbert_bf16": grouped})
    meta = {name: [stats(b) for b in (packed if name == "korbert_packed" else grouped)] for name in batches}
    peak = sgemm_gflops()
    load = os.getloadavg()
    print(f"shards {a.shards}: {len(reader)} instances, mean {lengths.mean():.1f} tokens (max_seq_len {max_len}), vocab {vocab}; "
          f"batch {a.batch_size} (~{tokens_per_step} tokens; packed: {packed[0]['input_ids'].shape[0]} rows of {max_len}), "
          f"{a.threads} threads, load {load[0]:.2f}; sgemm 2048^2: {peak:.0f} GFLOP/s")
    results = {}
    for size in a.sizes:
        mcfg = bert_config(size, vocab, max_len)
        runs = {}
        for name, bs in batches.items():
            torch.manual_seed(0)
            model = KorBertForPreTraining(mcfg)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            sparse = name.startswith("korbert")
            cast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=name.endswith("_bf16"))

            def step(b, model=model, opt=opt, sparse=sparse, cast=cast):
                with cast:
                    if sparse:
                        loss = model(**{k: b[k] for k in MODEL_INPUTS}, packed=b["packed"], sparse=True).loss
                    else:
                        loss = model(**b).loss  # HF's BertForPreTraining: dense logits + CrossEntropyLoss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            for b in bs[:2]:  # warm-up
                step(b)
            runs[name] = {"step": step, "bs": bs, "meta": meta[name], "seconds": 0.0, "tokens": 0, "padded": 0, "flops": 0.0}
        for r in range(a.rounds):
            for name, run in runs.items():
                chunk = run["bs"][2 + r * a.steps : 2 + (r + 1) * a.steps]
                t = time.perf_counter()
                for b in chunk:
                    run["step"](b)
                run["seconds"] += time.perf_counter() - t
                for b, (tok, att, m, pairs) in zip(chunk, run["meta"][2 + r * a.steps :]):
                    run["tokens"] += tok
                    run["padded"] += b["input_ids"].numel()
                    run["flops"] += step_flops(mcfg, tok, att, m, pairs)
        res = {}
        for name, run in runs.items():
            res[name] = {"tokens_per_s": round(run["tokens"] / run["seconds"], 1), "seconds": round(run["seconds"], 2),
                         "tokens": run["tokens"], "padding_share": round(1 - run["tokens"] / run["padded"], 4),
                         "model_gflops_per_s": round(run["flops"] / run["seconds"] / 1e9, 1)}
        fair, naive = res["hf_dynamic_padding"]["tokens_per_s"], res["hf_padded"]["tokens_per_s"]
        res["ratio_korbert_vs_hf_dynamic_padding"] = round(res["korbert"]["tokens_per_s"] / fair, 3)
        res["ratio_korbert_packed_vs_hf_dynamic_padding"] = round(res["korbert_packed"]["tokens_per_s"] / fair, 3)
        res["ratio_korbert_vs_hf_padded"] = round(res["korbert"]["tokens_per_s"] / naive, 3)
        res["ratio_korbert_sgemm_peak_share"] = round(res["korbert"]["model_gflops_per_s"] / peak, 3)
        if a.bf16:
            res["ratio_korbert_bf16_vs_hf_dynamic_padding_bf16"] = round(res["korbert_bf16"]["tokens_per_s"] / res["hf_dynamic_padding_bf16"]["tokens_per_s"], 3)
            res["ratio_korbert_bf16_vs_korbert_fp32"] = round(res["korbert_bf16"]["tokens_per_s"] / res["korbert"]["tokens_per_s"], 3)
            res["ratio_korbert_bf16_vs_hf_dynamic_padding"] = round(res["korbert_bf16"]["tokens_per_s"] / fair, 3)
        results[size] = res
        print(f"BERT-{size}: " + ", ".join(f"{k} {v['tokens_per_s']:,.0f} tok/s" for k, v in res.items() if isinstance(v, dict)))
        print(f"  korbert / hf (dynamic padding) = {res['ratio_korbert_vs_hf_dynamic_padding']:.2f}x, packed "
              f"{res['ratio_korbert_packed_vs_hf_dynamic_padding']:.2f}x; / hf padded to {max_len} = {res['ratio_korbert_vs_hf_padded']:.2f}x; "
              f"{res['korbert']['model_gflops_per_s']:.0f} model GFLOP/s = {res['ratio_korbert_sgemm_peak_share']:.0%} of the sgemm peak")
        if a.bf16:
            print(f"  bf16 autocast: korbert / hf = {res['ratio_korbert_bf16_vs_hf_dynamic_padding_bf16']:.2f}x; korbert bf16 / fp32 = "
                  f"{res['ratio_korbert_bf16_vs_korbert_fp32']:.2f}x")
    out = {
        "stage": "pretrain", "what": "CPU training-step throughput, korbert vs transformers BertForPreTraining (dynamic padding)",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "torch": torch.__version__,
        "load_average_start": load, "load_average_end": os.getloadavg(), "sgemm_2048_gflops": round(peak, 1),
        "cpu_has_bf16": cpu_has_bf16(),
        "batch_size": a.batch_size, "steps_per_config": a.steps * a.rounds, "shards": a.shards, "vocab_size": vocab, "results": results,
        **{f"ratio_korbert_vs_hf_dynamic_padding_{s}": results[s]["ratio_korbert_vs_hf_dynamic_padding"] for s in results},
        **{f"ratio_korbert_bf16_vs_hf_dynamic_padding_bf16_{s}": results[s]["ratio_korbert_bf16_vs_hf_dynamic_padding_bf16"] for s in results if a.bf16},
    }
    atomic_write_json(a.out, out)
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
