"""A user's transformers `Trainer` with the model card's fine-tuning settings, against korbert's own
NSMC number, side by side.

    python benchmarks/trainer_parity.py --run runs/demo64 --name demo

Reads the run's exported model (pretrain/final) and its NSMC results (nsmc/model/results.json: the
settings behind the card's row, the files, korbert's accuracy), then fine-tunes that model with plain
`Trainer` (AutoTokenizer, AutoModelForSequenceClassification, DataCollatorWithPadding) and scores the
same test file. Arms:

  card, all train      the card's settings on the whole train file (what a user runs)
  card, korbert split  the card's settings on the training reviews korbert trained on (its held-out
                       slice left out: evals.nsmc.split_train), so only the implementation differs
  no warmup, no decay  the card's epochs, lr, batch and length, with `Trainer`'s defaults for warmup
                       (0) and weight decay (0)

Writes benchmarks/results/trainer-parity-<name>.json (machine, command, settings, accuracies, ratios).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402


def trainer_accuracy(model_dir: str, train: list, test: list, c: dict, warmup: float, decay: float, out: Path) -> tuple[float, float]:
    """(test accuracy, seconds) of one Trainer run: train/test are [(text, label)]."""
    import numpy as np
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    d = c["dropout"]
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=2, hidden_dropout_prob=d, attention_probs_dropout_prob=d, classifier_dropout=d)

    def dataset(rows):
        enc = tok([t for t, _ in rows], truncation=True, max_length=c["max_len"])
        return Dataset.from_dict({"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"],
                                  "attention_mask": enc["attention_mask"], "labels": [y for _, y in rows]})

    args = TrainingArguments(
        str(out), num_train_epochs=c["epochs"], learning_rate=c["lr"], per_device_train_batch_size=c["batch_size"],
        warmup_steps=warmup, weight_decay=decay, lr_scheduler_type="linear", max_grad_norm=1.0,
        train_sampling_strategy="group_by_length", seed=c["seed"], per_device_eval_batch_size=128,
        save_strategy="no", report_to="none", logging_strategy="no", disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=dataset(train), data_collator=DataCollatorWithPadding(tok))
    trainer.train()
    pred = trainer.predict(dataset(test))
    acc = float((np.argmax(pred.predictions, -1) == pred.label_ids).mean())
    return acc, time.time() - t0


def main(run: Path, name: str, out: Path) -> dict:
    from evals.data import read_nsmc
    from evals.nsmc import split_train

    results = json.loads((run / "nsmc" / "model" / "results.json").read_text(encoding="utf-8"))
    c = results["config"]
    model_dir = c["model"]
    train_rows, test_rows = read_nsmc(results["data"]["train"]["path"]), read_nsmc(results["data"]["test"]["path"])
    tr_idx, _ = split_train(len(train_rows), c["valid_size"], c["seed"])
    everything = [(r.text, r.label) for r in train_rows]
    split = [everything[i] for i in tr_idx]
    test = [(r.text, r.label) for r in test_rows]
    arms = {}
    for arm, rows, warmup, decay in (("card, all train", everything, c["warmup_ratio"], c["weight_decay"]),
                                     ("card, korbert split", split, c["warmup_ratio"], c["weight_decay"]),
                                     ("no warmup, no decay", everything, 0, 0.0)):
        acc, seconds = trainer_accuracy(model_dir, rows, test, c, warmup, decay, Path("/tmp") / f"trainer-parity-{name}")
        arms[arm] = {"train_reviews": len(rows), "warmup": warmup, "weight_decay": decay, "accuracy": round(acc, 6),
                     "ratio_to_korbert": round(acc / results["metrics"]["accuracy"], 4), "seconds": round(seconds, 1)}
        print(f"{arm}: {100 * acc:.2f}% ({len(rows):,} train reviews, {seconds:.0f} s)", flush=True)
    import transformers

    r = {
        "model": model_dir, "run": str(run), "command": " ".join(["python", *sys.argv]), "machine": machine(),
        "transformers": transformers.__version__,
        "settings": {k: c[k] for k in ("epochs", "lr", "batch_size", "warmup_ratio", "weight_decay", "dropout", "max_len", "seed", "valid_size")},
        "test": {"path": results["data"]["test"]["path"], "sha256": results["data"]["test"]["sha256"], "reviews": len(test)},
        "korbert": {"accuracy": results["metrics"]["accuracy"], "train_reviews": results["n"]["train"], "steps": results["training"]["steps"]},
        "trainer": arms,
    }
    atomic_write_json(out, r)
    return r


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, required=True, help="a `korbert run` folder (its pretrain/final and nsmc/model/results.json)")
    ap.add_argument("--name", default="demo")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    r = main(a.run, a.name, a.out or Path(__file__).parent / "results" / f"trainer-parity-{a.name}.json")
    print(f"korbert: {100 * r['korbert']['accuracy']:.2f}%")
