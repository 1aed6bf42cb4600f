"""KLUE: fine-tune a model on KLUE-NLI, KLUE-STS, KLUE-NER or YNAT and score it as KLUE does.

    korbert eval klue-nli --model runs/cpu/pretrain/final --dev-file $KORBERT_DATA/klue/klue-nli-v1.1_dev.json
    korbert eval klue-sts | klue-ner | ynat   (the same options)

The model is an exported korbert folder or any local transformers encoder folder with its own fast
tokenizer. The tasks (metrics in evals/klue_metric.py, names as results.json writes them):

    klue-nli   premise/hypothesis -> entailment, neutral, contradiction         accuracy
    klue-sts   a sentence pair -> similarity 0-5 (regression on the real value)  pearson, f1 (binary at 3.0)
    klue-ner   a class per token; the tag of a token's first non-space           entity_f1, char_f1
               character; a predicted tag goes back to every character the token covers
    ynat       a news headline -> one of 7 topics                                macro_f1

Protocols. With --train-file: train on it, score all of --dev-file; "official" when both are KLUE's
own files (the git blob ids `korbert data get klue` pins), else "custom train file"; a train file
holding a scored guid is refused, and texts it shares with dev are counted in results.json. With the dev file alone, "KLUE dev-split": the dev examples in
groups (NLI: a premise and its hypotheses; STS: a pair; NER: a sentence; YNAT: a headline; and any
two examples that share a text are in one group), groups 0, N, 2N, ... scored (--holdout-every N),
the others trained on, so no scored text is trained on.
Each dev-split score comes with a bootstrap 95% interval (scored groups resampled). Dev-split numbers
are not the published dev numbers: those train on KLUE's train files.

Fixed epochs, no model selection (nothing is held out of so few training examples to choose on). Features
are cached like NSMC's (evals/features.py). Writes to --out: results.json (metrics, intervals,
protocol, config, model and tokenizer hash, data sha256s, counts, device, seconds), predictions.jsonl
(one line per scored example: guid and prediction; NER: the predicted tag of every character) and
manifest.json.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, file_record, git_blob_id
from corpus_tools.text import InputError
from evals import features as F
from evals import klue_metric as M
from evals.data import read_klue_ner
from evals.finetune import DROPOUT_HELP, FINETUNE_DROPOUT, Device, TrainSettings, check_dropout, fine_tune, load_model, predict, seed_everything, write_results
from evals.klue_data import KLUE_GIT_BLOBS, NLI_LABELS, YNAT_LABELS, file_name, read_nli, read_sts, read_ynat
from korbert.folders import MODEL_HELP, check_trained_positions, open_folder


@dataclass
class KlueConfig:
    """Fine-tune a model on a KLUE task and score its dev set as KLUE does (the task is the subcommand)."""

    model: str = C.field("", MODEL_HELP + " (required)")
    dev_file: str = C.field("", "the task's KLUE dev file (klue/<task>-v1.1_dev.json, or .tsv for NER; required)")
    train_file: str = C.field("", "the task's KLUE train file: train on it and score all of dev (default: the KLUE dev-split)")
    holdout_every: int = C.field(5, "without --train-file: dev groups 0, N, 2N, ... are scored, the rest trained on")
    out: str = C.field("", "output folder (default: runs/eval-<task>)")
    control: bool = C.field(False, "control run: the model's config with a seeded random initialization, same fine-tuning")
    max_len: int = C.field(128, "maximum tokens per example, special tokens included")
    allow_untrained_positions: bool = C.field(False, "fine-tune on examples longer than a korbert model was pretrained on")
    features: str = C.field("", "feature cache folder (default: features/ beside --out)")
    rebuild_features: bool = C.field(False, "build the features again even when the cache holds them")
    epochs: int = C.field(3, "training epochs")
    max_steps: int = C.field(0, "stop after this many optimizer steps (0 = no limit)")
    batch_size: int = C.field(32, "training batch size")
    lr: float = C.field(5e-5, "peak learning rate (AdamW)")
    warmup_ratio: float = C.field(0.1, "share of the steps with linear warmup (then linear decay to 0)")
    weight_decay: float = C.field(0.01, "AdamW weight decay (not on biases and LayerNorm)")
    dropout: float = C.field(FINETUNE_DROPOUT, DROPOUT_HELP)
    bootstrap: int = C.field(1000, "dev-split: resamples for the bootstrap 95 percent interval (0: none)")
    eval_batch_size: int = C.field(128, "inference batch size")
    seed: int = C.field(42, "seed for the data order, the new head, dropout and the bootstrap")
    device: str = C.field("auto", "auto (CUDA with bf16 when present, else CPU fp32), cpu or cuda", choices=["auto", "cpu", "cuda"])
    threads: int = C.field(0, "CPU threads for torch (0 = torch's default, one per core)")


@dataclass
class Task:
    name: str
    read: Callable
    head: str  # load_model's task
    labels: int
    metrics: tuple[str, ...]
    texts: Callable  # example -> its texts: examples sharing one are one group (dev-split, bootstrap); the train/dev check


TASKS = {
    "klue-nli": Task("klue-nli", read_nli, "cls", len(NLI_LABELS), ("accuracy",), lambda e: (e.a, e.b)),
    "klue-sts": Task("klue-sts", read_sts, "cls", 1, ("pearson", "f1"), lambda e: (e.a, e.b)),
    "klue-ner": Task("klue-ner", read_klue_ner, "token", len(M.NER_TAGS), ("entity_f1", "char_f1"), lambda e: (e.text,)),
    "ynat": Task("ynat", read_ynat, "cls", len(YNAT_LABELS), ("macro_f1",), lambda e: (e.text,)),
}


def _nfc(text: str) -> str:
    import unicodedata

    return unicodedata.normalize("NFC", text)


def groups(examples: list, texts: Callable) -> list[int]:
    """Each example's group number: examples that share a text (NFC) are one group (an NLI premise with its
    hypotheses, a sentence that occurs twice), numbered in order of first appearance."""
    parent = list(range(len(examples)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, e in enumerate(examples):
        for t in texts(e):
            j = first.setdefault(_nfc(t), i)
            a, b = root(i), root(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    number: dict[int, int] = {}
    return [number.setdefault(root(i), len(number)) for i in range(len(examples))]


def split_groups(examples: list, texts: Callable, every: int) -> tuple[list[int], list[int], int]:
    """(train, scored) example indices and the number of groups: groups 0, N, 2N, ... scored."""
    if every < 2:
        raise InputError(f"--holdout-every must be at least 2, got {every}")
    g = groups(examples, texts)
    train = [i for i, x in enumerate(g) if x % every]
    scored = [i for i, x in enumerate(g) if x % every == 0]
    return train, scored, max(g, default=-1) + 1


def protocol_name(task: str, train_file: str, dev_file: str) -> str:
    """"KLUE dev-split" without a train file; "official" when the two files are the task's own train and
    dev files at the pinned commit (by content, whatever their names), else "custom train file"."""
    if not train_file:
        return "KLUE dev-split"
    short = task.removeprefix("klue-")
    pins = tuple(KLUE_GIT_BLOBS[file_name(short, split)] for split in ("train", "dev"))
    return "official" if (git_blob_id(train_file), git_blob_id(dev_file)) == pins else "custom train file"


def check_apart(task: Task, train: list, train_file: str, scored: list) -> int:
    """Refuse a train file holding a scored example (its guid); -> how many train examples share a text
    with a scored one (NFC, identical: KLUE's own train and dev files may repeat a short sentence)."""
    guids = {e.guid for e in scored}
    texts = {_nfc(t) for e in scored for t in task.texts(e)}
    same = next((e for e in train if e.guid in guids), None)
    if same is not None:
        raise InputError(f"{train_file}: {same.guid} is also a scored dev example: pick a train file that is not the dev file")
    return sum(any(_nfc(t) in texts for t in task.texts(e)) for e in train)


# -- scoring -------------------------------------------------------------------------------------


def ner_counts(gold: list[list[str]], pred: list[list[str]]) -> np.ndarray:
    """Per sentence: (tp, fp, fn) of each entity type (strict IOB2), then of each of the 13 character
    tags; shape (sentences, 6 + 13, 3). Summed over any set of sentences they give its two scores."""
    out = np.zeros((len(gold), len(M.NER_TYPES) + len(M.NER_TAGS), 3), dtype=np.int64)
    for s, (g, p) in enumerate(zip(gold, pred)):
        eg, ep = M.entities(g), M.entities(p)
        for k, kind in enumerate(M.NER_TYPES):
            a, b = {e for e in eg if e[0] == kind}, {e for e in ep if e[0] == kind}
            out[s, k] = len(a & b), len(b - a), len(a - b)
        ga, pa = np.asarray(g), np.asarray(p)
        for k, tag in enumerate(M.NER_TAGS, len(M.NER_TYPES)):
            gt, pt = ga == tag, pa == tag
            out[s, k] = (gt & pt).sum(), (pt & ~gt).sum(), (gt & ~pt).sum()
    return out


def ner_scores(counts: np.ndarray) -> dict:
    """entity_f1 and char_f1 (percent) from summed ner_counts: as klue_metric.ner_entity_f1 and ner_char_f1."""
    tp, fp, fn = counts[..., 0], counts[..., 1], counts[..., 2]
    n = len(M.NER_TYPES)
    seen = (tp[:n] + fp[:n] + fn[:n]) > 0
    f1 = np.where(tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 1.0)
    return {"entity_f1": 100.0 * float(f1[:n][seen].mean()) if seen.any() else 0.0, "char_f1": 100.0 * float(f1[n:].mean())}


def _pearson(g, p) -> float | None:
    """Pearson r, or None where it is undefined (every prediction the same: a model that learned nothing)."""
    try:
        return M.pearson(g, p)
    except ValueError:
        return None


def scorer(task: str, gold: list, pred: list) -> Callable[[np.ndarray], dict]:
    """idx (scored examples, with repeats) -> the task's metrics on them."""
    if task == "klue-ner":
        counts = ner_counts(gold, pred)
        return lambda idx: ner_scores(counts[idx].sum(0))
    g, p = np.asarray(gold), np.asarray(pred)
    if task == "klue-sts":
        return lambda idx: {"pearson": _pearson(g[idx], p[idx]), "f1": M.sts_f1(g[idx], p[idx])}
    if task == "klue-nli":
        return lambda idx: {"accuracy": M.accuracy(g[idx], p[idx])}
    return lambda idx: {"macro_f1": M.macro_f1(g[idx], p[idx])}


def bootstrap(score: Callable, groups: list[list[int]], n: int, seed: int) -> tuple[dict, dict]:
    """95% percentile intervals of each metric over `n` resamples of the groups (with replacement), and
    how many resamples each interval rests on (a metric undefined on a resample, e.g. Pearson r of equal
    predictions, is left out of that one, and counted)."""
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {}
    n = n if groups else 0  # (nothing scored: no interval)
    for _ in range(n):
        pick = rng.integers(0, len(groups), len(groups))
        for k, v in score(np.concatenate([groups[i] for i in pick])).items():
            draws.setdefault(k, [])
            if v is not None:
                draws[k].append(v)
    ci = {k: [round(float(np.percentile(v, 2.5)), 2), round(float(np.percentile(v, 97.5)), 2)] for k, v in draws.items() if v}
    return ci, {"resamples": n, "used": {k: len(v) for k, v in draws.items()}}


# -- the run -------------------------------------------------------------------------------------


def _rows(task: str, examples: list) -> dict:
    if task == "klue-ner":
        return {"text": [e.text for e in examples], "tags": [e.tags for e in examples]}
    if task == "ynat":
        return {"a": [e.text for e in examples], "label": [e.label for e in examples]}
    return {"a": [e.a for e in examples], "b": [e.b for e in examples], "label": [e.label for e in examples]}


def main(task_name: str, cfg: KlueConfig) -> dict:
    t_start = time.time()
    task = TASKS[task_name]
    if not cfg.model or not cfg.dev_file:
        raise InputError(f"korbert eval {task_name}: --model and --dev-file are required")
    if cfg.max_len < 3:
        raise InputError(f"--max-len must be at least 3, got {cfg.max_len}")
    check_dropout(cfg.dropout)
    out = Path(cfg.out or f"runs/eval-{task_name}")
    dev = task.read(cfg.dev_file)
    train_all = task.read(cfg.train_file) if cfg.train_file else dev
    protocol = {"name": protocol_name(task_name, cfg.train_file, cfg.dev_file)}
    if cfg.train_file:
        tr_idx, sc_idx = list(range(len(train_all))), list(range(len(dev)))
        shared = check_apart(task, train_all, cfg.train_file, dev)
        protocol.update(train="all of --train-file", scored="all of --dev-file", train_examples_sharing_a_dev_text=shared)
        if shared:
            print(f"{task_name}: {shared:,} train examples share a text with a scored dev example (kept: the files' own split)", file=sys.stderr)
    else:
        tr_idx, sc_idx, n_groups = split_groups(dev, task.texts, cfg.holdout_every)
        if not tr_idx:
            raise InputError(f"{cfg.dev_file}: {n_groups} group(s): nothing left to train on after the held-out split")
        protocol.update(holdout_every=cfg.holdout_every, groups=n_groups, grouped_by={
            "klue-nli": "premise", "klue-sts": "pair", "klue-ner": "sentence", "ynat": "headline"}[task_name])
    device = Device.pick(cfg.device, cfg.threads)
    seed_everything(cfg.seed)
    mf = open_folder(cfg.model, weights=not cfg.control)
    if cfg.max_len > mf.config.max_position_embeddings:
        raise InputError(f"--max-len {cfg.max_len} > the model's max_position_embeddings {mf.config.max_position_embeddings}")
    check_trained_positions(mf, cfg.max_len, cfg.allow_untrained_positions, cfg.control, f"--max-len {mf.manifest.get('trained_seq_len')}")

    t0 = time.time()
    root = cfg.features or F.default_dir(str(out))
    dev_c = F.klue(root, mf, task_name, cfg.dev_file, _rows(task_name, dev), cfg.max_len, cfg.rebuild_features)
    train_c = F.klue(root, mf, task_name, cfg.train_file, _rows(task_name, train_all), cfg.max_len, cfg.rebuild_features) if cfg.train_file else dev_c
    t_feat = time.time() - t0
    tmeta = dev_c.meta["tokenizer"]
    loaded = load_model(mf, task.head, cfg.control, cfg.seed, num_labels=task.labels, dropout=cfg.dropout)
    model = loaded.model
    loaded.info["tokenizer_hash"] = tmeta["fingerprint"]
    label_key = "labels"
    train_feats = train_c.rows(tr_idx)
    if task_name != "klue-ner":
        train_feats = [{**f, "labels": f.pop("label")} for f in train_feats]
    scored_feats = dev_c.rows(sc_idx)
    scored = [dev[i] for i in sc_idx]
    pad = tmeta["pad_token_id"]

    settings = TrainSettings(cfg.epochs, cfg.max_steps, cfg.batch_size, cfg.lr, cfg.warmup_ratio, cfg.weight_decay, cfg.seed)
    training = fine_tune(model, train_feats, (label_key,), settings, device, None, desc=task_name, pad_id=pad)

    def outputs(res, batch):
        logits = res.logits.float()
        return logits[:, 0] if task_name == "klue-sts" else logits.argmax(-1)

    def fp32(model, batch):  # STS scores in fp32 under bf16 too: bf16 rounds nearby scores to one value
        return model(**batch)

    raw = predict(model, scored_feats, cfg.eval_batch_size, device, outputs, "dev", pad, fp32 if task_name == "klue-sts" else None)
    if task_name == "klue-ner":
        pred_chars = []
        for e, f, r in zip(scored, scored_feats, raw):
            tags = [M.NER_TAGS[int(t)] for t in r[: len(f["offsets"])]]  # (special tokens' offsets cover no character)
            pred_chars.append(M.char_tags(e.text, tags, [tuple(o) for o in f["offsets"]]))
        keep = [[i for i, c in enumerate(e.text) if not c.isspace()] for e in scored]  # KLUE scores the non-space characters
        gold = [[e.tags[i] for i in k] for e, k in zip(scored, keep)]
        pred = [[p[i] for i in k] for p, k in zip(pred_chars, keep)]
        lines = [{"guid": e.guid, "tags": p} for e, p in zip(scored, pred_chars)]
    elif task_name == "klue-sts":
        gold, pred = [e.label for e in scored], [float(x) for x in raw]
        lines = [{"guid": e.guid, "score": round(p, 6), "label": e.label} for e, p in zip(scored, pred)]
    else:
        names = NLI_LABELS if task_name == "klue-nli" else YNAT_LABELS
        gold, pred = [e.label for e in scored], [int(x) for x in raw]
        lines = [{"guid": e.guid, "prediction": names[p], "label": names[e.label]} for e, p in zip(scored, pred)]
    score = scorer(task_name, gold, pred)
    metrics = {k: None if v is None else round(v, 4) for k, v in score(np.arange(len(scored))).items()}
    intervals, resampled = {}, {}
    if not cfg.train_file and cfg.bootstrap > 0:
        by_group: dict = {}
        for i, g in enumerate(groups(scored, task.texts)):
            by_group.setdefault(g, []).append(i)
        intervals, resampled = bootstrap(score, list(by_group.values()), cfg.bootstrap, cfg.seed)

    atomic_write_bytes(out / "predictions.jsonl", "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode("utf-8"))
    data = {"dev": file_record(cfg.dev_file), **({"train": file_record(cfg.train_file)} if cfg.train_file else {})}
    results = write_results(out, task_name, {
        "metrics": metrics,
        "ci95": intervals,
        "bootstrap": resampled,
        "protocol": protocol,
        "model": loaded.info,
        "tokenizer_hash": loaded.info["tokenizer_hash"],
        "control": cfg.control,
        "data": data,
        "n": {"train": len(train_feats), "scored": len(scored)},
        "features": {"folders": sorted({str(dev_c.folder), str(train_c.folder)}), "built": dev_c.built + (train_c.built if cfg.train_file else 0)},
        "training": training,
        "examples_per_s": training["examples_per_s"],
        "device": device.describe(),
        "seconds": {"features": round(t_feat, 2), "train": training["train_seconds"], "total": round(time.time() - t_start, 2)},
        "config": C.to_dict(cfg),
    }, ["predictions.jsonl"])
    what = "control (random init)" if cfg.control else Path(cfg.model).name
    shown = ", ".join(f"{k} {'undefined (one prediction for all)' if v is None else f'{v:.2f}'}"
                      + (f" [{intervals[k][0]:.2f}, {intervals[k][1]:.2f}]" if k in intervals else "") for k, v in metrics.items())
    print(f"{task_name} [{what}] ({protocol['name']}): {shown} on {len(scored):,} scored examples; "
          f"{len(train_feats):,} trained on, {training['steps']} steps -> {out}")
    return results


def cli(task: str, argv: list[str] | None = None) -> dict:
    return main(task, C.parse(KlueConfig, argv, prog=f"korbert eval {task}"))
