"""KLUE's dev metrics, as its baseline code computes them (KLUE-benchmark/KLUE-baseline,
`klue_baseline/metrics/functional.py`), in numpy: no scikit-learn, scipy or seqeval needed. Every
score is in percent, as KLUE reports it.

- YNAT: macro F1 over the topics that occur in the labels or the predictions.
- KLUE-NLI: accuracy.
- KLUE-STS: Pearson r of the predicted and gold similarity (0 to 5), and the binary F1 with both
  cut at 3.0 (>= 3 is "similar").
- KLUE-NER, scored on the non-space characters of each sentence (KLUE drops the spaces, which the TSV
  lists as their own rows), every character of every sentence. KLUE's model code also scores a
  [CLS] and a last padded position per sentence (gold `O`) and cuts sentences at its max length;
  here only the characters count, and no entity runs from one sentence into the next:
  - entity F1: strict IOB2, as seqeval's `mode="strict", scheme=IOB2` reads it. An entity is a `B-X`
    and the `I-X` that follow it; a stray `I-X` starts none. It counts only when type, start and end
    all match. Macro average over the types found in either sequence, 0 for a type with no hit.
  - character F1: per tag, over all 13 tags, `O` included (KLUE's code passes every label index,
    although its docstring says "except O"). A tag's F1 is 2tp / (2tp + fp + fn), and 1 for a tag
    that is in neither sequence (scikit-learn's `zero_division=True`). Macro average.

`char_tags` and `token_tags` move NER tags between characters and tokens: a token takes the tag of
its first non-space character, and a predicted token tag goes back to every character its offsets
cover (`B-X` on the first, `I-X` on the rest).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

NER_TYPES = ("PS", "LC", "OG", "DT", "TI", "QT")
NER_TAGS = tuple(f"{p}-{t}" for t in NER_TYPES for p in "BI") + ("O",)  # KLUE's label order


def _f1(tp: int, fp: int, fn: int, empty: float) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else empty


def _f1_of(gold: np.ndarray, pred: np.ndarray, empty: float) -> float:
    """F1 of one class from boolean arrays: where the gold label, and the prediction, is that class."""
    return _f1(int((pred & gold).sum()), int((pred & ~gold).sum()), int((~pred & gold).sum()), empty)


def _pair(gold: Sequence, pred: Sequence, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    g, p = np.asarray(gold, dtype=dtype), np.asarray(pred, dtype=dtype)
    if g.shape != p.shape or not g.size:
        raise ValueError(f"{g.size} gold labels, {p.size} predictions: need as many, and some")
    return g, p


def macro_f1(gold: Sequence, pred: Sequence) -> float:
    """YNAT: F1 per class that occurs in either sequence, averaged, in percent."""
    gold, pred = _pair(gold, pred)
    return 100.0 * float(np.mean([_f1_of(gold == c, pred == c, 0.0) for c in np.union1d(gold, pred)]))


def accuracy(gold: Sequence, pred: Sequence) -> float:
    """KLUE-NLI: the share of predictions equal to the gold label, in percent."""
    gold, pred = _pair(gold, pred)
    return 100.0 * float((gold == pred).mean())


def pearson(gold: Sequence[float], pred: Sequence[float]) -> float:
    """KLUE-STS: Pearson r, in percent (None-free inputs of at least 2 values that vary)."""
    g, p = np.asarray(gold, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    if g.shape != p.shape or g.size < 2:
        raise ValueError(f"{g.size} gold scores, {p.size} predictions: need as many, at least 2")
    g, p = g - g.mean(), p - p.mean()
    denom = np.sqrt((g * g).sum() * (p * p).sum())
    if denom == 0:
        raise ValueError("Pearson r is undefined: the gold scores or the predictions are all equal")
    return 100.0 * float((g * p).sum() / denom)


def sts_f1(gold: Sequence[float], pred: Sequence[float], threshold: float = 3.0) -> float:
    """KLUE-STS: F1 of "similar" (score >= 3.0) against not, in percent (0 when no pair is similar in either)."""
    g, p = _pair(gold, pred, np.float64)
    return 100.0 * _f1_of(g >= threshold, p >= threshold, 0.0)


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The strict-IOB2 entities of a tag sequence: (type, start, end) with end exclusive."""
    found, start, kind = set(), None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, t = tag.partition("-")
        if start is not None and not (prefix == "I" and t == kind):  # the open entity ends here
            found.add((kind, start, i))
            start = kind = None
        if prefix == "B":
            start, kind = i, t
    return found


def _flat(sentences: Sequence[Sequence[str]], what: str, sep: Sequence[str] = ()) -> list[str]:
    """The sentences' tags in one list, `sep` after each."""
    out = [tag for s in sentences for tag in (*s, *sep)]
    bad = sorted(set(out) - set(NER_TAGS))
    if bad:
        raise ValueError(f"{what}: tags KLUE-NER does not have: {bad[:5]}")
    return out


def _check(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]], sep: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    lengths = [len(s) for s in gold], [len(s) for s in pred]
    if lengths[0] != lengths[1]:
        raise ValueError("the predicted sentences differ from the gold ones in number or in characters per sentence")
    if not sum(lengths[0]):
        raise ValueError("no characters to score")
    return _flat(gold, "gold", sep), _flat(pred, "predictions", sep)


def ner_entity_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> float:
    """KLUE-NER entity-level macro F1 (strict IOB2), in percent; sentences of non-space character tags."""
    g, p = _check(gold, pred, sep=("O",))  # (an O between sentences: no entity spans two)
    eg, ep = entities(g), entities(p)
    kinds = sorted({e[0] for e in eg | ep})
    if not kinds:  # no entity in either (seqeval gives nan)
        return 0.0
    scores = []
    for k in kinds:
        a, b = {e for e in eg if e[0] == k}, {e for e in ep if e[0] == k}
        scores.append(_f1(len(a & b), len(b - a), len(a - b), 0.0))
    return 100.0 * float(np.mean(scores))


def ner_char_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> float:
    """KLUE-NER character-level macro F1 over all 13 tags, `O` included, in percent."""
    g, p = map(np.asarray, _check(gold, pred))
    return 100.0 * float(np.mean([_f1_of(g == t, p == t, 1.0) for t in NER_TAGS]))


def token_tags(text: str, char_tags: Sequence[str], offsets: Sequence[tuple[int, int]]) -> list[str]:
    """Each token's gold tag: the tag of its first non-space character (`O` for a token covering none).
    `char_tags` has one tag per character of `text`, spaces included; offsets index `text`."""
    if len(char_tags) != len(text):
        raise ValueError(f"{len(char_tags)} tags for {len(text)} characters")
    out = []
    for a, b in offsets:
        first = next((i for i in range(a, b) if not text[i].isspace()), None)
        out.append(char_tags[first] if first is not None else "O")
    return out


def char_tags(text: str, tags: Sequence[str], offsets: Sequence[tuple[int, int]]) -> list[str]:
    """Characters' tags from token tags: a `B-X` token gives `B-X` to its first non-space character and
    `I-X` to the rest; an `I-X` token gives `I-X` to all; `O` and characters no token covers get `O`.
    Where two tokens cover one character, the first token's tag stands."""
    if len(tags) != len(offsets):
        raise ValueError(f"{len(tags)} token tags for {len(offsets)} tokens' offsets")
    out: list[str | None] = [None] * len(text)
    for tag, (a, b) in zip(tags, offsets):
        prefix, _, kind = tag.partition("-")
        first = True
        for i in range(a, b):
            if out[i] is not None or text[i].isspace():
                continue
            out[i] = "O" if prefix not in ("B", "I") else (f"B-{kind}" if prefix == "B" and first else f"I-{kind}")
            first = False
    return [t or "O" for t in out]


def entity_spans(text: str, tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """A sentence's gold entities as (type, start, end) character spans of `text` (spaces included), read
    strict-IOB2 over its non-space characters, as they are scored."""
    if len(tags) != len(text):
        raise ValueError(f"{len(tags)} tags for {len(text)} characters")
    where = [i for i, c in enumerate(text) if not c.isspace()]
    return sorted((kind, where[a], where[b - 1] + 1) for kind, a, b in entities([tags[i] for i in where]))

