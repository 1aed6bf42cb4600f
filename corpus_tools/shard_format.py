"""The shard format: the columns the shards stage writes, the reader the pretraining loader uses,
and the masking's settings (the masking itself: corpus_tools/masking.py; static shards are masked
when written, dynamic ones when read).

Shard format 2 (`open_shards` reads formats 1 and 2; plain .npy files, no pickles, np.load(mmap_mode="r")):

    {split}-{k:05d}.tokens.npy    uint16 [T]    all instances' token ids, concatenated (int32 when the
                                                vocabulary has more than 65,536 ids; static: the
                                                masked input ids)
    {split}-{k:05d}.offsets.npy   int64 [N+1]   instance n = tokens[offsets[n]:offsets[n+1]]
    {split}-{k:05d}.b_start.npy   int16 [N]     index of B's first token (token type 1 from there)
    {split}-{k:05d}.nsp.npy       int8  [N]     0 = IsNext, 1 = NotNext (random B), as in HF BERT
    {split}-{k:05d}.labels.npy    int32 [T]     static only: original id where masked, else -100
    {split}-{k:05d}.units.npy     int8  [T]     dynamic + morpheme/eojeol: unit id within the
                                                instance (specials -1), for whole-unit masking
                                                (int16 when max_seq_len - 3 > 127)
    tokenizer/                    a copy of the tokenizer folder the shards were made with
    manifest.json                 kind "shards": config, tokenizer hash, counts, shard list, sha256s,
                                  dtypes (column -> numpy dtype name)

The columns are as narrow as the ids allow: the loader reads every token of every instance each
epoch, so tokens + units take half the bytes (disk, page cache) they did in format 1, which wrote
tokens int32 and units int16 (and no `dtypes`). Every .npy carries its dtype, so format 1 is read
as it is; a reader's ids have the tokens column's dtype.

split is "train" or "valid"; a shard is one input piece (`{split}-FFFF-PPPPP`: input file, piece of
it; corpus_tools/pieces.py), older folders have `{split}-KKKKK`. The manifest lists every shard's
path, so readers never parse names. Instances are stored in document order: the loader shuffles.

Nothing here needs Kiwi or korbert.tokenizer: a pretraining machine reads shards without them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_tools.artifacts import NpyWriter, read_manifest, sha256_file
from corpus_tools.text import InputError

FORMAT_VERSION = 2  # written; READ_VERSIONS are read
READ_VERSIONS = (1, 2)
IGNORE = -100  # label of a token that is not predicted
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4  # fixed by the tokenizer (korbert.tokenizer.SPECIAL_TOKENS)
SPLITS = ("train", "valid")
TOKENIZER_DIR = "tokenizer"


def shard_columns(vocab_size: int, max_seq_len: int, masking: str, units: bool) -> dict[str, str]:
    """The columns of a shard -> their dtype names: token ids in 2 bytes when every id fits, unit
    ids (-1 .. max_seq_len - 4 within an instance) in 1 byte when they fit."""
    cols = {"tokens": "uint16" if vocab_size <= 1 << 16 else "int32", "offsets": "int64", "b_start": "int16", "nsp": "int8"}
    if masking == "static":
        cols["labels"] = "int32"  # -100 or an id
    elif units:
        cols["units"] = "int8" if max_seq_len - 3 <= 127 else "int16"
    return cols


# ---------------------------------------------------------------------------------------------
# The masking's settings and random numbers (the masking itself: corpus_tools/masking.py)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MaskConfig:
    mask_prob: float = 0.15
    mask_id: int = MASK
    random_low: int = 0  # random replacements are drawn from [random_low, random_high): normal pieces
    random_high: int = 1
    mask_share: float = 0.8  # of the chosen tokens: [MASK]
    keep_share: float = 0.1  # unchanged; the rest (0.1) a random piece

    @classmethod
    def from_tokenizer(cls, tok, mask_prob: float = 0.15, id_map=None) -> "MaskConfig":
        """id_map: the tokenizer's own id -> the shards' (korbert.foreign.id_map), when they differ."""
        mask_id = tok.mask_token_id if id_map is None else int(id_map[tok.mask_token_id])
        return cls(mask_prob=mask_prob, mask_id=mask_id, random_low=first_normal_id(tok, id_map), random_high=len(tok))


def first_normal_id(tok, id_map=None) -> int:
    """The first id (the shards', after id_map) that is not special, [unusedN] or a byte piece <0xNN>."""
    tokens = tok.convert_ids_to_tokens(list(range(len(tok))))
    if id_map is not None:  # in the shards' order
        order = np.argsort(id_map[: len(tok)])
        tokens = [tokens[j] for j in order]
    for i, t in enumerate(tokens):
        special = t in tok.all_special_tokens or (t.startswith("[unused") and t.endswith("]"))
        if not special and not (len(t) == 6 and t.startswith("<0x") and t.endswith(">")):
            return i
    raise ValueError("the tokenizer has no normal pieces")


GOLDEN, _MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(z: np.ndarray) -> np.ndarray:
    """uint64 -> uint64, elementwise: splitmix64's finalizer (its output for state z). Counter-based
    random numbers are mix64 of a counter times the golden ratio plus a key: no generator state."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def to_unit(z: np.ndarray) -> np.ndarray:
    """uint64 -> float64 uniform in [0, 1) (the top 53 bits)."""
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def special_mask_of(ids: np.ndarray) -> np.ndarray:
    """bool [n]: the [CLS]/[SEP]/[PAD] positions (document text never holds these ids: see pairs.Doc)."""
    return (ids == CLS) | (ids == SEP) | (ids == PAD)


# ---------------------------------------------------------------------------------------------
# Writing shards
# ---------------------------------------------------------------------------------------------


class ShardWriter:
    """The columns of one shard; instances are appended a batch at a time."""

    def __init__(self, folder: Path, name: str, columns: dict[str, str]):
        """columns: `shard_columns(...)`."""
        self.name = name
        self.cols = {c: NpyWriter(folder / f"{name}.{c}.npy", t) for c, t in columns.items()}  # one .npy writer for shards and `korbert embed`
        self.cols["offsets"].append([0])
        self.instances = self.tokens = 0

    def append_flat(self, lengths: np.ndarray, columns: dict) -> None:
        """Instances of `lengths` tokens each, their per-token columns already concatenated."""
        self.cols["offsets"].append(self.tokens + np.cumsum(lengths))
        self.instances += len(lengths)
        self.tokens += int(lengths.sum())
        for c, values in columns.items():
            if c in self.cols:
                self.cols[c].append(values)

    def close(self) -> dict:
        files = {f"{self.name}.{c}.npy": col.close() for c, col in self.cols.items()}
        return {"name": self.name, "instances": self.instances, "tokens": self.tokens, "files": files}


# ---------------------------------------------------------------------------------------------
# Reading shards
# ---------------------------------------------------------------------------------------------


class ShardReader:
    """Random access to the instances of one split; each column is memory-mapped, never loaded.

    reader[i] -> {"input_ids": [n], "token_type_ids": int8 [n], "next_sentence_label": int,
                  "labels": int32 [n] (static shards) or "unit_ids": [n] (dynamic, by unit)}
    input_ids and unit_ids have their columns' dtypes (format 2: uint16 and int8 as a rule; format
    1: int32 and int16), so a consumer widens them itself (the loader's collate does).
    """

    def __init__(self, folder: Path, manifest: dict, split: str):
        self.folder, self.manifest, self.split = folder, manifest, split
        self.shards = manifest["shards"][split]
        self.masking = manifest["config"]["masking"]
        self.mask_config = MaskConfig(**manifest["mask_config"])
        self.ends = np.cumsum([s["instances"] for s in self.shards], dtype=np.int64)  # [shards]
        self._open: dict[int, dict] = {}

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def columns(self, k: int) -> dict:
        if k not in self._open:
            path = self.shards[k]["path"]
            cols = {}
            for name in self.shards[k]["files"]:
                col = name.split(".")[-2]
                mm = np.load(self.folder / f"{path}.{col}.npy", mmap_mode="r", allow_pickle=False)
                cols[col] = mm.view(np.ndarray)  # the same mapped pages; slicing skips np.memmap's per-slice Python hooks
            self._open[k] = cols
        return self._open[k]

    def __getitem__(self, i: int) -> dict:
        if not -len(self) <= i < len(self):
            raise IndexError(f"instance {i} out of range ({len(self)} {self.split} instances)")
        i %= len(self)
        k = int(np.searchsorted(self.ends, i, side="right"))
        j = i - (int(self.ends[k - 1]) if k else 0)
        cols = self.columns(k)
        a, b = int(cols["offsets"][j]), int(cols["offsets"][j + 1])
        ids = np.asarray(cols["tokens"][a:b])
        tt = np.zeros(b - a, dtype=np.int8)
        tt[int(cols["b_start"][j]) :] = 1
        item = {"input_ids": ids, "token_type_ids": tt, "next_sentence_label": int(cols["nsp"][j])}
        if "labels" in cols:
            item["labels"] = np.asarray(cols["labels"][a:b])
        if "units" in cols:
            item["unit_ids"] = np.asarray(cols["units"][a:b])
        return item

    def gather(self, index: np.ndarray) -> dict:
        """The instances `index` (int [n], global in the split) laid end to end, a few fancy-index reads
        per shard: {"lengths": int64 [n], "b_start": int64 [n], "nsp": int64 [n], "input_ids": [T] (the
        tokens column's dtype), and "labels" int32 [T] (static) or "unit_ids" [T] (dynamic, by unit)}."""
        index = np.asarray(index, np.int64)
        n = len(index)
        if n == 0:  # a micro-batch of padding rows only
            return {"lengths": np.zeros(0, np.int64), "b_start": np.zeros(0, np.int64), "nsp": np.zeros(0, np.int64), "input_ids": np.zeros(0, np.int64)}
        if not (0 <= int(index.min()) and int(index.max()) < len(self)):
            raise IndexError(f"instances out of range ({len(self)} {self.split} instances)")
        shard = np.searchsorted(self.ends, index, side="right")
        local = index - np.where(shard > 0, self.ends[np.maximum(shard - 1, 0)], 0)
        present = np.unique(shard).tolist()
        one = len(present) == 1  # the common case: no selection per shard
        src = np.empty(n, np.int64)  # each instance's first token in its shard
        out = {"lengths": np.empty(n, np.int64), "b_start": np.empty(n, np.int64), "nsp": np.empty(n, np.int64)}
        for k in present:
            cols, sel = self.columns(k), slice(None) if one else shard == k
            j = local[sel]
            src[sel] = cols["offsets"][j]
            out["lengths"][sel] = cols["offsets"][j + 1] - src[sel]
            out["b_start"][sel], out["nsp"][sel] = cols["b_start"][j], cols["nsp"][j]
        lengths = out["lengths"]
        flat = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(src - (np.cumsum(lengths) - lengths), lengths)
        tok_shard = None if one else np.repeat(shard, lengths)
        first = self.columns(present[0])
        for col, name in (("tokens", "input_ids"), ("labels", "labels"), ("units", "unit_ids")):
            if col not in first:
                continue
            if one:
                out[name] = first[col][flat]
                continue
            vals = np.empty(len(flat), first[col].dtype)
            for k in present:
                sel = tok_shard == k
                vals[sel] = self.columns(k)[col][flat[sel]]
            out[name] = vals
        return out


def open_shards(folder: str | os.PathLike, tokenizer_hash: str | None = None, split: str = "train", verify: bool = True) -> ShardReader:
    """Open a finished shards folder. Refuses shards made with another tokenizer (when
    `tokenizer_hash` is given) and, with `verify`, any file whose sha256 differs from the manifest."""
    folder = Path(folder)
    m = read_manifest(folder, "shards")
    if m.get("format_version") not in READ_VERSIONS:
        raise InputError(
            f"{folder}: shards format {m.get('format_version')}, this korbert reads formats "
            f"{', '.join(map(str, READ_VERSIONS))}; rebuild them with this korbert (korbert shards --force ...)"
        )
    if tokenizer_hash is not None and m["tokenizer_hash"] != tokenizer_hash:
        raise ValueError(
            f"{folder}: shards were made with tokenizer {m['tokenizer_hash'][:12]}, not {tokenizer_hash[:12]}; "
            "rebuild them with this tokenizer (korbert shards --tokenizer ...)"
        )
    if split not in m["shards"]:
        raise ValueError(f"{folder}: no split {split!r} (have {', '.join(m['shards'])})")
    if verify and (bad := verify_shards(folder, m, split)):
        raise ValueError(bad[0])
    return ShardReader(folder, m, split)


def verify_shards(folder: str | os.PathLike, manifest: dict, split: str, rank: int = 0, world: int = 1) -> list[str]:
    """Hash this process's share of a split's files against the manifest: shard k's files when
    k % world == rank, so N ranks each read 1/N of the bytes. -> one message per file that differs."""
    folder, bad = Path(folder), []
    for s in manifest["shards"][split][rank::world]:
        for name, digest in s["files"].items():
            path = folder / Path(s["path"]).parent / name
            if sha256_file(path) != digest:
                bad.append(f"{path}: sha256 differs from manifest.json (corrupt or edited)")
    return bad


def tokenizer_dir(folder: Path) -> Path:
    if (folder / TOKENIZER_DIR).is_dir():
        return folder / TOKENIZER_DIR
    parts = sorted(folder.glob(f"part-*/{TOKENIZER_DIR}"))
    if not parts:
        raise FileNotFoundError(f"{folder}: no tokenizer copy")
    return parts[0]
