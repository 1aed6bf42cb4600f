"""What the NSMC and KorQuAD fine-tuning runs share.

  * model folders are opened by `korbert.folders.open_folder`;
  * `load_model`: a folder -> a task model (a new, seeded head on the pretrained encoder), or with
    `control=True` the same architecture from a seeded random initialization. Its dropout is the
    fine-tuning's own (`dropout`, BERT's 0.1 by default; `set_dropout`), never the pretraining
    config's: a model pretrained without dropout (hidden_dropout_prob=0 in its config.json) is
    still fine-tuned with it.
  * `Device`: CUDA when present (bf16 autocast, fp32 weights), CPU fp32 otherwise.
  * `fine_tune`: AdamW (no decay on biases/LayerNorm), linear warmup then linear decay, gradient
    clipping, length-grouped batches with dynamic padding (fast on CPU), a tqdm bar, optional
    per-epoch model selection (the best state is kept in memory and restored), and the training
    throughput in examples/s (training time only; validation excluded).
  * `predict`: batched inference sorted by length, results back in input order.

Why a loop of its own and not transformers' `Trainer`. Speed is no reason either way (the two are
compared side by side in benchmarks/finetune_throughput.py; docs/results.md). What it gives that
`Trainer` does not: it needs only torch. `TrainingArguments`
raises ImportError without `accelerate` (which needs `psutil` too), and the GPU machines this
project is lent come with torch and transformers but not `accelerate` (by their package list) and
reach no package registry; korbert's GPU runs fine-tune there. Per-epoch model selection keeps the best state in memory, where `Trainer`'s
`load_best_model_at_end` saves a checkpoint (weights and optimizer) every epoch. A `Trainer` with a selection callback is a drop-in replacement where `accelerate` is at hand
(tried: it passes tests/test_evals.py's two end-to-end tests).

On CPU the same seed gives the same result: the data order comes from random.Random(seed), the new
head's and the control's initialization and dropout from torch's seeded generator.
"""

from __future__ import annotations

import contextlib
import copy
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from corpus_tools.text import InputError
from korbert.folders import ModelFolder, first_line, open_folder



# -- device --------------------------------------------------------------------------------------


@dataclass
class Device:
    kind: str  # "cuda" | "cpu"
    bf16: bool
    name: str = ""

    @classmethod
    def pick(cls, want: str = "auto", threads: int = 0) -> "Device":
        """threads > 0: torch's CPU threads (fewer than cores helps on a busy, shared machine)."""
        import torch

        if threads > 0:
            torch.set_num_threads(threads)
        if want not in ("auto", "cpu", "cuda"):
            raise InputError(f"--device must be auto, cpu or cuda, got {want!r}")
        if want == "cuda" and not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available")
        if want != "cpu" and torch.cuda.is_available():
            return cls("cuda", torch.cuda.is_bf16_supported(), torch.cuda.get_device_name(0))
        return cls("cpu", False, f"cpu ({torch.get_num_threads()} threads)")

    @property
    def precision(self) -> str:
        return "bf16 autocast" if self.bf16 else "fp32"

    def autocast(self):
        import torch

        if self.bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "precision": self.precision}


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# -- model ---------------------------------------------------------------------------------------


@dataclass
class Loaded:
    model: object
    info: dict = field(default_factory=dict)


FINETUNE_DROPOUT = 0.1  # BERT's fine-tuning dropout
DROPOUT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")
DROPOUT_HELP = ("dropout of the fine-tuned model (hidden states and attention probabilities, and the new head's; BERT's 0.1), "
                "whatever the pretraining config says")


def check_dropout(p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise InputError(f"--dropout must be in [0, 1), got {p}")


def set_dropout(config, p: float) -> dict:
    """Set the fine-tuning dropout on a (copied) config: hidden_dropout_prob, attention_probs_dropout_prob
    and classifier_dropout (the classification head's, which otherwise falls back to hidden_dropout_prob),
    each only where the config has it (BERT, ELECTRA and RoBERTa configs do; a config with other names,
    e.g. DistilBERT's, keeps its own). -> {"set": {field: p}, "config_said": {field: value before}}."""
    check_dropout(p)
    said = {k: getattr(config, k) for k in DROPOUT_FIELDS if hasattr(config, k)}
    for k in said:
        setattr(config, k, p)
    return {"set": {k: p for k in said}, "config_said": said}


def load_model(folder: str | ModelFolder, task: str, control: bool, seed: int, num_labels: int = 2,
               dropout: float = FINETUNE_DROPOUT) -> Loaded:
    """task "cls" (sequence classification on [CLS]; num_labels=1: regression), "token" (a class per
    token) or "qa" (span start/end). The tokenizer is
    not loaded (see ModelFolder). `dropout` replaces the folder config's dropout (set_dropout), for the
    pretrained model and the control alike."""
    import torch
    import transformers
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoModelForTokenClassification

    mf = folder if isinstance(folder, ModelFolder) else open_folder(folder, weights=not control)
    config = copy.deepcopy(mf.config)
    dropped = set_dropout(config, dropout)
    if not dropped["set"]:
        print(f"{mf.where}: its config ({config.model_type}) has none of {', '.join(DROPOUT_FIELDS)}: "
              f"fine-tuned with its own dropout, not --dropout {dropout}", file=sys.stderr)
    if task == "cls":
        config.num_labels = num_labels
        auto = AutoModelForSequenceClassification
    elif task == "token":
        config.num_labels = num_labels
        auto = AutoModelForTokenClassification
    elif task == "qa":
        auto = AutoModelForQuestionAnswering
    else:
        raise ValueError(task)
    torch.manual_seed(seed)  # the new head (and the control's every weight) is seeded
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the "newly initialized head" notice is expected
    try:
        if control:
            model = auto.from_config(config)
        else:
            model = auto.from_pretrained(mf.path, config=config, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise InputError(f"{mf.where}: cannot load the weights as {auto.__name__}: {first_line(e)}") from None
    finally:
        transformers.logging.set_verbosity(verbosity)
    info = {
        "path": str(mf.path),
        "folder_kind": mf.kind,
        "control": control,
        "init": "random (seeded), same config" if control else "pretrained encoder + new seeded head",
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "manifest_kind": mf.manifest.get("kind"),
        "dropout": dropped,
    }
    return Loaded(model, info)


# -- batching ------------------------------------------------------------------------------------


def length_grouped_batches(lengths: list[int], batch_size: int, rng: random.Random | None) -> list[list[int]]:
    """Batches of indices of similar length. rng=None: sorted by length (inference); otherwise a
    shuffle, then sorted inside windows of 50 batches, and the batch order shuffled (training)."""
    idx = list(range(len(lengths)))
    if rng is None:
        idx.sort(key=lambda i: (lengths[i], i))
        return [idx[i : i + batch_size] for i in range(0, len(idx), batch_size)]
    rng.shuffle(idx)
    window = batch_size * 50
    batches = []
    for w in range(0, len(idx), window):
        part = sorted(idx[w : w + window], key=lambda i: lengths[i])
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(feats: list[dict], idxs: list[int], label_keys: tuple[str, ...] = (), pad_id: int = 0) -> dict:
    import torch

    n = max(len(feats[i]["input_ids"]) for i in idxs)
    ids = torch.full((len(idxs), n), pad_id, dtype=torch.long)
    types = torch.zeros((len(idxs), n), dtype=torch.long)
    mask = torch.zeros((len(idxs), n), dtype=torch.long)
    for r, i in enumerate(idxs):
        f = feats[i]
        k = len(f["input_ids"])
        ids[r, :k] = torch.tensor(f["input_ids"])
        types[r, :k] = torch.tensor(f["token_type_ids"])
        mask[r, :k] = 1
    out = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    for key in label_keys:
        values = [feats[i][key] for i in idxs]
        if isinstance(values[0], list):  # a label per token (token classification): padded with -100, ignored
            labels = torch.full((len(idxs), n), -100, dtype=torch.long)
            for r, v in enumerate(values):
                labels[r, : len(v)] = torch.tensor(v, dtype=torch.long)
            out[key] = labels
        else:  # a class, or a real value (regression)
            out[key] = torch.tensor(values, dtype=torch.float32 if isinstance(values[0], float) else torch.long)
    return out


# -- training ------------------------------------------------------------------------------------


@dataclass
class TrainSettings:
    epochs: int
    max_steps: int
    batch_size: int
    lr: float
    warmup_ratio: float
    weight_decay: float
    seed: int
    max_grad_norm: float = 1.0


def optimizer_and_schedule(model, s: TrainSettings, total_steps: int):
    import torch

    no_decay = ("bias", "LayerNorm.weight", "layernorm.weight", "norm.weight")
    params = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": s.weight_decay},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(params, lr=s.lr, betas=(0.9, 0.999), eps=1e-8)
    warmup = int(math.ceil(s.warmup_ratio * total_steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor), warmup


def fine_tune(
    model,
    feats: list[dict],
    label_keys: tuple[str, ...],
    s: TrainSettings,
    device: Device,
    select: Callable[[object], float] | None = None,
    desc: str = "fine-tune",
    pad_id: int = 0,
    log_every: int = 10,
) -> dict:
    """Train `model` on `feats` (dicts with input_ids, token_type_ids + label_keys). With `select`
    (model -> score, higher is better), score after every epoch and end with the best state."""
    import torch
    from tqdm import tqdm

    if not feats:
        raise InputError("no training examples")
    if s.batch_size < 1 or (s.epochs < 1 and s.max_steps < 1):
        raise InputError("--batch-size must be >= 1, and --epochs or --max-steps >= 1")
    rng = random.Random(s.seed)
    lengths = [len(f["input_ids"]) for f in feats]
    per_epoch = math.ceil(len(feats) / s.batch_size)
    total = per_epoch * s.epochs if s.epochs > 0 else s.max_steps
    if s.max_steps > 0:
        total = min(total, s.max_steps) if s.epochs > 0 else s.max_steps
    epochs = math.ceil(total / per_epoch)
    model.to(device.kind)
    opt, sched, warmup = optimizer_and_schedule(model, s, total)
    torch.manual_seed(s.seed)  # dropout
    step, seen, train_seconds = 0, 0, 0.0
    history, best, best_state = [], None, None
    bar = tqdm(total=total, desc=desc, unit="step", disable=None, file=sys.stderr, dynamic_ncols=True)
    # the loss is summed on the device (float64: the same sum as Python's over the same float32
    # values) and read on the host only every `log_every` steps: no GPU sync per step
    loss_sum, loss_n = torch.zeros((), dtype=torch.float64, device=device.kind), 0
    for epoch in range(1, epochs + 1):
        model.train()
        t0 = time.perf_counter()
        for idxs in length_grouped_batches(lengths, s.batch_size, rng):
            if step >= total:
                break
            batch = {k: v.to(device.kind, non_blocking=True) for k, v in collate(feats, idxs, label_keys, pad_id).items()}
            with device.autocast():
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            seen += len(idxs)
            loss_sum += loss.detach().double()
            loss_n += 1
            bar.update(1)
            if step % log_every == 0 or step == total:
                bar.set_postfix(epoch=epoch, loss=f"{loss_sum.item() / loss_n:.4f}", lr=f"{sched.get_last_lr()[0]:.2e}")
        if device.kind == "cuda":
            torch.cuda.synchronize()
        train_seconds += time.perf_counter() - t0
        row = {"epoch": epoch, "step": step, "train_loss": round(loss_sum.item() / max(loss_n, 1), 5)}
        loss_sum, loss_n = torch.zeros((), dtype=torch.float64, device=device.kind), 0
        if select is not None:
            score = select(model)
            row["valid"] = score
            if best is None or score > best["valid"]:
                best = dict(row)
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        history.append(row)
        bar.write(f"{desc}: epoch {epoch}, step {step}/{total}: " + ", ".join(f"{k} {v}" for k, v in row.items() if k not in ("epoch", "step")), file=sys.stderr)
    bar.close()
    if best_state is not None and best["epoch"] != history[-1]["epoch"]:
        model.load_state_dict(best_state)
    return {
        "steps": step,
        "epochs_run": len(history),
        "warmup_steps": warmup,
        "examples_seen": seen,
        "train_seconds": round(train_seconds, 3),
        "examples_per_s": round(seen / train_seconds, 2) if train_seconds else None,
        "history": history,
        "selected_epoch": best["epoch"] if best else history[-1]["epoch"],
    }


def predict(model, feats: list[dict], batch_size: int, device: Device, outputs: Callable, desc: str = "predict",
            pad_id: int = 0, forward: Callable | None = None) -> list:
    """outputs(model_output, batch) -> a tensor with one row per batch row, left on the device;
    the rows come back (as numpy) in input order. Nothing is read on the host until the end (no
    sync per batch). forward(model, batch) replaces model(**batch) (see qa_forward)."""
    import torch
    from tqdm import tqdm

    model.to(device.kind)
    model.eval()
    kept: list = []
    batches = length_grouped_batches([len(f["input_ids"]) for f in feats], batch_size, None)
    with torch.inference_mode():
        for idxs in tqdm(batches, desc=desc, unit="batch", disable=None, file=sys.stderr, leave=False):
            batch = {k: v.to(device.kind, non_blocking=True) for k, v in collate(feats, idxs, (), pad_id).items()}
            if forward is not None:
                res = forward(model, batch)
            else:
                with device.autocast():
                    res = model(**batch)
            kept.append((idxs, outputs(res, batch)))
    out: list = [None] * len(feats)
    for idxs, values in kept:
        values = values.cpu().numpy() if isinstance(values, torch.Tensor) else [v.cpu().numpy() for v in values]
        for r, i in enumerate(idxs):
            out[i] = values[r] if not isinstance(values, list) else tuple(v[r] for v in values)
    return out


def qa_forward(device: Device) -> Callable:
    """model(**batch) for a QA model whose start/end logits come out in fp32: with bf16 autocast the
    encoder runs in bf16 and the span head in fp32 (bf16 logits tie, which changes the n-best order
    and so EM/F1). Without autocast, the model's own forward."""
    import torch
    from transformers.modeling_outputs import QuestionAnsweringModelOutput

    def forward(model, batch):
        if not device.bf16 or not hasattr(model, "qa_outputs"):
            return model(**batch)
        with device.autocast():
            hidden = model.base_model(**batch)[0]
        with torch.autocast("cuda", enabled=False):
            logits = model.qa_outputs(hidden.float())
        start, end = logits.split(1, dim=-1)
        return QuestionAnsweringModelOutput(start_logits=start.squeeze(-1), end_logits=end.squeeze(-1))

    return forward


def write_results(out: str | Path, task: str, results: dict, files: list[str]) -> dict:
    """results.json (+ machine and library versions), then manifest.json over it and `files`."""
    from corpus_tools.artifacts import atomic_write_json, machine, versions, write_manifest

    out = Path(out)
    results = {"task": task, **results, "machine": machine(), "versions": versions()}
    atomic_write_json(out / "results.json", results)
    write_manifest(
        out, "eval", 1, files=["results.json", *files], task=task, config=results.get("config"),
        tokenizer_hash=results.get("tokenizer_hash"), metrics=results.get("metrics"),
    )
    return results
