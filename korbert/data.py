"""Pretraining batches from shards: length-grouped global batches, dynamic padding, masking in the loader.

The unit of the data order is the *global batch* (what one optimizer step sees over all ranks and
accumulation steps). Global batch s of epoch e is a pure function of (seed, e, s): a seeded
permutation of the split, cut into mega-batches of `group` global batches, each sorted by length
so a batch holds instances of similar length, then the global batches shuffled. Each global batch
is cut into world_size x grad_accum micro-batches; rank r takes micro-batches r*accum ... So:

- resume is exact: the data position is just the step number;
- 1 process with batch 2b and 2 processes with batch b see the same global batches;
- an instance's mask depends only on (seed, epoch, index) (dynamic masking: a fresh draw each
  epoch), never on batch size, workers or rank.
"""

from __future__ import annotations

import numpy as np
import torch

from corpus_tools.shards import IGNORE, ShardReader


def instance_lengths(reader: ShardReader) -> np.ndarray:
    """int32 [instances]: tokens per instance, read from the shards' offsets columns only."""
    parts = [np.diff(np.asarray(reader._columns(k)["offsets"])) for k in range(len(reader.shards))]
    return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)


class BatchPlan:
    """Which instances form global batch `step` (counted over epochs from 0)."""

    def __init__(self, lengths: np.ndarray, global_batch: int, seed: int, group: int = 64):
        if global_batch < 1:
            raise ValueError("global batch must be >= 1")
        self.lengths, self.global_batch, self.seed, self.group = lengths, global_batch, seed, group
        n = len(lengths)
        self.per_epoch = n // global_batch  # the last partial batch of an epoch is dropped
        if self.per_epoch == 0:
            raise ValueError(f"{n} instances are fewer than one global batch of {global_batch}")
        self._epoch, self._batches = -1, None

    def epoch_of(self, step: int) -> int:
        return step // self.per_epoch

    def _plan(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch, 0x6261])
        order = rng.permutation(len(self.lengths))
        mega = self.global_batch * self.group
        batches = []
        for i in range(0, len(order), mega):
            chunk = order[i : i + mega]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]  # similar lengths side by side
            batches += [chunk[j : j + self.global_batch] for j in range(0, len(chunk), self.global_batch)]
        batches = [b for b in batches if len(b) == self.global_batch][: self.per_epoch]
        return [batches[i] for i in rng.permutation(len(batches))]

    def __call__(self, step: int) -> tuple[int, np.ndarray]:
        """(epoch, instance indices int64 [global_batch]) of global batch `step`."""
        epoch = self.epoch_of(step)
        if epoch != self._epoch:
            self._epoch, self._batches = epoch, self._plan(epoch)
        return epoch, self._batches[step % self.per_epoch]


def micro_batches(indices: np.ndarray, world: int, rank: int, accum: int) -> list[np.ndarray]:
    """This rank's `accum` micro-batches of one global batch (equal sizes; the global batch is a
    multiple of world * accum)."""
    parts = np.array_split(indices, world * accum)
    return parts[rank * accum : (rank + 1) * accum]


class PretrainingDataset(torch.utils.data.Dataset):
    """Item = one micro-batch, collated: the DataLoader's workers read and mask whole batches.

    Requests are (epoch, indices); the sampler below yields them."""

    def __init__(self, reader: ShardReader, seed: int, pad_multiple: int = 1):
        self.reader, self.seed, self.pad_multiple = reader, seed, pad_multiple

    def __len__(self) -> int:
        return len(self.reader)

    def instance(self, epoch: int, i: int) -> dict:
        # static shards: the stored mask; dynamic: the mask of instance i in this epoch
        return self.reader.masked(int(i), np.random.default_rng([self.seed, epoch, int(i)]))

    def __getitem__(self, request: tuple[int, np.ndarray]) -> dict:
        epoch, indices = request
        return collate([self.instance(epoch, int(i)) for i in indices], self.pad_multiple)


def collate(items: list[dict], pad_multiple: int = 1) -> dict:
    """Pad to the longest item (rounded up to pad_multiple). Returns int64 tensors:
    input_ids/token_type_ids/attention_mask/labels (B, T), next_sentence_label (B,)."""
    n = max(len(it["input_ids"]) for it in items)
    n = -(-n // pad_multiple) * pad_multiple
    b = len(items)
    ids = np.zeros((b, n), np.int64)
    tt = np.zeros((b, n), np.int64)
    am = np.zeros((b, n), np.int64)
    labels = np.full((b, n), IGNORE, np.int64)
    for r, it in enumerate(items):
        k = len(it["input_ids"])
        ids[r, :k] = it["input_ids"]
        tt[r, :k] = it["token_type_ids"]
        am[r, :k] = 1
        labels[r, :k] = it["labels"]
    nsp = np.array([it["next_sentence_label"] for it in items], np.int64)
    return {
        "input_ids": torch.from_numpy(ids), "token_type_ids": torch.from_numpy(tt), "attention_mask": torch.from_numpy(am),
        "labels": torch.from_numpy(labels), "next_sentence_label": torch.from_numpy(nsp),
    }


class StepSampler(torch.utils.data.Sampler):
    """Yields this rank's micro-batch requests for steps start, start+1, ... (accum per step)."""

    def __init__(self, plan: BatchPlan, start: int, stop: int, world: int, rank: int, accum: int):
        self.plan, self.start, self.stop, self.world, self.rank, self.accum = plan, start, stop, world, rank, accum

    def __iter__(self):
        for step in range(self.start, self.stop):
            epoch, idx = self.plan(step)
            for part in micro_batches(idx, self.world, self.rank, self.accum):
                yield epoch, part

    def __len__(self) -> int:
        return (self.stop - self.start) * self.accum


def eval_batches(reader: ShardReader, n: int, batch_size: int, seed: int) -> list[dict]:
    """A fixed held-out set: the first n instances of the split with one fixed mask draw, in
    length-sorted batches (so the held-out numbers are comparable across steps and runs)."""
    n = min(n, len(reader))
    items = [reader.masked(i, np.random.default_rng([seed, 0x7661, i])) for i in range(n)]
    items.sort(key=lambda it: len(it["input_ids"]))
    return [collate(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
