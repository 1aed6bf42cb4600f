"""Evaluation text inside a pretraining corpus: the two tests every corpus here is held to.

  * an NSMC test review: a document whose letters and digits alone (NFC, casefolded; spaces,
    punctuation and symbols dropped) equal those of a review of the test file. Whitespace-only
    matching misses the same review with one more space or one more ellipsis.
  * a KorQuAD context: a document that shares a run of `run` characters (whitespace collapsed)
    with a context of the dev file. Wikipedia copies text between related articles, so a title
    check alone misses them.
  * a KLUE dev text (NER sentences, NLI premises and hypotheses, STS sentences, YNAT headlines;
    KLUE took some from NSMC's crawl and from Wikipedia): a document equal to one by letters and
    digits (`klue_review`: those of at least KLUE_MIN_KEY letters and digits), or one that holds a
    whole text of at least KLUE_MIN_WHOLE characters or shares a run of `run` characters with one
    (`klue_text`; whitespace collapsed).

`korbert data get` removes both from the corpora it builds; `korbert vocab`, `korbert shards` and
`korbert run` leave such documents out of whatever corpus they are given and count them (`Found`);
`--keep-eval-text` keeps them (counted, pretrained on), `--strict` refuses the corpus.

The run test samples the document: every `step`-th position is looked up among the contexts'
`probe`-character windows, and only a hit is checked against their `run`-character windows. A
shared run of `run` characters always contains a sampled probe (probe + step - 1 = run), so
nothing is missed, and a long corpus costs one lookup per `step` characters. The whole-text test
of KLUE's shorter texts works the same way, with a run as long as the shortest text it looks for.
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


KLUE_MIN_KEY = 10  # a KLUE text as a review: at least this many letters and digits (as the shared corpus was cleaned)
KLUE_MIN_WHOLE = 20  # a KLUE text held whole in a document: at least this many characters


def klue_texts(path: str | Path) -> list[str]:
    """The texts of a KLUE file: the sentences of a KLUE-NER TSV (their characters joined), the premises
    and hypotheses of KLUE-NLI, the sentence pairs of KLUE-STS, the headlines of YNAT (JSON lists)."""
    path = Path(path)
    if path.suffix == ".tsv":
        out, chars = [], []
        for line in path.read_text(encoding="utf-8").split("\n") + [""]:
            if not line.strip("\t\r"):
                if chars:
                    out.append("".join(chars))
                chars = []
            elif not line.startswith("##"):
                chars.append(line.rstrip("\r").rpartition("\t")[0])
        return out
    with open(path, encoding="utf-8") as fh:
        rows = json.load(fh)
    if not isinstance(rows, list):
        raise ValueError(f"{path}: not a KLUE task file (a JSON list of examples, or KLUE-NER's .tsv)")
    fields = ("premise", "hypothesis", "sentence1", "sentence2", "title")
    return [r[k] for r in rows if isinstance(r, dict) for k in fields if isinstance(r.get(k), str)]


class Runs:
    """Texts, and whether a document holds a run of `run` characters of one (whitespace collapsed, NFC)."""

    def __init__(self, run: int, probe: int | None = None):
        self.run, self.probe = run, probe or run // 2 + 1
        self.step = run - self.probe + 1
        self._probes: set[int] = set()
        self._runs: set[int] = set()

    def _add_probes(self, c: str) -> None:
        self._probes.update(hash(c[i:i + self.probe]) for i in range(len(c) - self.probe + 1))

    def add(self, text: str) -> None:
        c, run = flat(text), self.run
        self._add_probes(c)
        self._runs.update(hash(c[i:i + run]) for i in range(len(c) - run + 1))

    def __bool__(self) -> bool:
        return bool(self._runs)

    def starts(self, t: str):
        """The positions of `t` (flat) where a candidate run starts: every one that matches, and a few that do not."""
        n, probe, probes = len(t), self.probe, self._probes
        for p in range(0, n - probe + 1, self.step):
            if hash(t[p:p + probe]) in probes:
                yield from range(max(0, p - self.step + 1), p + 1)

    def shares(self, t: str) -> bool:
        run, runs = self.run, self._runs
        return bool(runs) and any(hash(t[q:q + run]) in runs for q in self.starts(t) if q + run <= len(t))


class Wholes(Runs):
    """Short texts (at least `shortest` characters), and whether a document holds one whole."""

    def __init__(self, shortest: int):
        super().__init__(shortest, shortest // 2 + 1)
        self._wholes: dict[int, set[int]] = {}  # length -> hashes of the texts of that length

    def add(self, text: str) -> None:
        c = flat(text)
        self._add_probes(c)
        self._wholes.setdefault(len(c), set()).add(hash(c))

    def __bool__(self) -> bool:
        return bool(self._wholes)

    def shares(self, t: str) -> bool:
        if not self._wholes:
            return False
        for q in self.starts(t):  # (a whole text is a run of its own length, at least `shortest`)
            for n, hashes in self._wholes.items():
                if q + n <= len(t) and hash(t[q:q + n]) in hashes:
                    return True
        return False


class EvalText:
    """The evaluation text a corpus must not contain, and the tests above."""

    def __init__(self, nsmc_test: Iterable[str | Path] = (), korquad: Iterable[str | Path] = (), run: int = 48,
                 klue: Iterable[str | Path] = ()):
        if run < 8:
            raise ValueError("run must be at least 8 characters")
        self.run = run
        self.reviews = {k for p in nsmc_test for k in map(review_key, nsmc_documents(p)) if k}
        self.longest_review = max(map(len, self.reviews), default=0)
        self.titles: set[str] = set()
        self.contexts = Runs(run)
        for p in korquad:
            for title, ctx in korquad_contexts(p):
                self.titles.add(title_key(title))
                self.contexts.add(ctx)
        self.klue_keys: set[str] = set()
        self.klue_runs, self.klue_wholes = Runs(run), Wholes(KLUE_MIN_WHOLE)
        for p in klue:
            for text in klue_texts(p):
                if len(key := review_key(text)) >= KLUE_MIN_KEY:
                    self.klue_keys.add(key)
                c = flat(text)
                if len(c) >= run:
                    self.klue_runs.add(c)
                elif len(c) >= KLUE_MIN_WHOLE:
                    self.klue_wholes.add(c)
        self.longest_klue = max(map(len, self.klue_keys), default=0)

    def is_title(self, title: str) -> bool:
        """A scored article's title, however either side writes its spaces."""
        return title_key(title) in self.titles

    def is_review(self, text: str) -> bool:
        return _same_key(text, self.reviews, self.longest_review)

    def shares_context(self, text: str) -> bool:
        return bool(self.contexts) and self.contexts.shares(flat(text))

    def check(self, text: str) -> str | None:
        """"nsmc_test_review", "korquad_context", "klue_review", "klue_text" or None."""
        if self.is_review(text):
            return "nsmc_test_review"
        if self.shares_context(text):
            return "korquad_context"
        if _same_key(text, self.klue_keys, self.longest_klue):
            return "klue_review"
        if self.klue_runs or self.klue_wholes:
            t = flat(text)
            if self.klue_runs.shares(t) or self.klue_wholes.shares(t):
                return "klue_text"
        return None


def _same_key(text: str, keys: set[str], longest: int) -> bool:
    # a review's key is short; a long document cannot have the same one (cheap early out)
    if not keys or len(text) > 4 * longest + 64:
        return False
    key = review_key(text)
    return bool(key) and key in keys


# The stages' policy (`korbert vocab`, `korbert shards`, `korbert run`): a corpus document holding
# evaluation text is left out of pretraining (the vocabulary's sample and the shards) and counted;
# --keep-eval-text keeps it (counted, pretrained on); --strict refuses the corpus.
KINDS = {"nsmc_test_review": "documents equal to an NSMC test review (letters and digits alone)",
         "korquad_context": "documents sharing a 48-character run with a KorQuAD context",
         "klue_review": "documents equal to a KLUE dev text (letters and digits alone)",
         "klue_text": "documents holding a KLUE dev text whole or sharing a 48-character run with one"}


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
