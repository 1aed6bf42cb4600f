"""NSMC sentiment: fine-tune a model (or its random-init control) and score test accuracy.

    korbert eval nsmc --model runs/pretrain/final --train $KORBERT_DATA/nsmc/ratings_train.txt \
        --test $KORBERT_DATA/nsmc/ratings_test.txt --out runs/eval-nsmc

The model is an exported korbert folder or any local transformers encoder folder (its own
tokenizer is used). Sequence classification on the first token (AutoModelForSequenceClassification:
a new seeded head on the pretrained encoder). Features come from the cache in --features (default:
`features/` beside --out; see evals/features.py): built on the first run, read on every later
one, so fine-tuning itself needs no tokenizer and no Kiwi. A seeded random slice of train (`--valid-size`, default 10%) is held out for
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

from corpus_tools import SAMPLE_DATA
from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, file_record
from corpus_tools.text import InputError
from evals.data import read_nsmc
from evals import features as F
from evals.finetune import DROPOUT_HELP, FINETUNE_DROPOUT, Device, TrainSettings, check_dropout, fine_tune, load_model, predict, seed_everything, write_results
from korbert.folders import MODEL_HELP, check_trained_positions, open_folder
from korbert.table import print_table, result_row



@dataclass
class NsmcConfig:
    """Fine-tune a korbert model on NSMC (sentiment of movie reviews) and report test accuracy."""

    model: str = C.field("", MODEL_HELP + " (required)")
    train: str = C.field(str(SAMPLE_DATA / "nsmc_train.txt"), "training file, NSMC format (id<TAB>document<TAB>label, header)")
    test: str = C.field(str(SAMPLE_DATA / "nsmc_test.txt"), "test file, same format (scored once, at the end)")
    out: str = C.field("runs/eval-nsmc", "output folder")
    control: bool = C.field(False, "control run: the model's config with a seeded random initialization, same fine-tuning")
    max_len: int = C.field(128, "maximum tokens per review, [CLS] and [SEP] included")
    allow_untrained_positions: bool = C.field(False, "fine-tune on reviews longer than a korbert model was pretrained on (its manifest's trained_seq_len)")
    features: str = C.field("", "feature cache folder, shared by runs with the same tokenizer, data and max length (default: features/ beside --out)")
    rebuild_features: bool = C.field(False, "build the features again even when the cache holds them")
    epochs: int = C.field(2, "training epochs (the best one on the validation slice is kept)")
    max_steps: int = C.field(0, "stop after this many optimizer steps (0 = no limit)")
    batch_size: int = C.field(32, "training batch size")
    lr: float = C.field(5e-5, "peak learning rate (AdamW)")
    warmup_ratio: float = C.field(0.1, "share of the steps with linear warmup (then linear decay to 0)")
    weight_decay: float = C.field(0.01, "AdamW weight decay (not on biases and LayerNorm)")
    dropout: float = C.field(FINETUNE_DROPOUT, DROPOUT_HELP)
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
    check_dropout(cfg.dropout)
    device = Device.pick(cfg.device, cfg.threads)
    seed_everything(cfg.seed)
    mf = open_folder(cfg.model, weights=not cfg.control)
    if cfg.max_len > mf.config.max_position_embeddings:
        raise InputError(f"--max-len {cfg.max_len} > the model's max_position_embeddings {mf.config.max_position_embeddings}")
    check_trained_positions(mf, cfg.max_len, cfg.allow_untrained_positions, cfg.control, f"--max-len {mf.manifest.get('trained_seq_len')}")

    t0 = time.time()
    root = cfg.features or F.default_dir(cfg.out)
    train_c = F.nsmc(root, mf, cfg.train, train_rows, cfg.max_len, cfg.rebuild_features)
    test_c = F.nsmc(root, mf, cfg.test, test_rows, cfg.max_len, cfg.rebuild_features)
    t_feat = time.time() - t0
    tmeta = train_c.meta["tokenizer"]
    if mf.config.vocab_size < tmeta["size"]:
        raise InputError(f"{mf.where}: config.json vocab_size {mf.config.vocab_size} < the tokenizer's {tmeta['size']} tokens")
    loaded = load_model(mf, "cls", cfg.control, cfg.seed, num_labels=2, dropout=cfg.dropout)
    model = loaded.model
    loaded.info["tokenizer_hash"] = tmeta["fingerprint"]

    tr_idx, va_idx = split_train(len(train_rows), cfg.valid_size, cfg.seed)
    if cfg.max_train_examples > 0:
        tr_idx = tr_idx[: cfg.max_train_examples]
    n_test = min(cfg.max_eval_examples, len(test_rows)) if cfg.max_eval_examples > 0 else len(test_rows)
    test_rows = test_rows[:n_test]
    train = [train_rows[i] for i in tr_idx]
    valid = [train_rows[i] for i in va_idx]
    train_feats = [{**f, "labels": f.pop("label")} for f in train_c.rows(tr_idx)]
    valid_feats = train_c.rows(va_idx)
    test_feats = test_c.rows(range(n_test))
    pad = tmeta["pad_token_id"]

    def probs(feats, desc):
        import torch

        return [float(x) for x in predict(model, feats, cfg.eval_batch_size, device,
                                          lambda res, batch: torch.softmax(res.logits.float(), -1)[:, 1], desc, pad)]

    def accuracy(p, rows) -> float:
        return sum((x >= 0.5) == (r.label == 1) for x, r in zip(p, rows)) / max(len(rows), 1)

    def select(m) -> float:
        return round(accuracy(probs(valid_feats, "valid"), valid), 6)

    settings = TrainSettings(cfg.epochs, cfg.max_steps, cfg.batch_size, cfg.lr, cfg.warmup_ratio, cfg.weight_decay, cfg.seed)
    training = fine_tune(model, train_feats, ("labels",), settings, device, select if valid else None, desc="nsmc", pad_id=pad)

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
        "features": {"folders": [str(train_c.folder), str(test_c.folder)], "built": train_c.built + test_c.built,
                     "reused": (not train_c.built) + (not test_c.built)},
        "training": training,
        "examples_per_s": training["examples_per_s"],
        "device": device.describe(),
        "seconds": {"features": round(t_feat, 2), "train": training["train_seconds"], "total": round(time.time() - t_start, 2)},
        "config": C.to_dict(cfg),
    }, ["predictions.tsv"])
    what = "control (random init)" if cfg.control else Path(cfg.model).name
    partial = "" if cfg.max_eval_examples <= 0 else f" (first {len(test_rows)} only: --max-eval-examples)"
    built = results["features"]["built"]
    print(
        f"nsmc [{what}]: test accuracy {100 * acc:.2f}% on {len(test_rows):,} reviews{partial}; "
        f"valid {'-' if best_valid is None else f'{100 * best_valid:.2f}%'} (epoch {training['selected_epoch']}); "
        f"{len(train):,} train reviews, {training['steps']} steps -> {out}"
    )
    print(f"features: {'built' if built else 'read from the cache'} in {t_feat:.1f}s ({train_c.folder.parent}); "
          f"fine-tuning throughput: {training['examples_per_s']} examples/s on {device.name} ({device.precision})")
    print_table([result_row(cfg.model, cfg.control, "given folder", nsmc=results)])
    return results


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(NsmcConfig, argv, prog="korbert eval nsmc"))
