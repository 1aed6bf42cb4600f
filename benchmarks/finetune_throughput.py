"""Fine-tuning speed: korbert's loop (evals.finetune.fine_tune) against the transformers `Trainer`.

Same model (the same pretrained folder, the same seeded head), same features (from the cache in
evals/features.py), same batch size, epochs, lr schedule and weight decay, one after the other in
one process:

  ours            length-grouped batches (windows of 50 batches sorted by length), dynamic padding
  trainer         Trainer + DataCollatorWithPadding: random batches, padded to each batch's longest
                  (what a competent transformers user runs)
  trainer-grouped the same with train_sampling_strategy="group_by_length" (LengthGroupedSampler)

Tasks: NSMC-R, 20,000 training reviews (the seeded selection `korbert eval nsmc` makes), and a
KorQuAD slice (training windows of the dev split's training articles). Throughput is training
examples per second (windows for KorQuAD) over the training loop only: feature building, model
loading and evaluation are left out of both sides. Ratios are ours / Trainer.

    python benchmarks/finetune_throughput.py --model runs/demo/pretrain/final
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402

SHARED = default_folder()


def nsmc_features(model: str, n: int, max_len: int, features: str):
    from evals import features as F
    from evals.data import read_nsmc
    from korbert.folders import open_folder
    from evals.nsmc import split_train

    mf = open_folder(model)
    path = str(SHARED / "nsmc" / "ratings_train.txt")
    rows = read_nsmc(path)
    cached = F.nsmc(features, mf, path, rows, max_len)
    tr, _ = split_train(len(rows), 0.1, 42)
    feats = [{**f, "labels": f.pop("label")} for f in cached.rows(tr[:n])]
    return mf, feats, ("labels",), cached.meta["tokenizer"]["pad_token_id"]


def korquad_features(model: str, n: int, features: str):
    from evals import features as F
    from evals.data import read_squad, split_articles, squad_examples
    from korbert.folders import open_folder

    mf = open_folder(model)
    path = str(SHARED / "korquad" / "KorQuAD_v1.0_dev.json")
    data = read_squad(path)
    everything = squad_examples(data, path)
    cached = F.korquad(features, mf, path, everything, 384, 128, 64)
    train_articles, _ = split_articles(len(data))
    ids = {e.id for e in squad_examples(data, path, train_articles)}
    keep = [w for w, q in enumerate(cached.columns["example"]) if everything[q].id in ids][:n]
    cols = ("input_ids", "token_type_ids", "start_positions", "end_positions")
    feats = [{k: cached.columns[k][w] for k in cols} for w in keep]
    return mf, feats, ("start_positions", "end_positions"), cached.meta["tokenizer"]["pad_token_id"]


def run_ours(mf, task, feats, label_keys, pad, a) -> dict:
    from evals.finetune import Device, TrainSettings, fine_tune, load_model

    model = load_model(mf, task, False, 42).model
    s = TrainSettings(a.epochs, 0, a.batch_size, a.lr, 0.1, 0.01, 42)
    t = time.perf_counter()
    r = fine_tune(model, feats, label_keys, s, Device.pick("cpu"), desc=f"ours {task}", pad_id=pad)
    wall = time.perf_counter() - t
    return {"examples_per_s": r["examples_per_s"], "train_seconds": r["train_seconds"], "wall_seconds": round(wall, 2),
            "steps": r["steps"], "final_train_loss": r["history"][-1]["train_loss"]}


def run_trainer(mf, task, feats, label_keys, pad, a, grouped: bool) -> dict:
    import datasets
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    from evals.finetune import load_model

    model = load_model(mf, task, False, 42).model
    cols = {k: [f[k] for f in feats] for k in ("input_ids", "token_type_ids", *label_keys)}
    if task == "cls":
        cols["labels"] = cols.pop("labels")
    ds = datasets.Dataset.from_dict(cols)
    tok = mf.tokenizer()
    assert tok.pad_token_id == pad
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=a.batch_size, num_train_epochs=a.epochs, learning_rate=a.lr,
            warmup_steps=0.1, weight_decay=0.01, lr_scheduler_type="linear", max_grad_norm=1.0, seed=42,
            logging_steps=50, save_strategy="no", report_to="none", use_cpu=True, dataloader_num_workers=0,
            disable_tqdm=True, train_sampling_strategy="group_by_length" if grouped else "random",
        )
        trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=DataCollatorWithPadding(tok))
        t = time.perf_counter()
        out = trainer.train()
        wall = time.perf_counter() - t
    m = out.metrics
    return {"examples_per_s": round(len(feats) * a.epochs / m["train_runtime"], 2), "train_seconds": round(m["train_runtime"], 3),
            "wall_seconds": round(wall, 2), "steps": out.global_step, "final_train_loss": round(m.get("train_loss", float("nan")), 5)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(ROOT / "runs" / "demo" / "pretrain" / "final"), help="model folder (default: the demo recipe's)")
    p.add_argument("--nsmc-examples", type=int, default=20000)
    p.add_argument("--korquad-windows", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--features", default=str(ROOT / "runs" / "bench-features"), help="feature cache folder")
    p.add_argument("--tasks", nargs="+", default=["nsmc", "korquad"], choices=["nsmc", "korquad"])
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "finetune-throughput.json"))
    a = p.parse_args()
    import torch

    result = {
        "what": "fine-tuning examples/s: korbert's loop vs transformers Trainer (same model, features, batch, epochs, schedule)",
        "command": "python " + " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "machine": machine(), "torch_threads": torch.get_num_threads(), "load_average_before": list(os.getloadavg()),
        "model": a.model, "batch_size": a.batch_size, "epochs": a.epochs, "tasks": {},
    }
    for task in a.tasks:
        if task == "nsmc":
            mf, feats, keys, pad = nsmc_features(a.model, a.nsmc_examples, 128, a.features)
            kind = "cls"
        else:
            mf, feats, keys, pad = korquad_features(a.model, a.korquad_windows, a.features)
            kind = "qa"
        lengths = [len(f["input_ids"]) for f in feats]
        row = {"examples": len(feats), "mean_length": round(sum(lengths) / len(lengths), 1), "max_length": max(lengths)}
        row["ours"] = run_ours(mf, kind, feats, keys, pad, a)
        print(f"{task} ours: {row['ours']}", flush=True)
        row["trainer"] = run_trainer(mf, kind, feats, keys, pad, a, grouped=False)
        print(f"{task} trainer: {row['trainer']}", flush=True)
        row["trainer_grouped"] = run_trainer(mf, kind, feats, keys, pad, a, grouped=True)
        print(f"{task} trainer-grouped: {row['trainer_grouped']}", flush=True)
        row["ratio_vs_trainer"] = round(row["ours"]["examples_per_s"] / row["trainer"]["examples_per_s"], 3)
        row["ratio_vs_trainer_grouped"] = round(row["ours"]["examples_per_s"] / row["trainer_grouped"]["examples_per_s"], 3)
        print(f"{task}: ours / Trainer = {row['ratio_vs_trainer']}x, ours / Trainer(group_by_length) = {row['ratio_vs_trainer_grouped']}x", flush=True)
        result["tasks"][task] = row
        result[f"ratio_{task}_vs_trainer"] = row["ratio_vs_trainer"]
        result[f"ratio_{task}_vs_trainer_grouped"] = row["ratio_vs_trainer_grouped"]
    result["load_average_after"] = list(os.getloadavg())
    atomic_write_json(Path(a.out), result)
    print(json.dumps({k: v for k, v in result.items() if k.startswith("ratio")}, indent=1))


if __name__ == "__main__":
    main()
