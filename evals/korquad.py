"""KorQuAD 1.0: fine-tune a korbert model for extractive QA and score EM/F1 as the official scorer does.

    korbert eval korquad --model runs/pretrain/final --dev-file ../shared/data/korquad/KorQuAD_v1.0_dev.json

Protocol. Only the dev file is available here, so by default the dev articles are split in file
order: every fifth article (indices 0, 5, 10, ...) is held out and scored, the others are trained
on (official dev file: 28 articles / 1,287 questions scored, 112 / 4,487 trained on). With
`--train-file` the official protocol applies: train on the train file, score all of dev.

Features. The tokenizer's own sliding window: `tok(questions, contexts, truncation="only_second",
max_length=384, stride=128, return_overflowing_tokens=True, return_offsets_mapping=True)`; a
window's answer start/end tokens are the context tokens that contain the answer's first and last
characters (from the character offsets), and a window that does not hold the whole answer points
both at [CLS] (index 0). Questions longer than `--max-query-len` tokens are cut (by offsets).

Decoding. Per question, over all its windows: the `--n-best` best start and end logits, spans
inside the context with start <= end and at most `--max-answer-len` tokens, scored by
start + end logit; the answer text is sliced from the original context by the offsets
(context[start_char:end_char]), never re-joined from tokens.

Writes to --out: predictions.json ({question id: answer text}, the official format),
nbest_predictions.json, results.json (EM/F1 via evals.korquad_metric, the resolved config,
protocol, model + tokenizer hash, data sha256s, counts, device, seconds, examples/s) and
manifest.json.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_json, file_record
from corpus_tools.text import InputError
from evals import korquad_metric
from evals.data import QAExample, read_squad, split_articles, squad_examples
from evals.finetune import (
    MODEL_HELP, Device, TrainSettings, fine_tune, load_model, predict, seed_everything,
    write_results,
)

SAMPLE = Path(__file__).resolve().parent.parent / "korbert" / "sample_data"


@dataclass
class KorquadConfig:
    """Fine-tune a korbert model on KorQuAD 1.0 and report EM / F1 (official KorQuAD scorer)."""

    model: str = C.field("", MODEL_HELP + " (required)")
    dev_file: str = C.field(str(SAMPLE / "korquad_dev.json"), "KorQuAD 1.0 dev JSON (SQuAD v1 format)")
    train_file: str = C.field("", "official train JSON: train on it and score all of dev (default: split dev by article)")
    holdout_every: int = C.field(5, "without --train-file: articles 0, N, 2N, ... of dev are scored, the rest trained on")
    out: str = C.field("runs/eval-korquad", "output folder")
    control: bool = C.field(False, "control run: the model's config with a seeded random initialization, same fine-tuning")
    max_len: int = C.field(384, "maximum tokens per window ([CLS] question [SEP] context [SEP])")
    stride: int = C.field(128, "tokens of overlap between consecutive windows of a long context")
    max_query_len: int = C.field(64, "questions longer than this many tokens are cut")
    max_answer_len: int = C.field(30, "longest answer span considered, in tokens")
    n_best: int = C.field(20, "start/end candidates per window, and answers kept in nbest_predictions.json")
    epochs: int = C.field(2, "training epochs")
    max_steps: int = C.field(0, "stop after this many optimizer steps (0 = no limit)")
    batch_size: int = C.field(16, "training batch size (windows)")
    lr: float = C.field(5e-5, "peak learning rate (AdamW)")
    warmup_ratio: float = C.field(0.1, "share of the steps with linear warmup (then linear decay to 0)")
    weight_decay: float = C.field(0.01, "AdamW weight decay (not on biases and LayerNorm)")
    max_train_examples: int = C.field(0, "train on at most this many questions (a seeded sample; 0 = all)")
    max_eval_examples: int = C.field(0, "score only the first N scored questions, for quick runs (0 = all; recorded)")
    eval_batch_size: int = C.field(64, "inference batch size (windows)")
    seed: int = C.field(42, "seed for the sample, the data order, the new head and dropout")
    device: str = C.field("auto", "auto (CUDA with bf16 when present, else CPU fp32), cpu or cuda", choices=["auto", "cpu", "cuda"])
    threads: int = C.field(0, "CPU threads for torch (0 = torch's default, one per core)")


# -- features ------------------------------------------------------------------------------------


def cut_questions(tok, questions: list[str], max_query_len: int) -> list[str]:
    """Strip leading whitespace; cut a question after its `max_query_len`-th token (by offsets)."""
    questions = [q.lstrip() for q in questions]
    enc = tok(questions, add_special_tokens=False, return_offsets_mapping=True)
    return [q if len(offs) <= max_query_len else q[: offs[max_query_len - 1][1]] for q, offs in zip(questions, enc["offset_mapping"])]


def answer_chars(ex: QAExample) -> tuple[int, int]:
    """[start, end) of the first answer in the context, surrounding whitespace left out (a few
    official answers end with a space, which no token covers)."""
    a = ex.answers[0]
    start, end = a["answer_start"], a["answer_start"] + len(a["text"])
    while end > start + 1 and ex.context[end - 1].isspace():
        end -= 1
    while start < end - 1 and ex.context[start].isspace():
        start += 1
    return start, end


def answer_tokens(offsets: list, seq: list, start_char: int, end_char: int) -> tuple[int, int]:
    """(start, end) token indices of the answer [start_char, end_char) in one window: the context
    tokens holding its first and last characters; (0, 0) = [CLS] when the window does not hold
    the whole answer."""
    ctx = [k for k, s in enumerate(seq) if s == 1]
    if not ctx or offsets[ctx[0]][0] > start_char or offsets[ctx[-1]][1] < end_char:
        return 0, 0
    s = next(k for k in ctx if offsets[k][1] > start_char)
    e = next(k for k in reversed(ctx) if offsets[k][0] < end_char)
    return s, e


def prepare_features(tok, examples: list[QAExample], max_len: int, stride: int, max_query_len: int,
                     train: bool, chunk: int = 256, desc: str = "features") -> list[dict]:
    """Windows of every example: input_ids, token_type_ids, example (index), offsets (context
    tokens only, None elsewhere) and, with train=True, start_positions / end_positions."""
    from tqdm import tqdm

    if max_len - max_query_len - 3 <= stride:
        raise InputError(f"--max-len {max_len} leaves no room: it must exceed --max-query-len + 3 + --stride ({max_query_len + 3 + stride})")
    feats: list[dict] = []
    with tqdm(total=len(examples), desc=desc, unit="q", disable=None, file=sys.stderr, leave=False) as bar:
        for c in range(0, len(examples), chunk):
            part = examples[c : c + chunk]
            questions = cut_questions(tok, [e.question for e in part], max_query_len)
            enc = tok(
                questions, [e.context for e in part], truncation="only_second", max_length=max_len, stride=stride,
                return_overflowing_tokens=True, return_offsets_mapping=True, padding=False,
            )
            for i, sample in enumerate(enc["overflow_to_sample_mapping"]):
                seq = enc.sequence_ids(i)
                offsets = enc["offset_mapping"][i]
                f = {
                    "input_ids": enc["input_ids"][i],
                    "token_type_ids": enc["token_type_ids"][i],
                    "example": c + sample,
                    "offsets": [tuple(o) if s == 1 else None for o, s in zip(offsets, seq)],
                }
                if train:
                    f["start_positions"], f["end_positions"] = answer_tokens(offsets, seq, *answer_chars(part[sample]))
                feats.append(f)
            bar.update(len(part))
    return feats


# -- decoding ------------------------------------------------------------------------------------


def _candidates(context: str, fi: int, offs: list, logits, top: int | None, max_answer_len: int, cands: dict) -> None:
    """Add the valid spans of one window to `cands` ({(start_char, end_char): best candidate})."""
    start, end = (np.asarray(x, dtype=np.float64)[: len(offs)] for x in logits)
    starts = np.argsort(-start, kind="stable")[:top] if top else range(len(offs))
    ends = np.argsort(-end, kind="stable")[:top] if top else None
    for s in starts:
        if offs[s] is None:
            continue
        for e in ends if top else range(s, min(len(offs), s + max_answer_len)):
            if offs[e] is None or e < s or e - s + 1 > max_answer_len:
                continue
            a, b = offs[s][0], offs[e][1]
            while a < b and context[a].isspace():  # a lone "▁" token spans whitespace
                a += 1
            while b > a and context[b - 1].isspace():
                b -= 1
            if a == b:
                continue
            score = float(start[s] + end[e])
            if (a, b) not in cands or score > cands[(a, b)]["score"]:
                cands[(a, b)] = {"score": score, "start_logit": float(start[s]), "end_logit": float(end[e]),
                                 "feature": fi, "start_token": int(s), "end_token": int(e)}


def postprocess(examples: list[QAExample], feats: list[dict], logits: list[tuple[np.ndarray, np.ndarray]],
                n_best: int = 20, max_answer_len: int = 30) -> tuple[dict, dict]:
    """-> ({id: answer text}, {id: [n-best answers]}). logits[i] = (start, end) of feats[i]."""
    by_example: dict[int, list[int]] = {}
    for i, f in enumerate(feats):
        by_example.setdefault(f["example"], []).append(i)
    preds, nbest = {}, {}
    for ei, ex in enumerate(examples):
        cands: dict[tuple[int, int], dict] = {}
        for top in (n_best, None):  # None: no valid pair among the top n_best; try every pair
            for fi in by_example.get(ei, []):
                _candidates(ex.context, fi, feats[fi]["offsets"], logits[fi], top, max_answer_len, cands)
            if cands:
                break
        ranked = sorted(cands.items(), key=lambda kv: -kv[1]["score"])[:n_best]
        scores = np.array([c["score"] for _, c in ranked])
        probs = np.exp(scores - scores.max()) if ranked else scores
        rows = [
            {"text": ex.context[a:b], "probability": float(pr / probs.sum()), "start_char": a, "end_char": b, **c}
            for ((a, b), c), pr in zip(ranked, probs)
        ]
        preds[ex.id] = rows[0]["text"] if rows else ""
        nbest[ex.id] = rows or [{"text": "", "probability": 1.0, "start_char": 0, "end_char": 0}]
    return preds, nbest


# -- the run -------------------------------------------------------------------------------------


def scoring_dataset(examples: list[QAExample]) -> list[dict]:
    """The questions scored, as a SQuAD `data` list for korquad_metric.evaluate."""
    return [{"paragraphs": [{"qas": [{"id": e.id, "answers": e.answers} for e in examples]}]}]


def main(cfg: KorquadConfig) -> dict:
    t_start = time.time()
    dev = read_squad(cfg.dev_file)
    if cfg.train_file:
        train_data = read_squad(cfg.train_file)
        train_ex = squad_examples(train_data, cfg.train_file, need_answer=True)
        eval_ex = squad_examples(dev, cfg.dev_file)
        protocol = {"name": "official", "train": "all of --train-file", "scored": "all of --dev-file"}
    else:
        tr_articles, held = split_articles(len(dev), cfg.holdout_every)
        if not tr_articles:
            raise InputError(f"{cfg.dev_file}: {len(dev)} article(s): nothing left to train on after the held-out split")
        train_ex = squad_examples(dev, cfg.dev_file, tr_articles, need_answer=True)
        eval_ex = squad_examples(dev, cfg.dev_file, held)
        protocol = {
            "name": "dev-split", "holdout_every": cfg.holdout_every,
            "scored_articles": held, "train_articles": len(tr_articles),
        }
    if cfg.max_train_examples > 0 and cfg.max_train_examples < len(train_ex):
        pick = sorted(random.Random(cfg.seed).sample(range(len(train_ex)), cfg.max_train_examples))
        train_ex = [train_ex[i] for i in pick]
    if cfg.max_eval_examples > 0:
        eval_ex = eval_ex[: cfg.max_eval_examples]
    protocol.update(train_questions=len(train_ex), scored_questions=len(eval_ex))

    device = Device.pick(cfg.device, cfg.threads)
    seed_everything(cfg.seed)
    loaded = load_model(cfg.model, "qa", cfg.control, cfg.seed)
    tok, model = loaded.tok, loaded.model
    if cfg.max_len > model.config.max_position_embeddings:
        raise InputError(f"--max-len {cfg.max_len} > the model's max_position_embeddings {model.config.max_position_embeddings}")

    t0 = time.time()
    train_feats = prepare_features(tok, train_ex, cfg.max_len, cfg.stride, cfg.max_query_len, True, desc="features train")
    eval_feats = prepare_features(tok, eval_ex, cfg.max_len, cfg.stride, cfg.max_query_len, False, desc="features eval")
    t_feat = time.time() - t0
    impossible = sum(f["start_positions"] == 0 for f in train_feats)

    settings = TrainSettings(cfg.epochs, cfg.max_steps, cfg.batch_size, cfg.lr, cfg.warmup_ratio, cfg.weight_decay, cfg.seed)
    training = fine_tune(model, train_feats, ("start_positions", "end_positions"), settings, device, None, desc="korquad")

    logits = predict(
        model, eval_feats, cfg.eval_batch_size, device,
        lambda res, r, f: (res.start_logits[r, : len(f["input_ids"])].float().cpu().numpy(),
                           res.end_logits[r, : len(f["input_ids"])].float().cpu().numpy()),
        desc="predict",
    )
    preds, nbest = postprocess(eval_ex, eval_feats, logits, cfg.n_best, cfg.max_answer_len)
    scores = korquad_metric.evaluate(scoring_dataset(eval_ex), preds, quiet=True)

    out = Path(cfg.out)
    atomic_write_json(out / "predictions.json", preds)
    atomic_write_json(out / "nbest_predictions.json", nbest)
    data = {"dev": file_record(cfg.dev_file)}
    if cfg.train_file:
        data["train"] = file_record(cfg.train_file)
    results = write_results(out, "korquad", {
        "metrics": {"exact_match": round(scores["exact_match"], 4), "f1": round(scores["f1"], 4)},
        "metric": "official KorQuAD 1.0 scorer (character-level F1), evals/korquad_metric.py",
        "protocol": protocol,
        "model": loaded.info,
        "tokenizer_hash": loaded.info["tokenizer_hash"],
        "control": cfg.control,
        "data": data,
        "n": {"train_questions": len(train_ex), "train_windows": len(train_feats), "train_windows_without_answer": impossible,
              "scored_questions": len(eval_ex), "eval_windows": len(eval_feats)},
        "full_eval": cfg.max_eval_examples <= 0,
        "training": training,
        "examples_per_s": training["examples_per_s"],
        "examples_are": "windows (features)",
        "device": device.describe(),
        "seconds": {"features": round(t_feat, 2), "train": training["train_seconds"], "total": round(time.time() - t_start, 2)},
        "config": C.to_dict(cfg),
    }, ["predictions.json", "nbest_predictions.json"])
    what = "control (random init)" if cfg.control else Path(cfg.model).name
    partial = "" if cfg.max_eval_examples <= 0 else " (--max-eval-examples: a subset)"
    print(
        f"korquad [{what}]: EM {scores['exact_match']:.2f}  F1 {scores['f1']:.2f} on {len(eval_ex):,} questions{partial} "
        f"({protocol['name']} protocol); trained on {len(train_ex):,} questions = {len(train_feats):,} windows, "
        f"{training['steps']} steps -> {out}"
    )
    print(f"fine-tuning throughput: {training['examples_per_s']} examples/s (windows) on {device.name} ({device.precision})")
    return results


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(KorquadConfig, argv, prog="korbert eval korquad"))
