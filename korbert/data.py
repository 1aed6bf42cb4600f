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
  epoch; `corpus_tools.masking`), never on batch size, packing, workers or rank.

A loader worker turns one micro-batch request into tensors with whole-array numpy operations
(`make_batch`): no per-instance Python. The batch carries what the model needs as indices
(`mlm_positions`, `nsp_positions`: flat positions in the R x T batch) and the counts the loss is
normalized by (`counts`), all made on the CPU, so the training step never waits on the GPU to learn
a shape or a count. With `buckets` (for torch.compile) the padded length and the number of rows are
rounded up to a few fixed sizes (padding rows are empty), so the compiler sees a handful of shapes;
the lengths of the index lists are dynamic sizes (korbert.pretrain marks them), or, with `fixed`
counts (`fixed_counts`), padded to one size: one shape, one graph, CUDA graphs possible.
"""

from __future__ import annotations

import numpy as np
import torch

from corpus_tools.masking import EVAL_EPOCH, instance_keys, mask_batch
from corpus_tools.shard_format import IGNORE, ShardReader, special_mask_of


def instance_lengths(reader: ShardReader) -> np.ndarray:
    """int64 [instances]: tokens per instance, read from the shards' offsets columns only."""
    parts = [np.diff(np.asarray(reader.columns(k)["offsets"])) for k in range(len(reader.shards))]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def length_bucket(n: int, cap: int) -> int:
    """The padded length for a row of n tokens under --compile: the smallest of 8, 12, 16, 24, 32,
    48, 64, 96, 128, ... that holds n (at most ~41% padding), never above cap."""
    b = 8
    while b < n:
        b = b * 3 // 2 if b & (b - 1) == 0 else b * 4 // 3  # 8 -> 12 -> 16 -> 24 -> 32 -> 48 ...
    return min(b, cap)


def pack_rows(instances: np.ndarray, lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Best fit decreasing: rows of instances whose lengths add up to <= capacity. Longest first; each
    goes into the open row with the least room that still holds it (the last one opened or filled at
    that room), else a new row. -> (items: the instances row by row, sizes: instances per row).

    Done a run of equal lengths at a time, not an instance at a time: while the rows with the least
    room r >= n last, each takes r // n instances of length n in turn (best fit keeps filling a row
    until less than n is left), so the loop runs over (length, room) pairs, not instances."""
    order = instances[np.argsort(-lengths[instances], kind="stable")]
    lens = lengths[order]
    row_of = np.empty(len(order), np.int64)
    by_room: list[list[int]] = [[] for _ in range(capacity + 1)]  # room -> rows with that much room left, last used last
    have = np.zeros(capacity + 1, np.int64)  # len(by_room[room]), for the search
    n_rows, pos = 0, 0
    for end in [*(np.flatnonzero(np.diff(lens)) + 1).tolist(), len(order)]:
        n = int(lens[pos])
        while pos < end:
            c = end - pos
            fit = np.flatnonzero(have[n:])
            if fit.size:
                room = n + int(fit[0])
                q = room // n
                k = min(int(have[room]), -(-c // q))
                stack = by_room[room]
                rows = stack[len(stack) - k :][::-1]  # the rows best fit would pop, in its order
                del stack[len(stack) - k :]
                have[room] -= k
            else:
                room, q = capacity, capacity // n
                k = -(-c // q)
                rows = list(range(n_rows, n_rows + k))
                n_rows += k
            m = min(c, k * q)
            row_of[pos : pos + m] = np.asarray(rows, np.int64)[np.arange(m) // q]
            full, rem = divmod(m, q)
            by_room[room - q * n].extend(rows[:full])
            have[room - q * n] += full
            if rem:
                by_room[room - rem * n].append(rows[full])
                have[room - rem * n] += 1
            pos += m
    by_row = np.argsort(row_of, kind="stable")
    return order[by_row], np.bincount(row_of, minlength=n_rows)


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
                chunk_items, chunk_sizes = pack_rows(chunk, self.lengths, self.max_len)
                items.append(chunk_items)
                sizes.append(chunk_sizes)
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

    def largest_padded(self) -> int:
        """The most tokens, padding included, of a global batch of epoch 0 (what memory must hold)."""
        _, _, row_len, batches = self._epoch(0)
        return max(len(b) * self.padded_len(int(row_len[b[b >= 0]].max())) for b in batches if (b >= 0).any())

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
    """Item = one micro-batch, finished: the DataLoader's workers read, mask and collate whole
    batches (`make_batch`). Requests are (epoch, rows, padded length); the sampler below yields them.
    `fixed`: (masked tokens, instances) entries per micro-batch under fixed shapes (`fixed_counts`)."""

    def __init__(self, reader: ShardReader, seed: int, pack: bool = False, nsp: bool = True, fixed: tuple[int, int] | None = None):
        self.reader, self.seed, self.pack, self.nsp, self.fixed = reader, seed, pack, nsp, fixed

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, request: tuple[int, list[np.ndarray], int]) -> dict:
        epoch, rows, length = request
        return make_batch(self.reader, rows, length, seed=self.seed, epoch=epoch, packed=self.pack, nsp=self.nsp, fixed=self.fixed)


def make_batch(
    reader: ShardReader, rows: list[np.ndarray], length: int | None = None, *, seed: int, epoch: int,
    packed: bool | None = None, nsp: bool = True, fixed: tuple[int, int] | None = None,
) -> dict:
    """Rows of instance indices (empty arrays: padding rows) -> the model's int64 tensors, with whole-
    array numpy operations: one gather per shard, one masking call (`corpus_tools.masking.mask_batch`:
    instance i of this epoch gets the same mask in any batch; static shards: their stored masks).

    input_ids, token_type_ids, position_ids, segments   (R, T)  segments: 1, 2, ... per instance in its row, 0 = padding
    mlm_positions, mlm_labels                           (M,)    flat positions r*T+t of the tokens to predict; labels -100 = padding
    nsp_positions, nsp_labels                           (N,)    flat positions of each instance's [CLS]; its IsNext label (-100: none)
    counts: (predicted tokens, instances, non-padding tokens, those of them not [CLS]/[SEP]: the tokens ELECTRA's
            discriminator scores) as Python ints (never a device read)
    packed: whether rows may hold several instances (default: whether any does); a Python bool
    T = length (default: the longest row). `fixed` = (M, N): the two lists are padded to these sizes
    (entries with label -100 at position 0, which carry no loss), so every batch has one shape; a
    batch that needs more gets the next size of a x1.25 ladder (another shape, never a dropped token)."""
    counts = np.fromiter((len(r) for r in rows), np.int64, len(rows))
    index = np.concatenate([np.asarray(r, np.int64) for r in rows]) if counts.sum() else np.zeros(0, np.int64)
    n_rows, n = len(rows), len(index)
    g = reader.gather(index)
    lens = g["lengths"]
    first_tok = np.cumsum(lens) - lens  # [n] each instance's first token in the flat list
    row_of = np.repeat(np.arange(n_rows), counts)  # [n]
    row_first = (np.cumsum(counts) - counts)[row_of]  # [n] the first instance of its row
    row_tokens = np.bincount(row_of, weights=lens, minlength=n_rows).astype(np.int64) if n else np.zeros(n_rows, np.int64)
    t = length or max(int(row_tokens.max()) if n_rows else 1, 1)
    starts = row_of * t + first_tok - first_tok[row_first]  # [n] flat position of each [CLS] in R x T
    total = int(lens.sum())
    pos = np.arange(total, dtype=np.int64) - np.repeat(first_tok, lens)  # [total] position within its instance
    dest = np.repeat(starts, lens) + pos  # [total] flat position in R x T

    if "labels" in g:  # static shards: inputs and labels as written
        inputs, predict = g["input_ids"].astype(np.int64), g["labels"] != IGNORE
        targets = g["labels"][predict].astype(np.int64)
    else:
        ids = g["input_ids"]
        inputs, predict = mask_batch(ids, lens, instance_keys(seed, epoch, index), g.get("unit_ids"), reader.mask_config)
        targets = ids[predict].astype(np.int64)
    cols = {c: np.zeros(n_rows * t, np.int64) for c in ("input_ids", "token_type_ids", "position_ids", "segments")}
    cols["input_ids"][dest] = inputs
    cols["token_type_ids"][dest] = pos >= np.repeat(g["b_start"], lens)
    cols["position_ids"][dest] = pos
    cols["segments"][dest] = np.repeat(np.arange(n) - row_first + 1, lens)
    out = {k: v.reshape(n_rows, t) for k, v in cols.items()}
    out["mlm_positions"], out["mlm_labels"] = dest[predict], targets
    out["nsp_positions"], out["nsp_labels"] = starts, g["nsp"] if nsp else np.full(n, IGNORE, np.int64)
    m = len(targets)
    if fixed is not None:
        for (p, lab), size in zip((("mlm_positions", "mlm_labels"), ("nsp_positions", "nsp_labels")), fixed):
            have, want = len(out[p]), size
            while want < have:  # a rare batch that outgrows the count: the next of a few sizes (x1.25), one graph each
                want = -(-int(want * 1.25) // 64) * 64
            out[p] = np.concatenate((out[p], np.zeros(want - have, np.int64)))
            out[lab] = np.concatenate((out[lab].astype(np.int64), np.full(want - have, IGNORE, np.int64)))
    packed = bool((counts > 1).any()) if packed is None else packed
    cu = cu_seqlens(lens, row_of, row_tokens, t, len(out["nsp_positions"]) + n_rows + 1 if fixed is not None else None)
    return {
        **{k: torch.from_numpy(np.ascontiguousarray(v, np.int64)) for k, v in out.items()}, "cu_seqlens": torch.from_numpy(cu),
        "counts": (m, n, total, total - int(special_mask_of(inputs).sum())), "packed": packed,
    }


def cu_seqlens(lens: np.ndarray, row_of: np.ndarray, row_tokens: np.ndarray, t: int, size: int | None = None) -> np.ndarray:
    """The flat R x T token list cut into the sequences attention runs over, as cumulative offsets (int32,
    FlashAttention's `cu_seqlens`): each row's instances in order, then the row's padding as one sequence
    of its own (so no real token attends to padding or padding to it, and no output is left unwritten).
    `size` (fixed shapes: instances + rows + 1 at most) pads the list with zero-length sequences at the end."""
    n_rows = len(row_tokens)
    pad = t - row_tokens  # [R] padding at the end of each row
    has_pad = np.flatnonzero(pad > 0)
    seq_row = np.concatenate((row_of, has_pad))
    seq_len = np.concatenate((lens, pad[has_pad]))
    last = np.concatenate((np.zeros(len(lens), np.int8), np.ones(len(has_pad), np.int8)))  # a row's padding after its instances
    order = np.lexsort((np.arange(len(seq_row)), last, seq_row))  # by row, instances (in their order) before padding
    cu = np.concatenate(([0], np.cumsum(seq_len[order]))).astype(np.int32)
    assert cu[-1] == n_rows * t, (cu[-1], n_rows, t)
    if size is not None:
        if len(cu) > size:
            raise AssertionError(f"{len(cu) - 1} attention sequences in a batch sized for {size - 1}")
        cu = np.concatenate((cu, np.full(size - len(cu), cu[-1], np.int32)))
    return cu


def fixed_counts(plan: "BatchPlan", mask_prob: float, parts: int, margin: float = 0.02, epochs: int = 2) -> tuple[int, int]:
    """(masked tokens, instances) per micro-batch that hold every micro-batch of the first `epochs` epochs,
    from the plan alone: an instance of L tokens predicts at most max(1, round(mask_prob x (L - 2))) (all
    but [CLS] and one [SEP] maskable), plus `margin` of that and a multiple of 64, so later epochs (other
    packings) fit too as a rule (`make_batch` grows a list that does not: another shape, and on a GPU a
    compile in the middle of the run, but no lost token). Epoch 0 alone was not enough: a short corpus
    reaches epoch 1 early, and another packing's largest batch can pass epoch 0's by more than the margin.
    The plans are cached, so the loader reuses them."""
    bound = np.maximum(1, np.rint(mask_prob * np.maximum(plan.lengths - 2, 0))).astype(np.int64)
    m = k = 0
    for epoch in range(max(1, epochs)):
        items, row_ptr, _, batches = plan._epoch(epoch)
        row_mask = np.add.reduceat(bound[items], row_ptr[:-1]) if len(items) else np.zeros(0, np.int64)
        row_inst = np.diff(row_ptr)
        ids = np.stack(batches)  # [batches, rows]: rows_fixed rows each (fixed shapes need a fixed row count)
        per = ids.shape[1] // parts
        mb = ids.reshape(-1, per)
        real = mb >= 0
        m = max(m, int(np.where(real, row_mask[np.maximum(mb, 0)], 0).sum(1).max()))
        k = max(k, int(np.where(real, row_inst[np.maximum(mb, 0)], 0).sum(1).max()))
    up = lambda x: int(-(-int(x * (1 + margin)) // 64) * 64)  # noqa: E731
    return up(m), up(k)


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
    """A fixed held-out set: n instances drawn by `seed` from the whole split (the split is in input
    order: its first n would hold only the first input's documents) with one fixed mask draw (epoch
    key EVAL_EPOCH), one per row, in length-sorted batches (so the held-out numbers are comparable
    across steps and runs)."""
    n = min(n, len(reader))
    pick = np.sort(np.random.default_rng([seed, 0x68656C64]).permutation(len(reader))[:n])
    order = pick[np.argsort(instance_lengths(reader)[pick], kind="stable")]  # from the offsets columns alone
    return [
        make_batch(reader, [np.array([i]) for i in order[j : j + batch_size]], seed=seed, epoch=EVAL_EPOCH, packed=False, nsp=nsp)
        for j in range(0, n, batch_size)
    ]


def row_tokens(lengths: np.ndarray, max_len: int, pack: bool, seed: int, sample: int = 20_000) -> float:
    """Mean real tokens per row: an instance's mean length, or (`pack`) a packed row's mean fill over a
    seeded sample of the instances. A row budget keeps its real tokens per step across phases of other
    lengths with this (fewer, longer rows in the long phase)."""
    lengths = np.asarray(lengths, np.int64)
    if not pack:
        return float(lengths.mean())
    pick = np.random.default_rng([seed, 0x726F77]).permutation(len(lengths))[:sample]
    items, sizes = pack_rows(pick, lengths, max_len)
    return float(lengths[items].sum()) / max(1, len(sizes))
