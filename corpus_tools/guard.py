"""Evaluation text inside a pretraining corpus: the two tests every corpus here is held to.

  * an NSMC test review: a document whose letters and digits alone (NFC, casefolded; spaces,
    punctuation and symbols dropped) equal those of a review of the test file. Whitespace-only
    matching misses the same review with one more space or one more ellipsis.
  * a KorQuAD context: a document that shares a run of `run` characters (whitespace collapsed)
    with a context of the dev file. Wikipedia copies text between related articles, so a title
    check alone misses them.

`korbert data get` removes both from the corpora it builds; `korbert vocab`, `korbert shards` and
`korbert run` leave such documents out of whatever corpus they are given and count them (`Found`);
`--keep-eval-text` keeps them (counted, pretrained on), `--strict` refuses the corpus.

The run test samples the document: every `step`-th position is looked up among the contexts'
`probe`-character windows, and only a hit is checked against their `run`-character windows. A
shared run of `run` characters always contains a sampled probe (probe + step - 1 = run), so
nothing is missed, and a long corpus costs one lookup per `step` characters.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
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


def title_key(title: str) -> str:
    """An article title as both sides are compared: NFC, `_` as a space (KorQuAD writes `노아의_방주`,
    Wikipedia's title column `노아의 방주`), spaces collapsed, stripped."""
    return " ".join(unicodedata.normalize("NFC", title or "").replace("_", " ").split())


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
                self.titles.add(title_key(title))
                c = flat(ctx)
                self._probes.update(hash(c[i:i + self.probe]) for i in range(len(c) - self.probe + 1))
                self._runs.update(hash(c[i:i + run]) for i in range(len(c) - run + 1))

    def is_title(self, title: str) -> bool:
        """A scored article's title, however either side writes its spaces."""
        return title_key(title) in self.titles

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


# The stages' policy (`korbert vocab`, `korbert shards`, `korbert run`): a corpus document holding
# evaluation text is left out of pretraining (the vocabulary's sample and the shards) and counted;
# --keep-eval-text keeps it (counted, pretrained on); --strict refuses the corpus.
KINDS = {"nsmc_test_review": "documents equal to an NSMC test review (letters and digits alone)",
         "korquad_context": "documents sharing a 48-character run with a KorQuAD context"}


def policy(keep: bool) -> str:
    return "keep" if keep else "drop"


class Found:
    """The documents of a corpus that hold evaluation text: by kind, by input file, and the first
    place of each kind (the manifests' `eval_text`, `eval_text_by_file`, `eval_text_first_at`)."""

    def __init__(self) -> None:
        self.kinds: Counter = Counter()
        self.first: dict[str, str] = {}
        self.by_file: dict[str, Counter] = {}

    def add(self, kind: str, where: str, file: str) -> None:
        self.kinds[kind] += 1
        self.first.setdefault(kind, where)
        self.by_file.setdefault(str(file), Counter())[kind] += 1

    def update(self, counts: dict) -> None:
        """Add another's counts (a shard's record), in order: the first places of the earlier stay."""
        self.kinds.update(counts.get("eval_text", {}))
        for kind, where in counts.get("eval_text_first_at", {}).items():
            self.first.setdefault(kind, where)
        for file, kinds in counts.get("eval_text_by_file", {}).items():
            self.by_file.setdefault(file, Counter()).update(kinds)

    def counts(self) -> dict:
        return {
            "eval_text": dict(sorted(self.kinds.items())), "eval_text_first_at": dict(sorted(self.first.items())),
            "eval_text_by_file": {f: dict(sorted(c.items())) for f, c in sorted(self.by_file.items())},
        }
