"""Pretraining: a tiny BERT on real shards (built from the sample with the session vocab)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from corpus_tools.text import InputError
from korbert.pretrain import PretrainConfig, main

ROOT = Path(__file__).resolve().parent.parent
TINY = ["hidden_size=64", "num_hidden_layers=2", "num_attention_heads=2", "intermediate_size=128"]


@pytest.fixture(scope="module")
def shards_dir(tmp_path_factory, vocab_dir, corpus_file) -> Path:
    from corpus_tools.shards import ShardsConfig, main as shards_main

    out = tmp_path_factory.mktemp("shards")
    shards_main(ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(corpus_file)], out=str(out), valid_fraction=0.05, show=0, seed=1))
    return out


def cfg(shards_dir, out, **kw) -> PretrainConfig:
    base = dict(
        shards=str(shards_dir), out=str(out), model_size="tiny", override=TINY, batch_size=8, max_steps=10, lr=2e-3,
        log_every=1, eval_every=0, eval_instances=64, save_every=4, num_workers=0, seed=3,
    )
    base.update(kw)
    return PretrainConfig(**base)


def losses(out) -> list[float]:
    return [json.loads(line)["loss"] for line in Path(out, "log.jsonl").read_text().splitlines()]


def _run_cli(args: list[str], env: dict | None = None, nproc: int = 0) -> subprocess.CompletedProcess:
    e = {**os.environ, **(env or {})}
    if nproc:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", f"--master_port={port}", "-m", "korbert.pretrain", *args]
    else:
        cmd = [sys.executable, "-m", "korbert.pretrain", *args]
    return subprocess.run(cmd, env=e, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _args(c: PretrainConfig) -> list[str]:
    return [
        "--shards", c.shards, "--out", c.out, "--model-size", c.model_size, "--override", *c.override, "--batch-size", str(c.batch_size),
        "--max-steps", str(c.max_steps), "--lr", str(c.lr), "--log-every", str(c.log_every), "--eval-every", str(c.eval_every),
        "--eval-instances", str(c.eval_instances), "--save-every", str(c.save_every), "--num-workers", str(c.num_workers),
        "--seed", str(c.seed),
    ]


def test_loss_goes_down(shards_dir, tmp_path):
    r = main(cfg(shards_dir, tmp_path, max_steps=60, batch_size=16, lr=3e-3, log_every=5, eval_every=60, warmup=0.1))
    ls = losses(tmp_path)
    assert len(ls) == 12
    assert ls[-1] < ls[0] - 1.5, ls  # from ~ln(3000)+ln(2) = 8.7 down; chance MLM accuracy is 1/3000
    assert r["eval"]["mlm_acc"] > 0.02 and r["eval"]["instances"] > 20
    assert (tmp_path / "final" / "model.safetensors").is_file()
    lines = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert {"loss", "mlm_acc", "nsp_acc", "lr", "tokens_per_s", "step", "tokens"} <= set(lines[0])
    assert "eval_mlm_acc" in lines[-1]


def test_same_seed_same_losses_and_rerun_is_up_to_date(shards_dir, tmp_path, capsys):
    main(cfg(shards_dir, tmp_path / "a", max_steps=5))
    main(cfg(shards_dir, tmp_path / "b", max_steps=5))
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    again = main(cfg(shards_dir, tmp_path / "a", max_steps=5))
    assert "up to date" in capsys.readouterr().out and again["step"] == 5


def test_kill_and_resume_gives_the_same_losses(shards_dir, tmp_path):
    """A run SIGKILLed after step 7 (last checkpoint: step 4) and resumed equals an unbroken run."""
    whole = cfg(shards_dir, tmp_path / "whole", num_workers=1)
    main(whole)
    broken = cfg(shards_dir, tmp_path / "broken", num_workers=1)
    p = _run_cli(_args(broken), env={"KORBERT_TEST_KILL_AT_STEP": "7"})
    assert p.returncode == -9, p.stderr[-2000:]
    assert len(losses(tmp_path / "broken")) == 7  # it logged steps 5-7 after the checkpoint of step 4
    r = main(broken)  # --resume is the default
    assert r["step"] == 10
    assert losses(tmp_path / "broken") == losses(tmp_path / "whole")
    a = torch.load(tmp_path / "whole" / "ckpt.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "broken" / "ckpt.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    # killed before its first checkpoint: the rerun starts fresh and its log holds only its own lines
    early = cfg(shards_dir, tmp_path / "early", num_workers=1)
    assert _run_cli(_args(early), env={"KORBERT_TEST_KILL_AT_STEP": "2"}).returncode == -9
    main(early)
    assert losses(tmp_path / "early") == losses(tmp_path / "whole")


def test_export_loads_in_plain_transformers(shards_dir, tmp_path):
    from transformers import AutoModelForMaskedLM, BertForPreTraining, pipeline

    from korbert.model import KorBertForPreTraining
    from korbert.tokenizer import KorBertTokenizer

    main(cfg(shards_dir, tmp_path, max_steps=3))
    final = tmp_path / "final"
    state = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    from transformers import BertConfig

    ours = KorBertForPreTraining(BertConfig.from_dict(state["state"]["model_config"]))
    ours.load_state_dict(state["model"])
    ours.eval()
    tok = KorBertTokenizer.from_pretrained(final)
    enc = tok(["영화가 정말 재미있었다", "배우들의 연기는 별로였어요"], ["다음에 또 보고 싶다", "스토리가 지루하다"], padding=True, return_tensors="pt")
    with torch.no_grad():
        ref = ours(**enc)
        pt = BertForPreTraining.from_pretrained(final).eval()(**enc)
        mlm = AutoModelForMaskedLM.from_pretrained(final).eval()(**enc)
    assert (pt.prediction_logits - ref.prediction_logits).abs().max() < 1e-4
    assert (pt.seq_relationship_logits - ref.seq_relationship_logits).abs().max() < 1e-4
    assert (mlm.logits - ref.prediction_logits).abs().max() < 1e-4
    # the sparse training head gives the dense head's logits at the masked positions
    labels = torch.full_like(enc["input_ids"], -100)
    labels[0, 2], labels[1, 3] = enc["input_ids"][0, 2], enc["input_ids"][1, 3]
    with torch.no_grad():
        o = ours(**enc, labels=labels, next_sentence_label=torch.tensor([0, 1]), sparse=True)
    dense = torch.log_softmax(ref.prediction_logits, -1)
    want = -(dense[0, 2, labels[0, 2]] + dense[1, 3, labels[1, 3]])
    assert abs(float(o.mlm_loss_sum) - float(want)) < 1e-4 and int(o.mlm_count) == 2
    fill = pipeline("fill-mask", model=str(final), tokenizer=tok)
    preds = fill(f"영화가 정말 {tok.mask_token}")
    assert len(preds) == 5 and all(isinstance(p["token_str"], str) for p in preds)
    m = json.loads((final / "manifest.json").read_text())
    assert m["kind"] == "model" and m["tokenizer_hash"] == tok.fingerprint and m["step"] == 3


def test_ddp_two_processes_equal_one_process(shards_dir, tmp_path):
    """torchrun with 2 CPU processes (gloo), batch 4 each == 1 process with batch 8 (dropout off)."""
    no_dropout = [*TINY, "hidden_dropout_prob=0", "attention_probs_dropout_prob=0"]
    one = cfg(shards_dir, tmp_path / "one", batch_size=8, max_steps=6, override=no_dropout)
    two = cfg(shards_dir, tmp_path / "two", batch_size=4, max_steps=6, override=no_dropout)
    p = _run_cli(_args(two), nproc=2)
    assert p.returncode == 0, p.stderr[-3000:]
    main(one)
    assert np.allclose(losses(tmp_path / "one"), losses(tmp_path / "two"), atol=2e-4)
    a = torch.load(tmp_path / "one" / "ckpt.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "two" / "ckpt.pt", weights_only=False)["model"]
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-4
    assert json.loads((tmp_path / "two" / "config.json").read_text())["run"]["world_size"] == 2


def test_clear_errors(shards_dir, tmp_path, vocab_dir):
    with pytest.raises(InputError, match="no budget"):
        main(cfg(shards_dir, tmp_path / "a", max_steps=0))
    with pytest.raises(InputError, match="no manifest"):
        main(cfg(vocab_dir.parent, tmp_path / "b"))
    with pytest.raises(InputError, match="non-finite"):
        main(cfg(shards_dir, tmp_path / "c", lr=1e30, warmup=0.0, max_steps=8, clip_grad=0.0))
    main(cfg(shards_dir, tmp_path / "d", max_steps=2))
    with pytest.raises(InputError, match="another run"):
        main(cfg(shards_dir, tmp_path / "d", max_steps=2, lr=1e-4, save_every=1))  # final/ is stale, ckpt.pt foreign
    with pytest.raises(InputError, match="--override"):
        main(cfg(shards_dir, tmp_path / "e", override=["hidden_size"]))
