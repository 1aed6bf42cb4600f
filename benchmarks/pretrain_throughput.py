"""Training-step throughput: korbert's pretraining step against transformers' plain BertForPreTraining.

Same shards, same model size, same batch size, same optimizer (AdamW), same machine, in one run:

  hf        BertForPreTraining as the HF examples train it: every batch padded to max_seq_len, the
            dense MLM head (vocabulary logits at every position), HF's own loss
  korbert   KorBertForPreTraining as `korbert pretrain` trains it: length-grouped batches padded to
            the longest instance, MLM logits at the masked positions only

and two ablations that split the gain: hf+dynamic padding (dense head on korbert's batches) and
korbert+padded (sparse head on max_seq_len batches). Throughput counts real (non-padding) tokens,
so padding is cost, not credit. Configurations run interleaved in rounds so that load drift on a
shared machine hits them alike.

    python benchmarks/pretrain_throughput.py --shards runs/shards-full --sizes mini small
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
from corpus_tools.shards import open_shards  # noqa: E402
from korbert.data import BatchPlan, PretrainingDataset, collate, instance_lengths  # noqa: E402
from korbert.model import KorBertForPreTraining, bert_config  # noqa: E402


def batches(ds: PretrainingDataset, batch: int, n: int, seed: int, padded_to: int | None) -> list[dict]:
    """n batches: korbert's plan (length-grouped) or, with padded_to, random batches padded to max_seq_len."""
    if padded_to is None:
        plan = BatchPlan(instance_lengths(ds.reader), batch, seed)
        return [ds[plan(s)] for s in range(n)]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        items = [ds.instance(0, int(i)) for i in rng.choice(len(ds.reader), batch, replace=False)]
        b = collate(items)
        pad = padded_to - b["input_ids"].shape[1]
        out.append({k: (torch.nn.functional.pad(v, (0, pad), value=-100 if k == "labels" else 0) if v.dim() == 2 else v) for k, v in b.items()})
    return out


def step_fn(model, opt, sparse: bool):
    def step(b):
        if sparse:
            loss = model(**b, sparse=True).loss
        else:
            loss = model(**b).loss  # HF's BertForPreTraining: dense logits + CrossEntropyLoss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", default="runs/shards-full")
    ap.add_argument("--sizes", nargs="+", default=["mini", "small"])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per configuration per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default="benchmarks/results/pretrain-cpu-throughput.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    reader = open_shards(a.shards, verify=False)
    max_len = reader.manifest["config"]["max_seq_len"]
    ds = PretrainingDataset(reader, seed=0)
    n = a.steps * a.rounds + 2
    dyn = batches(ds, a.batch_size, n, 0, None)
    pad = batches(ds, a.batch_size, n, 0, max_len)
    real = lambda bs: sum(int(b["attention_mask"].sum()) for b in bs)  # noqa: E731
    print(f"shards {a.shards}: {len(reader)} instances, mean {real(pad) / (n * a.batch_size):.1f} tokens (max_seq_len {max_len}); "
          f"batch {a.batch_size}, {a.threads} threads, load {os.getloadavg()[0]:.2f}")
    results = {}
    for size in a.sizes:
        cfgs = {  # name: (sparse head, batches)
            "hf": (False, pad), "hf+dynamic_padding": (False, dyn), "korbert+padded": (True, pad), "korbert": (True, dyn),
        }
        runs = {}
        for name, (sparse, bs) in cfgs.items():
            torch.manual_seed(0)
            model = KorBertForPreTraining(bert_config(size, reader.manifest["mask_config"]["random_high"], max_len))
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            fn = step_fn(model, opt, sparse)
            for b in bs[:2]:  # warm-up
                fn(b)
            runs[name] = {"fn": fn, "bs": bs, "seconds": 0.0, "tokens": 0, "padded": 0}
        for r in range(a.rounds):
            for name, run in runs.items():
                chunk = run["bs"][2 + r * a.steps : 2 + (r + 1) * a.steps]
                t = time.perf_counter()
                for b in chunk:
                    run["fn"](b)
                run["seconds"] += time.perf_counter() - t
                run["tokens"] += real(chunk)
                run["padded"] += sum(b["input_ids"].numel() for b in chunk)
        res = {}
        for name, run in runs.items():
            res[name] = {"tokens_per_s": round(run["tokens"] / run["seconds"], 1), "seconds": round(run["seconds"], 2),
                         "tokens": run["tokens"], "padding_share": round(1 - run["tokens"] / run["padded"], 4)}
        base = res["hf"]["tokens_per_s"]
        res["ratio_korbert_vs_hf"] = round(res["korbert"]["tokens_per_s"] / base, 3)
        res["ratio_dynamic_padding_only"] = round(res["hf+dynamic_padding"]["tokens_per_s"] / base, 3)
        res["ratio_sparse_head_only"] = round(res["korbert+padded"]["tokens_per_s"] / base, 3)
        results[size] = res
        print(f"BERT-{size}: " + ", ".join(f"{k} {v['tokens_per_s']:,.0f} tok/s" for k, v in res.items() if isinstance(v, dict)))
        print(f"  ratio korbert / hf = {res['ratio_korbert_vs_hf']:.2f}x (dynamic padding alone {res['ratio_dynamic_padding_only']:.2f}x, "
              f"sparse MLM head alone {res['ratio_sparse_head_only']:.2f}x)")
    out = {
        "stage": "pretrain", "what": "CPU training-step throughput, korbert vs transformers BertForPreTraining",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "torch": torch.__version__,
        "load_average_end": os.getloadavg(), "batch_size": a.batch_size, "steps_per_config": a.steps * a.rounds,
        "shards": a.shards, "results": results,
        **{f"ratio_korbert_vs_hf_{s}": results[s]["ratio_korbert_vs_hf"] for s in results},
    }
    atomic_write_json(a.out, out)
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
