"""NSMC sentiment: fine-tune a korbert model (or the random-init control) and score test accuracy.

    korbert eval nsmc --model runs/pretrain/final --train ../shared/data/nsmc/ratings_train.txt \
        --test ../shared/data/nsmc/ratings_test.txt --out runs/eval-nsmc

Sequence classification on [CLS] (BertForSequenceClassification: a new seeded head on the
pretrained encoder). A seeded random slice of train (`--valid-size`, default 10%) is held out for
model selection: the model is scored on it after every epoch and the best epoch's weights are
kept; the test set is used once, at the end. Writes to --out:

    results.json          accuracy, validation history, resolved config, model + tokenizer hash,
                          data sha256s, counts, device, seconds, fine-tuning examples/s
    predictions.tsv       id, label, prediction, p_positive (test file order)
    manifest.json         sha256 of both
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, file_record
from corpus_tools.text import InputError
from evals.data import read_nsmc
from evals.finetune import (
    MODEL_HELP, Device, TrainSettings, fine_tune, load_model, predict, seed_everything, tokenize_texts,
    write_results,
)

SAMPLE = Path(__file__).resolve().parent.parent / "korbert" / "sample_data"


@dataclass
class NsmcConfig:
    """Fine-tune a korbert model on NSMC (sentiment of movie reviews) and report test accuracy."""

    model: str = C.field("", MODEL_HELP + " (required)")
    train: str = C.field(str(SAMPLE / "nsmc_train.txt"), "training file, NSMC format (id<TAB>document<TAB>label, header)")
    test: str = C.field(str(SAMPLE / "nsmc_test.txt"), "test file, same format (scored once, at the end)")
    out: str = C.field("runs/eval-nsmc", "output folder")
    control: bool = C.field(False, "control run: the model's config with a seeded random initialization, same fine-tuning")
    max_len: int = C.field(128, "maximum tokens per review, [CLS] and [SEP] included")
    epochs: int = C.field(2, "training epochs (the best one on the validation slice is kept)")
    max_steps: int = C.field(0, "stop after this many optimizer steps (0 = no limit)")
    batch_size: int = C.field(32, "training batch size")
    lr: float = C.field(5e-5, "peak learning rate (AdamW)")
    warmup_ratio: float = C.field(0.1, "share of the steps with linear warmup (then linear decay to 0)")
    weight_decay: float = C.field(0.01, "AdamW weight decay (not on biases and LayerNorm)")
    valid_size: float = C.field(0.1, "validation slice of train for model selection: a fraction (< 1) or a count (0 = none)")
    max_train_examples: int = C.field(0, "train on at most this many reviews (after the validation slice; 0 = all)")
    max_eval_examples: int = C.field(0, "score only the first N test reviews, for quick runs (0 = all; recorded in results)")
    eval_batch_size: int = C.field(128, "inference batch size")
    seed: int = C.field(42, "seed for the split, the data order, the new head and dropout")
    device: str = C.field("auto", "auto (CUDA with bf16 when present, else CPU fp32), cpu or cuda", choices=["auto", "cpu", "cuda"])
    threads: int = C.field(0, "CPU threads for torch (0 = torch's default, one per core)")


def split_train(n: int, valid_size: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, valid) indices: a seeded shuffle, the first `valid_size` (fraction or count) to valid."""
    if valid_size < 0:
        raise InputError(f"--valid-size must be >= 0, got {valid_size}")
    n_valid = int(round(valid_size * n)) if valid_size < 1 else int(valid_size)
    if n_valid >= n:
        raise InputError(f"--valid-size {valid_size} leaves no training reviews (the file has {n})")
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    return idx[n_valid:], idx[:n_valid]


def main(cfg: NsmcConfig) -> dict:
    t_start = time.time()
    train_rows = read_nsmc(cfg.train)
    test_rows = read_nsmc(cfg.test)
    if cfg.max_len < 3:
        raise InputError(f"--max-len must be at least 3, got {cfg.max_len}")
    device = Device.pick(cfg.device, cfg.threads)
    seed_everything(cfg.seed)
    loaded = load_model(cfg.model, "cls", cfg.control, cfg.seed, num_labels=2)
    tok, model = loaded.tok, loaded.model
    if cfg.max_len > model.config.max_position_embeddings:
        raise InputError(f"--max-len {cfg.max_len} > the model's max_position_embeddings {model.config.max_position_embeddings}")

    tr_idx, va_idx = split_train(len(train_rows), cfg.valid_size, cfg.seed)
    if cfg.max_train_examples > 0:
        tr_idx = tr_idx[: cfg.max_train_examples]
    if cfg.max_eval_examples > 0:
        test_rows = test_rows[: cfg.max_eval_examples]
    train = [train_rows[i] for i in tr_idx]
    valid = [train_rows[i] for i in va_idx]

    t0 = time.time()
    train_feats = tokenize_texts(tok, [r.text for r in train], cfg.max_len, "tokenize train")
    for f, r in zip(train_feats, train):
        f["labels"] = r.label
    valid_feats = tokenize_texts(tok, [r.text for r in valid], cfg.max_len, "tokenize valid")
    test_feats = tokenize_texts(tok, [r.text for r in test_rows], cfg.max_len, "tokenize test")
    t_tok = time.time() - t0

    def probs(feats, desc):
        import torch

        return predict(model, feats, cfg.eval_batch_size, device,
                       lambda res, r, f: torch.softmax(res.logits[r].float(), -1)[1].item(), desc)

    def accuracy(p, rows) -> float:
        return sum((x >= 0.5) == (r.label == 1) for x, r in zip(p, rows)) / max(len(rows), 1)

    def select(m) -> float:
        return round(accuracy(probs(valid_feats, "valid"), valid), 6)

    settings = TrainSettings(cfg.epochs, cfg.max_steps, cfg.batch_size, cfg.lr, cfg.warmup_ratio, cfg.weight_decay, cfg.seed)
    training = fine_tune(model, train_feats, ("labels",), settings, device, select if valid else None, desc="nsmc")

    p_test = probs(test_feats, "test")
    acc = accuracy(p_test, test_rows)
    out = Path(cfg.out)
    lines = ["id\tlabel\tprediction\tp_positive"] + [
        f"{r.id}\t{r.label}\t{int(p >= 0.5)}\t{p:.6f}" for r, p in zip(test_rows, p_test)
    ]
    atomic_write_bytes(out / "predictions.tsv", ("\n".join(lines) + "\n").encode("utf-8"))
    best_valid = next((h.get("valid") for h in training["history"] if h["epoch"] == training["selected_epoch"]), None)
    results = write_results(out, "nsmc", {
        "metrics": {"accuracy": round(acc, 6), "valid_accuracy": best_valid},
        "model": loaded.info,
        "tokenizer_hash": loaded.info["tokenizer_hash"],
        "control": cfg.control,
        "data": {"train": file_record(cfg.train), "test": file_record(cfg.test)},
        "n": {"train": len(train), "valid": len(valid), "test": len(test_rows)},
        "full_test": cfg.max_eval_examples <= 0,
        "training": training,
        "examples_per_s": training["examples_per_s"],
        "device": device.describe(),
        "seconds": {"tokenize": round(t_tok, 2), "train": training["train_seconds"], "total": round(time.time() - t_start, 2)},
        "config": C.to_dict(cfg),
    }, ["predictions.tsv"])
    what = "control (random init)" if cfg.control else Path(cfg.model).name
    partial = "" if cfg.max_eval_examples <= 0 else f" (first {len(test_rows)} only: --max-eval-examples)"
    print(
        f"nsmc [{what}]: test accuracy {100 * acc:.2f}% on {len(test_rows):,} reviews{partial}; "
        f"valid {'-' if best_valid is None else f'{100 * best_valid:.2f}%'} (epoch {training['selected_epoch']}); "
        f"{len(train):,} train reviews, {training['steps']} steps -> {out}"
    )
    print(f"fine-tuning throughput: {training['examples_per_s']} examples/s on {device.name} ({device.precision})")
    return results


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(NsmcConfig, argv, prog="korbert eval nsmc"))
