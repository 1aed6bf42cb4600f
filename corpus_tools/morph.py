"""Morpheme analysis with Kiwi, as surface segments that tile the original string.

Kiwi's morphemes are normalized forms: 했 -> 하/VV + 었/EP (both spanning "했"),
입니다 -> 이/VCP + ᆸ니다/EF (overlapping spans). Such morphemes cannot be cut apart on the
surface, so overlapping (and zero-length) morphemes are merged into one *segment*:

    "나는 학교에 갔다"  ->  나 | 는 | 학교 | 에 | 갔다        (갔다 = 가+었+다)

Every segment is a real substring with exact [start, end) offsets; segments never contain
whitespace, never overlap, and together cover every non-whitespace character exactly once
(characters Kiwi leaves out become segments of their own). A segment "starts an eojeol" when
whitespace (or the start of the text) precedes it — the word-boundary information is kept.

One Kiwi model is loaded per process and per option set (`get_kiwi`), and batches are
analyzed with Kiwi's own worker threads.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Sequence

from corpus_tools.text import nfc_with_offsets

#: Options that change the analysis; they are part of a tokenizer's identity (and its hash).
DEFAULT_KIWI = {"model_type": "cong", "typos": None}


_THREADS = 0  # set_kiwi_threads: 0 = every core this process may use


def set_kiwi_threads(n: int) -> None:
    """Kiwi threads for this process from now on (a shards worker takes its share of the cores)."""
    global _THREADS
    _THREADS = max(0, int(n))


def default_threads() -> int:
    return _THREADS or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def analyse_ahead(kiwi, texts: list[str]):
    """Kiwi's analyses of `texts`, in order (an iterator), all queued to its worker threads now, so
    Kiwi works while the caller does something else. Kiwi's iterable API by itself keeps only
    `num_workers * 16` texts in flight, so the texts go in as calls of at most that many: each
    call queues all of its texts at once."""
    step = max(1, kiwi.num_workers * 16)
    return chain.from_iterable([kiwi.tokenize(texts[i : i + step]) for i in range(0, len(texts), step)])


def get_kiwi(num_workers: int = 0, model_type: str = "cong", typos: str | None = None):
    """The process-wide Kiwi instance for these options (loading the model takes ~1 s).
    num_workers 0 = all cores (the tokenizer's default)."""
    return _load_kiwi(num_workers or default_threads(), model_type, typos)


_KIWIS: dict[tuple, object] = {}  # (num_workers, model_type, typos) -> this process's Kiwi


def _load_kiwi(num_workers: int, model_type: str, typos: str | None):
    key = (num_workers, model_type, typos)
    kiwi = _KIWIS.get(key)
    if kiwi is None:
        from kiwipiepy import Kiwi

        kiwi = _KIWIS.setdefault(key, Kiwi(num_workers=num_workers, model_type=model_type, typos=typos))
    return kiwi


def _forget_parents_kiwi() -> None:
    # A forked child (datasets' `num_proc`, a DataLoader worker) inherits the parent's instances but
    # not their worker threads: using one waits forever, and so does freeing one, even at the child's
    # exit. The child takes one reference to each that is never given back (they are never freed in
    # it) and loads its own.
    import ctypes

    for kiwi in _KIWIS.values():
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(kiwi))
    _KIWIS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_kiwi)


def kiwi_version() -> str:
    import kiwipiepy

    return kiwipiepy.__version__


KIWI_PACKAGES = ("kiwipiepy", "kiwipiepy_model")  # the analyzer and its weights: pip updates each on its own


def kiwi_versions() -> dict[str, str]:
    """The installed kiwipiepy and kiwipiepy_model versions, from a loaded module's `__version__` or
    the package's metadata (nothing imported); {} where kiwipiepy is not installed. The stages that
    run Kiwi key on them (vocabulary, shards, feature caches): another version may segment otherwise."""
    import importlib.metadata
    import sys

    # (as corpus_tools.artifacts.package_version: this file travels alone in a model folder's remote code)
    out = {}
    for name in KIWI_PACKAGES:
        version = getattr(sys.modules.get(name), "__version__", None)
        if version is None:
            try:
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                continue
        out[name] = str(version)
    return out if "kiwipiepy" in out else {}


def kiwi_differs(recorded: dict, strict: bool = False) -> str | None:
    """"kiwipiepy A / kiwipiepy_model B (installed here: kiwipiepy C / kiwipiepy_model D)" when an
    artifact's recorded `versions` name another Kiwi than the one installed, else None. Only recorded
    versions are compared (korbert recorded kiwipiepy_model later than kiwipiepy); strict (a stage's
    up-to-date check): a record without kiwipiepy counts as another Kiwi too. None where Kiwi is not
    installed here: nothing could rebuild the artifact, and a stage that needs Kiwi fails on its own."""
    now = kiwi_versions()
    then = {k: str(recorded[k]) for k in KIWI_PACKAGES if recorded.get(k)}
    if not now or ((not strict or "kiwipiepy" in then) and all(now.get(k) == v for k, v in then.items())):
        return None
    return (" / ".join(f"{k} {then.get(k, '(not recorded)')}" for k in KIWI_PACKAGES)
            + f" (installed here: {' / '.join(f'{k} {v}' for k, v in now.items())})")


@dataclass(frozen=True)
class Morpheme:
    form: str  # Kiwi's normalized form (not always a substring: 었, ᆸ니다)
    tag: str
    start: int  # span in the original string (may be shared with, or inside, a neighbour's)
    end: int


@dataclass(frozen=True)
class Analysis:
    """One analyzed text. All offsets index the string the caller passed (even NFD input)."""

    text: str
    segments: list[tuple[int, int]]  # surface segments, in order, tiling the non-space text
    eojeol_start: list[bool]  # segment i is the first of its eojeol (whitespace/start before it)
    sentences: list[tuple[int, int]]  # sentence spans (empty unless split_sents=True)
    morphemes: list[Morpheme]

    def surfaces(self) -> list[str]:
        return [self.text[a:b] for a, b in self.segments]

    def segmented(self, delimiter: str = " + ") -> str:
        """Eojeols joined by spaces, the segments inside an eojeol by `delimiter`."""
        out: list[str] = []
        for (a, b), first in zip(self.segments, self.eojeol_start):
            if out and first:
                out.append(" ")
            elif out:
                out.append(delimiter)
            out.append(self.text[a:b])
        return "".join(out)


_WS = re.compile(r"\s")


def segment_spans(text: str, spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge Kiwi morpheme spans (in `text`'s coordinates) into surface segments.

    Overlapping spans merge; zero-length spans join the segment they touch; non-space characters
    Kiwi did not cover become segments of their own (one per run); whitespace always splits.
    (This runs once per text inside the tokenizer: whitespace checks are C-level str/regex calls.)
    """
    out: list[tuple[int, int]] = []
    pos = 0  # everything before pos is emitted
    cur_s = cur_e = -1
    for s, e in spans:
        if cur_e >= 0 and (s < cur_e or (s == e and s <= cur_e)):
            if e > cur_e:
                cur_e = e
            continue
        if s >= e:
            continue
        if cur_e >= 0:
            pos = _emit(text, pos, cur_s, cur_e, out)
        cur_s, cur_e = s, e
    if cur_e >= 0:
        pos = _emit(text, pos, cur_s, cur_e, out)
    if pos < len(text) and not text[pos:].isspace():
        out += _split_ws(text, pos, len(text))
    return out


def _emit(text: str, pos: int, s: int, e: int, out: list) -> int:
    """Append segment [s, e) to `out`, after any characters Kiwi left out before it; -> new pos."""
    s = max(s, pos)  # Kiwi spans are ordered; be safe anyway
    if pos < s and not text[pos:s].isspace():  # characters Kiwi left out
        out += _split_ws(text, pos, s)
    if s < e:
        if _WS.search(text, s, e):
            out += _split_ws(text, s, e)
        else:
            out.append((s, e))
    return max(pos, e)


def _split_ws(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """Maximal non-whitespace runs of text[a:b]."""
    return [(m.start(), m.end()) for m in _NON_WS.finditer(text, a, b)]


_NON_WS = re.compile(r"\S+")


def _eojeol_starts(text: str, segments: Sequence[tuple[int, int]]) -> list[bool]:
    return [a == 0 or text[a - 1].isspace() or i == 0 for i, (a, _) in enumerate(segments)]


def _span_mapper(starts: list[int], ends: list[int]):
    """(a, b) in NFC coordinates -> the same span in the original string."""

    def fix(a: int, b: int) -> tuple[int, int]:
        if a >= len(starts):  # empty span at the very end
            return ends[-1], ends[-1]
        return starts[a], (ends[b - 1] if b > a else starts[a])

    return fix


def analyze(
    texts: Sequence[str],
    split_sents: bool = False,
    num_workers: int = 0,
    **kiwi_options,
) -> list[Analysis]:
    """Analyze many texts with Kiwi's worker threads. Offsets refer to each original string."""
    opts = {**DEFAULT_KIWI, **kiwi_options}
    kiwi = get_kiwi(num_workers, **opts)
    normalized = [nfc_with_offsets(t) for t in texts]
    results = kiwi.tokenize([n for n, _, _ in normalized], split_sents=split_sents)
    out: list[Analysis] = []
    for text, (norm, starts, ends), result in zip(texts, normalized, results):
        if split_sents:
            sents = [(s[0].start, s[-1].end) for s in result if s]
            toks = [t for s in result for t in s]
        else:
            sents, toks = [], result
        segs = segment_spans(norm, ((t.start, t.end) for t in toks))
        morphs = [Morpheme(t.form, t.tag, t.start, t.end) for t in toks]
        if starts is not None:  # map NFC coordinates back to the user's string
            fix = _span_mapper(starts, ends)
            segs = [fix(a, b) for a, b in segs]
            sents = [fix(a, b) for a, b in sents]
            morphs = [Morpheme(m.form, m.tag, *fix(m.start, m.end)) for m in morphs]
        out.append(Analysis(text, segs, _eojeol_starts(text, segs), sents, morphs))
    return out
