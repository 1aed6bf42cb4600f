"""KorQuAD 1.0 EM and F1, exactly as the official scorer computes them.

The official script is `evaluate-v1.0.py` from korquad.github.io ("KorQuAD v1.0에 대한 공식 평가
스크립트", derived from the SQuAD v1.1 script). Checked against two verbatim copies of it in public
repositories (monologg/KoBERT-KorQuAD `evaluate_v1_0.py`, and an identical copy found by its
docstring); what it does, and what this module reproduces:

  normalize_answer(s) = white_space_fix(remove_punc(lower(remove_(s))))
    remove_:         each of  '  "  《  》  <  >  〈  〉  (  )  ‘  ’  is replaced by a space
    lower:           str.lower()
    remove_punc:     every character in Python's string.punctuation is deleted (not spaced)
    white_space_fix: ' '.join(text.split())
  There is NO article removal (SQuAD's a/an/the step is gone) and no other Unicode punctuation
  is touched (“ ” · … 「 」 stay).

  f1_score: both strings normalized and split on whitespace, then the tokens are broken into
  CHARACTERS (spaces therefore do not count); F1 of the character multisets (Counter &). Zero
  common characters -> 0. (SQuAD's word-level F1 gives different numbers: "세종 대왕" vs
  "세종대왕" is 0 there and 1.0 here.)

  exact_match_score: normalized strings equal (spaces count, after collapsing).

  evaluate: max over the ground truths per question; an unanswered question scores 0 and is
  reported; both averaged over all questions of the dataset and multiplied by 100.

A string that normalizes to nothing (only punctuation) has no characters, so its F1 is 0
against anything, as in the official script.
"""

from __future__ import annotations

import re
import string
import sys
from collections import Counter

_REMOVE = re.compile("['\"《》<>〈〉()‘’]")
_PUNCT = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    text = _REMOVE.sub(" ", s)
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    return " ".join(text.split())


def _chars(s: str) -> list[str]:
    return [c for tok in normalize_answer(s).split() for c in tok]


def f1_score(prediction: str, ground_truth: str) -> float:
    pred, gold = _chars(prediction), _chars(ground_truth)
    num_same = sum((Counter(pred) & Counter(gold)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred)
    recall = num_same / len(gold)
    return 2 * precision * recall / (precision + recall)


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def metric_max_over_ground_truths(metric_fn, prediction: str, ground_truths: list[str]) -> float:
    return max(metric_fn(prediction, gt) for gt in ground_truths)


def evaluate(dataset: list[dict], predictions: dict[str, str], quiet: bool = False) -> dict:
    """`dataset`: SQuAD v1 `data` articles; `predictions`: {question id: answer text}.
    -> {"exact_match", "f1"} in percent, over every question in `dataset`."""
    f1 = exact_match = total = 0.0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                qid = str(qa["id"])
                if qid not in predictions:
                    if not quiet:
                        print(f"Unanswered question {qid} will receive score 0.", file=sys.stderr)
                    continue
                ground_truths = [a["text"] for a in qa["answers"]]
                if not ground_truths:  # the official script would fail on max([]); count it as 0
                    continue
                prediction = predictions[qid]
                exact_match += metric_max_over_ground_truths(exact_match_score, prediction, ground_truths)
                f1 += metric_max_over_ground_truths(f1_score, prediction, ground_truths)
    if not total:
        return {"exact_match": 0.0, "f1": 0.0}
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}
