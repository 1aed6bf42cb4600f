"""Fine-tuning features, built once with `datasets` and cached on disk for every later run.

    features/<task>-<key16>/features.json    what the folder holds: key, tokenizer, inputs, settings,
                                              counts, and the sha256 of every Arrow file
    features/<task>-<key16>/*.arrow           the features, written by Dataset.map(batched=True)

The key (also passed to `Dataset.map` as `new_fingerprint`) is the sha256 of the tokenizer files,
the input file's sha256 and the feature settings (max length; for KorQuAD stride and question
length), and for korbert's tokenizer the installed kiwipiepy and kiwipiepy_model versions (another
Kiwi may segment otherwise). Where Kiwi is not installed, the newest complete set of the same
tokenizer, input and settings is read, whichever Kiwi built it: nothing here could build another. Features cover the whole input file, so the pretrained model and its control, reruns,
other seeds and other training-set sizes all read the same cache; the selection (train/valid
split, --max-train-examples) happens when the cache is read.

Reading a cache loads neither the tokenizer nor Kiwi: fine-tuning and scoring run where `import
kiwipiepy` fails (a GPU machine without it) once the features were built elsewhere. A cache is
never used silently when it is stale: another tokenizer or other settings give another key (and
another folder); a file that changed since it was written (truncated, edited) is an error that
says to rebuild (--rebuild-features).

Runs started together on one features folder (seeds side by side) may build the same set at once:
each builds into a folder of its own (`<task>-<key16>.partial-<pid>-<random>`) and renames it into
place; the first rename wins, and the others discard their copy and read the winner's, checked
as any cached set is. A build folder is never removed while its build may still run: one left by
a killed process goes once nothing in it has changed for STALE_HOURS.

NSMC: `[CLS] review [SEP]`, cut at max length, exactly as `tok(texts, truncation=True)`.

KorQuAD: each distinct context is tokenized once (not once per question), each question once
(cut after `max_query_len` tokens, by offsets, then tokenized again when cut); the windows are
assembled from these token lists the way the tokenizer's own `truncation="only_second", stride=`
overflow does it (tests/test_features.py checks they are identical), with the tokenizer's own
special-token layout (read from one probe encoding, so BERT's [CLS] q [SEP] c [SEP] and RoBERTa's
<s> q </s></s> c </s> both come out right).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from corpus_tools.artifacts import atomic_write_json, sha256_file
from corpus_tools.text import InputError

VERSION = 1
STALE_HOURS = 6  # a build folder unchanged this long belongs to a process that died
STATS: Counter = Counter()  # "built" / "reused" feature sets in this process (tests read it)


@dataclass
class Cached:
    """A feature set: the rows as Python lists (column -> list) and what features.json says."""

    columns: dict
    meta: dict
    folder: Path
    built: bool

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def rows(self, idxs=None) -> list[dict]:
        names = list(self.columns)
        idxs = range(len(self)) if idxs is None else idxs
        return [{k: self.columns[k][i] for k in names} for i in idxs]


def default_dir(out: str) -> Path:
    """The cache beside a run's output folder: runs/x/nsmc/model -> runs/x/nsmc/features (so a
    model and its control share it)."""
    return Path(out).resolve().parent / "features"


def _key(task: str, tokenizer_sha256: str, inputs: dict, settings: dict, kiwi: dict | None = None) -> str:
    ident = {"version": VERSION, "task": task, "tokenizer_files": tokenizer_sha256, "inputs": inputs, "settings": settings}
    if kiwi is not None:  # korbert's tokenizer runs Kiwi (other tokenizers: the key is as before)
        ident["kiwi"] = kiwi
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def _built_under_any_kiwi(root: Path, task: str, base: str) -> tuple[Path, str] | None:
    """(folder, key) of the newest complete set whose key, Kiwi left out, is `base` (a set from before
    the key named Kiwi has `base` as its key)."""
    found = []
    for d in root.glob(f"{task}-*"):
        m = None if ".partial-" in d.name else _read_meta(d)
        if m and m.get("complete") and base in (m.get("base_key"), m.get("key")):
            found.append(((d / "features.json").stat().st_mtime, d, m["key"]))
    return max(found)[1:] if found else None


def _read_meta(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "features.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _others(root: Path, task: str) -> str:
    """What else the cache folder holds for this task (for the miss message)."""
    found = []
    for d in sorted(root.glob(f"{task}-*")):
        m = _read_meta(d)
        if m:
            found.append(f"{d.name} (tokenizer {m['tokenizer']['files_sha256'][:12]}, {json.dumps(m['settings'], sort_keys=True)})")
    return "; it holds " + ", ".join(found) if found else ""


def get(root: str | Path, task: str, mf, inputs: dict[str, str], settings: dict, build, rebuild: bool = False) -> Cached:
    """The cached features of (`task`, model folder `mf`'s tokenizer, `inputs` {name: path},
    `settings`), built first with `build(tok, folder, key) -> (columns names, counts)` when absent.

    `build` writes its Arrow files into `folder` (this process's own build folder) with
    Dataset.map(new_fingerprint=key, cache_file_name=folder/NAME.arrow); this function then writes
    features.json, last, and renames the folder into place (see _publish)."""
    root = Path(root)
    records = {name: sha256_file(path) for name, path in inputs.items()}
    from corpus_tools.morph import kiwi_versions

    kiwi = kiwi_versions() if mf.kind == "korbert" else None
    base, key = _key(task, mf.tokenizer_sha256, records, settings), _key(task, mf.tokenizer_sha256, records, settings, kiwi)
    folder = root / f"{task}-{key[:16]}"
    if kiwi == {} and not rebuild:  # no Kiwi here: a set built under any Kiwi is the only one there can be
        folder, key = _built_under_any_kiwi(root, task, base) or (folder, key)
    cached = None if rebuild else _reuse(folder, key, mf)
    if cached is not None:
        return cached

    _remove_stale(root)
    tmp = folder.with_name(f"{folder.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        try:
            tok = mf.tokenizer()
            tmp.mkdir(parents=True)
            t0 = time.time()
            names, counts = build(tok, tmp, key)
        except ImportError as e:  # kiwipiepy missing: only the cache could have helped
            raise InputError(
                f"{root}: no cached {task} features for {mf.where} with {json.dumps(settings, sort_keys=True)}"
                f"{_others(root, task)}; building them needs the tokenizer, which cannot run here ({e}). Build them "
                f"where it can (the same command with --features DIR) and bring DIR along"
            ) from None
        files = {n: {"bytes": (tmp / n).stat().st_size, "sha256": sha256_file(tmp / n)} for n in names}
        meta = {
            "kind": "features", "version": VERSION, "task": task, "key": key, "complete": True,
            "tokenizer": {
                "files_sha256": mf.tokenizer_sha256, "fingerprint": mf.tokenizer_fingerprint(tok),
                "class": type(tok).__name__, "size": len(tok), "pad_token_id": tok.pad_token_id or 0,
            },
            **({"kiwi": kiwi, "base_key": base} if kiwi is not None else {}),
            "model_folder": str(mf.path), "inputs": {n: {"path": str(p), "sha256": records[n]} for n, p in inputs.items()},
            "settings": settings, "counts": counts, "files": files, "seconds": round(time.time() - t0, 2),
        }
        atomic_write_json(tmp / "features.json", meta)
        columns = _load_columns(tmp, names)
        if not _publish(tmp, folder, key, replace=rebuild):
            cached = _reuse(folder, key, mf)  # another process's copy came first: it is the cache
            if cached is not None:  # (None only if a --rebuild-features elsewhere is replacing it: ours is as good)
                return cached
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # ours, unless it was renamed into place
    STATS["built"] += 1
    return Cached(columns, meta, folder, built=True)


def _complete(folder: Path, key: str) -> dict | None:
    """features.json of `folder` when it says the folder holds all of `key`'s features."""
    meta = _read_meta(folder)
    return meta if meta is not None and meta.get("key") == key and meta.get("complete") else None


def _reuse(folder: Path, key: str, mf) -> Cached | None:
    """The cached features in `folder`, every file checked against features.json; None when the
    folder holds no complete set of `key`."""
    meta = _complete(folder, key)
    if meta is None:
        return None
    for name, rec in meta["files"].items():
        f = folder / name
        if not f.is_file() or f.stat().st_size != rec["bytes"] or sha256_file(f) != rec["sha256"]:
            raise InputError(
                f"{f}: cached features changed or truncated since they were written (features.json has "
                f"{rec['bytes']:,} bytes, sha256 {rec['sha256'][:12]}): rerun with --rebuild-features, or delete {folder}"
            )
    want = mf.trained_tokenizer_hash
    if want and meta["tokenizer"].get("fingerprint") not in (None, want):
        raise InputError(
            f"{folder}: features made with tokenizer {meta['tokenizer']['fingerprint'][:12]}, but {mf.where} says the "
            f"model was trained with {want[:12]}: the folder mixes a model and a foreign tokenizer"
        )
    STATS["reused"] += 1
    return Cached(_load_columns(folder, meta["files"]), meta, folder, built=False)


def _publish(tmp: Path, folder: Path, key: str, replace: bool) -> bool:
    """Renames the finished build folder `tmp` to `folder`: True when it did, False when another
    process's rename came first (a complete folder of `key` is there; it stays). A `folder` that is
    not complete, or any with `replace` (--rebuild-features), is first renamed aside and removed."""
    if folder.exists() and (replace or _complete(folder, key) is None):
        old = folder.with_name(f"{folder.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            folder.rename(old)
        except OSError:  # already moved by another process replacing it
            pass
        shutil.rmtree(old, ignore_errors=True)
    try:
        tmp.rename(folder)  # atomic; fails when `folder` exists (not empty)
        return True
    except OSError:
        if _complete(folder, key) is not None:
            return False
        raise


def _remove_stale(root: Path) -> None:
    """Removes the build folders (`*.partial*`) of `root` left by killed processes: those where
    nothing (the folder, or a file in it) has changed for STALE_HOURS. A running build writes its
    files as it goes, so it is never one of them; the pid in a name is not relied on (another
    machine, or another container, may share the folder)."""
    for d in root.glob("*.partial*"):
        try:
            newest = max(p.stat().st_mtime for p in (d, *d.iterdir()))
        except OSError:  # removed or renamed meanwhile
            continue
        if time.time() - newest > STALE_HOURS * 3600:
            shutil.rmtree(d, ignore_errors=True)


def _load_columns(folder: Path, names) -> dict:
    """The Arrow files `names` of `folder` as {column: Python list}. `datasets` writes them in
    Arrow's streaming IPC format; pyarrow reads them directly, so fine-tuning from a cache needs
    neither Kiwi nor `datasets` (a GPU machine may have neither)."""
    import pyarrow as pa

    columns = {}
    for name in names:
        with pa.memory_map(str(folder / name)) as src:
            table = pa.ipc.open_stream(src).read_all()
        for col in table.column_names:
            columns[col] = table.column(col).to_pylist()
    return columns


def _map(rows: dict, fn, folder: Path, name: str, key: str, desc: str, batch_size: int = 1000):
    """Dataset.from_dict(rows).map(fn, batched=True) into folder/name, keyed by `key`."""
    from datasets import Dataset, disable_progress_bars, enable_progress_bars, is_progress_bar_enabled

    ds = Dataset.from_dict(rows)
    quiet = not sys.stderr.isatty()
    was = is_progress_bar_enabled()
    if quiet:
        disable_progress_bars()
    try:
        return ds.map(fn, batched=True, batch_size=batch_size, remove_columns=ds.column_names, new_fingerprint=hashlib.sha256(f"{key}-{name}".encode()).hexdigest(),
                      cache_file_name=str(folder / name), desc=desc)
    finally:
        if quiet and was:
            enable_progress_bars()


# -- NSMC ------------------------------------------------------------------------------------------


def nsmc(root, mf, path: str, rows: list, max_len: int, rebuild: bool = False) -> Cached:
    """input_ids, token_type_ids, label of every review of `path` (`rows` = evals.data.read_nsmc)."""
    if max_len < 3:
        raise InputError(f"--max-len must be at least 3, got {max_len}")

    def build(tok, folder: Path, key: str):
        def fn(batch):
            enc = tok(batch["text"], truncation=True, max_length=max_len)
            types = enc.get("token_type_ids") or [[0] * len(x) for x in enc["input_ids"]]
            return {"input_ids": enc["input_ids"], "token_type_ids": types, "label": batch["label"]}

        ds = _map({"text": [r.text for r in rows], "label": [r.label for r in rows]}, fn, folder, "reviews.arrow", key,
                  f"features {Path(path).name}")
        import pyarrow.compute as pc

        tokens = pc.sum(pc.list_value_length(ds.data.column("input_ids").combine_chunks())).as_py() or 0
        return ["reviews.arrow"], {"reviews": len(ds), "tokens": tokens}

    return get(root, "nsmc", mf, {"file": path}, {"max_len": max_len}, build, rebuild)


# -- KorQuAD ---------------------------------------------------------------------------------------


def pair_layout(tok) -> list[tuple]:
    """The tokenizer's special-token layout for a pair, from one probe encoding: a list of
    ("special", id, type_id) / ("A", type_id) / ("B", type_id) in order."""
    enc = tok("가", "나", return_token_type_ids=True)
    seq = enc.sequence_ids(0)
    ids, types = enc["input_ids"], enc.get("token_type_ids") or [0] * len(enc["input_ids"])
    layout: list[tuple] = []
    for i, s in enumerate(seq):
        if s is None:
            layout.append(("special", ids[i], types[i]))
        elif not layout or layout[-1][0] != "AB"[s]:
            layout.append(("AB"[s], types[i]))
    if [x[0] for x in layout if x[0] != "special"] != ["A", "B"]:
        raise InputError(f"{type(tok).__name__}: cannot read its pair layout from {enc['input_ids']}")
    return layout


def windows(layout, q_ids: list[int], c_ids: list[int], c_offs: list, max_len: int, stride: int):
    """The windows of one question over its context, as the tokenizer's `truncation="only_second"`
    overflow makes them: [(input_ids, token_type_ids, offsets (None outside the context))]."""
    n_special = sum(x[0] == "special" for x in layout)
    budget = max_len - len(q_ids) - n_special
    if len(q_ids) + len(c_ids) + n_special <= max_len:
        parts = [(0, len(c_ids))]
    else:
        if budget <= stride:
            raise InputError(f"max_len {max_len}: no room for the context beside a {len(q_ids)}-token question with stride {stride}")
        parts, start = [], 0
        while True:
            stop = min(start + budget, len(c_ids))
            parts.append((start, stop))
            if stop == len(c_ids):
                break
            start += budget - stride
    out = []
    for a, b in parts:
        ids, types, offs = [], [], []
        for item in layout:
            if item[0] == "special":
                ids.append(item[1]), types.append(item[2]), offs.append(None)
            elif item[0] == "A":
                ids += q_ids
                types += [item[1]] * len(q_ids)
                offs += [None] * len(q_ids)
            else:
                ids += c_ids[a:b]
                types += [item[1]] * (b - a)
                offs += [tuple(o) for o in c_offs[a:b]]
        out.append((ids, types, offs))
    return out


def answer_tokens(offsets: list, start_char: int, end_char: int) -> tuple[int, int]:
    """(start, end) token indices of the answer [start_char, end_char) in one window: the context
    tokens holding its first and last characters; (0, 0) = [CLS] when the window does not hold
    the whole answer."""
    ctx = [k for k, o in enumerate(offsets) if o is not None]
    if not ctx or offsets[ctx[0]][0] > start_char or offsets[ctx[-1]][1] < end_char:
        return 0, 0
    s = next(k for k in ctx if offsets[k][1] > start_char)
    e = next(k for k in reversed(ctx) if offsets[k][0] < end_char)
    return s, e


def answer_chars(context: str, answers: list[dict]) -> tuple[int, int]:
    """[start, end) of the first answer in the context, surrounding whitespace left out (a few
    official answers end with a space, which no token covers); (-1, -1) without an answer."""
    if not answers:
        return -1, -1
    a = answers[0]
    start, end = a["answer_start"], a["answer_start"] + len(a["text"])
    while end > start + 1 and context[end - 1].isspace():
        end -= 1
    while start < end - 1 and context[start].isspace():
        start += 1
    return start, end


def korquad(root, mf, path: str, examples: list, max_len: int, stride: int, max_query_len: int, rebuild: bool = False) -> Cached:
    """The windows of every question of `path` (`examples` = all its questions, in file order):
    input_ids, token_type_ids, example (index into `examples`), offsets ([start, end] for context
    tokens, [-1, -1] elsewhere), start_positions / end_positions of the first answer."""
    if max_len - max_query_len - 3 <= stride:
        raise InputError(f"--max-len {max_len} leaves no room: it must exceed --max-query-len + 3 + --stride ({max_query_len + 3 + stride})")

    def build(tok, folder: Path, key: str):
        if not getattr(tok, "is_fast", False):
            raise InputError(
                f"{mf.where}: its tokenizer ({type(tok).__name__}) gives no character offsets, which KorQuAD's answer "
                f"spans need: save a fast tokenizer (tokenizer.json) with the model"
            )
        layout = pair_layout(tok)
        contexts: dict[str, int] = {}
        for e in examples:
            contexts.setdefault(e.context, len(contexts))

        def tok_contexts(batch):
            # (whole contexts, cut into windows below: transformers' "longer than the maximum" notice does not apply)
            enc = tok(batch["context"], add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            return {"ids": enc["input_ids"], "offsets": [[list(o) for o in offs] for offs in enc["offset_mapping"]]}

        cds = _map({"context": list(contexts)}, tok_contexts, folder, "contexts.arrow", key, "features: contexts", 64)
        c_ids = cds.data.column("ids").to_pylist()
        c_offs = cds.data.column("offsets").to_pylist()
        del cds
        (folder / "contexts.arrow").unlink()  # an intermediate: the windows hold what is needed

        def tok_questions(batch):
            qs = [q.lstrip() for q in batch["question"]]
            enc = tok(qs, add_special_tokens=False, return_offsets_mapping=True)
            ids = list(enc["input_ids"])
            cut = [i for i, offs in enumerate(enc["offset_mapping"]) if len(offs) > max_query_len]
            if cut:  # cut after the max_query_len-th token, then tokenized again (what the pair call sees)
                again = tok([qs[i][: enc["offset_mapping"][i][max_query_len - 1][1]] for i in cut], add_special_tokens=False)
                for i, x in zip(cut, again["input_ids"]):
                    ids[i] = x
            out = {k: [] for k in ("input_ids", "token_type_ids", "offsets", "example", "start_positions", "end_positions")}
            for q, ex, ci, s, e in zip(ids, batch["example"], batch["context"], batch["answer_start"], batch["answer_end"]):
                for w_ids, w_types, w_offs in windows(layout, q, c_ids[ci], c_offs[ci], max_len, stride):
                    a, b = answer_tokens(w_offs, s, e) if s >= 0 else (0, 0)
                    out["input_ids"].append(w_ids)
                    out["token_type_ids"].append(w_types)
                    out["offsets"].append([list(o) if o is not None else [-1, -1] for o in w_offs])
                    out["example"].append(ex)
                    out["start_positions"].append(a)
                    out["end_positions"].append(b)
            return out

        spans = [answer_chars(e.context, e.answers) for e in examples]
        rows = {
            "question": [e.question for e in examples], "example": list(range(len(examples))),
            "context": [contexts[e.context] for e in examples],
            "answer_start": [s for s, _ in spans], "answer_end": [e for _, e in spans],
        }
        wds = _map(rows, tok_questions, folder, "windows.arrow", key, "features: questions", 256)
        return ["windows.arrow"], {"questions": len(examples), "contexts": len(contexts), "windows": len(wds)}

    cached = get(root, "korquad", mf, {"file": path}, {"max_len": max_len, "stride": stride, "max_query_len": max_query_len}, build, rebuild)
    cached.columns["offsets"] = [[tuple(o) if o[0] >= 0 else None for o in offs] for offs in cached.columns["offsets"]]
    return cached


# -- KLUE ------------------------------------------------------------------------------------------


def klue(root, mf, task: str, path: str, rows: dict, max_len: int, rebuild: bool = False) -> Cached:
    """KLUE features of every example of `path` (`task`: klue-nli, klue-sts, klue-ner or ynat). `rows`: {"a": texts, "b": second texts or absent,
    "label": labels} for the sentence tasks (NLI, STS: `[CLS] a [SEP] b [SEP]` cut longest first; YNAT:
    `[CLS] a [SEP]`), {"text", "tags"} for NER: input_ids, token_type_ids, each token's character
    offsets and its tag index (evals.klue_metric.token_tags; -100 on special tokens, never trained on).
    Cut at max length, exactly as `tok(..., truncation=True)`."""
    if max_len < 3:
        raise InputError(f"--max-len must be at least 3, got {max_len}")
    ner = "tags" in rows

    def build(tok, folder: Path, key: str):
        from evals.klue_metric import NER_TAGS, token_tags

        index = {t: i for i, t in enumerate(NER_TAGS)}

        def fn(batch):
            if ner:
                enc = tok(batch["text"], truncation=True, max_length=max_len, return_offsets_mapping=True)
            else:
                enc = tok(batch["a"], batch["b"] if "b" in batch else None, truncation=True, max_length=max_len)
            out = {"input_ids": enc["input_ids"], "token_type_ids": enc.get("token_type_ids") or [[0] * len(x) for x in enc["input_ids"]]}
            if not ner:
                return {**out, "label": batch["label"]}
            offsets, labels = [], []
            for i, (text, tags) in enumerate(zip(batch["text"], batch["tags"])):
                seq = enc.sequence_ids(i)
                offs = [list(o) if s is not None else [0, 0] for o, s in zip(enc["offset_mapping"][i], seq)]
                gold = token_tags(text, tags, [tuple(o) for o in offs])
                offsets.append(offs)
                labels.append([index[t] if s is not None else -100 for t, s in zip(gold, seq)])
            return {**out, "offsets": offsets, "labels": labels}

        ds = _map(rows, fn, folder, "examples.arrow", key, f"features {Path(path).name}")
        import pyarrow.compute as pc

        tokens = pc.sum(pc.list_value_length(ds.data.column("input_ids").combine_chunks())).as_py() or 0
        return ["examples.arrow"], {"examples": len(ds), "tokens": tokens}

    from evals.klue_data import READER_VERSION

    # (the rules that make the rows are in the key: how the readers take labels, how NER tags go to tokens)
    settings = {"max_len": max_len, "reader": READER_VERSION, **({"tags": "first non-space character, v1"} if ner else {})}
    return get(root, task, mf, {"file": path}, settings, build, rebuild)
