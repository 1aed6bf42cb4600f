"""The position measure (`korbert eval positions`): MLM accuracy by position bucket in 512-token windows
against the same masked tokens in consecutive 128-token windows, on a hand-made model whose predictions
come from its position embeddings alone."""

from __future__ import annotations

import json

import pytest
import torch

from corpus_tools.text import InputError
from evals.positions import BUCKETS, Specials, score

H = 32  # hidden size = the number of distinct tokens the pattern uses
SP = Specials(cls=2, sep=3, mask=4, pad=0)


def pattern(j: int) -> int:
    """The token at content index j of a window (it repeats every 126 tokens: a 128-token window's content)."""
    return 10 + (j % 126) % H


def hand_made(zero_past: int | None = None):
    """A BertForMaskedLM with no layers that predicts from its position embedding alone: position p (content
    index p - 1) holds the one-hot of pattern(p - 1), the head maps it back to that token. Its input tokens,
    [MASK] included, are ignored. zero_past=128: rows 128.. zeroed (positions never trained, as it were)."""
    from transformers import BertConfig, BertForMaskedLM

    c = BertConfig(vocab_size=10 + H, hidden_size=H, num_hidden_layers=0, num_attention_heads=1, intermediate_size=H, max_position_embeddings=512,
                   hidden_dropout_prob=0.0, tie_word_embeddings=False)
    m = BertForMaskedLM(c).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        emb = m.bert.embeddings
        emb.LayerNorm.weight.fill_(1.0)
        for p in range(1, 512):
            emb.position_embeddings.weight[p, pattern(p - 1) - 10] = 10.0
        if zero_past is not None:
            emb.position_embeddings.weight[zero_past:] = 0.0
        head = m.cls.predictions
        head.transform.dense.weight.copy_(torch.eye(H))
        head.transform.LayerNorm.weight.fill_(1.0)
        for k in range(H):
            head.decoder.weight[10 + k, k] = 1.0
    return m


def docs(n: int = 30) -> list[list[int]]:
    return [[pattern(j) for j in range(510)] for _ in range(n)]


def test_a_model_whose_positions_past_128_are_zeroed_scores_lower_there_than_its_reference():
    r = score(hand_made(zero_past=128), docs(), SP, seed=1, batch_size=4)
    long, ref, n = r["mlm_acc_by_position"], r["mlm_acc_128_reference"], r["masked_tokens"]
    assert list(long) == list(ref) == list(n) == list(BUCKETS)
    assert all(ref[b] == 1.0 for b in BUCKETS) and long["0-127"] == 1.0  # the first window: the same positions in both
    assert all(long[b] == 0.0 for b in ("128-255", "256-383", "384-511"))
    assert all(300 < n[b] < 700 for b in BUCKETS), n  # 15% of ~127 positions x 30 windows
    whole = score(hand_made(), docs(), SP, seed=1, batch_size=4)
    assert whole["masked_tokens"] == n and all(whole["mlm_acc_by_position"][b] == whole["mlm_acc_128_reference"][b] == 1.0 for b in BUCKETS)
    other = score(hand_made(), docs(), SP, seed=2, batch_size=4)
    assert other["masked_tokens"] != n  # the masks come from the seed


def test_the_gap_s_standard_error_is_paired_over_the_same_tokens():
    """Positions 320.. zeroed: bucket 256-383 is right in the reference everywhere and in the long window
    only before 320, so its gap is -p (p: its masked share past 319) with s.e. sqrt(p(1 - p)/n); a bucket
    all right or all wrong in both has no spread (s.e. 0)."""
    r = score(hand_made(zero_past=320), docs(), SP, seed=1, batch_size=4)
    n, only, se = r["masked_tokens"], r["right_in_one_only"], r["gap_se"]
    assert all(only["long"][b] == 0 for b in BUCKETS)
    assert only["short"]["0-127"] == only["short"]["128-255"] == 0 and only["short"]["384-511"] == n["384-511"]
    p = only["short"]["256-383"] / n["256-383"]
    assert 0.3 < p < 0.7  # positions 320-383 of 256-383
    assert r["mlm_acc_by_position"]["256-383"] == pytest.approx(1 - p, abs=1e-5)
    assert se["256-383"] == pytest.approx((p * (1 - p) / n["256-383"]) ** 0.5, abs=1e-5) and se["256-383"] > 0.01
    assert se["0-127"] == se["128-255"] == se["384-511"] == 0.0
    # paired, not two samples: rows 64-95 zeroed make both scorings miss the same tokens of 0-127 (no gap, no
    # spread; two independent samples' s.e. would be > 0), and the reference alone miss those at short position 64-95
    # of the other buckets
    m = hand_made()
    with torch.no_grad():
        m.bert.embeddings.position_embeddings.weight[64:96] = 0.0
    r = score(m, docs(), SP, seed=1, batch_size=4)
    acc, ref = r["mlm_acc_by_position"], r["mlm_acc_128_reference"]
    assert 0.6 < acc["0-127"] == ref["0-127"] < 0.9 and r["gap_se"]["0-127"] == 0.0
    assert all(acc[b] == 1.0 and 0.6 < ref[b] < 0.9 and r["gap_se"][b] > 0.005 for b in ("128-255", "256-383", "384-511"))


def test_eval_positions_end_to_end_on_real_texts(model_dir, tmp_path, one_thread):
    """The CLI's path: texts chosen from a corpus file (documents of >= 512 tokens, recorded by id and sha256),
    scored with a real tokenizer and model folder; too few masked tokens per bucket is refused before scoring."""
    from corpus_tools import SAMPLE_DATA
    from evals.positions import PositionsConfig, TextsConfig, main, select_texts

    texts = tmp_path / "texts.jsonl"
    sel = select_texts(TextsConfig(corpus=str(SAMPLE_DATA / "petitions.jsonl.gz"), tokenizer=str(model_dir), out=str(texts), skip_first=10, every=2,
                                   windows=6))
    rows = [json.loads(line) for line in texts.read_text(encoding="utf-8").splitlines()]
    assert sel["windows"] >= 6 and len(rows) == sel["documents"] and all(r["index"] >= 10 and r["index"] % 2 == 0 for r in rows)
    assert all(r["tokens"] >= 512 for r in rows)
    with pytest.raises(InputError, match="--long-len must be a multiple of --short-len"):  # (its last bucket would score nothing)
        main(PositionsConfig(model=str(model_dir), texts=str(texts), out=str(tmp_path / "r"), device="cpu", long_len=300))
    with pytest.raises(InputError, match=r"masked tokens in bucket .* fewer than --min-per-bucket 20000"):
        main(PositionsConfig(model=str(model_dir), texts=str(texts), out=str(tmp_path / "r"), device="cpu"))
    r = main(PositionsConfig(model=str(model_dir), texts=str(texts), out=str(tmp_path / "r"), device="cpu", min_per_bucket=10))
    saved = json.loads((tmp_path / "r" / "results.json").read_text())
    assert saved["mlm_acc_by_position"] == r["mlm_acc_by_position"] and set(saved["mlm_acc_by_position"]) == set(BUCKETS)
    assert saved["texts"]["ids"] == [x["id"] for x in rows] and saved["seed"] == 0 and saved["masking"].startswith("mask-only")
    assert saved["windows"] == sel["windows"] and all(saved["masked_tokens"][b] >= 10 for b in BUCKETS)
    # a folder without an MLM head is refused, not scored through a random one; an ELECTRA export is scored through
    # its generator (final/generator/), which shares the discriminator's position embeddings
    import shutil

    from transformers import BertModel, ElectraForMaskedLM, ElectraForPreTraining

    from korbert.electra import discriminator_config, generator_config
    from korbert.model import bert_config

    bare = tmp_path / "bare"
    shutil.copytree(model_dir, bare)
    (bare / "model.safetensors").unlink()
    BertModel.from_pretrained(model_dir).save_pretrained(bare)
    with pytest.raises(InputError, match="no trained MLM head"):
        main(PositionsConfig(model=str(bare), texts=str(texts), out=str(tmp_path / "b"), device="cpu", min_per_bucket=10))
    electra = tmp_path / "electra"
    shutil.copytree(model_dir, electra, ignore=shutil.ignore_patterns("config.json", "model.safetensors"))
    disc = discriminator_config(bert_config("tiny", json.loads((model_dir / "config.json").read_text())["vocab_size"]))
    gen = generator_config(disc, 0.25)
    torch.manual_seed(0)
    ElectraForPreTraining(disc).save_pretrained(electra)
    shutil.copytree(electra, electra / "generator", ignore=shutil.ignore_patterns("config.json", "model.safetensors", "generator"))
    ElectraForMaskedLM(gen).save_pretrained(electra / "generator")
    e = main(PositionsConfig(model=str(electra), texts=str(texts), out=str(tmp_path / "e"), device="cpu", min_per_bucket=10))
    assert e["masked_tokens"] == saved["masked_tokens"] and set(e["mlm_acc_by_position"]) == set(BUCKETS)
