"""The encoder's attention paths and its one QKV matmul (korbert.model.KorBertForPreTraining.encode).

The CPU runs SDPA with a dense mask (the reference: transformers' own BertModel with that mask) and
FlexAttention's forward; FlashAttention's varlen kernel needs CUDA, so here its inputs are checked
(the batch's `cu_seqlens`, on real packed and unpacked batches) and its semantics are run by a loop of
SDPA calls, one per sequence of `cu_seqlens` (benchmarks/gpu_attention_check.py compares the kernel
itself with SDPA on a GPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from corpus_tools.text import InputError
from korbert.data import BatchPlan, fixed_counts, instance_lengths, make_batch
from korbert.heldout import MODEL_INPUTS
from korbert.model import KorBertForPreTraining, attention_path, bert_config, cu_seqlens_of


@pytest.fixture(scope="module")
def reader(shards_dir):
    from corpus_tools.shard_format import open_shards

    return open_shards(shards_dir, verify=False)


def batches(reader) -> dict[str, dict]:
    """Real batches of each kind the loop makes: packed rows at fixed shapes (a padding row included),
    packed rows of dynamic shape, one instance per row (the held-out evaluation's), NSP pairs."""
    plan = BatchPlan(instance_lengths(reader), 0, 128, tokens_per_step=1024, pack=True)
    fixed = fixed_counts(plan, reader.mask_config.mask_prob, 1)
    epoch, rows, length = plan(3)
    rows = [*rows, np.zeros(0, np.int64)]  # an empty row: padding only
    return {
        "packed-fixed": make_batch(reader, rows, length, seed=0, epoch=epoch, packed=True, fixed=(fixed[0], fixed[1] + 8)),
        "packed": make_batch(reader, plan(5)[1], seed=0, epoch=0, packed=True),
        "one-per-row": make_batch(reader, [np.array([i]) for i in (0, 5, 9, 14, 20)], seed=0, epoch=0, packed=False),
    }


def test_cu_seqlens_cut_real_batches_into_instances_and_padding_runs(reader):
    for name, b in batches(reader).items():
        seg, pos = b["segments"], b["position_ids"]
        r, t = seg.shape
        cu = b["cu_seqlens"]
        assert cu.dtype == torch.int32 and cu[0] == 0 and cu[-1] == r * t, name
        assert (cu[1:] >= cu[:-1]).all(), name
        lens = (cu[1:] - cu[:-1]).tolist()
        seqs = [(int(a), int(z)) for a, z in zip(cu[:-1], cu[1:]) if z > a]
        flat_seg, flat_pos = seg.reshape(-1), pos.reshape(-1)
        for a, z in seqs:  # one instance or one row's padding: within a row, one segment, positions from 0
            assert a // t == (z - 1) // t, (name, a, z)
            assert (flat_seg[a:z] == flat_seg[a]).all(), (name, a, z)
            if flat_seg[a] > 0:
                assert flat_pos[a:z].tolist() == list(range(z - a)), (name, a, z)
        rows_padded = int(((seg == 0).any(1)).sum())
        instances = b["counts"][1]
        assert len(seqs) == instances + rows_padded, name
        assert torch.equal(cu_seqlens_of(seg), torch.tensor([0] + [z for _, z in seqs], dtype=torch.int32)), name
        if name == "packed-fixed":  # fixed shapes: as many entries as the padded [CLS] list + rows + 1, zero-length at the end
            assert len(cu) == len(b["nsp_positions"]) + r + 1 and lens[-1] == 0
            assert rows_padded >= 1 and len(cu) > len(seqs) + 1


def varlen_by_sdpa(q, k, v, cu):
    """What varlen attention computes, a sequence at a time: (N, H, d) -> (N, H, d)."""
    out = torch.empty_like(q)
    for a, z in zip(cu[:-1].tolist(), cu[1:].tolist()):
        if z > a:
            out[a:z] = F.scaled_dot_product_attention(*(x[a:z].transpose(0, 1) for x in (q, k, v))).transpose(0, 1)
    return out


@pytest.fixture
def emulated_varlen(monkeypatch):
    """Runs the 'varlen' path on the CPU with `varlen_by_sdpa` in place of the CUDA kernel."""
    import korbert.model as km

    real = km.attention_path
    monkeypatch.setattr(km, "varlen_attention", lambda: lambda q, k, v, cu_q, cu_k, max_q, max_k: varlen_by_sdpa(q, k, v, cu_q))
    monkeypatch.setattr(km, "attention_path", lambda want, *a: "varlen" if want == "varlen" else real(want, *a))


@pytest.mark.parametrize("path", ["sdpa", "flex", "varlen"])
def test_every_attention_path_equals_transformers_with_the_dense_mask(reader, path, emulated_varlen):
    torch.manual_seed(0)
    model = KorBertForPreTraining(bert_config("tiny", 3000, 128, {"hidden_size": 64, "intermediate_size": 128})).eval()
    model.attention, model.fused_qkv = path, path == "varlen"  # (both QKV forms are covered)
    for name, b in batches(reader).items():
        seg = b["segments"]
        mask = seg[:, None, :, None] == seg[:, None, None, :] if b["packed"] else (seg > 0)[:, None, None, :]
        with torch.no_grad():
            ref = model.bert(b["input_ids"], attention_mask=mask, token_type_ids=b["token_type_ids"], position_ids=b["position_ids"]).last_hidden_state
            out = model.encode(b["input_ids"], b["token_type_ids"], b["position_ids"], seg, b["cu_seqlens"], b["packed"])
            loss = model(**{k: b[k] for k in MODEL_INPUTS}, packed=b["packed"], sparse=True)
        real = seg > 0
        err = (out - ref)[real].abs().max().item()
        assert err < 1e-5, (path, name, err)
        assert torch.isfinite(out).all(), (path, name)  # padding rows too: nothing left unwritten
        assert torch.isfinite(loss.loss), (path, name)


def test_the_fused_qkv_matmul_keeps_the_layout_and_the_gradients(tmp_path):
    """One matmul over the three weights concatenated gives the three projections' outputs and
    gradients; the parameters stay three Linear layers, so the state dict is BertForPreTraining's and
    plain transformers loads the saved folder with no missing or unexpected keys."""
    from transformers import BertForPreTraining

    cfg = bert_config("tiny", 500, 64, {"hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0})
    torch.manual_seed(1)
    model = KorBertForPreTraining(cfg)
    plain = BertForPreTraining(cfg)
    ours, theirs = model.state_dict(), plain.state_dict()
    assert list(ours) == list(theirs) and all(ours[k].shape == theirs[k].shape for k in ours)
    assert not any("qkv" in k for k in ours)
    seg = torch.tensor([[1] * 20 + [2] * 30 + [0] * 14, [1] * 64])
    pos = torch.cat([torch.arange(20), torch.arange(30), torch.zeros(14, dtype=torch.long)])[None].repeat(2, 1)
    pos[1] = torch.arange(64)
    ids = torch.randint(5, 500, (2, 64)) * (seg > 0)
    tt = torch.zeros_like(ids)
    grads = {}
    for fused in (True, False):
        model.zero_grad()
        model.fused_qkv = fused
        out = model.encode(ids, tt, pos, seg, None, True)
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))  # (a mean of squares after LayerNorm has no gradient)
        (out * w)[seg > 0].sum().backward()
        grads[fused] = (out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert (grads[True][0] - grads[False][0]).abs().max() < 1e-5
    for n, g in grads[False][1].items():
        assert (grads[True][1][n] - g).abs().max() <= 1e-5 * max(1.0, g.abs().max().item()), n
    assert any(".attention.self.query.weight" in n for n in grads[True][1])
    model.save_pretrained(tmp_path / "m")
    loaded, info = BertForPreTraining.from_pretrained(tmp_path / "m", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    for k, v in loaded.state_dict().items():
        assert torch.equal(v, ours[k]), k


def test_the_attention_path_rules():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert KorBertForPreTraining.attention == "sdpa" and not KorBertForPreTraining.fused_qkv  # the measured defaults
    assert attention_path("sdpa", cpu, torch.float32, 0.1) == "sdpa"  # the only one with attention dropout
    assert attention_path("sdpa", cuda, torch.bfloat16, 0.1) == "sdpa"
    assert attention_path("flex", cpu, torch.float32, 0.0, training=False) == "flex"  # its forward runs on a CPU, its backward not
    for want, dev, dt, p in (("varlen", cpu, torch.bfloat16, 0.0), ("flex", cuda, torch.bfloat16, 0.1), ("varlen", cuda, torch.bfloat16, 0.1),
                             ("flex", cpu, torch.float32, 0.0), ("auto", cpu, torch.float32, 0.0)):
        with pytest.raises(InputError):
            attention_path(want, dev, dt, p)


def test_the_attention_path_is_not_part_of_the_run_key():
    """The paths compute one function: a run resumes under another --attention."""
    from korbert.checkpoint import run_key
    from korbert.pretrain_config import PretrainConfig

    keys = {run_key(PretrainConfig(attention=a), "shards", "tok", 1, "bf16", True) for a in ("sdpa", "varlen", "flex")}
    assert len(keys) == 1


@pytest.mark.parametrize("mode", ["train-fp32", "train-bf16", "train-bf16-stream"])
def test_the_default_path_trains_as_transformers_did_bit_for_bit(reader, mode):
    """Training mode (dropout on), the same seed: `encode` draws the same dropout masks in the same
    order as transformers' BertModel with the dense mask (the loop's forward before this encoder), and
    gives the same bits, in fp32, under bf16 autocast and with the bf16 residual stream."""
    from korbert.model import bf16_residual_stream

    torch.manual_seed(0)
    model = KorBertForPreTraining(bert_config("tiny", 3000, 128, {"hidden_size": 64, "intermediate_size": 128})).train()
    if mode == "train-bf16-stream":
        bf16_residual_stream(model)
    b = batches(reader)["packed"]
    seg = b["segments"]
    mask = seg[:, None, :, None] == seg[:, None, None, :]
    amp = torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode != "train-fp32")
    with torch.no_grad(), amp:
        torch.manual_seed(5)
        ref = model.bert(b["input_ids"], attention_mask=mask, token_type_ids=b["token_type_ids"], position_ids=b["position_ids"]).last_hidden_state
        torch.manual_seed(5)
        out = model.encode(b["input_ids"], b["token_type_ids"], b["position_ids"], seg, b["cu_seqlens"], True)
    real = seg > 0
    assert torch.equal(out[real], ref[real])


def test_an_attention_the_machine_cannot_run_is_refused_before_training(tmp_path, vocab_dir, corpus_file, reader):
    from korbert.pretrain import main as pretrain
    from korbert.pretrain_config import PretrainConfig

    for attention in ("varlen", "flex"):  # (without attention dropout: refused for the machine, not for the dropout)
        with pytest.raises(InputError, match="needs torch"):
            pretrain(PretrainConfig(shards=str(Path(reader.folder)), out=str(tmp_path / attention), model_size="tiny", max_steps=2, device="cpu",
                                    attention=attention, override=["attention_probs_dropout_prob=0"], num_workers=0))
