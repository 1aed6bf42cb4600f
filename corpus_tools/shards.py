"""Stage 2: raw text -> BERT pretraining instances (NSP pairs + MLM) in checksummed shards.

    korbert shards --tokenizer runs/vocab --inputs corpus/*.jsonl.gz --out runs/shards

Files, one role each: this module is the driver (plan, resume, manifest, report, `--show`);
corpus_tools/shards_config.py holds its settings;
corpus_tools/pieces.py cuts the inputs into pieces; corpus_tools/shard_task.py turns one piece into
one shard (read -> `clean` -> filters, every skip counted by reason -> `KorBertTokenizer.encode_documents`,
one Kiwi pass per batch -> BERT's recipe -> columns); corpus_tools/pairs.py is BERT's recipe (its rules
are described there); corpus_tools/engine.py runs the tasks here or on Dask.

Pieces, determinism and resume. The inputs are cut into pieces of about `shard_mb` MB
(corpus_tools/pieces.py: byte ranges of plain files, stretches of a .gz stream; a Parquet file's
row groups, whatever their size), each cut at a document boundary; one piece is one task and one
shard (train + valid). A document is known by its file's sha256 and the byte offset where it starts
(a Parquet file: its row) (`document_key`): it goes to the validation
split when a hash of (seed, key) falls below `valid_fraction`, and every random choice for it comes
from (seed, key) alone: its first `DRAWS` choices from counter-based uniforms (`pairs.draw_uniforms`:
splitmix64 of seed, key and the draw's number, for a whole batch at once), any further ones (long
documents) and the binomials of truncation from a PCG64 generator seeded with (seed, key) (`Draws`;
packed and static shards use the generator alone); the masks of its instances (static shards, the
statistics) come from the training loader's `mask_batch` keyed by (seed, key, the instance's number
in the document) (corpus_tools/masking.py). So a shard's bytes depend only on its piece: the same
inputs + options give byte-identical shards in one process (no option), on a local Dask cluster
(`--workers N`) or on a running one (`--scheduler`), whatever was redone.

The tasks run here one after the other, or on Dask workers (one Kiwi each: Kiwi cannot be
pickled); this process plans the pieces (it decompresses .gz inputs and hands their pieces out)
and records each finished one, with its files' sha256, as one line appended to `progress.jsonl`
(flushed and fsynced; a last line torn by a kill is ignored). A restarted run skips the recorded
pieces whose files are intact and builds the rest; a task whose worker dies is run again by Dask.
`manifest.json` is written last.

The shard format (columns, dtypes, manifest) and its reader: corpus_tools/shard_format.py; the
masking: corpus_tools/masking.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, file_record, read_manifest, sha256_file, write_manifest
from corpus_tools.shard_format import (
    FORMAT_VERSION, IGNORE, SPLITS, TOKENIZER_DIR, MaskConfig, tokenizer_dir,
    open_shards, shard_columns,
)
from corpus_tools.engine import run_dask, run_here
from corpus_tools.guard import Found, policy
from corpus_tools.masking import MASKING_VERSION, masked_instance
from corpus_tools.morph import default_threads
from corpus_tools.pieces import Piece, file_id, is_streamed, parquet_pieces, ranged_pieces, stream_pieces
from corpus_tools.shard_task import DYNAMIC_STATS_EVERY, DYNAMIC_STATS_FIRST, Job, build_piece
from corpus_tools.shards_config import ShardsConfig
from corpus_tools.text import InputError, expand_inputs, format_of, open_parquet

PROGRESS = "progress.jsonl"  # {"key"}, then {"piece", "record"} per finished piece: appended to, never rewritten
OLD_PROGRESS = "progress.json"  # what korbert wrote before: one object, rewritten after every piece


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------


def _check(cfg: ShardsConfig) -> None:
    problems = [
        (cfg.max_seq_len < 8 or cfg.max_seq_len > 32767, f"--max-seq-len must be in 8..32767, not {cfg.max_seq_len}"),
        (not 0 <= cfg.short_seq_prob <= 1, "--short-seq-prob must be in [0, 1]"),
        (not 0 < cfg.mask_prob < 1, "--mask-prob must be in (0, 1)"),
        (not 0 <= cfg.valid_fraction < 1, "--valid-fraction must be in [0, 1)"),
        (cfg.dupe_factor < 1, "--dupe-factor must be >= 1"),
        (min(cfg.batch_docs, cfg.batch_chars) < 1, "--batch-docs and --batch-chars must be >= 1"),
        (not cfg.shard_mb > 0, "--shard-mb must be > 0"),
        (cfg.workers < 0 or cfg.kiwi_threads < 0, "--workers and --kiwi-threads must be >= 0"),
        (bool(cfg.workers and cfg.scheduler), "--workers starts a cluster, --scheduler uses a running one: pass one of them"),
        (cfg.instances == "packed" and cfg.masking == "static", "--instances packed needs --masking dynamic (static copies are not packed)"),
        (not cfg.nsp and cfg.instances != "packed", "--no-nsp needs --instances packed (a document's instances without NSP: pack them)"),
    ]
    for bad, msg in problems:
        if bad:
            raise InputError(msg)


MODEL_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "spm.model")  # a korbert model folder's tokenizer


def _load_tokenizer(folder: str):
    """A korbert tokenizer folder (`korbert vocab`), a korbert model folder (its final/), or any local
    transformers folder with a fast tokenizer (korbert/foreign.py) -> (tokenizer, its manifest)."""
    from korbert import foreign
    from korbert.folders import TOKENIZER_FILES

    where = f"--tokenizer {folder}"
    if not Path(folder).is_dir():
        raise InputError(f"{where}: no such folder")
    tok = foreign.load(folder, where)
    fingerprint = foreign.fingerprint(tok, folder)
    try:
        tm = read_manifest(folder, "vocab")
    except (FileNotFoundError, ValueError):  # a model folder: a korbert model's, or another's with its own tokenizer
        if foreign.is_korbert(folder):
            try:
                m = read_manifest(folder, "model")
            except (FileNotFoundError, ValueError) as e:
                raise InputError(f"{where}: {e}") from None
            names, tokenizer_hash = MODEL_TOKENIZER_FILES, m["tokenizer_hash"]
        else:
            names, tokenizer_hash = TOKENIZER_FILES, fingerprint
        files = [n for n in names if Path(folder, n).is_file()]
        tm = {"tokenizer_hash": tokenizer_hash, "files": {n: sha256_file(Path(folder, n)) for n in files}, "model": str(folder),
              "tokenizer_class": type(tok).__name__}
    if fingerprint != tm["tokenizer_hash"]:
        raise InputError(f"{where}: files differ from its manifest.json (hash {fingerprint[:12]} != {tm['tokenizer_hash'][:12]})")
    return tok, tm


def _copy_tokenizer(src: str, tm: dict, dest: Path) -> list[str]:
    """The tokenizer files into dest/tokenizer/, with a tokenizer manifest (a model folder's
    tokenizer gets one written, naming the model)."""
    from corpus_tools.vocab import FORMAT_VERSION as VOCAB_FORMAT

    names = sorted(tm["files"])
    for name in names + ([] if "model" in tm else ["manifest.json"]):
        target = dest / TOKENIZER_DIR / name
        data = Path(src, name).read_bytes()
        if not target.is_file() or target.read_bytes() != data:
            atomic_write_bytes(target, data)
    if "model" in tm:
        write_manifest(dest / TOKENIZER_DIR, "vocab", VOCAB_FORMAT, files=names, tokenizer_hash=tm["tokenizer_hash"], from_model=tm["model"],
                       tokenizer_class=tm["tokenizer_class"])
    return [f"{TOKENIZER_DIR}/{n}" for n in names + ["manifest.json"]]


def _shard_files(folder: Path) -> list[Path]:
    return [p for p in folder.glob("*-*.*.npy") if p.name.split("-")[0] in SPLITS]


_SPLIT_INTS = (
    "documents", "instances", "tokens", "random_next", "forced_random_next", "single_sentence_split",
    "single_sentence_split_by_morpheme", "single_sentence_suffix_dropped_tokens", "isnext_fallback", "unpaired_chunks",
    "truncated", "special_ids_in_text", "document_separators", "empty_segment_dropped",
)
_MASK_INTS = ("candidate_tokens", "masked", "as_mask", "as_random", "as_keep")


def _split_summary(c: Counter, nsp: bool = True) -> dict:
    """Integer counts of one split -> the manifest's counts, shares included (no NSP: no IsNext shares)."""
    n, free, m = c["instances"], c["instances"] - c["forced_random_next"], c["masked"]
    share = lambda x, y: round(x / y, 4) if y and nsp else None  # noqa: E731
    mshare = lambda x, y: round(x / y, 4) if y else None  # noqa: E731
    return {
        **{k: c[k] for k in _SPLIT_INTS},
        "tokens_per_instance": round(c["tokens"] / n, 2) if n else None,
        "isnext": n - c["random_next"] if nsp else None,
        "isnext_share": share(n - c["random_next"], n),
        "isnext_share_when_free": share(n - c["random_next"], free),  # leaving out the chunks forced to NotNext
        "forced_random_next_share": share(c["forced_random_next"], n),
        "masking": {
            **{k: c[k] for k in _MASK_INTS},
            "masked_share": mshare(m, c["candidate_tokens"]),  # of non-special tokens
            "mask_share": mshare(c["as_mask"], m),
            "random_share": mshare(c["as_random"], m),
            "keep_share": mshare(c["as_keep"], m),
        },
    }


def _summarize(chunks: list[dict], nsp: bool = True) -> dict:
    """Totals over the pieces' records (each holds its reader's skips too): documents in = used + skipped, always."""
    docs, skipped, first, found = Counter(), Counter(), {}, Found()
    splits = {s: Counter() for s in SPLITS}
    for ch in chunks:
        docs.update(ch["documents"])
        skipped.update(ch["skipped"])
        for r, w in ch["first_skip_at"].items():
            first.setdefault(r, w)
        found.update(ch)
        for s in SPLITS:
            splits[s].update(ch["splits"][s])
    if docs["documents_in"] != docs["documents_used"] + sum(skipped.values()):  # every document is accounted for
        raise AssertionError(f"documents in {docs['documents_in']} != used {docs['documents_used']} + skipped {dict(skipped)}")
    return {
        "documents_in": docs["documents_in"],
        "documents_used": docs["documents_used"],
        "documents_skipped": dict(sorted(skipped.items())),
        "first_skip_at": dict(sorted(first.items())),
        **found.counts(),
        "sentences": docs["sentences"],
        "document_tokens": docs["document_tokens"],
        **{s: _split_summary(c, nsp) for s, c in splits.items()},
    }


def _kiwi(folder: Path) -> dict:
    """The installed kiwipiepy and kiwipiepy_model versions; where Kiwi is not installed (nothing here
    could rebuild the shards), the ones the finished shards in `folder` record, so they still match."""
    from corpus_tools.morph import KIWI_PACKAGES, kiwi_versions

    now = kiwi_versions()
    if now or not (folder / "manifest.json").is_file():
        return now
    return {k: v for k, v in read_manifest(folder, "shards").get("versions", {}).items() if k in KIWI_PACKAGES}


def _same_kiwi_key(folder: Path, before: str, key: str) -> str:
    """`key` (with the Kiwi versions), or the key shards built before korbert keyed on Kiwi have (`before`)
    when `folder` holds such shards and the Kiwi they record is the one installed: they stay usable, and
    so do the pretraining runs keyed on them."""
    if (folder / "manifest.json").is_file():
        from corpus_tools.morph import kiwi_differs

        try:
            old = read_manifest(folder, "shards")
        except (OSError, ValueError):
            return key  # (what the folder holds is judged where it is opened)
        if old.get("key") == before and not kiwi_differs(old.get("versions", {}), strict=True):
            return before
    return key


def _existing(folder: Path, key: str, force: bool) -> tuple[dict | None, dict]:
    """What `folder` already holds: (its manifest if it is finished with this key, None) and the
    pieces to keep (piece -> record: finished shards whose files are intact). Anything else is refused."""
    if force and folder.is_dir():
        for p in _shard_files(folder) + [folder / PROGRESS, folder / OLD_PROGRESS, folder / "manifest.json"]:
            p.unlink(missing_ok=True)
    done: dict = {}
    if (folder / "manifest.json").is_file():
        old = read_manifest(folder, "shards")
        if old.get("key") == key:
            return old, done
        raise InputError(f"{folder} holds shards made with other options, inputs or shard format; pass --force to replace them, or choose another --out")
    if (folder / OLD_PROGRESS).is_file():
        raise InputError(f"{folder} holds an unfinished run of an older korbert ({OLD_PROGRESS}); pass --force to replace it, or choose another --out")
    if (folder / PROGRESS).is_file():
        old_key, records = _read_progress(folder / PROGRESS)
        if old_key not in (None, key):  # (None: killed before its first line was whole, so nothing is recorded)
            raise InputError(f"{folder} holds an unfinished run with other options, inputs or shard format; pass --force to replace it, or choose another --out")
        for k, rec in records.items():  # keep a recorded shard only if its files are intact
            files = [(folder / n, d) for sh in rec["shards"].values() for n, d in sh["files"].items()]
            if all(p.is_file() and sha256_file(p) == d for p, d in files):
                done[k] = rec
        print(f"{folder}: resuming, {len(done)} shard(s) already done", file=sys.stderr)
    elif folder.is_dir() and _shard_files(folder):
        raise InputError(f"{folder} holds shard files but no {PROGRESS} or manifest.json; pass --force to replace them")
    return None, done


def _line(obj: dict) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def _read_progress(path: Path) -> tuple[str | None, dict]:
    """progress.jsonl -> (its key, {piece: record}). A last line without its newline (torn by a kill
    while it was appended) is ignored: that piece is built again."""
    lines = path.read_bytes().split(b"\n")[:-1]  # what follows the last newline: nothing, or a torn line
    try:
        rows = [json.loads(line) for line in lines]
    except ValueError:
        raise InputError(f"{path}: a line is not JSON (edited?); pass --force to start over") from None
    return (rows[0]["key"] if rows else None), {r["piece"]: r["record"] for r in rows[1:]}


def _append_line(f, obj: dict) -> None:
    """One JSON line, on disk (flush + fsync) before the next piece is recorded."""
    f.write(_line(obj))
    f.flush()
    os.fsync(f.fileno())


KEYS = 2  # how documents are keyed: 2 = (file sha256, byte offset; a Parquet file's row), in pieces; 1 = by global index (before Dask)



def _pieces(files: list[Path], inputs: list[dict], cfg: ShardsConfig) -> Iterator[tuple[Piece, bytes | None]]:
    """Every piece of the inputs, in order: ranged ones from the files' sizes, Parquet row groups
    from the files' footers, streamed ones as the .gz (or PATH@N) files are read."""
    piece_bytes = max(1, int(cfg.shard_mb * 1e6))
    for f, (path, rec) in enumerate(zip(files, inputs)):
        fid = file_id(rec["sha256"])
        if format_of(path) == "parquet":
            yield from ((p, None) for p in parquet_pieces(f, path, fid, cfg.text_field))
        elif is_streamed(path):
            yield from stream_pieces(f, path, fid, piece_bytes, cfg.one_doc_per_line)
        else:
            yield from ((p, None) for p in ranged_pieces(f, path, rec["bytes"], fid, piece_bytes))


def main(cfg: ShardsConfig, on_piece: Callable[[str], None] | None = None, ready_only: bool = False) -> dict:
    """Build the shards. on_piece(name) is called after a piece is recorded (tests simulate kills
    with it). ready_only: never build; an InputError when `cfg.out` does not hold these shards."""
    from tqdm import tqdm

    _check(cfg)
    t0 = time.time()
    tok, tm = _load_tokenizer(cfg.tokenizer)
    from korbert import foreign

    perm = foreign.id_map(tok)
    mcfg = MaskConfig.from_tokenizer(tok, cfg.mask_prob, perm)
    # a tokenizer with its specials elsewhere than 0..4: the shards hold mapped ids (korbert/foreign.py), and say so
    id_map = {"own_special_ids": foreign.special_ids(tok), "rule": "korbert.foreign.id_map"} if perm is not None else None
    columns = shard_columns(len(tok), cfg.max_seq_len, cfg.masking, cfg.mask_unit != "token")
    from korbert.plain import is_plain

    runs_kiwi = not is_plain(tok)  # Kiwi cuts the sentences (korbert's tokenizer: the morphemes too); plain: punctuation
    del tok  # the tasks load their own (a Dask worker its own Kiwi: Kiwi cannot be pickled)
    files = expand_inputs(cfg.inputs)
    for f in files:  # a Parquet file without the text columns is an error before anything is written
        if format_of(f) == "parquet":
            open_parquet(f, cfg.text_field)[0].close()
    inputs = [file_record(f) for f in files]
    folder = Path(cfg.out)
    config = C.to_dict(cfg)
    for k in ("out", "show", "force", "replace", "workers", "scheduler", "kiwi_threads"):
        config.pop(k)
    if cfg.masking == "dynamic":
        config["dupe_factor"] = 1
    ident = {k: v for k, v in config.items()
             if k not in ("batch_docs", "batch_chars", "eval_nsmc_test", "eval_korquad", "eval_klue", "eval_strict", "keep_eval_text")}
    guard = [sha256_file(f) if f else "" for f in (cfg.eval_nsmc_test, cfg.eval_korquad, *cfg.eval_klue)]
    if any(guard):  # what is left out depends on the evaluation files' content and the policy (without them: the key is as before)
        ident["eval_text"] = [*guard, policy(cfg.keep_eval_text)]
    for k, default in (("instances", "document"), ("nsp", True)):  # options added later: at their defaults the key is as before
        if ident[k] == default:
            del ident[k]
    if cfg.masking == "static":  # the masks written (dynamic shards hold none: their key is as before)
        ident["masking_version"] = MASKING_VERSION
    def key_of(ident: dict) -> str:
        return hashlib.sha256(json.dumps([ident, tm["tokenizer_hash"], inputs, FORMAT_VERSION, KEYS], sort_keys=True).encode()).hexdigest()

    key = key_of(ident)
    if runs_kiwi:  # another Kiwi may cut otherwise (plain shards: the key is as before)
        key = _same_kiwi_key(folder, key, key_of({**ident, "kiwi": _kiwi(folder)}))

    if ready_only:
        finished = read_manifest(folder, "shards") if (folder / "manifest.json").is_file() else None
        if finished is None or finished.get("key") != key:
            raise InputError(f"{folder}: no shards built from these inputs and options yet")
        return finished
    try:
        finished, done = _existing(folder, key, cfg.force)
    except InputError:
        if not cfg.replace:
            raise
        print(f"{folder}: holds shards made with other options, inputs or shard format; rebuilding", file=sys.stderr)
        finished, done = _existing(folder, key, True)
    if finished is not None:
        print(f"{folder}: shards up to date ({finished['counts']['train']['instances']} training instances); --force rebuilds them")
        _eval_strict(cfg, finished["counts"])
        show(folder, cfg.show)
        return finished
    folder.mkdir(parents=True, exist_ok=True)
    for p in list(folder.glob(".*.partial")) + list(folder.glob(".*.tmp")):
        p.unlink()  # leftovers of a killed run
    tok_files = _copy_tokenizer(cfg.tokenizer, tm, folder)
    # the key and the pieces kept, written whole once (a torn last line dropped); then a line per piece
    atomic_write_bytes(folder / PROGRESS, b"".join([_line({"key": key})] + [_line({"piece": k, "record": r}) for k, r in done.items()]))

    todo = ((p, d) for p, d in _pieces(files, inputs, cfg) if p.name not in done)
    # Kiwi threads: all cores in one process; their share on a local cluster; one per worker thread on
    # a running cluster (start one worker process per core)
    threads = cfg.kiwi_threads or (max(1, default_threads() // cfg.workers) if cfg.workers else 1 if cfg.scheduler else 0)
    # (absolute paths: a Dask worker reads the evaluation files where it runs, and checks their content)
    evals = {k: str(Path(v).resolve()) for k, v in (("eval_nsmc_test", cfg.eval_nsmc_test), ("eval_korquad", cfg.eval_korquad)) if v}
    evals["eval_klue"] = [str(Path(v).resolve()) for v in cfg.eval_klue]
    job = Job(dataclasses.replace(cfg, **evals), str(folder.resolve()), threads, mcfg, columns, tuple(guard))
    bar = tqdm(desc="shards", unit="doc", unit_scale=True, disable=None, file=sys.stderr)
    built, mb = 0, 0.0
    runner = run_dask(build_piece, job, todo, cfg, bar) if cfg.workers or cfg.scheduler else run_here(build_piece, job, todo, bar)
    with open(folder / PROGRESS, "ab") as log:
        for piece, record in runner:
            done[piece.name] = record
            _append_line(log, {"piece": piece.name, "record": record})
            built += 1
            mb += piece.bytes / 1e6
            bar.set_postfix_str(f"{built} pieces, {mb:.0f} MB, {mb / max(time.time() - t0, 1e-9):.2f} MB/s")
            if on_piece is not None:
                on_piece(piece.name)
    bar.close()
    for p in list(folder.glob(".*.partial")) + list(folder.glob(".*.tmp")):
        p.unlink(missing_ok=True)  # what killed attempts of a task left behind

    chunks = [done[k] for k in sorted(done)]
    counts = {"files": len(files), "bytes": sum(ch["bytes"] for ch in chunks), "pieces": len(chunks), **_summarize(chunks, cfg.nsp)}
    counts["masking_measured_on"] = (
        "every instance as written" if cfg.masking == "static"
        else f"one mask_batch draw on the instances of every shard's first documents (until {DYNAMIC_STATS_FIRST} instances) "
        f"and of every {DYNAMIC_STATS_EVERY}th document after them"
    )
    _eval_strict(cfg, counts)  # pieces resumed from a run without eval_strict were never checked
    if counts["train"]["instances"] == 0:
        raise InputError(
            f"no training instances from {', '.join(map(str, cfg.inputs))}: {counts['documents_in']} documents read, "
            f"skipped {counts['documents_skipped'] or 'none'}"
        )
    shards = {s: [{**ch["shards"][s], "path": ch["shards"][s]["name"]} for ch in chunks if s in ch["shards"]] for s in SPLITS}
    names = [n for s in SPLITS for sh in shards[s] for n in sh["files"]]
    cpu = Counter()
    for ch in chunks:
        cpu.update(ch["cpu_seconds"])
    manifest = write_manifest(
        folder, "shards", FORMAT_VERSION, files=names + tok_files,
        key=key, document_keys=KEYS, masking_version=MASKING_VERSION, config=config, inputs=inputs,
        tokenizer_hash=tm["tokenizer_hash"], tokenizer_path=str(cfg.tokenizer),
        mask_config=vars(mcfg), dtypes=columns, counts=counts, shards=shards, **({"id_map": id_map} if id_map else {}),
        eval_guard={"nsmc_test": guard[0], "korquad": guard[1], **({"klue": guard[2:]} if guard[2:] else {}), "policy": policy(cfg.keep_eval_text)},
        run={
            "shards_built": built, "shards_reused": len(chunks) - built, "seconds": round(time.time() - t0, 1),
            "engine": f"dask, {cfg.workers} local workers" if cfg.workers else f"dask at {cfg.scheduler}" if cfg.scheduler else "one process",
            "cpu_seconds": {k: round(v, 1) for k, v in sorted(cpu.items())},  # summed over the pieces' tasks (main thread: read, tokenize, recipe)
        },
    )
    (folder / PROGRESS).unlink(missing_ok=True)
    report(folder, manifest, time.time() - t0)
    show(folder, cfg.show)
    return manifest


def _eval_strict(cfg: ShardsConfig, counts: dict) -> None:
    """eval_strict against pieces built before it was asked for (finished or resumed shards): their counts decide."""
    if cfg.eval_strict and counts.get("eval_text"):
        kind, where = next(iter(counts["eval_text_first_at"].items()))
        raise InputError(f"{where}: {kind.replace('_', ' ')} in the corpus (eval_strict; {counts['eval_text']})")


def report(folder: Path, m: dict, seconds: float) -> None:
    c, tr = m["counts"], m["counts"]["train"]
    skipped = sum(c["documents_skipped"].values())
    mk = tr["masking"]
    if m["config"].get("single_sentence", "random") == "split":
        nsp = f"{tr['forced_random_next']} one-morpheme chunks forced to NotNext, {tr['single_sentence_split']} one-sentence chunks split in two"
    else:
        nsp = f"{tr['forced_random_next']} one-sentence chunks forced to NotNext"
    cfg = m["config"]
    mode = f"{cfg.get('instances', 'document')} instances, {tr.get('tokens_per_instance')} tokens each on average"
    pairs = (
        f"IsNext {tr['isnext_share']} of all pairs ({tr['isnext_share_when_free']} of those free to be either; {nsp})"
        if cfg.get("nsp", True) else "no NSP (one segment per instance)"
    )
    print(
        f"shards: {tr['instances']} training / {c['valid']['instances']} validation instances "
        f"({tr['tokens']} / {c['valid']['tokens']} tokens) in {len(m['shards']['train'])} + {len(m['shards']['valid'])} shards\n"
        f"  documents: {c['documents_in']} in = {c['documents_used']} used + {skipped} skipped"
        f"{': ' + str(c['documents_skipped']) if skipped else ''}"
        f"{' (first at ' + str(c['first_skip_at']) + ')' if skipped else ''}\n"
        + (f"  evaluation text in the corpus ({'documents kept, counted' if cfg.get('keep_eval_text') else 'documents left out, counted'}): "
           f"{c['eval_text']} by file {c.get('eval_text_by_file', {})} (first at {c['eval_text_first_at']})\n"
           if c.get("eval_text") else "")
        + f"  {mode}; {pairs}; "
        f"masked {mk['masked_share']} of non-special tokens, as [MASK]/random/kept {mk['mask_share']}/{mk['random_share']}/{mk['keep_share']}"
        f" ({m['config']['masking']} masking, by {m['config']['mask_unit']})\n"
        f"  {seconds:.1f}s -> {folder} (tokenizer {m['tokenizer_hash'][:12]})"
    )


def show(folder: str | os.PathLike, n: int, split: str = "train") -> None:
    """Print n decoded instances: segments A/B, NSP label, [MASK]s visible (dynamic: the loader's draw of epoch 0)."""
    if n <= 0:
        return
    from korbert import foreign

    reader = open_shards(folder, split=split, verify=False)
    tok = foreign.load(tokenizer_dir(Path(folder)), f"{folder}/tokenizer")
    own = foreign.own_ids(tok)  # the shards' id -> the tokenizer's own, to decode
    for i in range(min(n, len(reader))):
        item = masked_instance(reader, i)
        ids, labels, tt = item["input_ids"], item["labels"], item["token_type_ids"]
        if own is not None:
            ids, labels = own[ids], np.where(labels != IGNORE, own[np.maximum(labels, 0)], IGNORE)
        b = int(np.argmax(tt)) if tt.any() else len(ids)
        nsp = {0: "IsNext", 1: "NotNext (random B)"}.get(item["next_sentence_label"], "no NSP label")
        print(f"[{split} {i}] {nsp}, {len(ids)} tokens, {int((labels != IGNORE).sum())} to predict ({reader.masking} masking)")
        print(f"  A: {tok.decode(ids[:b].tolist())}")
        if b < len(ids):
            print(f"  B: {tok.decode(ids[b:].tolist())}")
        targets = [f"{tok.convert_ids_to_tokens(int(labels[p]))}" for p in np.flatnonzero(labels != IGNORE)]
        print(f"  targets: {' '.join(targets)}")


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(ShardsConfig, argv, prog="korbert shards"))
