"""The batch-level data path: counter-based whole-unit masking and collation of whole micro-batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from corpus_tools.shard_format import CLS, IGNORE, MASK, PAD, SEP, open_shards
from korbert.data import BatchPlan, fixed_counts, instance_lengths, make_batch
from corpus_tools.masking import instance_keys, mask_batch, raw_draws
from korbert.model import KorBertForPreTraining, bert_config
from korbert.heldout import MODEL_INPUTS
from conftest import sample_texts, write_jsonl


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("c") / "c.jsonl", sample_texts(600) + sample_texts(30, "petitions"))


def _shards(vocab_dir, corpus, out, **kw) -> Path:
    from corpus_tools.shards import main
    from corpus_tools.shards_config import ShardsConfig

    main(ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(corpus)], out=str(out), valid_fraction=0.05, show=0, seed=1, shard_mb=0.03, **kw))
    return out


@pytest.fixture(scope="module", params=["morpheme", "eojeol", "token"])
def dynamic(request, vocab_dir, corpus, tmp_path_factory):
    """Dynamic shards (several shard files) masked by morpheme, eojeol or token."""
    return open_shards(_shards(vocab_dir, corpus, tmp_path_factory.mktemp(request.param), mask_unit=request.param))


@pytest.fixture(scope="module")
def static(vocab_dir, corpus, tmp_path_factory):
    return open_shards(_shards(vocab_dir, corpus, tmp_path_factory.mktemp("static"), masking="static", dupe_factor=1))


def per_instance(batch: dict) -> dict[int, tuple]:
    """instance (by its [CLS] position's order) -> (input ids, predicted positions, labels), read back from a batch."""
    ids, seg = batch["input_ids"].numpy(), batch["segments"].numpy()
    t = ids.shape[1]
    pred = dict(zip(batch["mlm_positions"].tolist(), batch["mlm_labels"].tolist()))
    out = []
    for p in batch["nsp_positions"].tolist():
        r, c = divmod(p, t)
        n = int((seg[r] == seg[r, c]).sum())
        where = [q - p for q in range(p, p + n) if q in pred and pred[q] != IGNORE]
        out.append((ids[r, c : c + n].tolist(), where, [pred[p + q] for q in where]))
    return out


def reference_mask(ids, units, key, cfg):
    """BERT's whole-unit masking, one instance at a time in plain Python, with the same counter-based
    draws: the specification `mask_batch` vectorizes."""
    n = len(ids)
    cand = [j for j in range(n) if ids[j] not in (CLS, SEP, PAD)]
    k = max(1, round(len(cand) * cfg.mask_prob)) if cand else 0
    groups = []  # runs of maskable tokens with one unit id
    for j in cand:
        if groups and units is not None and units[j] == units[groups[-1][-1]]:
            groups[-1].append(j)
        else:
            groups.append([j])
    u = raw_draws(np.full(len(groups), key, np.uint64), np.array([g[0] for g in groups]), 0) >> np.uint64(24)  # its top 40 bits
    chosen, left = [], k
    for g in (groups[i] for i in np.argsort(u, kind="stable")):
        if len(g) <= left:
            chosen += g
            left -= len(g)
    return sorted(chosen)


def test_mask_is_one_function_of_seed_epoch_and_instance(dynamic):
    """Instance i's mask in epoch e is the same whatever batch it is in: packed or one per row, other
    neighbours, another batch size, another worker or rank (a separate call)."""
    picks = np.random.default_rng(0).choice(len(dynamic), 12, replace=False)
    kw = dict(seed=7, epoch=3)
    packed = make_batch(dynamic, [picks[:5], picks[5:9], np.zeros(0, np.int64), picks[9:]], 512, **kw)
    alone = make_batch(dynamic, [np.array([i]) for i in picks[::-1]], **kw)
    halves = [make_batch(dynamic, [picks[j : j + 1] for j in range(h, 12, 2)], **kw) for h in (0, 1)]
    a = dict(zip(picks.tolist(), per_instance(packed)))
    b = dict(zip(picks[::-1].tolist(), per_instance(alone)))
    c = {**dict(zip(picks[0::2].tolist(), per_instance(halves[0]))), **dict(zip(picks[1::2].tolist(), per_instance(halves[1])))}
    assert a == b == c
    other = dict(zip(picks.tolist(), per_instance(make_batch(dynamic, [picks], 2048, seed=7, epoch=4))))
    assert sum(a[i] != other[i] for i in a) >= 6  # a new epoch draws new masks (short reviews have few choices)


def test_counts_units_and_specials_match_the_reference(dynamic):
    """Every instance of a batch: the chosen positions are those of the one-instance reference
    (round(p x maskable) tokens, whole units in random order, a unit that overshoots skipped), never a
    special token; labels are the original ids."""
    index = np.arange(min(400, len(dynamic)))
    batch = make_batch(dynamic, [index], 128 * len(index), seed=11, epoch=2)
    g = dynamic.gather(index)
    keys = instance_keys(11, 2, index)
    starts = np.cumsum(g["lengths"]) - g["lengths"]
    exact = short = 0
    for j, (ids, where, labels) in enumerate(per_instance(batch)):
        s, n = starts[j], g["lengths"][j]
        orig = g["input_ids"][s : s + n].tolist()
        units = g["unit_ids"][s : s + n].tolist() if "unit_ids" in g else None
        assert where == reference_mask(orig, units, keys[j], dynamic.mask_config)
        assert labels == [orig[q] for q in where] and not {orig[q] for q in where} & {CLS, SEP, PAD}
        k = max(1, round(sum(t not in (CLS, SEP, PAD) for t in orig) * 0.15))
        exact += len(where) == k
        short += len(where) < k
        if units is not None:
            for u in {units[q] for q in where}:  # whole units
                assert all(q in where for q in range(n) if units[q] == u and orig[q] not in (CLS, SEP))
    # short reviews in few eojeols often have no unit small enough for the last token or two
    assert exact >= (0.5 if dynamic.manifest["config"]["mask_unit"] == "eojeol" else 0.9) * len(index)
    assert exact + short == len(index)
    if "unit_ids" not in g:
        assert short == 0  # single tokens: always exactly round(p x maskable)


def test_80_10_10_within_binomial_bounds(dynamic):
    index = np.arange(len(dynamic))
    got = np.zeros(3)
    for epoch in range(4):
        b = make_batch(dynamic, [index], int(instance_lengths(dynamic).sum()), seed=0, epoch=epoch)
        ids, pos, lab = b["input_ids"].reshape(-1), b["mlm_positions"], b["mlm_labels"]
        now = ids[pos]
        got += [(now == MASK).sum(), (now == lab).sum(), ((now != MASK) & (now != lab)).sum()]
        assert (now[(now != MASK) & (now != lab)] >= dynamic.mask_config.random_low).all()  # random normal pieces
    n = got.sum()
    for share, want in zip(got / n, (0.8, 0.1 + 0.1 / 8000, 0.1)):
        assert abs(share - want) < 4 * np.sqrt(want * (1 - want) / n) + 1e-3, (got, n)


def old_collate(reader, rows, length):
    """The per-instance collate this path replaced, as the reference for static shards."""
    t = length
    ids, tt, pos, seg = (np.zeros((len(rows), t), np.int64) for _ in range(4))
    mp, ml, npos, nl = [], [], [], []
    for r, row in enumerate(rows):
        c = 0
        for k, i in enumerate(row.tolist()):
            it = reader[i]
            n = len(it["input_ids"])
            ids[r, c : c + n], tt[r, c : c + n], pos[r, c : c + n], seg[r, c : c + n] = it["input_ids"], it["token_type_ids"], np.arange(n), k + 1
            w = np.flatnonzero(it["labels"] != IGNORE)
            mp += (r * t + c + w).tolist()
            ml += it["labels"][w].tolist()
            npos.append(r * t + c)
            nl.append(it["next_sentence_label"])
            c += n
    return {"input_ids": ids, "token_type_ids": tt, "position_ids": pos, "segments": seg, "mlm_positions": np.array(mp),
            "mlm_labels": np.array(ml), "nsp_positions": np.array(npos), "nsp_labels": np.array(nl)}


def test_static_shards_collate_as_before(static):
    plan = BatchPlan(instance_lengths(static), 0, 128, tokens_per_step=1024, pack=True)
    for step in range(6):
        epoch, rows, length = plan(step)
        new, old = make_batch(static, rows, length, seed=0, epoch=epoch), old_collate(static, rows, length)
        for k in MODEL_INPUTS:
            if k != "cu_seqlens":  # (newer than the old collate: tests/test_attention_paths.py checks it)
                assert np.array_equal(new[k].numpy(), old[k]), k
        text = (old["segments"] > 0) & ~np.isin(old["input_ids"], (CLS, SEP))  # (what ELECTRA's discriminator scores)
        assert new["counts"] == (len(old["mlm_labels"]), len(old["nsp_labels"]), int((old["segments"] > 0).sum()), int(text.sum()))


def test_fixed_shapes_pad_without_loss(dynamic):
    """Fixed shapes: the lists are padded to the plan's counts; the padded entries carry no loss, and
    the losses equal the unpadded batch's."""
    plan = BatchPlan(instance_lengths(dynamic), 0, 128, tokens_per_step=2048, pack=True, parts=2)
    fixed = fixed_counts(plan, dynamic.mask_config.mask_prob, 2)
    torch.manual_seed(0)
    model = KorBertForPreTraining(bert_config("tiny", 3000, 128, {"hidden_size": 64, "intermediate_size": 128})).eval()
    sizes = set()
    for step in range(4):
        epoch, rows, length = plan(step)
        half = rows[: len(rows) // 2]
        a = make_batch(dynamic, half, length, seed=0, epoch=epoch, packed=True)
        b = make_batch(dynamic, half, length, seed=0, epoch=epoch, packed=True, fixed=fixed)
        sizes.add((len(b["mlm_labels"]), len(b["nsp_labels"])))
        assert b["counts"] == a["counts"] and len(b["mlm_labels"]) >= len(a["mlm_labels"])
        assert (b["mlm_labels"][len(a["mlm_labels"]) :] == IGNORE).all() and (b["nsp_labels"][len(a["nsp_labels"]) :] == IGNORE).all()
        with torch.no_grad():
            oa = model(**{k: a[k] for k in MODEL_INPUTS}, packed=True, sparse=True)
            ob = model(**{k: b[k] for k in MODEL_INPUTS}, packed=True, sparse=True)
        for f in ("loss", "mlm_loss_sum", "nsp_loss_sum"):
            assert abs(float(getattr(oa, f)) - float(getattr(ob, f))) < 1e-5, f
        assert int(oa.mlm_count) == int(ob.mlm_count) and int(oa.nsp_count) == int(ob.nsp_count)
    assert sizes == {fixed}  # one shape
    empty = make_batch(dynamic, [np.zeros(0, np.int64)] * 3, 128, seed=0, epoch=0, packed=True, fixed=fixed)  # a rank's share of padding rows
    assert empty["counts"] == (0, 0, 0, 0) and (len(empty["mlm_labels"]), len(empty["nsp_labels"])) == fixed and empty["input_ids"].shape == (3, 128)
    epoch, rows, length = plan(0)
    need = make_batch(dynamic, rows, length, seed=0, epoch=epoch, packed=True)
    grown = make_batch(dynamic, rows, length, seed=0, epoch=epoch, packed=True, fixed=(64, 8))  # counts too small for this batch
    ladder = [64]
    while ladder[-1] < len(need["mlm_labels"]):
        ladder.append(-(-int(ladder[-1] * 1.25) // 64) * 64)
    assert len(grown["mlm_labels"]) == ladder[-1] and (grown["mlm_labels"][: len(need["mlm_labels"])] == need["mlm_labels"]).all()
    assert len(grown["nsp_labels"]) >= len(need["nsp_labels"]) and grown["counts"] == need["counts"]  # nothing dropped


def test_mask_batch_on_hand_made_instances():
    """Two instances end to end: [CLS]/[SEP] never chosen; a 3-token instance gets its 1 token."""
    from corpus_tools.shard_format import MaskConfig

    cfg = MaskConfig(random_low=10, random_high=500)
    ids = np.array([CLS, *range(300, 397), SEP, CLS, 600, SEP], np.uint16)
    out, masked = mask_batch(ids, np.array([99, 3]), instance_keys(0, 0, np.array([5, 6])), None, cfg)
    assert masked[:99].sum() == round(97 * 0.15) and masked[99:].tolist() == [False, True, False]
    assert not masked[[0, 98, 99, 101]].any() and out.dtype == np.int64
    assert (out[~masked] == ids[~masked]).all()


def test_ranks_hash_disjoint_shares_of_the_shards(vocab_dir, corpus, tmp_path, monkeypatch):
    """Each of N ranks hashes only its shards' files (before, rank 0 hashed them all while the others
    waited at the first barrier); together they hash every file once, and an edited file is reported
    by the rank that owns it, and by `korbert pretrain`."""
    import json

    from corpus_tools import shard_format
    from corpus_tools.text import InputError
    from korbert.pretrain import main
    from korbert.pretrain_config import PretrainConfig

    folder = _shards(vocab_dir, corpus, tmp_path / "s")
    m = json.loads((folder / "manifest.json").read_text())
    hashed, shares = [], []
    real = shard_format.sha256_file
    monkeypatch.setattr(shard_format, "sha256_file", lambda p: hashed.append(Path(p).name) or real(p))
    for rank in range(3):
        hashed.clear()
        assert shard_format.verify_shards(folder, m, "train", rank, 3) == []
        shares.append(list(hashed))
    every = [f for s in m["shards"]["train"] for f in s["files"]]
    assert len(m["shards"]["train"]) >= 3 and all(shares) and sorted(sum(shares, [])) == sorted(every)
    victim = m["shards"]["train"][1]
    name = next(iter(victim["files"]))
    path = folder / name
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert shard_format.verify_shards(folder, m, "train", 0, 2) == []
    assert name in shard_format.verify_shards(folder, m, "train", 1, 2)[0]
    with pytest.raises(InputError, match="sha256 differs"):
        main(PretrainConfig(shards=str(folder), out=str(tmp_path / "run"), model_size="tiny", max_steps=1, num_workers=0))


def best_fit_one_at_a_time(instances, lengths, capacity):
    """The reference: best fit decreasing, one instance at a time in Python (the loop epoch planning
    ran before, ~1.1 us per instance: ~2 minutes per epoch of 100M instances on every rank)."""
    rows, by_room = [], [[] for _ in range(capacity + 1)]
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


def test_packing_runs_of_equal_lengths_gives_best_fits_rows():
    """pack_rows places a run of equal lengths at a time and gives exactly the rows of best fit
    decreasing done one instance at a time, on capacities and length mixes of every kind."""
    from korbert.data import pack_rows

    rng = np.random.default_rng(0)
    for trial in range(120):
        cap = int(rng.choice([8, 16, 64, 128, 512]))
        n = int(rng.integers(1, 2000))
        lengths = rng.integers(1, cap + 1, size=n) if trial % 3 else np.minimum(cap, rng.geometric(0.05, size=n))
        inst = rng.permutation(n)[: max(1, n // 2)]
        items, sizes = pack_rows(inst, lengths, cap)
        got = [r.tolist() for r in np.split(items, np.cumsum(sizes)[:-1])]
        assert got == best_fit_one_at_a_time(inst, lengths, cap), trial




def test_fixed_counts_hold_the_second_epoch():
    """The fixed counts hold every batch of epoch 1 too, not only epoch 0's: on a GPU a batch over them is
    another shape, so a compile in the middle of the run. With these lengths an epoch-1 batch predicts
    more than epoch 0's counts (plus their margin) allow."""
    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(np.exp(rng.normal(3.3, 0.9, 200_000))), 5, 128).astype(np.int64)
    plan = BatchPlan(lengths, 0, 128, tokens_per_step=65536, pack=True)
    masked, instances = fixed_counts(plan, 0.15, 1)
    masked0, instances0 = fixed_counts(plan, 0.15, 1, epochs=1)  # epoch 0's alone (the counts before the fix)
    most = np.maximum(1, np.rint(0.15 * (lengths - 2))).astype(np.int64)  # the most one instance predicts
    over_epoch0, step = 0, 0
    while True:
        epoch, rows, _ = plan(step)
        if epoch > 1:
            break
        inst = np.concatenate(rows)
        assert len(inst) <= instances and int(most[inst].sum()) <= masked, (epoch, step)
        over_epoch0 += len(inst) > instances0 or int(most[inst].sum()) > masked0
        step += 1
    assert over_epoch0 > 0  # the case this test is for: epoch 0's counts alone do not hold epoch 1
