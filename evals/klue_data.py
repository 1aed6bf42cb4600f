"""KLUE's task files: where they are, what they pin, and readers with clear errors (KLUE-NER's TSV
is read by evals.data.read_klue_ner).

KLUE v1.1 (CC BY-SA 4.0, the KLUE authors; github.com/KLUE-benchmark/KLUE) names its files
`<stem>_train.<ext>` and `<stem>_dev.<ext>`; a data folder keeps them under `klue/` with those names.

    klue-nli   [{"guid", "premise", "hypothesis", "gold_label": entailment|neutral|contradiction, ...}]
    klue-sts   [{"guid", "sentence1", "sentence2", "labels": {"real-label": 0-5, "label" (rounded), "binary-label": 0|1}, ...}]
    ynat       [{"guid", "title", "label": one of YNAT_LABELS, ...}]
    klue-ner   see evals.data.read_klue_ner
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from corpus_tools.text import InputError

# task -> (file stem, extension)
KLUE_FILES = {"nli": ("klue-nli-v1.1", "json"), "sts": ("klue-sts-v1.1", "json"), "ner": ("klue-ner-v1.1", "tsv"), "ynat": ("ynat-v1.1", "json")}
# the git blob ids at KLUE-benchmark/KLUE 3efd98708a40ff49251fddde35453f8fbb11f536 (klue_benchmark/<stem>/<file>)
KLUE_COMMIT = "3efd98708a40ff49251fddde35453f8fbb11f536"
KLUE_GIT_BLOBS = {
    "ynat-v1.1_train.json": "e74e912a66720294bd6fe70e69b0cd131a0a10d7",
    "ynat-v1.1_dev.json": "f4fb92cc5d967b586ea5172c3da8c379ba31caf9",
    "klue-nli-v1.1_train.json": "a7903d15f09a3663d8f1d78e68d8d6c10dbd8618",
    "klue-nli-v1.1_dev.json": "db052b2459c68d1ec57dd1573bfe90a9bb3f8157",
    "klue-sts-v1.1_train.json": "4e92fce70fe9f2dbed2ffcb9c2aec7417c6d32ff",
    "klue-sts-v1.1_dev.json": "2645707503e7b25cc3d9f94103cbfb2f5a086f56",
    "klue-ner-v1.1_train.tsv": "b4f5d7dba85bb04d9dd72c7491bd62568af55cf1",
    "klue-ner-v1.1_dev.tsv": "3ed843a2e62d536fc2e2dbcc0f304ee346dda62e",
}
READER_VERSION = 1  # what the readers take from the files (e.g. STS's real-label): the feature caches are keyed on it
NLI_LABELS = ("entailment", "neutral", "contradiction")
YNAT_LABELS = ("IT과학", "경제", "사회", "생활문화", "세계", "스포츠", "정치")


def file_name(task: str, split: str) -> str:
    stem, ext = KLUE_FILES[task]
    return f"{stem}_{split}.{ext}"


def dev_files(data: str | Path) -> dict[str, Path]:
    """task -> the dev file a data folder holds under klue/ (the tasks without one left out)."""
    return {t: p for t in KLUE_FILES if (p := Path(data) / "klue" / file_name(t, "dev")).is_file()}


@dataclass
class PairExample:
    """One NLI or STS example; `label` is the class index (NLI) or the real-valued score (STS: `real-label`, the
    annotators' mean, as KLUE-baseline trains and scores on; `label` is it rounded to one decimal)."""

    guid: str
    a: str
    b: str
    label: float | int
    binary: int = -1  # STS: the file's binary-label


@dataclass
class TextExample:
    guid: str
    text: str
    label: int


def _rows(path: str | Path, what: str) -> list:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file ({what}; `korbert data get klue` fetches KLUE's files)")
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a JSON file ({what}): {e}") from None
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{path}: expected a non-empty JSON list of examples ({what})")
    return rows


def _field(path, where: str, row, name: str, kind):
    value = row.get(name) if isinstance(row, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{path}: {where}.{name}: missing or of the wrong type")
    return value


def _guids(path, out) -> None:
    seen = set()
    for e in out:
        if e.guid in seen:
            raise InputError(f"{path}: guid {e.guid!r} appears twice")
        seen.add(e.guid)


def read_nli(path: str | Path) -> list[PairExample]:
    out = []
    for i, r in enumerate(_rows(path, "KLUE-NLI")):
        label = _field(path, f"[{i}]", r, "gold_label", str)
        if label not in NLI_LABELS:
            raise InputError(f"{path}: [{i}].gold_label: {label!r} is not one of {', '.join(NLI_LABELS)}")
        out.append(PairExample(_field(path, f"[{i}]", r, "guid", str), _field(path, f"[{i}]", r, "premise", str),
                               _field(path, f"[{i}]", r, "hypothesis", str), NLI_LABELS.index(label)))
    _guids(path, out)
    return out


def read_sts(path: str | Path) -> list[PairExample]:
    out = []
    for i, r in enumerate(_rows(path, "KLUE-STS")):
        labels = _field(path, f"[{i}]", r, "labels", dict)
        score = _field(path, f"[{i}].labels", labels, "real-label" if "real-label" in labels else "label", (int, float))
        binary = labels.get("binary-label", int(score >= 3.0))
        out.append(PairExample(_field(path, f"[{i}]", r, "guid", str), _field(path, f"[{i}]", r, "sentence1", str),
                               _field(path, f"[{i}]", r, "sentence2", str), float(score), int(binary)))
    _guids(path, out)
    return out


def read_ynat(path: str | Path) -> list[TextExample]:
    out = []
    for i, r in enumerate(_rows(path, "YNAT")):
        label = _field(path, f"[{i}]", r, "label", str)
        if label not in YNAT_LABELS:
            raise InputError(f"{path}: [{i}].label: {label!r} is not one of {', '.join(YNAT_LABELS)}")
        out.append(TextExample(_field(path, f"[{i}]", r, "guid", str), _field(path, f"[{i}]", r, "title", str), YNAT_LABELS.index(label)))
    _guids(path, out)
    return out
