"""NSMC baselines: TF-IDF + logistic regression (scikit-learn) over character n-grams and over
Kiwi morpheme n-grams, trained on the NSMC train file and scored once on the test file.

    korbert eval baseline --train $KORBERT_DATA/nsmc/ratings_train.txt \
        --test $KORBERT_DATA/nsmc/ratings_test.txt --out runs/eval-baseline

  char:  TfidfVectorizer(analyzer="char", ngram_range=(1, 4)) + LogisticRegression(C=2)
  morph: Kiwi morphemes as "form/tag" tokens (the analyzer options the korbert tokenizer uses),
         TF-IDF over morpheme 1-3-grams + LogisticRegression(C=2)

Both use scikit-learn's defaults otherwise (lbfgs; for char n-grams TfidfVectorizer's
lowercase=True, which only touches Latin letters; morphemes are kept as Kiwi gives them). Writes results.json (accuracy per analyzer, resolved config, data
sha256s, counts, seconds), predictions-{char,morph}.tsv and manifest.json to --out.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from corpus_tools import SAMPLE_DATA
from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, file_record
from corpus_tools.text import InputError
from evals.data import read_nsmc
from evals.finetune import write_results



@dataclass
class BaselineConfig:
    """NSMC baselines: TF-IDF + logistic regression over character and Kiwi-morpheme n-grams."""

    train: str = C.field(str(SAMPLE_DATA / "nsmc_train.txt"), "training file, NSMC format (id<TAB>document<TAB>label, header)")
    test: str = C.field(str(SAMPLE_DATA / "nsmc_test.txt"), "test file, same format")
    out: str = C.field("runs/eval-baseline", "output folder")
    analyzer: str = C.field("both", "features: character n-grams, Kiwi morpheme n-grams, or both", choices=["char", "morph", "both"])
    char_ngrams: list[int] = C.field([1, 4], "character n-gram range (min max)")
    morph_ngrams: list[int] = C.field([1, 3], "morpheme n-gram range (min max)")
    morph_tags: bool = C.field(True, "morpheme tokens carry their POS tag (form/tag); --no-morph-tags: form only")
    c: float = C.field(2.0, "inverse regularization strength C of the logistic regression")
    max_iter: int = C.field(1000, "logistic regression iterations (lbfgs)")
    min_df: int = C.field(1, "ignore n-grams seen in fewer than this many training reviews")
    lowercase: bool = C.field(True, "char n-grams: TfidfVectorizer's lowercase (scikit-learn's default; Hangul is unaffected)")
    max_train_examples: int = C.field(0, "train on the first N reviews only (0 = all)")
    max_eval_examples: int = C.field(0, "score only the first N test reviews (0 = all; recorded in results)")
    seed: int = C.field(0, "random_state of the logistic regression")


def _range(v: list[int], flag: str) -> tuple[int, int]:
    if len(v) != 2 or not 1 <= v[0] <= v[1]:
        raise InputError(f"{flag} takes two numbers, 1 <= min <= max; got {v}")
    return v[0], v[1]


def morphemes(texts: list[str], tags: bool = True, batch: int = 5000) -> list[list[str]]:
    """Kiwi morphemes of each text ("form/tag"), with the tokenizer's Kiwi options."""
    from tqdm import tqdm

    from corpus_tools.morph import DEFAULT_KIWI, get_kiwi

    kiwi = get_kiwi(0, **DEFAULT_KIWI)
    out = []
    for i in tqdm(range(0, len(texts), batch), desc="kiwi", unit="batch", disable=None, file=sys.stderr, leave=False):
        for res in kiwi.tokenize(texts[i : i + batch]):
            out.append([f"{m.form}/{m.tag}" if tags else m.form for m in res])
    return out


def _identity(x):
    return x


def run_one(kind: str, cfg: BaselineConfig, train_texts, y_train, test_texts, y_test) -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    t0 = time.time()
    if kind == "char":
        vec = TfidfVectorizer(analyzer="char", ngram_range=_range(cfg.char_ngrams, "--char-ngrams"),
                              min_df=cfg.min_df, lowercase=cfg.lowercase)
        a, b = train_texts, test_texts
        desc = f"char {cfg.char_ngrams[0]}-{cfg.char_ngrams[1]}-grams"
    else:
        vec = TfidfVectorizer(analyzer="word", tokenizer=_identity, preprocessor=_identity, token_pattern=None,
                              ngram_range=_range(cfg.morph_ngrams, "--morph-ngrams"), min_df=cfg.min_df, lowercase=False)
        a, b = morphemes(train_texts, cfg.morph_tags), morphemes(test_texts, cfg.morph_tags)
        desc = f"Kiwi morpheme {cfg.morph_ngrams[0]}-{cfg.morph_ngrams[1]}-grams ({'form/tag' if cfg.morph_tags else 'form'})"
    t_an = time.time() - t0
    X = vec.fit_transform(a)
    Xt = vec.transform(b)
    t_vec = time.time() - t0 - t_an
    print(f"baseline {kind}: {desc}: {X.shape[1]:,} features; fitting logistic regression (C={cfg.c}) ...", file=sys.stderr)
    lr = LogisticRegression(C=cfg.c, max_iter=cfg.max_iter, random_state=cfg.seed)
    lr.fit(X, y_train)
    t_fit = time.time() - t0 - t_an - t_vec
    proba = lr.predict_proba(Xt)[:, list(lr.classes_).index(1)]
    pred = (proba >= 0.5).astype(int)
    acc = float((pred == y_test).mean())
    return {
        "accuracy": round(acc, 6),
        "features": desc,
        "n_features": int(X.shape[1]),
        "lr_iterations": int(max(lr.n_iter_)),
        "seconds": {"analyze": round(t_an, 2), "vectorize": round(t_vec, 2), "fit": round(t_fit, 2),
                    "total": round(time.time() - t0, 2)},
        "_pred": pred,
        "_proba": proba,
    }


def main(cfg: BaselineConfig) -> dict:
    import numpy as np

    t_start = time.time()
    train = read_nsmc(cfg.train)
    test = read_nsmc(cfg.test)
    if cfg.max_train_examples > 0:
        train = train[: cfg.max_train_examples]
    if cfg.max_eval_examples > 0:
        test = test[: cfg.max_eval_examples]
    y_train = np.array([r.label for r in train])
    y_test = np.array([r.label for r in test])
    if len(set(y_train.tolist())) < 2:
        raise InputError(f"{cfg.train}: the training reviews hold only one label")
    kinds = ["char", "morph"] if cfg.analyzer == "both" else [cfg.analyzer]
    out = Path(cfg.out)
    metrics, details, files = {}, {}, []
    for kind in kinds:
        res = run_one(kind, cfg, [r.text for r in train], y_train, [r.text for r in test], y_test)
        pred, proba = res.pop("_pred"), res.pop("_proba")
        lines = ["id\tlabel\tprediction\tp_positive"] + [
            f"{r.id}\t{r.label}\t{p}\t{q:.6f}" for r, p, q in zip(test, pred.tolist(), proba.tolist())
        ]
        name = f"predictions-{kind}.tsv"
        atomic_write_bytes(out / name, ("\n".join(lines) + "\n").encode("utf-8"))
        files.append(name)
        metrics[f"accuracy_{kind}"] = res["accuracy"]
        details[kind] = res
        print(f"baseline {kind}: test accuracy {100 * res['accuracy']:.2f}% ({res['features']}, C={cfg.c}; "
              f"{res['seconds']['total']:.0f} s)")
    results = write_results(out, "nsmc-baseline", {
        "metrics": metrics,
        "baselines": details,
        "data": {"train": file_record(cfg.train), "test": file_record(cfg.test)},
        "n": {"train": len(train), "test": len(test)},
        "full_test": cfg.max_eval_examples <= 0,
        "seconds": round(time.time() - t_start, 2),
        "config": C.to_dict(cfg),
    }, files)
    partial = "" if cfg.max_eval_examples <= 0 else f" (first {len(test)} only: --max-eval-examples)"
    print(f"baseline: {len(train):,} train / {len(test):,} test reviews{partial} -> {out}")
    return results


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(BaselineConfig, argv, prog="korbert eval baseline"))
