"""KorQuAD 1.0: fine-tune a model for extractive QA and score EM/F1 as the official scorer does.

    korbert eval korquad --model runs/pretrain/final --dev-file $KORBERT_DATA/korquad/KorQuAD_v1.0_dev.json

The model is an exported korbert folder or any local transformers encoder folder whose (fast)
tokenizer gives character offsets.

Protocol. Only the dev file is available here, so by default the dev articles are split in file
order: every fifth article (indices 0, 5, 10, ...) is held out and scored, the others are trained
on (official dev file: 28 articles / 1,287 questions scored, 112 / 4,487 trained on). With
`--train-file`: train on the train file, score all of dev; the protocol is "official" only when
both files are KorQuAD 1.0's own (the git blob ids `korbert data get` pins), else "custom train
file". A train file holding a scored question (its id, or its paragraph's identical context) is
refused.

Features (evals/features.py, cached in --features, default `features/` beside --out): the
windows of the tokenizer's own sliding window (`truncation="only_second", max_length=384,
stride=128`), each context tokenized once; a window's answer start/end tokens are the context
tokens that contain the answer's first and last characters (from the character offsets), and a
window that does not hold the whole answer points both at the first token (index 0). Questions
longer than `--max-query-len` tokens are cut (by offsets). `prepare_features` below is the
tokenizer's own overflow call, kept as the reference the cache is tested against.

Decoding. Per question, over all its windows: the `--n-best` best start and end logits (fp32,
also under bf16), spans inside the context with start <= end and at most `--max-answer-len`
tokens, scored by start + end logit; the answer text is sliced from the original context by the
offsets (context[start_char:end_char]), never re-joined from tokens.

Writes to --out: predictions.json ({question id: answer text}, the official format),
nbest_predictions.json, results.json (EM/F1 via evals.korquad_metric, the resolved config,
protocol, model + tokenizer hash, data sha256s, counts, device, seconds, examples/s) and
manifest.json.
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from corpus_tools import SAMPLE_DATA
from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_json, file_record
from corpus_tools.text import InputError
from evals import korquad_metric
from evals.data import QAExample, check_train_apart, korquad_protocol, read_squad, split_articles, squad_examples
from evals import features as F
from evals.finetune import DROPOUT_HELP, FINETUNE_DROPOUT, Device, TrainSettings, check_dropout, fine_tune, load_model, predict, qa_forward, seed_everything, write_results
from korbert.folders import MODEL_HELP, check_trained_positions, open_folder
from korbert.table import print_table, result_row



@dataclass
class KorquadConfig:
    """Fine-tune a korbert model on KorQuAD 1.0 and report EM / F1 (official KorQuAD scorer)."""

    model: str = C.field("", MODEL_HELP + " (required)")
    dev_file: str = C.field(str(SAMPLE_DATA / "korquad_dev.json"), "KorQuAD 1.0 dev JSON (SQuAD v1 format)")
    train_file: str = C.field("", "KorQuAD 1.0 train JSON: train on it and score all of dev (the official protocol when both are "
                              "KorQuAD's own files; default: split dev by article)")
    holdout_every: int = C.field(5, "without --train-file: articles 0, N, 2N, ... of dev are scored, the rest trained on")
    out: str = C.field("runs/eval-korquad", "output folder")
    control: bool = C.field(False, "control run: the model's config with a seeded random initialization, same fine-tuning")
    max_len: int = C.field(384, "maximum tokens per window ([CLS] question [SEP] context [SEP])")
    stride: int = C.field(128, "tokens of overlap between consecutive windows of a long context")
    max_query_len: int = C.field(64, "questions longer than this many tokens are cut")
    allow_untrained_positions: bool = C.field(False, "fine-tune windows longer than a korbert model was pretrained on (its manifest's trained_seq_len)")
    max_answer_len: int = C.field(30, "longest answer span considered, in tokens")
    n_best: int = C.field(20, "start/end candidates per window, and answers kept in nbest_predictions.json")
    epochs: int = C.field(2, "training epochs")
    epoch_window: str = C.field(
        "", "count --epochs in the windows of another shape, MAX_LEN/STRIDE/MAX_QUERY_LEN (e.g. 128/32/40): a run at 384 then "
        "takes the optimizer steps a run at 128 takes, where its own windows (fewer, longer) would give fewer (empty: its own)",
    )
    max_steps: int = C.field(0, "stop after this many optimizer steps (0 = no limit)")
    batch_size: int = C.field(16, "training batch size (windows)")
    lr: float = C.field(5e-5, "peak learning rate (AdamW)")
    warmup_ratio: float = C.field(0.1, "share of the steps with linear warmup (then linear decay to 0)")
    weight_decay: float = C.field(0.01, "AdamW weight decay (not on biases and LayerNorm)")
    dropout: float = C.field(FINETUNE_DROPOUT, DROPOUT_HELP)
    max_train_examples: int = C.field(0, "train on at most this many questions (a seeded sample; 0 = all)")
    max_eval_examples: int = C.field(0, "score only the first N scored questions, for quick runs (0 = all; recorded)")
    eval_batch_size: int = C.field(64, "inference batch size (windows)")
    seed: int = C.field(42, "seed for the sample, the data order, the new head and dropout")
    device: str = C.field("auto", "auto (CUDA with bf16 when present, else CPU fp32), cpu or cuda", choices=["auto", "cpu", "cuda"])
    threads: int = C.field(0, "CPU threads for torch (0 = torch's default, one per core)")
    features: str = C.field("", "feature cache folder, shared by runs with the same tokenizer, data and window settings (default: features/ beside --out)")
    rebuild_features: bool = C.field(False, "build the features again even when the cache holds them")


# -- features ------------------------------------------------------------------------------------


def cut_questions(tok, questions: list[str], max_query_len: int) -> list[str]:
    """Strip leading whitespace; cut a question after its `max_query_len`-th token (by offsets)."""
    questions = [q.lstrip() for q in questions]
    enc = tok(questions, add_special_tokens=False, return_offsets_mapping=True)
    return [q if len(offs) <= max_query_len else q[: offs[max_query_len - 1][1]] for q, offs in zip(questions, enc["offset_mapping"])]


def answer_chars(ex: QAExample) -> tuple[int, int]:
    """[start, end) of the first answer in the context, surrounding whitespace left out."""
    return F.answer_chars(ex.context, ex.answers)


def prepare_features(tok, examples: list[QAExample], max_len: int, stride: int, max_query_len: int,
                     train: bool, chunk: int = 256, desc: str = "features") -> list[dict]:
    """The reference path (the tokenizer's own overflow call, one call per chunk of questions):
    windows of every example: input_ids, token_type_ids, example (index), offsets (context tokens
    only, None elsewhere) and, with train=True, start_positions / end_positions."""
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
                    f["start_positions"], f["end_positions"] = F.answer_tokens(f["offsets"], *answer_chars(part[sample]))
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


def parse_window(spec: str, epochs: int) -> tuple[int, int, int] | None:
    """--epoch-window MAX_LEN/STRIDE/MAX_QUERY_LEN -> (max_len, stride, max_query_len); "" -> None."""
    if not spec:
        return None
    parts = spec.split("/")
    if len(parts) != 3 or not all(x.isdigit() and int(x) > 0 for x in parts):
        raise InputError(f"--epoch-window {spec}: expected MAX_LEN/STRIDE/MAX_QUERY_LEN, e.g. 128/32/40")
    if epochs < 1:
        raise InputError(f"--epoch-window {spec} counts --epochs: set --epochs >= 1")
    return int(parts[0]), int(parts[1]), int(parts[2])


def scoring_dataset(examples: list[QAExample]) -> list[dict]:
    """The questions scored, as a SQuAD `data` list for korquad_metric.evaluate."""
    return [{"paragraphs": [{"qas": [{"id": e.id, "answers": e.answers} for e in examples]}]}]


def main(cfg: KorquadConfig) -> dict:
    t_start = time.time()
    dev = read_squad(cfg.dev_file)
    dev_all = squad_examples(dev, cfg.dev_file)
    if cfg.train_file:
        train_data = read_squad(cfg.train_file)
        train_ex = squad_examples(train_data, cfg.train_file, need_answer=True)
        train_all, train_path = squad_examples(train_data, cfg.train_file), cfg.train_file
        eval_ex = dev_all
        protocol = {"name": korquad_protocol(cfg.train_file, cfg.dev_file), "train": "all of --train-file", "scored": "all of --dev-file"}
    else:
        tr_articles, held = split_articles(len(dev), cfg.holdout_every)
        if not tr_articles:
            raise InputError(f"{cfg.dev_file}: {len(dev)} article(s): nothing left to train on after the held-out split")
        train_ex = squad_examples(dev, cfg.dev_file, tr_articles, need_answer=True)
        train_all, train_path = dev_all, cfg.dev_file
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
    if cfg.train_file and protocol["name"] != "official":  # the pinned pair is the benchmark's own split, as published
        check_train_apart(train_data, cfg.train_file, eval_ex, cfg.dev_file)
    protocol.update(train_questions=len(train_ex), scored_questions=len(eval_ex))

    check_dropout(cfg.dropout)
    other_window = parse_window(cfg.epoch_window, cfg.epochs)
    device = Device.pick(cfg.device, cfg.threads)
    seed_everything(cfg.seed)
    mf = open_folder(cfg.model, weights=not cfg.control)
    if cfg.max_len > mf.config.max_position_embeddings:
        raise InputError(f"--max-len {cfg.max_len} > the model's max_position_embeddings {mf.config.max_position_embeddings}")
    check_trained_positions(mf, cfg.max_len, cfg.allow_untrained_positions, cfg.control, "--max-len 128 --stride 32 --max-query-len 40")

    t0 = time.time()
    root = cfg.features or F.default_dir(cfg.out)
    window = (cfg.max_len, cfg.stride, cfg.max_query_len, cfg.rebuild_features)
    train_c = F.korquad(root, mf, train_path, train_all, *window)
    eval_c = train_c if not cfg.train_file else F.korquad(root, mf, cfg.dev_file, dev_all, *window)
    t_feat = time.time() - t0
    tmeta = train_c.meta["tokenizer"]
    if mf.config.vocab_size < tmeta["size"]:
        raise InputError(f"{mf.where}: config.json vocab_size {mf.config.vocab_size} < the tokenizer's {tmeta['size']} tokens")
    loaded = load_model(mf, "qa", cfg.control, cfg.seed, dropout=cfg.dropout)
    model = loaded.model
    loaded.info["tokenizer_hash"] = tmeta["fingerprint"]

    def select_windows(cached, all_ex, chosen, train: bool) -> list[dict]:
        """The windows of the `chosen` questions, in their order, `example` renumbered to index `chosen`."""
        pos = {e.id: i for i, e in enumerate(all_ex)}
        by_q: dict[int, list[int]] = {}
        for w, q in enumerate(cached.columns["example"]):
            by_q.setdefault(q, []).append(w)
        keep = ("input_ids", "token_type_ids", "offsets") + (("start_positions", "end_positions") if train else ())
        out = []
        for i, e in enumerate(chosen):
            for w in by_q.get(pos[e.id], []):
                out.append({**{k: cached.columns[k][w] for k in keep}, "example": i})
        return out

    train_feats = select_windows(train_c, train_all, train_ex, True)
    eval_feats = select_windows(eval_c, dev_all, eval_ex, False)
    impossible = sum(f["start_positions"] == 0 for f in train_feats)
    pad = tmeta["pad_token_id"]

    settings = TrainSettings(cfg.epochs, cfg.max_steps, cfg.batch_size, cfg.lr, cfg.warmup_ratio, cfg.weight_decay, cfg.seed)
    budget = None
    if other_window:  # epochs of the other shape's windows of the same questions, as a step budget
        other = F.korquad(root, mf, train_path, train_all, *other_window, cfg.rebuild_features)
        n = len(select_windows(other, train_all, train_ex, True))
        steps = cfg.epochs * math.ceil(n / cfg.batch_size)
        steps = min(steps, cfg.max_steps) if cfg.max_steps > 0 else steps
        budget = {"epochs": cfg.epochs, "epoch_window": cfg.epoch_window, "windows_per_epoch": n, "max_steps": steps}
        settings = replace(settings, epochs=0, max_steps=steps)
    training = fine_tune(model, train_feats, ("start_positions", "end_positions"), settings, device, None, desc="korquad", pad_id=pad)
    if budget:
        training["budget"] = budget

    logits = predict(
        model, eval_feats, cfg.eval_batch_size, device,
        lambda res, batch: (res.start_logits.float(), res.end_logits.float()),
        desc="predict", pad_id=pad, forward=qa_forward(device),
    )
    logits = [(s[: len(f["input_ids"])], e[: len(f["input_ids"])]) for (s, e), f in zip(logits, eval_feats)]
    preds, nbest = postprocess(eval_ex, eval_feats, logits, cfg.n_best, cfg.max_answer_len)
    scores = korquad_metric.evaluate(scoring_dataset(eval_ex), preds, quiet=True)

    out = Path(cfg.out)
    atomic_write_json(out / "predictions.json", preds)
    atomic_write_json(out / "nbest_predictions.json", nbest)
    data = {"dev": file_record(cfg.dev_file)}
    if cfg.train_file:
        data["train"] = file_record(cfg.train_file)
    folders = sorted({str(train_c.folder), str(eval_c.folder)})
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
        "features": {"folders": folders, "built": int(train_c.built) + int(eval_c is not train_c and eval_c.built),
                     "reused": int(not train_c.built) + int(eval_c is not train_c and not eval_c.built)},
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
    print(f"features: {'built' if results['features']['built'] else 'read from the cache'} in {t_feat:.1f}s "
          f"({train_c.folder.parent}); fine-tuning throughput: {training['examples_per_s']} examples/s (windows) "
          f"on {device.name} ({device.precision})")
    print_table([result_row(cfg.model, cfg.control, "given folder", korquad=results)])
    return results


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(KorquadConfig, argv, prog="korbert eval korquad"))
