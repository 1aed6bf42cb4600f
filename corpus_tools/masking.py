"""MLM masking for a whole batch at once, from counter-based random numbers: the one masking of
the project, part of the instance format. The training loader draws every epoch's masks with it
(korbert/data.py); the shards stage writes static shards' masks and measures its statistics with it.

BERT's recipe per instance: round(mask_prob x maskable tokens) tokens (at least 1) are chosen unit
by unit (a morpheme or eojeol, or each token alone) in random order, skipping a unit that would
overshoot the count and trying the next ones, as BERT's whole-word masking does; each chosen token
becomes [MASK] (80%), stays (10%) or becomes a random normal piece (10%). [CLS]/[SEP]/[PAD] are
never chosen.

Every random number is splitmix64 of a counter built from (seed, epoch, instance, position, draw),
a pure function of those keys, with no generator state. So an instance's mask is the same whatever
batch, row, packing, worker or rank it lands in, and a batch costs a handful of numpy operations
on whole arrays: a hash per token, one sort of the units, cumulative sums. The loader keys an
instance by its index in its split; the shards stage by its document and its number there
(`document_instances`), under the epoch key SHARDS_EPOCH. Version 2 of the masks: version 1 drew
them per instance from numpy's PCG64.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from corpus_tools.shard_format import GOLDEN, IGNORE, MaskConfig, mix64, special_mask_of, to_unit

MASKING_VERSION = 2  # recorded in the pretraining run key and the static shards' key: never mixed with other masks
EVAL_EPOCH = 0x7661  # the epoch key of the held-out batches' one fixed draw
SHARDS_EPOCH = 0x7368  # the epoch key of the shards stage's draws: static masks, the statistics' draw
INSTANCE_BITS = 24  # a unit's sort key: its instance in the batch (24 bits), then the top 40 bits of its random number


def splitmix64(x: np.ndarray) -> np.ndarray:
    """uint64 -> uint64, elementwise: splitmix64 of state x (wraps mod 2^64)."""
    with np.errstate(over="ignore"):
        return mix64(x + GOLDEN)


def instance_keys(seed: int, epoch: int, instances: np.ndarray) -> np.ndarray:
    """uint64 [n]: the counter base of each instance in this epoch (instances: the loader's index in the
    split, or the shards stage's `document_instances`)."""
    head = splitmix64(splitmix64(np.uint64(seed & (2**64 - 1))) ^ np.uint64(epoch & (2**64 - 1)))
    return splitmix64(head ^ np.asarray(instances, np.uint64))


def document_instances(docs: np.ndarray, numbers: np.ndarray) -> np.ndarray:
    """uint64 [n]: the instance ids the shards stage keys with (`instance_keys`): instance numbers[j] of
    the document with key docs[j] (`corpus_tools.pieces.document_key`), so its masks depend on its
    document alone, never on the piece, shard or worker it was built in."""
    with np.errstate(over="ignore"):
        return splitmix64(np.asarray(docs, np.uint64) ^ np.asarray(numbers, np.uint64) * GOLDEN)


def raw_draws(keys: np.ndarray, positions: np.ndarray, stream: int) -> np.ndarray:
    """uint64 random numbers for tokens at `positions` (within their instance) of instances with `keys`
    (the same length); stream 0: unit order, 1: [MASK]/keep/random, 2: the random piece."""
    with np.errstate(over="ignore"):
        c = keys ^ (np.asarray(positions, np.uint64) * np.uint64(4) + np.uint64(stream)) * GOLDEN
    return splitmix64(c)


def draws(keys: np.ndarray, positions: np.ndarray, stream: int) -> np.ndarray:
    """`raw_draws` as float64 uniforms in [0, 1)."""
    return to_unit(raw_draws(keys, positions, stream))


def mask_batch(
    ids: np.ndarray, lengths: np.ndarray, keys: np.ndarray, units: np.ndarray | None, cfg: MaskConfig
) -> tuple[np.ndarray, np.ndarray]:
    """ids [T]: the token ids of n instances laid end to end, instance j with lengths[j] tokens and
    counter base keys[j] (`instance_keys`); units [T] or None: a unit id per token (a run of equal
    ids within an instance is one unit); None: every token alone.

    Returns (input_ids int64 [T], masked bool [T]): the ids with the chosen tokens replaced, and which
    tokens are to be predicted (their labels are the original ids)."""
    ids = np.asarray(ids).astype(np.int64)
    lengths = np.asarray(lengths, np.int64)
    n, total = len(lengths), int(lengths.sum())
    starts = np.cumsum(lengths) - lengths  # [n] each instance's first token
    inst = np.repeat(np.arange(n), lengths)  # [T]
    cand = np.flatnonzero(~special_mask_of(ids))  # maskable tokens ([CLS]/[SEP]/[PAD] never), in order
    masked = np.zeros(total, bool)
    if cand.size == 0:
        return ids, masked
    ci = inst[cand]  # [C] instance of each candidate
    m = np.bincount(ci, minlength=n)  # maskable tokens per instance
    k = np.where(m > 0, np.maximum(1, np.rint(m * cfg.mask_prob)), 0).astype(np.int64)  # round half to even, as Python's round

    # units: runs of candidates in one instance with one unit id (no units: each candidate alone)
    first = np.ones(cand.size, bool)
    if units is not None:
        u = np.asarray(units)[cand]
        first[1:] = (u[1:] != u[:-1]) | (ci[1:] != ci[:-1])
    ustart = np.flatnonzero(first)  # [U] index into cand of each unit's first token
    usize = np.diff(np.append(ustart, cand.size))  # [U]
    uinst = ci[ustart]  # [U] instances, ascending
    ukey = raw_draws(keys[uinst], cand[ustart] - starts[uinst], 0)

    # the units of each instance in random order: one sort by instance (the top 24 bits) then the key's
    # top 40 bits (equal ones, about 1 in 2^40, by position): the order within an instance never
    # depends on where it sits in the batch
    if n >= 1 << INSTANCE_BITS:
        raise ValueError(f"{n} instances in one batch: at most {(1 << INSTANCE_BITS) - 1}")
    order = np.argsort((uinst.astype(np.uint64) << np.uint64(64 - INSTANCE_BITS)) | (ukey >> np.uint64(INSTANCE_BITS)), kind="stable")
    s = usize[order]
    cum = np.cumsum(s)
    ufirst = np.searchsorted(uinst, np.arange(n))  # [n] first unit (in sorted order) of each instance
    before = np.where(ufirst > 0, cum[np.maximum(ufirst - 1, 0)], 0)[uinst]  # tokens of earlier instances
    within = cum - before  # [U] tokens up to and including this unit, within its instance
    take = within <= k[uinst]  # whole units in random order while the count is not exceeded
    left = k - np.bincount(uinst, weights=s * take, minlength=n).astype(np.int64)
    # the unit that overshot and the ones after it: take each that still fits, in order (BERT's
    # whole-word masking skips a unit that overshoots); `left` falls every round, so few rounds
    pos = np.arange(len(s)) - ufirst[uinst]  # rank of the unit within its instance's order
    ptr = np.bincount(uinst, weights=take, minlength=n).astype(np.int64)  # the next rank to try
    while True:
        open_ = left[uinst] > 0
        if not open_.any():
            break
        fits = open_ & ~take & (pos >= ptr[uinst]) & (s <= left[uinst])
        hit = np.flatnonzero(fits)
        if hit.size == 0:
            break
        hit = hit[np.r_[True, uinst[hit[1:]] != uinst[hit[:-1]]]]  # the first fitting unit per instance
        take[hit] = True
        hi = uinst[hit]
        left[hi] -= s[hit]
        ptr[hi] = pos[hit] + 1
        done = np.ones(n, bool)
        done[hi] = False
        left[done] = 0  # no unit fits what is left: as BERT, that instance gets fewer
    picked = np.zeros(len(s), bool)
    picked[order] = take
    chosen = cand[np.repeat(picked, usize)]  # [M] token positions, ascending
    masked[chosen] = True

    out = ids.copy()
    ck = keys[inst[chosen]]
    cpos = chosen - starts[inst[chosen]]
    r = draws(ck, cpos, 1)
    out[chosen[r < cfg.mask_share]] = cfg.mask_id
    rnd = r >= cfg.mask_share + cfg.keep_share
    span = cfg.random_high - cfg.random_low
    pieces = cfg.random_low + np.minimum((draws(ck[rnd], cpos[rnd], 2) * span).astype(np.int64), span - 1)
    out[chosen[rnd]] = pieces
    return out, masked


def mask_stats(ids: np.ndarray, out: np.ndarray, masked: np.ndarray, mask_id: int) -> Counter:
    """Counts that check the recipe, from `mask_batch`'s input ids and its (output, masked): candidates,
    masked, and how the masked tokens were replaced (a random piece equal to the original counts as kept)."""
    want, got = np.asarray(ids)[masked], out[masked]
    n, as_mask, as_keep = int(masked.sum()), int((got == mask_id).sum()), int((got == want).sum())
    return Counter(
        candidate_tokens=int((~special_mask_of(np.asarray(ids))).sum()), masked=n,
        as_mask=as_mask, as_keep=as_keep, as_random=n - as_mask - as_keep,
    )


def masked_instance(reader, i: int, seed: int = 0, epoch: int = 0) -> dict:
    """Instance i of a ShardReader with input_ids/labels ready for the MLM loss, as the training loader
    gives it in `epoch` under `seed`: its stored masks (static) or `mask_batch`'s draw (dynamic)."""
    item = reader[i]
    if "labels" not in item:
        ids = item["input_ids"]
        keys = instance_keys(seed, epoch, np.array([i % len(reader)]))
        out, chosen = mask_batch(ids, np.array([len(ids)]), keys, item.get("unit_ids"), reader.mask_config)
        item["input_ids"], item["labels"] = out.astype(ids.dtype), np.where(chosen, ids.astype(np.int32), IGNORE)
    return item
