"""What the NSMC and KorQuAD fine-tuning runs share.

  * `load_model`: an exported korbert model folder (config.json + model.safetensors saved from
    BertForPreTraining + the korbert tokenizer files [+ manifest.json of kind "model"]) -> the
    tokenizer and a task model (a new, seeded head on the pretrained encoder), or with
    `control=True` the same architecture from a seeded random initialization.
  * `Device`: CUDA when present (bf16 autocast, fp32 weights), CPU fp32 otherwise.
  * `fine_tune`: AdamW (no decay on biases/LayerNorm), linear warmup then linear decay, gradient
    clipping, length-grouped batches with dynamic padding (fast on CPU), a tqdm bar, optional
    per-epoch model selection (the best state is kept in memory and restored), and the training
    throughput in examples/s (training time only; validation excluded).
  * `predict`: batched inference sorted by length, results back in input order.

On CPU the same seed gives the same result: the data order comes from random.Random(seed), the new
head's and the control's initialization and dropout from torch's seeded generator.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from corpus_tools.text import InputError

MODEL_HELP = "exported korbert model folder: config.json + model.safetensors + the korbert tokenizer files"


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
    tok: object
    model: object
    info: dict = field(default_factory=dict)


def open_model_folder(folder: str, weights: bool = True, label: str | None = None):
    """The checks every consumer of an exported model folder makes -> (path, tokenizer, manifest, config):
    config.json, weights (unless `weights` is False: a control needs only the config), the korbert
    tokenizer files beside them, and the tokenizer hash the manifest says the model was trained with.
    Errors name the folder as `label` (default "--model FOLDER")."""
    from transformers import AutoConfig

    from korbert.tokenizer import KorBertTokenizer

    where = label or f"--model {folder}"
    if not folder:
        raise InputError(f"--model is required ({MODEL_HELP})")
    path = Path(folder)
    if not path.is_dir():
        raise InputError(f"{where}: no such folder ({MODEL_HELP})")
    if not (path / "config.json").is_file():
        raise InputError(f"{where}: no config.json, not an exported model folder ({MODEL_HELP})")
    found = [n for n in ("model.safetensors", "pytorch_model.bin") if (path / n).is_file()]
    if weights and not found and not (path / "model.safetensors.index.json").is_file():
        raise InputError(f"{where}: no model.safetensors ({MODEL_HELP}); --control needs only config.json")
    if not (path / "tokenizer.json").is_file():
        raise InputError(f"{where}: no tokenizer.json: the korbert tokenizer files must sit beside the model")
    tok = KorBertTokenizer.from_pretrained(path)
    manifest = {}
    if (path / "manifest.json").is_file():
        try:
            manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise InputError(f"{where}: unreadable manifest.json ({e})") from None
        want = manifest.get("tokenizer_hash") if isinstance(manifest, dict) else None
        if want and want != tok.fingerprint:
            raise InputError(
                f"{where}: the tokenizer files have hash {tok.fingerprint[:12]}, but manifest.json says the "
                f"model was trained with {want[:12]}: the folder mixes a model and a foreign tokenizer"
            )
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise InputError(f"{where}: config.json: {e}") from None
    if config.vocab_size < len(tok):
        raise InputError(f"{where}: config.json vocab_size {config.vocab_size} < the tokenizer's {len(tok)} tokens")
    return path, tok, manifest, config


def load_model(folder: str, task: str, control: bool, seed: int, num_labels: int = 2) -> Loaded:
    """task "cls" (sequence classification on [CLS]) or "qa" (span start/end)."""
    import torch
    import transformers
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

    path, tok, manifest, config = open_model_folder(folder, weights=not control)
    if task == "cls":
        config.num_labels = num_labels
        auto = AutoModelForSequenceClassification
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
            model = auto.from_pretrained(path, config=config, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError, RuntimeError) as e:
        raise InputError(f"--model {folder}: cannot load the weights: {e}") from None
    finally:
        transformers.logging.set_verbosity(verbosity)
    info = {
        "path": str(path),
        "control": control,
        "init": "random (seeded), same config" if control else "pretrained encoder + new seeded head",
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer_hash": tok.fingerprint,
        "manifest_kind": manifest.get("kind") if isinstance(manifest, dict) else None,
    }
    return Loaded(tok, model, info)


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
        out[key] = torch.tensor([feats[i][key] for i in idxs], dtype=torch.long)
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
    loss_sum, loss_n = 0.0, 0
    for epoch in range(1, epochs + 1):
        model.train()
        t0 = time.perf_counter()
        for idxs in length_grouped_batches(lengths, s.batch_size, rng):
            if step >= total:
                break
            batch = {k: v.to(device.kind) for k, v in collate(feats, idxs, label_keys).items()}
            with device.autocast():
                loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            seen += len(idxs)
            loss_sum += float(loss.detach())
            loss_n += 1
            bar.update(1)
            if step % 10 == 0 or step == total:
                bar.set_postfix(epoch=epoch, loss=f"{loss_sum / loss_n:.4f}", lr=f"{sched.get_last_lr()[0]:.2e}")
        if device.kind == "cuda":
            torch.cuda.synchronize()
        train_seconds += time.perf_counter() - t0
        row = {"epoch": epoch, "step": step, "train_loss": round(loss_sum / max(loss_n, 1), 5)}
        loss_sum, loss_n = 0.0, 0
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


def predict(model, feats: list[dict], batch_size: int, device: Device, outputs: Callable, desc: str = "predict") -> list:
    """outputs(model_output, batch_row, feature) -> the value kept per feature; returned in input order."""
    import torch
    from tqdm import tqdm

    model.to(device.kind)
    model.eval()
    out: list = [None] * len(feats)
    batches = length_grouped_batches([len(f["input_ids"]) for f in feats], batch_size, None)
    with torch.inference_mode():
        for idxs in tqdm(batches, desc=desc, unit="batch", disable=None, file=sys.stderr, leave=False):
            batch = {k: v.to(device.kind) for k, v in collate(feats, idxs).items()}
            with device.autocast():
                res = model(**batch)
            for r, i in enumerate(idxs):
                out[i] = outputs(res, r, feats[i])
    return out


def tokenize_texts(tok, texts: list[str], max_len: int, desc: str, chunk: int = 2000) -> list[dict]:
    """Single texts -> features ([CLS] text [SEP], truncated), with a progress bar."""
    from tqdm import tqdm

    feats = []
    with tqdm(total=len(texts), desc=desc, unit="text", unit_scale=True, disable=None, file=sys.stderr, leave=False) as bar:
        for i in range(0, len(texts), chunk):
            enc = tok(texts[i : i + chunk], truncation=True, max_length=max_len)
            feats += [
                {"input_ids": a, "token_type_ids": b}
                for a, b in zip(enc["input_ids"], enc["token_type_ids"])
            ]
            bar.update(min(chunk, len(texts) - i))
    return feats


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
