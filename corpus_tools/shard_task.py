"""One piece -> one shard: the task the shards stage runs in this process or on a Dask worker.

`build_piece(job, piece)` reads the piece's documents (corpus_tools/pieces.py), cleans and filters
them (every skip counted by reason), encodes them in batches with `KorBertTokenizer.encode_documents`
(one Kiwi pass per batch: ids, sentences, morpheme and eojeol units), turns them into instances with
BERT's recipe (corpus_tools/pairs.py) and writes the piece's train and valid shard files
(`ShardChunk`). Pipelined: Kiwi's threads analyse batch k+1 while Python turns batch k into
instances. The output depends on the piece alone; the record it returns (counts, files with their
sha256, CPU seconds by part) is what the driver (corpus_tools/shards.py) appends to progress.jsonl.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from corpus_tools.guard import Found
from corpus_tools.masking import SHARDS_EPOCH, document_instances, instance_keys, mask_batch, mask_stats
from corpus_tools.shard_format import IGNORE, MASK, SPLITS, TOKENIZER_DIR, MaskConfig, ShardWriter
from corpus_tools.pairs import DRAWS, DocRng, Draws, Packer, Pool, build_instance, build_instances, document_pairs, encoded_docs, is_valid, draw_uniforms
from corpus_tools.pieces import Piece, document_key, read_piece
from corpus_tools.text import InputError, ReadStats, clean
from corpus_tools.shards_config import ShardsConfig


# dynamic masking: the statistics draw masks (`mask_batch`, as the loader) for the instances of a sample of the
# documents: every document of a shard until DYNAMIC_STATS_FIRST instances are measured, then every DYNAMIC_STATS_EVERY-th
DYNAMIC_STATS_FIRST, DYNAMIC_STATS_EVERY = 2048, 64


class ShardChunk:
    """The documents of one shard (its train and valid halves): takes encoded batches, writes
    instances, counts everything; close() -> the record progress and the manifest keep.

    Masks (static shards: every instance; dynamic: the statistics' sample) are one `mask_batch` call
    per batch and split, instance j of document g keyed by instance_keys(seed, SHARDS_EPOCH,
    document_instances(g, j)): a document's masks depend on it alone, as its random choices do."""

    def __init__(self, name: str, folder: Path, cfg: ShardsConfig, mcfg: MaskConfig, columns: dict[str, str]):
        self.name, self.folder, self.cfg, self.mcfg, self.columns = name, folder, cfg, mcfg, columns
        self.pools = {s: Pool(cfg.pool_tokens) for s in SPLITS}
        self.writers: dict[str, ShardWriter] = {}
        self.counts = {s: Counter() for s in SPLITS}
        self.docs = Counter()  # documents_in, documents_used, sentences, document_tokens
        self.skipped, self.first_skip = Counter(), {}
        self.rng = DocRng(cfg.seed)
        self.measured = 0  # instances whose masks are drawn (static: all)
        self.dtypes = columns["tokens"], columns.get("units", "int16")  # static: units only steer the masks
        self.packers = {s: Packer(cfg, self.dtypes, self.counts[s]) for s in SPLITS} if cfg.instances == "packed" else {}

    def skip(self, reason: str, where: str) -> None:
        if self.cfg.strict:
            raise InputError(f"{where}: {reason.replace('_', ' ')}")
        self.skipped[reason] += 1
        self.first_skip.setdefault(reason, where)

    def add(self, batch: list[tuple[int, str, str, str]], encs: list[dict]) -> None:
        """batch: [(document index, where, split, cleaned text)]; encs: tok.encode_documents(texts)."""
        cfg = self.cfg
        static = cfg.masking == "static"
        copies = cfg.dupe_factor if static else 1
        max_tokens, split_single = cfg.max_seq_len - 3, cfg.single_sentence == "split"
        out = self._new_columns()
        batched = not static and not self.packers  # the instances are built at the end, all at once (build_instances)
        pairs: dict[str, list] = {s: [] for s in SPLITS}
        # one check for the batch instead of one per document: does any text spell a special token?
        specials = bool(encs) and int(np.concatenate([e["ids"] for e in encs]).min(initial=MASK + 1)) <= MASK
        used, sentences, tokens = 0, 0, 0
        uniforms = draw_uniforms(cfg.seed, np.fromiter((b[0] for b in batch), np.int64, len(batch)), DRAWS).tolist() if batched else None
        for j, ((g, where, split, _), doc) in enumerate(zip(batch, encoded_docs(encs, cfg.mask_unit, specials))):
            if doc is None:
                self.skip("no_tokens", where)
                continue
            used += 1
            sentences += doc.sentences
            tokens += len(doc.ids)
            counts, pool = self.counts[split], self.pools[split]
            counts["documents"] += 1
            counts["special_ids_in_text"] += doc.replaced
            measure = static or self.measured < DYNAMIC_STATS_FIRST or g % DYNAMIC_STATS_EVERY == 0
            if batched:  # the first choices from the batch's uniforms, a generator only when more are needed
                draws = Draws(uniforms[j], lambda g=g: self.rng(g))
                for k, pair in enumerate(document_pairs(doc, pool, draws, max_tokens, cfg.short_seq_prob, counts, split_single)):
                    pairs[split].append((doc, *pair))
                    self._key(out[split], g, k, measure)
                pool.add(doc)
                continue
            rng = self.rng(g)
            if self.packers:
                for k, inst in enumerate(self.packers[split].add(doc, rng)):
                    self._put(out[split], *inst, g, k, measure)
                continue
            k = 0  # the document's instances over all its copies
            for _ in range(copies):
                for a0, a1, other, b0, b1, nsp in document_pairs(doc, pool, rng, max_tokens, cfg.short_seq_prob, counts, split_single):
                    ids, units = build_instance(doc, a0, a1, other, b0, b1, *self.dtypes)
                    self._put(out[split], ids, units, a1 - a0 + 2, nsp, g, k, measure)
                    k += 1
            pool.add(doc)
        if used:
            self.docs.update(documents_used=used, sentences=sentences, document_tokens=tokens)
        if batched:
            for split, ps in pairs.items():
                if ps:
                    ids, units, lengths = build_instances(ps, *self.dtypes)
                    cols = out[split]
                    cols["flat"] = (lengths, {"tokens": ids, "units": units})
                    cols["b_start"] = [p[2] - p[1] + 2 for p in ps]
                    cols["nsp"] = [p[6] for p in ps]
        self._write(out)

    def _new_columns(self) -> dict:
        return {s: {"tokens": [], "units": [], "b_start": [], "nsp": [], "docs": [], "numbers": [], "measure": []} for s in SPLITS}

    def _key(self, cols: dict, doc: int, number: int, measure: bool) -> None:
        """An instance's masking key (its document's key and its number there) and whether it is masked."""
        cols["docs"].append(doc)
        cols["numbers"].append(number)
        cols["measure"].append(measure)
        self.measured += measure

    def _put(self, cols: dict, ids, units, b_start: int, nsp: int, doc: int, number: int, measure: bool) -> None:
        cols["tokens"].append(ids)
        cols["units"].append(units)
        cols["b_start"].append(b_start)
        cols["nsp"].append(nsp)
        self._key(cols, doc, number, measure)

    def _write(self, out: dict) -> None:
        static = self.cfg.masking == "static"
        for split, cols in out.items():
            if not cols["nsp"]:
                continue
            counts, flat = self.counts[split], cols.pop("flat", None)
            if flat:
                lengths, tokens, units = flat[0], flat[1]["tokens"], flat[1]["units"]
            else:
                lengths = np.fromiter(map(len, cols["tokens"]), np.int64, len(cols["tokens"]))
                tokens = np.concatenate(cols["tokens"])
                units = None if cols["units"][0] is None else np.concatenate(cols["units"])
            labels = None
            measure = np.array(cols["measure"], bool)
            if measure.any():  # static: the masks written; dynamic: one draw, for the statistics only
                sel = slice(None) if measure.all() else np.repeat(measure, lengths)
                ids = tokens[sel]
                docs, numbers = np.array(cols["docs"], np.uint64)[measure], np.array(cols["numbers"], np.uint64)[measure]
                keys = instance_keys(self.cfg.seed, SHARDS_EPOCH, document_instances(docs, numbers))
                masked_ids, masked = mask_batch(ids, lengths[measure], keys, None if units is None else units[sel], self.mcfg)
                counts.update(mask_stats(ids, masked_ids, masked, self.mcfg.mask_id))
                if static:  # (every instance measured)
                    labels = np.where(masked, ids.astype(np.int32), IGNORE)
                    tokens = masked_ids.astype(tokens.dtype)
            counts["instances"] += len(lengths)
            counts["random_next"] += sum(x > 0 for x in cols["nsp"])
            counts["tokens"] += int(lengths.sum())
            if split not in self.writers:
                self.writers[split] = ShardWriter(self.folder, f"{split}-{self.name}", self.columns)
            self.writers[split].append_flat(lengths, {"tokens": tokens, "units": units, "labels": labels, "b_start": cols["b_start"], "nsp": cols["nsp"]})

    def close(self) -> dict:
        if self.packers:  # the instances still open at the end of the shard (packed shards are dynamic: not measured)
            out = self._new_columns()
            rng = self.rng(f"end-{self.name}")
            for split, packer in self.packers.items():
                for inst in packer.finish(rng):
                    self._put(out[split], *inst, 0, 0, False)
            self._write(out)
        shards = {s: w.close() for s, w in self.writers.items()}
        return {
            "documents": dict(self.docs),
            "skipped": dict(self.skipped),
            "first_skip_at": self.first_skip,
            "splits": {s: dict(c) for s, c in self.counts.items()},
            "shards": shards,
        }


@dataclass(frozen=True)
class Job:
    """What every task needs besides its piece (pickled to Dask workers once per task: small)."""

    cfg: ShardsConfig
    folder: str
    kiwi_threads: int  # 0: all cores (one process alone)
    mcfg: MaskConfig
    columns: dict[str, str]
    eval_sha256: tuple[str, ...] = ("", "")  # the evaluation files' content (NSMC, KorQuAD, KLUE...), which a worker's cached guard must match


@lru_cache(maxsize=2)
def _task_guard(nsmc_test: str, korquad: str, klue: tuple[str, ...], sha256: tuple[str, ...]):
    """The evaluation text this process counts in its documents (built once per process and content), or None."""
    if not (nsmc_test or korquad or klue):
        return None
    import socket

    from corpus_tools.artifacts import sha256_file
    from corpus_tools.guard import EvalText

    for path, want in zip((nsmc_test, korquad, *klue), sha256):  # a worker reads them where it runs: the same files?
        if not path:
            continue
        if not os.path.isfile(path):
            what = "missing"
        elif sha256_file(path) != want:
            what = "another file than the one the shards stage read"
        else:
            continue
        raise InputError(f"{path}: this evaluation file is {what} on worker {socket.gethostname()}: put it on a filesystem every worker sees")

    return EvalText(nsmc_test=[nsmc_test] if nsmc_test else [], korquad=[korquad] if korquad else [], klue=klue)


@lru_cache(maxsize=2)
def _task_tokenizer(folder: str, threads: int):
    from corpus_tools.morph import set_kiwi_threads
    from korbert import foreign

    set_kiwi_threads(threads)
    return foreign.encoder(foreign.load(folder, folder))  # KorBertTokenizer, or another model's fast tokenizer


def build_piece(job: Job, piece: Piece, data: bytes | None = None, on_batch: Callable[[int], None] | None = None) -> dict:
    """The task: read one piece, analyse it with Kiwi, write its train/valid shard; -> its record
    (counts, files with sha256, CPU seconds by part). Runs in this process or on a Dask worker;
    the output depends on the piece alone."""
    from korbert.word_cache import gc_paused

    cfg = job.cfg
    tok = _task_tokenizer(str(Path(job.folder) / TOKENIZER_DIR), job.kiwi_threads)
    chunk = ShardChunk(piece.name, Path(job.folder), cfg, job.mcfg, job.columns)
    stats = ReadStats()
    guard = _task_guard(cfg.eval_nsmc_test, cfg.eval_korquad, tuple(cfg.eval_klue), job.eval_sha256)
    found = Found()  # documents holding evaluation text: left out (skipped as "eval_text") unless keep_eval_text, counted
    cpu = Counter()  # CPU seconds of this thread: reading, the tokenizer's Python side, the recipe
    analysed = 0  # documents through Kiwi so far (the progress bar's count)
    process0 = time.process_time()
    batch: list[tuple[int, str, str, str]] = []
    chars = 0
    pending: list = []  # at most one batch under analysis while the one before it becomes instances

    def flush(drain: bool = False) -> None:
        nonlocal chars, analysed
        if batch:
            t = time.thread_time()
            pending.append((batch.copy(), tok.encode_documents_async([x[3] for x in batch])))
            cpu["tokenize"] += time.thread_time() - t
            batch.clear()
            chars = 0
        while len(pending) > (0 if drain else 1):
            done, finish = pending.pop(0)
            t = time.thread_time()
            encs = finish()
            t2 = time.thread_time()
            with gc_paused():  # the recipe keeps ~10 small objects per document alive: no collector passes over them
                chunk.add(done, encs)
            cpu["tokenize"] += t2 - t
            cpu["recipe"] += time.thread_time() - t2
            analysed += len(done)
            if on_batch is not None:
                on_batch(len(done))

    t = time.thread_time()
    for offset, where, raw in read_piece(piece, data, cfg.text_field, cfg.one_doc_per_line, stats, cfg.strict):
        text = clean(raw)
        if not text:
            chunk.skip("empty", where)
        elif len(text) < cfg.min_chars:
            chunk.skip("too_short", where)
        elif len(text) > cfg.max_doc_chars:
            chunk.skip("too_long", where)
        else:
            if guard is not None and (hit := guard.check(text)):
                if cfg.eval_strict:
                    raise InputError(f"{where}: {hit.replace('_', ' ')} in the corpus (eval_strict)")
                found.add(hit, where, piece.path)
                if not cfg.keep_eval_text:
                    chunk.skipped["eval_text"] += 1  # (not chunk.skip: --strict is about unusable documents)
                    chunk.first_skip.setdefault("eval_text", where)
                    continue
            g = document_key(piece.file_id, offset)
            batch.append((g, where, "valid" if is_valid(cfg.seed, g, cfg.valid_fraction) else "train", text))
            chars += len(text)
            if cfg.batch_full(len(batch), chars):
                cpu["read"] += time.thread_time() - t
                flush()
                t = time.thread_time()
    cpu["read"] += time.thread_time() - t
    flush(drain=True)
    record = chunk.close()
    if on_batch is not None:  # and the documents skipped before Kiwi, for the progress bar
        on_batch(stats.documents_in - analysed)
    record["documents"]["documents_in"] = stats.documents_in
    record["skipped"] = dict(Counter(record["skipped"]) + stats.skipped)
    record["first_skip_at"] = {**stats.examples, **record["first_skip_at"]}
    record["bytes"] = piece.bytes
    record.update(found.counts())
    record["cpu_seconds"] = {**{k: round(v, 3) for k, v in cpu.items()}, "process": round(time.process_time() - process0, 3)}
    return record
