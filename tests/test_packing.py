"""Packed instances (--instances packed, with and without NSP) and MLM-only pretraining."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from corpus_tools.shard_format import CLS, SEP, open_shards
from corpus_tools.pairs import is_valid as _is_valid
from corpus_tools.shards import main as shards_main
from corpus_tools.shards_config import ShardsConfig
from corpus_tools.text import InputError, clean
from korbert.pretrain import UNTRAINED_WITHOUT_NSP, main as pretrain_main
from korbert.pretrain_config import PretrainConfig

MAX_LEN = 32  # short instances: many sentences are cut and many documents share an instance
SHARD_MB = 0.2  # ~3 pieces


def build(vocab_dir, corpus_file, out, **kw) -> Path:
    base = dict(tokenizer=str(vocab_dir), inputs=[str(corpus_file)], out=str(out), max_seq_len=MAX_LEN, valid_fraction=0.05,
                shard_mb=SHARD_MB, instances="packed", nsp=False, show=0, seed=5)
    shards_main(ShardsConfig(**{**base, **kw}))
    return Path(out)


@pytest.fixture(scope="module")
def packed_mlm(tmp_path_factory, vocab_dir, corpus_file) -> Path:
    return build(vocab_dir, corpus_file, tmp_path_factory.mktemp("packed-mlm"))


@pytest.fixture(scope="module")
def streams(tok, corpus_file) -> dict:
    """The reference: each (shard, split)'s documents, encoded one by one, in input order."""
    from corpus_tools.artifacts import sha256_file
    from corpus_tools.pieces import document_key, file_id, ranged_pieces, read_piece

    texts, keys = [], []
    fid = file_id(sha256_file(corpus_file))
    pieces = ranged_pieces(0, corpus_file, corpus_file.stat().st_size, fid, int(SHARD_MB * 1e6))
    assert len(pieces) > 1
    for piece in pieces:
        for offset, _, raw in read_piece(piece, text_field=["title", "text"]):
            text, g = clean(raw), document_key(fid, offset)
            if len(text) >= 2:
                texts.append(text)
                keys.append((piece.index, "valid" if _is_valid(5, g, 0.05) else "train"))
    out: dict = {}
    for key, enc in zip(keys, tok.encode_documents(texts)):
        if len(enc["ids"]):
            out.setdefault(key, []).append(np.asarray(enc["ids"], np.int64))
    return out


def instances(folder: Path, split: str) -> list[list[dict]]:
    """Instances per shard, in order."""
    r = open_shards(folder, split=split)
    per = []
    start = 0
    for s in r.shards:
        per.append([r[i] for i in range(start, start + s["instances"])])
        start += s["instances"]
    return per


def test_packed_instances_hold_every_token_once_with_sep_at_document_boundaries(packed_mlm, streams):
    m = json.loads((packed_mlm / "manifest.json").read_text())
    assert m["config"]["instances"] == "packed" and m["config"]["nsp"] is False
    assert m["counts"]["train"]["isnext"] is None and m["counts"]["train"]["tokens_per_instance"] > 0.8 * MAX_LEN
    checked = 0
    for split in ("train", "valid"):
        for k, shard in enumerate(instances(packed_mlm, split)):
            docs = streams[(k, split)]
            expected = np.concatenate(docs)
            bounds = set(np.cumsum([len(d) for d in docs])[:-1].tolist())  # where document k+1 starts in the stream
            got, seps, cuts, n = [], set(), set(), 0
            for it in shard:
                ids = it["input_ids"].astype(np.int64)
                assert len(ids) <= MAX_LEN and ids[0] == CLS and ids[-1] == SEP
                assert not it["token_type_ids"].any() and it["next_sentence_label"] == -1
                inner = ids[1:-1]
                assert len(inner) and inner[0] != SEP and inner[-1] != SEP  # a separator never opens or closes an instance
                for t in inner.tolist():
                    if t == SEP:
                        seps.add(n)
                    else:
                        got.append(t)
                        n += 1
                cuts.add(n)
                units = it["unit_ids"]
                assert (units[ids == SEP] == -1).all() and (units[1:-1][inner != SEP] >= 0).all()
            assert np.array_equal(np.asarray(got), expected)  # no token lost, duplicated or reordered
            assert seps <= bounds  # a [SEP] inside an instance is a document boundary ...
            assert bounds <= seps | cuts  # ... and every boundary inside an instance has one
            assert len(seps) > 0.3 * len(bounds)  # documents do share instances
            checked += len(shard)
    assert checked > 100


def test_packed_shards_are_deterministic_and_batching_does_not_matter(packed_mlm, tmp_path, vocab_dir, corpus_file):
    again = build(vocab_dir, corpus_file, tmp_path / "again", batch_docs=37)
    a, b = (json.loads((d / "manifest.json").read_text()) for d in (packed_mlm, again))
    assert a["shards"] == b["shards"]  # every file's sha256


def test_packed_nsp_pairs_follow_berts_rule(tmp_path, vocab_dir, corpus_file, streams):
    folder = build(vocab_dir, corpus_file, tmp_path / "packed-nsp", nsp=True)
    m = json.loads((folder / "manifest.json").read_text())
    tr = m["counts"]["train"]
    assert 0.35 < tr["isnext_share"] < 0.65
    # the pairs of ids a document boundary puts around a [SEP]: (last of document k, first of k+1)
    edges = {(int(a[-1]), int(b[0])) for docs in streams.values() for a, b in zip(docs, docs[1:])}
    n_inner = 0
    for shard in instances(folder, "train"):
        for it in shard:
            ids, tt = it["input_ids"].astype(np.int64), it["token_type_ids"]
            b = int(np.argmax(tt))
            assert len(ids) <= MAX_LEN and ids[0] == CLS and ids[b - 1] == SEP and ids[-1] == SEP and b >= 3 and len(ids) - b >= 2
            assert it["next_sentence_label"] in (0, 1) and tt[b:].all()
            for p in np.flatnonzero(ids == SEP).tolist():
                if p not in (b - 1, len(ids) - 1):
                    n_inner += 1
                    assert (int(ids[p - 1]), int(ids[p + 1])) in edges
    assert n_inner > 50


def test_no_nsp_needs_packing_and_packing_needs_dynamic_masking(tmp_path, vocab_dir, corpus_file):
    with pytest.raises(InputError, match="--no-nsp needs --instances packed"):
        build(vocab_dir, corpus_file, tmp_path / "a", instances="document")
    with pytest.raises(InputError, match="needs --masking dynamic"):
        build(vocab_dir, corpus_file, tmp_path / "b", masking="static")


def test_mlm_only_pretraining_trains_exports_and_fills_masks(packed_mlm, tmp_path):
    from transformers import BertForMaskedLM, BertForPreTraining, pipeline

    from korbert.model import KorBertForPreTraining
    from korbert.tokenizer import KorBertTokenizer

    kw = dict(shards=str(packed_mlm), out=str(tmp_path / "run"), model_size="tiny", batch_size=16, max_steps=40, lr=3e-3,
              log_every=5, eval_every=0, eval_instances=64, num_workers=0, seed=2, objective="mlm")
    with pytest.raises(InputError, match="--objective mlm"):
        pretrain_main(PretrainConfig(**{**kw, "objective": "mlm+nsp"}))
    result = pretrain_main(PretrainConfig(**kw))
    log = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert log[-1]["mlm_loss"] < log[0]["mlm_loss"] - 0.5 and "nsp_loss" not in log[-1]
    assert "nsp_acc" not in result["eval"] and result["eval"]["mlm_acc"] > 0
    final = tmp_path / "run" / "final"
    fm = json.loads((final / "manifest.json").read_text())
    assert fm["objective"] == "mlm" and fm["untrained"] == [f"{p}*" for p in UNTRAINED_WITHOUT_NSP]

    # the pooler and the NSP head are exactly as initialized; the rest trained
    torch.manual_seed(2)
    init = KorBertForPreTraining(BertForPreTraining.config_class.from_pretrained(final)).state_dict()
    trained = BertForPreTraining.from_pretrained(final).state_dict()
    for name, w in trained.items():
        same = torch.equal(w, init[name])
        assert same == name.startswith(UNTRAINED_WITHOUT_NSP) or name.endswith(("position_ids", "token_type_ids")), name

    tok = KorBertTokenizer.from_pretrained(final)
    fill = pipeline("fill-mask", model=BertForMaskedLM.from_pretrained(final), tokenizer=tok, top_k=3)
    out = fill(f"영화가 정말 {tok.mask_token}")
    assert len(out) == 3 and all(0 <= o["score"] <= 1 and o["token_str"] for o in out)
