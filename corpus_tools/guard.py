"""Evaluation text inside a pretraining corpus: the two tests every corpus here is held to.

  * an NSMC test review: a document whose letters and digits alone (NFC, casefolded; spaces,
    punctuation and symbols dropped) equal those of a review of the test file. Whitespace-only
    matching misses the same review with one more space or one more ellipsis.
  * a KorQuAD context: a document that shares a run of `run` characters (whitespace collapsed)
    with a context of the dev file. Wikipedia copies text between related articles, so a title
    check alone misses them.

`korbert data get` removes both from the corpora it builds; `korbert shards` and `korbert run`
count them in whatever corpus they are given (`--strict` refuses it).

The run test samples the document: every `step`-th position is looked up among the contexts'
`probe`-character windows, and only a hit is checked against their `run`-character windows. A
shared run of `run` characters always contains a sampled probe (probe + step - 1 = run), so
nothing is missed, and a long corpus costs one lookup per `step` characters.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Iterable

_NOT_ALNUM = re.compile(r"[\W_]+")
_SPACE = re.compile(r"\s+")


def review_key(text: str) -> str:
    """What two copies of one review share: NFC, casefolded, letters and digits only."""
    return _NOT_ALNUM.sub("", unicodedata.normalize("NFC", text).casefold())


def flat(text: str) -> str:
    """NFC with every run of whitespace as one space (the form runs are compared in)."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def nsmc_documents(path: str | Path) -> list[str]:
    """The `document` column of an NSMC-format file (`id<TAB>document<TAB>label`, header line)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().rstrip("\n").split("\t")
        col = header.index("document") if "document" in header else 1
        for line in fh:
            parts = line.rstrip("\n").split("\t")
            if len(parts) > col:
                out.append(parts[col])
    return out


def korquad_contexts(path: str | Path) -> list[tuple[str, str]]:
    """(title, context) of every paragraph of a SQuAD-format file."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)["data"]
    return [(a.get("title", ""), p["context"]) for a in data for p in a["paragraphs"]]


class EvalText:
    """The evaluation text a corpus must not contain, and the two tests above."""

    def __init__(self, nsmc_test: Iterable[str | Path] = (), korquad: Iterable[str | Path] = (), run: int = 48):
        if run < 8:
            raise ValueError("run must be at least 8 characters")
        self.run, self.probe = run, run // 2 + 1
        self.step = run - self.probe + 1
        self.reviews = {k for p in nsmc_test for k in map(review_key, nsmc_documents(p)) if k}
        self.longest_review = max(map(len, self.reviews), default=0)
        self.titles: set[str] = set()
        self._probes: set[int] = set()
        self._runs: set[int] = set()
        for p in korquad:
            for title, ctx in korquad_contexts(p):
                self.titles.add(unicodedata.normalize("NFC", title).strip())
                c = flat(ctx)
                self._probes.update(hash(c[i:i + self.probe]) for i in range(len(c) - self.probe + 1))
                self._runs.update(hash(c[i:i + run]) for i in range(len(c) - run + 1))

    def is_review(self, text: str) -> bool:
        # a review's key is short; a long document cannot have the same one (cheap early out)
        if not self.reviews or len(text) > 4 * self.longest_review + 64:
            return False
        key = review_key(text)
        return bool(key) and key in self.reviews

    def shares_context(self, text: str) -> bool:
        if not self._runs:
            return False
        t = flat(text)
        n, run, probe, probes, runs = len(t), self.run, self.probe, self._probes, self._runs
        for p in range(0, n - probe + 1, self.step):
            if hash(t[p:p + probe]) in probes:
                for q in range(max(0, p - self.step + 1), min(p, n - run) + 1):
                    if hash(t[q:q + run]) in runs:
                        return True
        return False

    def check(self, text: str) -> str | None:
        """"nsmc_test_review", "korquad_context" or None."""
        if self.is_review(text):
            return "nsmc_test_review"
        if self.shares_context(text):
            return "korquad_context"
        return None
