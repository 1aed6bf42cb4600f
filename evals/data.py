"""Benchmark data readers: NSMC (tab-separated) and SQuAD v1 JSON (KorQuAD 1.0), with clear errors.

NSMC (official `ratings_{train,test}.txt`, and NSMC-R, this project's rebuild):

    id<TAB>document<TAB>label          header line, then one review a line; label 0 or 1

A review may be empty (the official files hold a few). A malformed line is an InputError naming
the file and line number.

KorQuAD 1.0 / SQuAD v1: {"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id",
"question", "answers": [{"text", "answer_start"}]}]}]}]}. A malformed file is an InputError naming
the file and the JSON path of the bad field (`data[3].paragraphs[0].qas[2].answers[0].text`).

The KorQuAD protocol while only the dev file is available (`split_articles`): the dev articles in
file order, every fifth one (indices 0, 5, 10, ...) held out for scoring, the rest for
fine-tuning. On the official dev file that is 28 articles / 1,287 questions held out and 112
articles / 4,487 questions to train on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from corpus_tools.text import InputError

NSMC_HEADER = ["id", "document", "label"]


@dataclass
class Review:
    id: str
    text: str
    label: int


def read_nsmc(path: str | Path) -> list[Review]:
    """All reviews of an NSMC-format file, in file order."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file (NSMC format: id<TAB>document<TAB>label, header line)")
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise InputError(f"{path}: empty file (NSMC format: id<TAB>document<TAB>label, header line)")
    out: list[Review] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError as e:
            raise InputError(f"{path}:{n}: not valid UTF-8 (byte {e.start} of the line)") from None
        fields = line.split("\t")
        if n == 1:
            if fields != NSMC_HEADER:
                raise InputError(f"{path}:1: expected the header 'id<TAB>document<TAB>label', got {line[:60]!r}")
            continue
        if len(fields) != 3:
            raise InputError(
                f"{path}:{n}: expected 3 tab-separated fields (id, document, label), got {len(fields)}: {line[:60]!r}"
            )
        rid, text, label = fields
        if label not in ("0", "1"):
            raise InputError(f"{path}:{n}: label {label!r} is not 0 or 1")
        if not rid:
            raise InputError(f"{path}:{n}: empty id")
        if rid in seen:
            raise InputError(f"{path}:{n}: id {rid} repeats line {seen[rid]}")
        seen[rid] = n
        out.append(Review(rid, text, int(label)))
    if not out:
        raise InputError(f"{path}: no reviews after the header")
    return out


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[dict]  # [{"text", "answer_start"}], as in the file
    article: int  # index of the article in the file
    title: str = ""
    where: str = field(default="", repr=False)  # JSON path, for messages


def _need(obj, key: str, kind, where: str, path: Path):
    if not isinstance(obj, dict):
        raise InputError(f"{path}: {where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise InputError(f"{path}: {where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise InputError(f"{path}: {where}.{key}: expected {name}, got {type(value).__name__}")
    return value


def read_squad(path: str | Path) -> list[dict]:
    """The `data` list of a SQuAD v1 / KorQuAD 1.0 JSON file, every field checked."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file (SQuAD v1 / KorQuAD 1.0 JSON expected)")
    try:
        doc = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not valid UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON (column {e.colno}: {e.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise InputError(f"{path}: no top-level 'data' list (not SQuAD v1 / KorQuAD 1.0 JSON)")
    ids: dict[str, str] = {}
    for i, art in enumerate(doc["data"]):
        wa = f"data[{i}]"
        for j, para in enumerate(_need(art, "paragraphs", list, wa, path)):
            wp = f"{wa}.paragraphs[{j}]"
            _need(para, "context", str, wp, path)
            for k, qa in enumerate(_need(para, "qas", list, wp, path)):
                wq = f"{wp}.qas[{k}]"
                qid = _need(qa, "id", (str, int), wq, path)
                _need(qa, "question", str, wq, path)
                for m, ans in enumerate(_need(qa, "answers", list, wq, path)):
                    _need(ans, "text", str, f"{wq}.answers[{m}]", path)
                    _need(ans, "answer_start", int, f"{wq}.answers[{m}]", path)
                if str(qid) in ids:
                    raise InputError(f"{path}: {wq}.id: {qid!r} repeats {ids[str(qid)]}.id")
                ids[str(qid)] = wq
    if not ids:
        raise InputError(f"{path}: no questions in 'data'")
    return doc["data"]


def squad_examples(data: list[dict], path: str | Path = "", articles: list[int] | None = None,
                   need_answer: bool = False) -> list[QAExample]:
    """Flatten articles (all, or those at `articles`) into one example per question.

    need_answer=True (training data): every question must have an answer whose `answer_start`
    points at its text in the context; the first answer is the one trained on.
    """
    out = []
    for i in range(len(data)) if articles is None else articles:
        art = data[i]
        for j, para in enumerate(art["paragraphs"]):
            ctx = para["context"]
            for k, qa in enumerate(para["qas"]):
                where = f"data[{i}].paragraphs[{j}].qas[{k}]"
                if need_answer:
                    if not qa["answers"]:
                        raise InputError(f"{path}: {where}.answers: empty (a training question needs an answer)")
                    a = qa["answers"][0]
                    s, t = a["answer_start"], a["text"]
                    if not t or s < 0 or ctx[s : s + len(t)] != t:
                        raise InputError(
                            f"{path}: {where}.answers[0]: answer_start {s} does not point at the answer text "
                            f"{t!r} (the context has {ctx[max(s, 0) : max(s, 0) + len(t)]!r} there)"
                        )
                out.append(QAExample(str(qa["id"]), qa["question"], ctx, qa["answers"], i, art.get("title", ""), where))
    return out


def split_articles(n_articles: int, every: int = 5) -> tuple[list[int], list[int]]:
    """(train, held_out) article indices: every `every`-th article from 0 is held out."""
    if every < 2:
        raise InputError(f"--holdout-every must be at least 2, got {every}")
    held = list(range(0, n_articles, every))
    return [i for i in range(n_articles) if i % every], held


# -- the KorQuAD protocol with a train file ---------------------------------------------------------

# KorQuAD 1.0's (train, dev) files, as git and GitHub name their content: `korbert data get` pins these
KORQUAD_GIT_BLOBS = ("82e3c5939e5e61a1c4ae94e42676800e88ec52a6", "6849d8c79140447018f5701a0453835c96608a07")


def korquad_protocol(train: str | Path, dev: str | Path) -> str:
    """"official" when both files are KorQuAD 1.0's own (the git blob ids `korbert data get` pins),
    else "custom train file"."""
    from corpus_tools.artifacts import git_blob_id

    return "official" if (git_blob_id(train), git_blob_id(dev)) == KORQUAD_GIT_BLOBS else "custom train file"


def check_train_apart(train: list[dict], train_path: str | Path, scored: list[QAExample], dev_path: str | Path) -> None:
    """Refuse a train file (its `data` list) that holds a scored question: its id, or its paragraph's
    context, identical (NFC). Shared sentences are not refused: train and dev articles may quote the
    same Wikipedia text."""
    import unicodedata

    ids = {e.id for e in scored}
    contexts = {unicodedata.normalize("NFC", e.context) for e in scored}
    same_ids = [str(q["id"]) for a in train for p in a["paragraphs"] for q in p["qas"] if str(q["id"]) in ids]
    same_ctx = [f"data[{i}].paragraphs[{j}]" for i, a in enumerate(train) for j, p in enumerate(a["paragraphs"])
                if unicodedata.normalize("NFC", p["context"]) in contexts]
    if same_ids or same_ctx:
        def n(things: list[str], what: str) -> str:
            return f"{len(things)} {what}{'' if len(things) == 1 else 's'}" + (f" (first: {things[0]})" if things else "")

        raise InputError(f"{train_path}: shares {n(same_ids, 'question id')} and {n(same_ctx, 'paragraph context')} with the "
                         f"{len(scored):,} scored questions of {dev_path}: a train file must hold none of them")


# -- KLUE-NER ----------------------------------------------------------------------------------------

@dataclass
class NerSentence:
    guid: str
    text: str  # the sentence, spaces included
    tags: list[str]  # one per character of text (KLUE tags spaces O)


def read_klue_ner(path: str | Path) -> list[NerSentence]:
    """KLUE-NER's TSV (klue-ner-v1.1_*.tsv): "## " comment lines (the first of a sentence names its guid),
    then a CHAR<TAB>TAG line per character, spaces included; a blank line between sentences."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file (KLUE-NER; `korbert data get klue` fetches KLUE's files)")
    out: list[NerSentence] = []
    guid, chars, tags = "", [], []

    def close() -> None:
        if chars:
            out.append(NerSentence(guid or f"{path.name}:{len(out)}", "".join(chars), list(tags)))
        chars.clear()
        tags.clear()

    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip("\t\r"):  # a blank line (or a lone tab): the sentence ends
            close()
            guid = ""
        elif line.startswith("##"):
            if not chars and "\t" in line:  # (the last before the characters: the file's own header comes first)
                guid = line[2:].split("\t")[0].strip()
        else:
            ch, sep, tag = line.rstrip("\r").rpartition("\t")
            if not sep or len(ch) != 1:
                raise InputError(f"{path}:{n}: expected one character, a tab and its tag, got {line[:40]!r}")
            chars.append(ch)
            tags.append(tag)
    close()
    if not out:
        raise InputError(f"{path}: no sentences (not a KLUE-NER TSV?)")
    return out
