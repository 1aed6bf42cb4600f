"""Are a model's long positions as good as its first 128? MLM accuracy by position, against a short-context reference.

    korbert eval positions-texts --corpus $KORBERT_DATA/corpus/kowiki.jsonl.gz --tokenizer runs/cpu/vocab --out texts.jsonl
    korbert eval positions --model runs/cpu/pretrain/final --texts texts.jsonl --out runs/positions

Texts (`positions-texts`). Held-out documents of at least --long-len tokens: from a {"id", "text"}
JSON-lines corpus, every --every-th document after its first --skip-first (the `cpu` preset pretrains
on kowiki's first 8,000 articles: the default skips them), in file order, until they hold --windows
full windows. Each line written keeps the document's id, index, token count and sha256, so the runs
before and after a change read the same texts (`positions` refuses a text whose sha256 changed).

The measure (`positions`). Each text is tokenized whole and cut into consecutive windows of
--long-len - 2 content tokens (a shorter tail is left out). In each window, the first 4 x 126 content
tokens are scored (with 512 and 128: what 128-token windows [CLS] + 126 + [SEP] tile; the last 6
are context only). Masking is mask-only: 15% of the scored tokens, drawn once per window from --seed
and the text's id, are replaced by [MASK] (no 80/10/10: a kept or random token would score copying,
not context). The same masked input is scored two ways:
  1. as one window [CLS] content [SEP] of --long-len tokens (content token j at position j + 1);
  2. cut into consecutive windows [CLS] 126 tokens [SEP] of --short-len: the short-context reference.
Both are grouped by the token's position in the long window, in blocks of --short-len: 0-127, 128-255,
256-383, 384-511 (the scored tokens sit at positions 1-504, so the last block scores 384-504). Long
positions that work score at least as well with more context as the reference does with less. The
first block holds nearly the same positions in both: all but its last token (long position 127, the
first of the second short window).

Writes --out/results.json: mlm_acc_by_position and mlm_acc_128_reference (accuracy per bucket),
their gap and its paired standard error (gap_se: over the same tokens, from those right in one of the
two alone, right_in_one_only), masked_tokens per bucket, the windows and texts (file sha256, ids), the seed, the model folder.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, file_record
from corpus_tools.text import InputError

BUCKETS = ("0-127", "128-255", "256-383", "384-511")


@dataclass
class Specials:
    cls: int
    sep: int
    mask: int
    pad: int


@dataclass
class PositionsConfig:
    """MLM accuracy of a model by position bucket in long windows, against the same masked tokens in 128-token windows."""

    model: str = C.field("", "a model folder with an MLM head (a korbert final/, or a transformers BERT) (required)")
    texts: str = C.field("", "JSON lines {\"id\", \"text\"[, \"sha256\"]} (`korbert eval positions-texts` writes one) (required)")
    out: str = C.field("runs/eval-positions", "output folder")
    seed: int = C.field(0, "seed of the masks (drawn once per window from it and the text's id)")
    mask_prob: float = C.field(0.15, "share of the scored tokens replaced by [MASK]")
    long_len: int = C.field(512, "tokens per long window ([CLS] + content + [SEP])")
    short_len: int = C.field(128, "tokens per reference window; --long-len must be a multiple of it, at least 2 x")
    min_per_bucket: int = C.field(20000, "refuse (before scoring) when a bucket would hold fewer masked tokens than this")
    batch_size: int = C.field(8, "long windows per forward pass (4x as many short ones)")
    device: str = C.field("auto", "auto (cuda if available), cpu or cuda", choices=["auto", "cpu", "cuda"])
    threads: int = C.field(0, "CPU threads for torch (0: torch's default)")


@dataclass
class TextsConfig:
    """Pick held-out documents of at least --long-len tokens from a corpus file, recorded by id and sha256."""

    corpus: str = C.field("", "JSON lines (.jsonl or .jsonl.gz) with \"id\" and \"text\" (e.g. the data folder's corpus/kowiki.jsonl.gz) (required)")
    tokenizer: str = C.field("", "the tokenizer's folder (a model folder or a `korbert vocab` output) (required)")
    out: str = C.field("runs/positions-texts.jsonl", "the texts file to write")
    skip_first: int = C.field(8000, "leave out the corpus's first N documents (what pretraining read: the cpu preset's kowiki@8000)")
    every: int = C.field(10, "take every N-th document after them (spread over the file)")
    windows: int = C.field(1300, "stop once the texts hold this many full windows (1,300 give about 23,000 masked tokens per bucket at 15%)")
    long_len: int = C.field(512, "tokens per long window; shorter documents are passed over")


def buckets(long_len: int, short_len: int) -> list[str]:
    return [f"{a}-{min(a + short_len, long_len) - 1}" for a in range(0, long_len, short_len)]


def window_masks(key: str, seed: int, n: int, prob: float) -> np.ndarray:
    """Which of a window's n scored tokens are masked: drawn from the seed and the window's key alone."""
    k = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([seed, k]).random(n) < prob


def _predict(model, ids, sel):
    """Argmax predictions at the positions `sel` (a boolean (rows, length) tensor) of a batch of full rows."""
    import torch

    mask = torch.ones_like(ids)
    with torch.inference_mode():
        if hasattr(model, "bert") and hasattr(model, "cls"):  # BERT: the head only at the masked positions
            hidden = model.bert(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state
            head = model.cls.predictions if hasattr(model.cls, "predictions") else model.cls
            return head(hidden[sel]).argmax(-1)
        return model(input_ids=ids, attention_mask=mask).logits[sel].argmax(-1)


def score(model, docs: list[list[int]], sp: Specials, seed: int = 0, prob: float = 0.15, long_len: int = 512, short_len: int = 128,
          batch_size: int = 8, device: str = "cpu", keys: list[str] | None = None) -> dict:
    """Score `docs` (content token ids, no specials) as the module doc says; `keys`: the texts' ids (default
    their index), which the masks are drawn from."""
    import torch

    S = short_len - 2  # content tokens of a short window
    per_long = long_len - 2
    n_short = per_long // S
    scored = n_short * S
    names = buckets(long_len, short_len)
    long_rows, short_rows, targets = [], [], []
    for d, ids in enumerate(docs):
        for w in range(len(ids) // per_long):
            c = np.asarray(ids[w * per_long:(w + 1) * per_long], dtype=np.int64)
            m = window_masks(f"{keys[d] if keys else d}/{w}", seed, scored, prob)
            x = c.copy()
            x[:scored][m] = sp.mask
            long_rows.append(np.concatenate([[sp.cls], x, [sp.sep]]))
            for i in range(n_short):
                short_rows.append(np.concatenate([[sp.cls], x[i * S:(i + 1) * S], [sp.sep]]))
            targets.append((c[:scored], m))
    L = len(long_rows)
    correct = {"long": np.zeros(len(names), np.int64), "short": np.zeros(len(names), np.int64)}
    only = {"long": np.zeros(len(names), np.int64), "short": np.zeros(len(names), np.int64)}  # right in one of the two alone
    count = np.zeros(len(names), np.int64)
    bucket_of = (np.arange(scored) + 1) // short_len  # content token j sits at long position j + 1
    for b in range(len(names)):
        count[b] = sum(int((m & (bucket_of == b)).sum()) for _, m in targets)
    model.to(device).eval()
    for lo in range(0, L, batch_size):
        part = range(lo, min(L, lo + batch_size))
        ids = torch.as_tensor(np.stack([long_rows[r] for r in part]), device=device)
        sel = torch.zeros_like(ids, dtype=torch.bool)
        for k, r in enumerate(part):
            sel[k, 1:scored + 1] = torch.as_tensor(targets[r][1])
        pred_long = _predict(model, ids, sel).cpu().numpy()
        sids = torch.as_tensor(np.stack([short_rows[r * n_short + i] for r in part for i in range(n_short)]), device=device)
        ssel = torch.zeros_like(sids, dtype=torch.bool)
        for k, r in enumerate(part):
            for i in range(n_short):
                ssel[k * n_short + i, 1:S + 1] = torch.as_tensor(targets[r][1][i * S:(i + 1) * S])
        pred_short = _predict(model, sids, ssel).cpu().numpy()
        # both predictions list the masked tokens in content order, window by window
        truth = np.concatenate([targets[r][0][targets[r][1]] for r in part])
        where = np.concatenate([bucket_of[targets[r][1]] for r in part])
        right = {"long": pred_long == truth, "short": pred_short == truth}
        for key, other in (("long", "short"), ("short", "long")):
            np.add.at(correct[key], where, right[key].astype(np.int64))
            np.add.at(only[key], where, (right[key] & ~right[other]).astype(np.int64))
    acc = {k: {n: round(float(v[b] / count[b]), 5) if count[b] else None for b, n in enumerate(names)} for k, v in correct.items()}
    # the gap (long - reference) is a mean over the same tokens of d in {-1, 0, 1}: its standard error, paired
    n = np.maximum(count, 1)
    gap = (only["long"] - only["short"]) / n
    se = np.sqrt(np.maximum((only["long"] + only["short"]) / n - gap**2, 0) / n)
    return {"mlm_acc_by_position": acc["long"], "mlm_acc_128_reference": acc["short"], "masked_tokens": dict(zip(names, count.tolist())),
            "windows": L, "gap_se": {nm: round(float(se[b]), 5) if count[b] else None for b, nm in enumerate(names)},
            "right_in_one_only": {k: dict(zip(names, v.tolist())) for k, v in only.items()}}


def _read_jsonl(path: str):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if line.strip():
                try:
                    yield i, json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{i + 1}: not JSON ({e.msg})") from None


@contextlib.contextmanager
def quiet():
    """transformers' notices that do not apply here: a whole text longer than the model (it is cut into
    windows), and the pooler / NSP weights a masked-LM model does not load."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def select_texts(cfg: TextsConfig) -> dict:
    """Write cfg.out: the documents the module doc says, one JSON object a line."""
    from tqdm import tqdm

    from korbert import foreign

    if not cfg.corpus or not cfg.tokenizer:
        raise InputError("--corpus and --tokenizer are required")
    if not Path(cfg.corpus).is_file():
        raise InputError(f"--corpus {cfg.corpus}: no such file")
    if cfg.every < 1 or cfg.windows < 1 or cfg.skip_first < 0:
        raise InputError("--every and --windows must be >= 1, --skip-first >= 0")
    tok = foreign.load(cfg.tokenizer, f"--tokenizer {cfg.tokenizer}")
    rows, windows, passed = [], 0, 0
    with tqdm(total=cfg.windows, desc="texts", unit="window", disable=None, file=sys.stderr) as bar:
        for i, doc in _read_jsonl(cfg.corpus):
            if i < cfg.skip_first or (i - cfg.skip_first) % cfg.every:
                continue
            text = doc.get("text")
            if not isinstance(text, str) or "id" not in doc:
                raise InputError(f"{cfg.corpus}:{i + 1}: needs \"id\" and \"text\"")
            with quiet():
                n = len(tok(text, add_special_tokens=False)["input_ids"])
            if n < cfg.long_len:
                passed += 1
                continue
            rows.append({"id": doc["id"], **({"title": doc["title"]} if "title" in doc else {}), "index": i, "tokens": n,
                         "sha256": text_sha256(text), "text": text})
            got = n // (cfg.long_len - 2)
            windows += got
            bar.update(got)
            if windows >= cfg.windows:
                break
    if windows < cfg.windows:
        print(f"positions-texts: {cfg.corpus} ran out at {windows} windows (asked {cfg.windows})", file=sys.stderr)
    atomic_write_bytes(cfg.out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
    out = {"documents": len(rows), "windows": windows, "passed_over_short": passed, "last_index": rows[-1]["index"] if rows else None,
           "file": file_record(cfg.out)}
    print(f"positions-texts: {len(rows)} documents ({windows} windows of {cfg.long_len} tokens; {passed} shorter ones passed over) -> {cfg.out}")
    return out


def main(cfg: PositionsConfig) -> dict:
    import torch
    from transformers import AutoModelForMaskedLM

    from evals.finetune import write_results
    from korbert.folders import open_folder

    t0 = time.time()
    if not cfg.texts or not Path(cfg.texts).is_file():
        raise InputError(f"--texts {cfg.texts!r}: no such file (`korbert eval positions-texts` writes one)")
    if cfg.long_len < 2 * cfg.short_len or cfg.long_len % cfg.short_len or not 0 < cfg.mask_prob < 1:
        raise InputError("--long-len must be a multiple of --short-len, at least 2 x, and --mask-prob in (0, 1)")
    mf = open_folder(cfg.model)
    if mf.config.max_position_embeddings < cfg.long_len:
        raise InputError(f"{mf.where}: {mf.config.max_position_embeddings} positions, fewer than --long-len {cfg.long_len}")
    tok = mf.tokenizer()
    sp = Specials(tok.cls_token_id, tok.sep_token_id, tok.mask_token_id, tok.pad_token_id)
    ids, docs, skipped = [], [], 0
    for i, row in _read_jsonl(cfg.texts):
        if "id" not in row or not isinstance(row.get("text"), str):
            raise InputError(f"{cfg.texts}:{i + 1}: needs \"id\" and \"text\"")
        if "sha256" in row and row["sha256"] != text_sha256(row["text"]):
            raise InputError(f"{cfg.texts}:{i + 1}: text {row['id']} does not match its sha256: not the texts recorded")
        with quiet():
            content = tok(row["text"], add_special_tokens=False)["input_ids"]
        if len(content) < cfg.long_len - 2:
            skipped += 1
            continue
        ids.append(str(row["id"]))
        docs.append(content)
    # the masks, counted before any scoring: too few tokens per bucket is refused now
    per_long, S = cfg.long_len - 2, cfg.short_len - 2
    scored = (per_long // S) * S
    bucket_of = (np.arange(scored) + 1) // cfg.short_len
    names = buckets(cfg.long_len, cfg.short_len)
    counts = np.zeros(len(names), np.int64)
    windows = 0
    for key, d in zip(ids, docs):
        for w in range(len(d) // per_long):
            m = window_masks(f"{key}/{w}", cfg.seed, scored, cfg.mask_prob)
            counts += np.bincount(bucket_of[m], minlength=len(names))
            windows += 1
    low = int(np.argmin(counts))
    if counts[low] < cfg.min_per_bucket:
        need = int(np.ceil(windows * (cfg.min_per_bucket / max(1, counts[low]) - 1))) if windows else "some"
        raise InputError(
            f"{cfg.texts}: {counts[low]:,} masked tokens in bucket {names[low]} ({windows} windows), fewer than --min-per-bucket "
            f"{cfg.min_per_bucket}: add texts (about {need} more windows of {cfg.long_len} tokens: positions-texts --windows), or lower --min-per-bucket"
        )
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    device = "cuda" if cfg.device != "cpu" and torch.cuda.is_available() else "cpu"
    if cfg.device == "cuda" and device != "cuda":
        raise InputError("--device cuda: no CUDA device is available")
    # an ELECTRA export's MLM head is its generator (final/generator/, which shares the discriminator's positions);
    # a folder without an MLM head is refused, not scored through a random one
    where = mf.path / "generator" if getattr(mf.config, "model_type", "") == "electra" and (mf.path / "generator").is_dir() else mf.path
    with quiet():
        model, info = AutoModelForMaskedLM.from_pretrained(where, local_files_only=True, dtype=torch.float32, output_loading_info=True)
    head = [k for k in info["missing_keys"] if not k.endswith("position_ids")]
    if head:
        raise InputError(f"{where}: no trained MLM head ({len(head)} weights missing, e.g. {head[0]}): positions are scored by masked-token "
                         "prediction, which needs a pretraining checkpoint (BertForPreTraining / ...ForMaskedLM, or korbert's ELECTRA export)")
    r = score(model, docs, sp, cfg.seed, cfg.mask_prob, cfg.long_len, cfg.short_len, cfg.batch_size, device, keys=ids)
    assert list(r["masked_tokens"].values()) == counts.tolist()
    results = write_results(cfg.out, "positions", {
        **r,
        "metrics": {"mlm_acc_by_position": r["mlm_acc_by_position"], "mlm_acc_128_reference": r["mlm_acc_128_reference"]},
        "gap": {b: round(r["mlm_acc_by_position"][b] - r["mlm_acc_128_reference"][b], 5) for b in names},
        "texts": {**file_record(cfg.texts), "ids": ids, "documents": len(docs), "skipped_shorter": skipped},
        "seed": cfg.seed,
        "masking": f"mask-only: {cfg.mask_prob:.0%} of the scored tokens replaced by [MASK], drawn once per window from the seed and the text's id",
        "model": {"path": str(mf.path), "trained_seq_len": mf.trained_positions, "tokenizer_hash": mf.tokenizer_fingerprint(tok)},
        "tokenizer_hash": mf.tokenizer_fingerprint(tok),
        "device": device, "seconds": round(time.time() - t0, 2), "config": C.to_dict(cfg),
    }, [])
    print(f"positions [{Path(cfg.model).name}]: {windows} windows of {cfg.long_len} tokens from {len(docs)} texts, seed {cfg.seed}")
    print(f"{'bucket':>8} {'in ' + str(cfg.long_len):>8} {'in ' + str(cfg.short_len):>8} {'gap':>8} {'(s.e.)':>8} {'masked':>8}")
    for b in names:
        print(f"{b:>8} {r['mlm_acc_by_position'][b]:8.4f} {r['mlm_acc_128_reference'][b]:8.4f} {results['gap'][b]:+8.4f} "
              f"{r['gap_se'][b]:8.4f} {r['masked_tokens'][b]:8,}")
    return results


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(PositionsConfig, argv, prog="korbert eval positions"))


def texts_cli(argv: list[str] | None = None) -> dict:
    return select_texts(C.parse(TextsConfig, argv, prog="korbert eval positions-texts"))
