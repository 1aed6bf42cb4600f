"""The settings of `korbert shards` (its command line). Read by the driver (corpus_tools/shards.py), the
task (corpus_tools/shard_task.py) and BERT's recipe (corpus_tools/pairs.py), which sit above it."""

from __future__ import annotations

from dataclasses import dataclass

from corpus_tools import SAMPLE_DATA
from corpus_tools import config as C


@dataclass
class ShardsConfig:
    """Turn raw text into BERT pretraining instances (NSP pairs + MLM) in checksummed shards."""

    tokenizer: str = C.field(
        "runs/vocab", "tokenizer folder (the output of `korbert vocab`), or a model folder to continue: a korbert final/ or "
        "any local transformers folder with a fast tokenizer (its own tokens; Kiwi splits the sentences, punctuation for a plain vocabulary)",
    )
    inputs: list[str] = C.field(
        [str(SAMPLE_DATA / "reviews.jsonl.gz"), str(SAMPLE_DATA / "petitions.jsonl.gz")],
        "text files, folders or globs: .txt (blank line between documents), .jsonl, optionally .gz; .parquet (--text-field columns)",
    )
    out: str = C.field("runs/shards", "output folder (shards + manifest.json)")
    max_seq_len: int = C.field(128, "tokens per instance, [CLS]/[SEP] included")
    short_seq_prob: float = C.field(0.1, "probability of a shorter random target length (per document)")
    masking: str = C.field("dynamic", "static: masks written into the shards; dynamic: the loader masks", choices=["static", "dynamic"])
    dupe_factor: int = C.field(5, "static masking: copies of every document, each with other pairs and masks")
    mask_prob: float = C.field(0.15, "share of non-special tokens to predict")
    mask_unit: str = C.field("morpheme", "mask whole units: token, morpheme or eojeol", choices=["token", "morpheme", "eojeol"])
    single_sentence: str = C.field(
        "split", "a chunk of one sentence: split: cut it at a random eojeol (else morpheme) boundary into A + B, "
        "50%% IsNext; random: always NotNext with a random B (BERT)", choices=["split", "random"],
    )
    instances: str = C.field(
        "document", "document: BERT's instances, each from one document; packed: consecutive sentences across document "
        "boundaries ([SEP] between documents) fill every instance up to max_seq_len (RoBERTa / Cramming)",
        choices=["document", "packed"],
    )
    nsp: bool = C.field(True, "NSP pairs: segments A + B and an IsNext label; --no-nsp (with --instances packed): one segment per instance, no label, for --objective mlm")
    valid_fraction: float = C.field(0.01, "share of documents held out for validation (by a hash of position and seed)")
    shard_mb: float = C.field(
        8.0, "input MB per piece: a piece (a byte range of a file, or a stretch of a .gz stream, cut at a document "
        "boundary; a Parquet file's pieces are its row groups, of whatever size) is one task and one shard, the unit of work and of resume"
    )
    pool_tokens: int = C.field(1_000_000, "tokens of recent documents kept to draw random B segments from")
    text_field: list[str] = C.field(["title", "text"], "JSON Lines field(s) or Parquet column(s) holding the text (joined by a newline)")
    one_doc_per_line: bool = C.field(False, "plain text: every line is a document (default: blank-line separated)")
    min_chars: int = C.field(2, "skip documents shorter than this after cleaning (too_short)")
    max_doc_chars: int = C.field(
        100_000, "skip longer documents (too_long): Kiwi's time grows quadratically on long runs without spaces"
    )
    strict: bool = C.field(False, "fail on the first unusable document instead of counting it")
    eval_nsmc_test: str = C.field("", "an NSMC-format test file: leave out (and count) the documents whose letters and digits alone equal one of its reviews")
    eval_korquad: str = C.field("", "a KorQuAD (SQuAD-format) file: leave out (and count) the documents sharing a 48-character run with one of its contexts")
    eval_klue: list[str] = C.field([], "KLUE dev files (NER .tsv; NLI, STS, YNAT .json): leave out (and count) the documents equal to one of their texts by letters and digits, holding one whole, or sharing a 48-character run with one")
    eval_strict: bool = C.field(False, "refuse a corpus holding such documents instead of leaving them out")
    keep_eval_text: bool = C.field(False, "keep such documents (counted, and pretrained on) instead of leaving them out")
    seed: int = C.field(0, "seed for every random choice")
    workers: int = C.field(0, "build the pieces on a local Dask cluster of this many worker processes, one Kiwi each (0: this process alone)")
    scheduler: str = C.field("", "build the pieces on a running Dask cluster (tcp://HOST:8786); input and --out must be on a filesystem every worker sees")
    kiwi_threads: int = C.field(0, "Kiwi threads per process (0: all cores alone, cores / --workers on a local cluster, 1 per worker thread on --scheduler)")
    batch_chars: int = C.field(262_144, "characters per Kiwi batch (speed only: the output does not depend on it)")
    batch_docs: int = C.field(2048, "at most this many documents per Kiwi batch (speed only)")
    force: bool = C.field(False, "rebuild from scratch, discarding what `out` holds")
    replace: bool = C.field(False, "when `out` holds shards made with other options or inputs, rebuild instead of refusing (same options: kept or resumed)")
    show: int = C.field(2, "print this many decoded training instances at the end")

    def batch_full(self, docs: int, chars: int) -> bool:
        """Whether a batch of this many documents and characters goes to Kiwi."""
        return chars >= self.batch_chars or docs >= self.batch_docs
