"""Pretraining batches from shards: rows, global batches, masking and collation in the loader.

A *row* is one line of a batch: one instance, or (`pack`) several instances side by side up to
`max_len` tokens, each with its own positions, token types and [CLS], and attending only to itself
(the model builds a block-diagonal mask from the `segments` column). A *global batch* is what one
optimizer step sees over all ranks and accumulation steps: R rows, cut into world x accum equal
micro-batches. R is either fixed (`rows_per_step`: --batch-size x accum x world) or set by a token
budget (`tokens_per_step`: R x padded length <= budget).

The data order is a pure function of (seed, step). Epoch e: a seeded permutation of the split, cut
into mega-chunks of `group` steps' worth of instances, each sorted by length (similar lengths side
by side: little padding) or packed (best fit, longest first); the rows are cut into global batches,
the last one filled with empty rows (no instance of an epoch is lost or repeated), and the global
batches are shuffled. So:

- resume is exact: the data position is just the step number;
- 1 process with batch 2b and 2 processes with batch b see the same global batches;
- an instance's mask depends only on (seed, epoch, index) (dynamic masking: a fresh draw each
  epoch), never on batch size, packing, workers or rank.

The collated batch carries what the model needs as indices (`mlm_positions`, `nsp_positions`:
flat positions in the R x T batch) and the counts the loss is normalized by (`counts`), all made
on the CPU, so the training step never waits on the GPU to learn a shape or a count. With
`buckets` (for torch.compile) the padded length and the number of rows are rounded up to a
few fixed sizes (padding rows are empty), so the compiler sees a handful of shapes; the lengths
of the index lists are left to the compiler as dynamic sizes (korbert.pretrain marks them).
"""

from __future__ import annotations

import numpy as np
import torch

from corpus_tools.shard_format import IGNORE, ShardReader


def instance_lengths(reader: ShardReader) -> np.ndarray:
    """int64 [instances]: tokens per instance, read from the shards' offsets columns only."""
    parts = [np.diff(np.asarray(reader._columns(k)["offsets"])) for k in range(len(reader.shards))]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def length_bucket(n: int, cap: int) -> int:
    """The padded length for a row of n tokens under --compile: the smallest of 8, 12, 16, 24, 32,
    48, 64, 96, 128, ... that holds n (at most ~41% padding), never above cap."""
    b = 8
    while b < n:
        b = b * 3 // 2 if b & (b - 1) == 0 else b * 4 // 3  # 8 -> 12 -> 16 -> 24 -> 32 -> 48 ...
    return min(b, cap)


def pack_rows(instances: np.ndarray, lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Best fit decreasing: rows of instances whose lengths add up to <= capacity. Longest first;
    each goes into the open row with the least room that still holds it, else a new row."""
    rows: list[list[int]] = []
    by_room: list[list[int]] = [[] for _ in range(capacity + 1)]  # room -> rows with that much room left
    order = instances[np.argsort(-lengths[instances], kind="stable")]
    for i, n in zip(order.tolist(), lengths[order].tolist()):
        for room in range(n, capacity + 1):
            if by_room[room]:
                r = by_room[room].pop()
                break
        else:
            r, room = len(rows), capacity
            rows.append([])
        rows[r].append(i)
        by_room[room - n].append(r)
    return rows


class BatchPlan:
    """Which rows (instance indices) form global batch `step`, counted over epochs from 0."""

    def __init__(
        self, lengths: np.ndarray, seed: int, max_len: int, *, rows_per_step: int = 0, tokens_per_step: int = 0,
        pack: bool = False, parts: int = 1, buckets: bool = False, group: int = 64,
    ):
        if (rows_per_step > 0) == (tokens_per_step > 0):
            raise ValueError("give exactly one of rows_per_step and tokens_per_step")
        if rows_per_step and rows_per_step % parts:
            raise ValueError(f"{rows_per_step} rows per step do not split into {parts} equal micro-batches")
        self.lengths = np.asarray(lengths, np.int64)
        self.seed, self.max_len, self.pack, self.parts, self.buckets, self.group = seed, max_len, pack, parts, buckets, group
        self.tokens_per_step = tokens_per_step
        n = len(self.lengths)
        if n == 0:
            raise ValueError("no training instances")
        if int(self.lengths.max()) > max_len:
            raise ValueError(f"an instance of {int(self.lengths.max())} tokens is longer than max_len {max_len}")
        per_row = max_len / float(self.lengths.mean()) if pack else 1.0
        if tokens_per_step:
            rows_fixed = tokens_per_step // max_len // parts * parts if pack else 0
            if (pack and rows_fixed == 0) or tokens_per_step < max_len * parts:
                raise ValueError(f"a budget of {tokens_per_step} tokens per step is less than {parts} row(s) of {max_len} tokens")
            est_instances = tokens_per_step / max_len * per_row if pack else tokens_per_step / float(self.lengths.mean())
        else:
            rows_fixed = rows_per_step
            est_instances = rows_per_step * per_row
        self.rows_fixed = rows_fixed  # 0: varies with the rows' length (token budget, no packing)
        self.mega = max(1, int(est_instances * group))
        self._steps_before = [0]  # global batches in epochs 0..e-1, for the epochs planned so far
        self._cache: dict[int, tuple] = {}

    # -- one epoch
    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """(items, row_ptr, row_len, batches): row r = items[row_ptr[r]:row_ptr[r+1]], row_len[r] tokens;
        a batch = row ids (-1: empty row)."""
        if epoch in self._cache:
            return self._cache[epoch]
        rng = np.random.default_rng([self.seed, epoch, 0x6261])
        order = rng.permutation(len(self.lengths))
        items, sizes = [], []
        for i in range(0, len(order), self.mega):
            chunk = order[i : i + self.mega]
            if self.pack:
                rows = pack_rows(chunk, self.lengths, self.max_len)
                items.append(np.asarray([i for r in rows for i in r], np.int64))
                sizes.append(np.asarray([len(r) for r in rows], np.int64))
            else:
                items.append(chunk[np.argsort(self.lengths[chunk], kind="stable")])  # one instance per row
                sizes.append(np.ones(len(chunk), np.int64))
        items_arr = np.concatenate(items)
        row_ptr = np.concatenate(([0], np.cumsum(np.concatenate(sizes))))
        row_len = np.add.reduceat(self.lengths[items_arr], row_ptr[:-1]) if len(items_arr) else np.zeros(0, np.int64)
        batches = self._cut(row_len)
        batches = [batches[j] for j in rng.permutation(len(batches))]
        if len(self._cache) >= 2:  # the sampler runs ahead of the loop: keep this epoch and the one before
            self._cache.pop(min(self._cache))
        self._cache[epoch] = (items_arr, row_ptr, row_len, batches)
        return self._cache[epoch]

    def _cut(self, row_len: np.ndarray) -> list[np.ndarray]:
        n_rows = len(row_len)
        if self.rows_fixed:
            r = self.rows_fixed
            ids = np.concatenate((np.arange(n_rows), np.full(-n_rows % r, -1)))
            return list(ids.reshape(-1, r))
        # token budget without packing: rows are length-sorted runs; take rows while the batch's
        # padded size (rows rounded up to the parts x padded length) fits the budget
        budget, out, start = self.tokens_per_step, [], 0
        lens = row_len.tolist()
        while start < n_rows:
            longest, end = 0, start
            while end < n_rows:
                longest2 = max(longest, lens[end])
                rows = self.rows_for(end + 1 - start, longest2)
                if end + 1 - start > rows or rows * self.padded_len(longest2) > budget:
                    break
                longest, end = longest2, end + 1
            end = max(end, start + 1)  # a single row always fits (the budget holds parts x max_len)
            rows = self.rows_for(end - start, max(longest, lens[start]))
            out.append(np.concatenate((np.arange(start, end), np.full(rows - (end - start), -1))))
            start = end
        return out

    def padded_len(self, longest: int) -> int:
        if self.pack and self.buckets:
            return self.max_len
        return length_bucket(longest, self.max_len) if self.buckets else max(1, longest)

    def rows_for(self, n: int, longest: int) -> int:
        """Rows of a global batch of n real rows: a multiple of parts; under buckets with a token
        budget, the most rows of this padded length the budget holds (one shape per length)."""
        if self.buckets and self.tokens_per_step and not self.rows_fixed:
            return max(self.parts, self.tokens_per_step // self.padded_len(longest) // self.parts * self.parts)
        return -(-n // self.parts) * self.parts

    # -- steps
    def locate(self, step: int) -> tuple[int, int]:
        """(epoch, index of the global batch within the epoch) of global batch `step`."""
        while self._steps_before[-1] <= step:
            e = len(self._steps_before) - 1
            self._steps_before.append(self._steps_before[-1] + len(self._epoch(e)[3]))
        e = int(np.searchsorted(self._steps_before, step, side="right")) - 1
        return e, step - self._steps_before[e]

    def __call__(self, step: int) -> tuple[int, list[np.ndarray], int]:
        """(epoch, rows: instance indices per row (empty arrays: padding rows), padded length)."""
        epoch, j = self.locate(step)
        items, row_ptr, row_len, batches = self._epoch(epoch)
        empty = np.zeros(0, np.int64)
        ids = batches[j]
        rows = [items[row_ptr[r] : row_ptr[r + 1]] if r >= 0 else empty for r in ids.tolist()]
        real = ids[ids >= 0]
        return epoch, rows, self.padded_len(int(row_len[real].max()) if len(real) else 1)

    def token_stats(self, step: int) -> tuple[int, int]:
        """(non-padding tokens, sum over instances of length^2: the attention's work) of global batch
        `step`. Every rank computes it from the plan alone: no communication."""
        _, rows, _ = self(step)
        lens = self.lengths[np.concatenate(rows)] if rows else np.zeros(0, np.int64)
        return int(lens.sum()), int((lens * lens).sum())


def micro_batches(rows: list, world: int, rank: int, accum: int) -> list[list]:
    """This rank's `accum` micro-batches of one global batch (equal numbers of rows)."""
    per = len(rows) // (world * accum)
    return [rows[(rank * accum + a) * per : (rank * accum + a + 1) * per] for a in range(accum)]


class PretrainingDataset(torch.utils.data.Dataset):
    """Item = one micro-batch, collated: the DataLoader's workers read, mask and collate whole
    batches. Requests are (epoch, rows, padded length); the sampler below yields them."""

    def __init__(self, reader: ShardReader, seed: int, pack: bool = False, nsp: bool = True):
        self.reader, self.seed, self.pack, self.nsp = reader, seed, pack, nsp

    def __len__(self) -> int:
        return len(self.reader)

    def instance(self, epoch: int, i: int) -> dict:
        # static shards: the stored mask; dynamic: the mask of instance i in this epoch
        return self.reader.masked(int(i), np.random.default_rng([self.seed, epoch, int(i)]))

    def __getitem__(self, request: tuple[int, list[np.ndarray], int]) -> dict:
        epoch, rows, length = request
        return collate([[self.instance(epoch, i) for i in row.tolist()] for row in rows], length, self.pack, self.nsp)


def collate(rows: list[list[dict]], length: int | None = None, packed: bool | None = None, nsp: bool = True) -> dict:
    """Rows of instances (masked: input_ids, token_type_ids, labels, next_sentence_label) -> int64 tensors:

    input_ids, token_type_ids, position_ids, segments   (R, T)  segments: 1, 2, ... per instance in its row, 0 = padding
    mlm_positions, mlm_labels                           (M,)    flat positions r*T+t of the tokens to predict; labels -100 = padding
    nsp_positions, nsp_labels                           (N,)    flat positions of each instance's [CLS]; its IsNext label
    counts: (predicted tokens, instances, non-padding tokens) as Python ints (never a device read)
    packed: whether rows may hold several instances (default: whether any does); a Python bool
    T = length (default: the longest row)."""
    n_rows = len(rows)
    t = length or max([sum(len(it["input_ids"]) for it in row) for row in rows] + [1])
    ids, tt, pos, seg = (np.zeros((n_rows, t), np.int64) for _ in range(4))
    mlm_pos, mlm_lab, nsp_pos, nsp_lab = [], [], [], []
    tokens = 0
    for r, row in enumerate(rows):
        c = 0
        for k, it in enumerate(row):
            n = len(it["input_ids"])
            ids[r, c : c + n] = it["input_ids"]
            tt[r, c : c + n] = it["token_type_ids"]
            pos[r, c : c + n] = np.arange(n)
            seg[r, c : c + n] = k + 1
            where = np.flatnonzero(it["labels"] != IGNORE)
            mlm_pos.append(r * t + c + where)
            mlm_lab.append(np.asarray(it["labels"])[where])
            nsp_pos.append(r * t + c)
            nsp_lab.append(it["next_sentence_label"] if nsp else IGNORE)  # MLM only: no NSP loss
            c += n
        tokens += c
    mlm_pos_a = np.concatenate(mlm_pos).astype(np.int64) if mlm_pos else np.zeros(0, np.int64)
    mlm_lab_a = np.concatenate(mlm_lab).astype(np.int64) if mlm_lab else np.zeros(0, np.int64)
    nsp_pos_a, nsp_lab_a = np.asarray(nsp_pos, np.int64), np.asarray(nsp_lab, np.int64)
    out = {"input_ids": ids, "token_type_ids": tt, "position_ids": pos, "segments": seg, "mlm_positions": mlm_pos_a,
           "mlm_labels": mlm_lab_a, "nsp_positions": nsp_pos_a, "nsp_labels": nsp_lab_a}
    packed = any(len(row) > 1 for row in rows) if packed is None else packed
    return {**{k: torch.from_numpy(v) for k, v in out.items()}, "counts": (len(mlm_pos_a), len(nsp_pos_a), tokens), "packed": packed}


class StepSampler(torch.utils.data.Sampler):
    """Yields this rank's micro-batch requests for steps start, start+1, ... (accum per step)."""

    def __init__(self, plan: BatchPlan, start: int, stop: int, world: int, rank: int, accum: int):
        self.plan, self.start, self.stop, self.world, self.rank, self.accum = plan, start, stop, world, rank, accum

    def __iter__(self):
        for step in range(self.start, self.stop):
            epoch, rows, length = self.plan(step)
            for part in micro_batches(rows, self.world, self.rank, self.accum):
                yield epoch, part, length

    def __len__(self) -> int:
        return (self.stop - self.start) * self.accum


def eval_batches(reader: ShardReader, n: int, batch_size: int, seed: int, nsp: bool = True) -> list[dict]:
    """A fixed held-out set: the first n instances of the split with one fixed mask draw, one per
    row, in length-sorted batches (so the held-out numbers are comparable across steps and runs)."""
    n = min(n, len(reader))
    items = [reader.masked(i, np.random.default_rng([seed, 0x7661, i])) for i in range(n)]
    items.sort(key=lambda it: len(it["input_ids"]))
    return [collate([[it] for it in items[i : i + batch_size]], nsp=nsp) for i in range(0, len(items), batch_size)]
