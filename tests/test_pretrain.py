"""Pretraining: a tiny BERT on real shards (built from the sample with the session vocab)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from corpus_tools import config as C
from corpus_tools.text import InputError
from korbert.data import BatchPlan, instance_lengths, make_batch, micro_batches
from korbert.distributed import AgreedClock, default_workers
from korbert.heldout import MODEL_INPUTS
from korbert.pretrain import Trainer, main
from korbert.pretrain_config import PretrainConfig
from korbert.runtime import peak_flops
from korbert.schedule import lr_at

ROOT = Path(__file__).resolve().parent.parent
TINY = ["hidden_size=64", "num_hidden_layers=2", "num_attention_heads=2", "intermediate_size=128"]


def cfg(shards_dir, out, **kw) -> PretrainConfig:
    base = dict(
        shards=str(shards_dir), out=str(out), model_size="tiny", override=TINY, batch_size=8, max_steps=10, lr=2e-3,
        log_every=1, eval_every=0, eval_instances=64, save_every=4, num_workers=0, seed=3,
        precision="fp32",  # the tight comparisons below hold on any CPU; bf16 has its own test
    )
    base.update(kw)
    return PretrainConfig(**base)


def losses(out) -> list[float]:
    return [json.loads(line)["loss"] for line in Path(out, "log.jsonl").read_text().splitlines()]


def _run_cli(args: list[str], env: dict | None = None, nproc: int = 0, kill_at: int = 0) -> subprocess.CompletedProcess:
    """`korbert pretrain ARGS` in a subprocess (under torchrun with nproc), SIGKILLed after step kill_at if given."""
    e = {**os.environ, **(env or {})}
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH", "")]))  # a script's own folder comes first, not the root
    prog = [str(ROOT / "tests" / "pretrain_killed.py"), str(kill_at)] if kill_at else ["-m", "korbert.pretrain"]
    if not nproc:
        return subprocess.run([sys.executable, *prog, *args], env=e, cwd=ROOT, capture_output=True, text=True, timeout=300)
    for _ in range(3):  # the free port picked here can be taken before torchrun binds it: try another
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1", f"--master_port={port}",
               *prog, *args]
        p = subprocess.run(cmd, env=e, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if "address already in use" not in p.stderr.lower():
            return p
    return p


def _args(c: PretrainConfig) -> list[str]:
    """The command line of a config (every field, so the subprocess runs exactly `c`)."""
    out = []
    for k, v in C.to_dict(c).items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else f"--no-{k.replace('_', '-')}")
        elif isinstance(v, list):
            out += [flag, *map(str, v)] if v else []
        else:
            out += [flag, str(v)]
    return out


@pytest.fixture(scope="module")
def no_kiwi(tmp_path_factory) -> dict:
    """Environment for a subprocess (and its torchrun children) where `import kiwipiepy` fails, as on
    a GPU box that carries only torch + transformers."""
    d = tmp_path_factory.mktemp("nokiwi")
    (d / "kiwipiepy.py").write_text('raise ImportError("kiwipiepy is not installed on this training machine (test)")\n')
    return {"PYTHONPATH": os.pathsep.join([str(d), str(ROOT), os.environ.get("PYTHONPATH", "")])}


def weights(out) -> dict:
    return torch.load(Path(out) / "ckpt.pt", weights_only=False)["model"]


def test_loss_goes_down(shards_dir, tmp_path):
    r = main(cfg(shards_dir, tmp_path, max_steps=60, batch_size=16, lr=3e-3, log_every=5, eval_every=60, warmup=0.1))
    ls = losses(tmp_path)
    assert len(ls) == 12
    # from ~ln(3000)+ln(2) = 8.7 down (chance MLM accuracy is 1/3000; a model that does not learn stays there).
    # The last logged losses swing by +-0.15 with the shards' random draws: over 6 draws of the shards the
    # drop to the last step ranged 1.41-1.78, so the mean of the last three is compared, with room.
    assert sum(ls[-3:]) / 3 < ls[0] - 1.2, ls
    assert r["eval"]["mlm_acc"] > 0.02 and r["eval"]["instances"] > 20
    assert (tmp_path / "final" / "model.safetensors").is_file()
    lines = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert {"loss", "mlm_acc", "nsp_acc", "lr", "tokens_per_s", "step", "tokens"} <= set(lines[0])
    assert "eval_mlm_acc" in lines[-1]


def test_the_log_says_when_the_loop_waits_for_its_loader(shards_dir, tmp_path, monkeypatch):
    """log.jsonl's data_wait: the share of each interval spent waiting for the next batch. A loader that
    sleeps 0.3 s per batch in front of steps that take 0.3 s more than a tiny model's few milliseconds
    shows as about half of it: the wait alone is timed, not the step, and each interval starts afresh."""
    loader, step = Trainer._loader, Trainer.step

    def slow_loader(self):
        for batch in loader(self):
            time.sleep(0.3)
            yield batch

    def slow_step(self, batches):
        time.sleep(0.3)
        step(self, batches)

    monkeypatch.setattr(Trainer, "_loader", slow_loader)
    monkeypatch.setattr(Trainer, "step", slow_step)
    main(cfg(shards_dir, tmp_path / "slow", max_steps=6, log_every=2))
    rows = [json.loads(x) for x in (tmp_path / "slow" / "log.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(0.3 < r["data_wait"] < 0.7 for r in rows), rows


def test_bf16_on_cpu_trains_like_fp32_and_is_its_own_run(shards_dir, tmp_path):
    """--precision bf16 on the CPU: matmuls under bfloat16 autocast. Its first losses agree with fp32's
    to bf16's rounding, it learns as fp32 does, it is deterministic, the run key tells the two apart
    (a bf16 run does not resume an fp32 checkpoint), and the export is an fp32 checkpoint."""
    from safetensors.torch import load_file

    common = dict(override=[*TINY, "hidden_dropout_prob=0", "attention_probs_dropout_prob=0"], max_steps=40, batch_size=16,
                  lr=3e-3, log_every=4, save_every=40)
    f32 = main(cfg(shards_dir, tmp_path / "fp32", **common))
    b16 = main(cfg(shards_dir, tmp_path / "bf16", precision="bf16", **common))
    a, b = losses(tmp_path / "fp32"), losses(tmp_path / "bf16")
    assert a != b, "bf16 autocast changed nothing: it did not run"
    assert abs(a[0] - b[0]) < 0.05, (a[0], b[0])  # one step of bf16 rounding
    assert b[-1] < b[0] - 1.0 and abs(a[-1] - b[-1]) < 0.3, (a, b)
    main(cfg(shards_dir, tmp_path / "bf16b", precision="bf16", **common))
    assert losses(tmp_path / "bf16b") == b
    assert f32["run_key"] != b16["run_key"]
    conf = json.loads((tmp_path / "bf16" / "config.json").read_text())["run"]
    assert conf["precision"] == "bf16" and conf["precision_used"] == "bf16"
    w = load_file(str(tmp_path / "bf16" / "final" / "model.safetensors"))
    assert {t.dtype for t in w.values()} == {torch.float32}


def test_bf16_stream_keeps_layernorm_outputs_in_bf16_and_changes_nothing_else(shards_dir, tmp_path, monkeypatch):
    """--precision bf16-stream: under bf16 autocast every LayerNorm returns bf16 (autocast alone keeps the
    residual stream fp32: CUDA's autocast runs layer_norm in fp32, and the fp32 embeddings feed it); without autocast the model is the plain one, bit for bit;
    the parameters and their names are the same; a run with it is its own run and learns as bf16 does."""
    from korbert.model import Bf16StreamLayerNorm, KorBertForPreTraining, bert_config, bf16_residual_stream

    from corpus_tools.shard_format import open_shards

    reader_batch = make_batch(open_shards(shards_dir, verify=False), [np.array([i]) for i in range(8)], seed=0, epoch=0)
    torch.manual_seed(0)
    plain = KorBertForPreTraining(bert_config("tiny", 3000, 128, {"hidden_size": 64, "intermediate_size": 128})).eval()
    stream = KorBertForPreTraining(plain.config).eval()
    stream.load_state_dict(plain.state_dict())
    bf16_residual_stream(stream)
    assert sum(isinstance(m, Bf16StreamLayerNorm) for m in stream.modules()) == 2 * 2 + 2  # 2 per layer, embeddings, MLM head
    assert stream.state_dict().keys() == plain.state_dict().keys()

    def run(model, autocast):
        dtypes = []
        hooks = [m.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype)) for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            o = model(**{k: reader_batch[k] for k in MODEL_INPUTS}, packed=False, sparse=True)
        for h in hooks:
            h.remove()
        return float(o.mlm_loss_sum + o.nsp_loss_sum), set(dtypes)

    assert run(stream, False) == run(plain, False)  # fp32: the same model
    (a, da), (b, db) = run(plain, True), run(stream, True)
    assert torch.float32 in da and db == {torch.bfloat16}  # plain: the residual stream's LayerNorms return fp32
    assert a != b and abs(a - b) / abs(a) < 0.02, (a, b)
    common = dict(max_steps=12, log_every=4)
    bf = main(cfg(shards_dir, tmp_path / "bf16", precision="bf16", **common))
    seen, forward = [], Bf16StreamLayerNorm.forward  # the training loop's LayerNorms: swapped, and under autocast
    monkeypatch.setattr(Bf16StreamLayerNorm, "forward", lambda self, x: seen.append(forward(self, x).dtype) or forward(self, x))
    st = main(cfg(shards_dir, tmp_path / "stream", precision="bf16-stream", **common))
    monkeypatch.undo()
    assert seen and set(seen) == {torch.bfloat16}, set(seen)
    x, y = losses(tmp_path / "bf16"), losses(tmp_path / "stream")
    assert x != y and all(abs(p - q) < 0.05 for p, q in zip(x, y)), (x, y)
    assert bf["run_key"] != st["run_key"]
    assert json.loads((tmp_path / "stream" / "config.json").read_text())["run"]["precision_used"] == "bf16-stream"


def test_auto_precision_trains_exactly_as_what_it_resolves_to(shards_dir, tmp_path):
    """--precision auto is not a label: its run is step for step the run of the precision it names in
    config.json, and the other precision gives other losses (so the setting reaches the step)."""
    auto = main(cfg(shards_dir, tmp_path / "auto", max_steps=3, precision="auto"))
    used = json.loads((tmp_path / "auto" / "config.json").read_text())["run"]["precision_used"]
    other = "fp32" if used == "bf16" else "bf16"
    main(cfg(shards_dir, tmp_path / used, max_steps=3, precision=used))
    main(cfg(shards_dir, tmp_path / other, max_steps=3, precision=other))
    assert auto["step"] == 3 and losses(tmp_path / "auto") == losses(tmp_path / used) != losses(tmp_path / other)


def test_same_seed_same_losses_and_rerun_is_up_to_date(shards_dir, tmp_path, capsys):
    main(cfg(shards_dir, tmp_path / "a", max_steps=5))
    main(cfg(shards_dir, tmp_path / "b", max_steps=5))
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    again = main(cfg(shards_dir, tmp_path / "a", max_steps=5))
    assert "up to date" in capsys.readouterr().out and again["step"] == 5


@pytest.mark.parametrize("batching", [{}, pytest.param({"tokens_per_batch": 1024, "pack": True}, marks=pytest.mark.slow)], ids=[
    "batch-size", "token-budget-packed"])  # (packed rows under a token budget stay in CI through ELECTRA's kill-and-resume test)
def test_kill_and_resume_gives_the_same_losses(shards_dir, tmp_path, batching):
    """A run SIGKILLed after step 7 (last checkpoint: step 4) and resumed equals an unbroken run."""
    whole = cfg(shards_dir, tmp_path / "whole", num_workers=1, **batching)
    main(whole)
    broken = cfg(shards_dir, tmp_path / "broken", num_workers=1, **batching)
    p = _run_cli(_args(broken), kill_at=7)
    assert p.returncode == -9, p.stderr[-2000:]
    assert len(losses(tmp_path / "broken")) == 7  # it logged steps 5-7 after the checkpoint of step 4
    # a checkpoint written by another number of processes is refused, not resumed (each rank's streams continue)
    ckpt = tmp_path / "broken" / "ckpt.pt"
    saved = ckpt.read_bytes()
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    state["state"]["world"] = 2
    torch.save(state, ckpt)
    with pytest.raises(InputError, match="written by 2 process"):
        main(broken)
    ckpt.write_bytes(saved)
    r = main(broken)  # --resume is the default
    assert r["step"] == 10
    assert losses(tmp_path / "broken") == losses(tmp_path / "whole")
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "broken")
    assert all(torch.equal(a[k], b[k]) for k in a)
    if batching:
        return
    # killed before its first checkpoint: the rerun starts fresh and its log holds only its own lines
    early = cfg(shards_dir, tmp_path / "early", num_workers=1)
    assert _run_cli(_args(early), kill_at=2).returncode == -9
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

    from korbert.model import cu_seqlens_of

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
    t = enc["input_ids"].shape[1]
    batch = {  # the layout korbert.data.make_batch gives: flat positions r*T+t of the predicted tokens and of each [CLS]
        "input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"], "segments": enc["attention_mask"],
        "position_ids": torch.arange(t).expand(2, t), "mlm_positions": torch.tensor([2, t + 3]),
        "mlm_labels": torch.stack([labels[0, 2], labels[1, 3]]), "nsp_positions": torch.tensor([0, t]), "nsp_labels": torch.tensor([0, 1]),
        "cu_seqlens": cu_seqlens_of(enc["attention_mask"]),
    }
    with torch.no_grad():
        o = ours(**{k: batch[k] for k in MODEL_INPUTS}, sparse=True)
        positional = ours(*(batch[k] for k in MODEL_INPUTS), sparse=True)  # positional arguments reach the sparse head too
    assert torch.equal(positional.mlm_loss_sum, o.mlm_loss_sum) and torch.equal(positional.nsp_loss_sum, o.nsp_loss_sum)
    dense = torch.log_softmax(ref.prediction_logits, -1)
    want = -(dense[0, 2, labels[0, 2]] + dense[1, 3, labels[1, 3]])
    assert abs(float(o.mlm_loss_sum) - float(want)) < 1e-4 and int(o.mlm_count) == 2
    fill = pipeline("fill-mask", model=str(final), tokenizer=tok)
    preds = fill(f"영화가 정말 {tok.mask_token}")
    assert len(preds) == 5 and all(isinstance(p["token_str"], str) for p in preds)
    m = json.loads((final / "manifest.json").read_text())
    from korbert.card import read_card  # the model card, from the manifest alone (no results yet: no model-index)

    meta, body = read_card(final / "README.md")
    assert meta["pipeline_tag"] == "fill-mask" and "model-index" not in meta and "license" not in meta
    assert f"{m['step']:,} optimizer steps, {m['tokens']:,} training tokens" in body and "README.md" not in m["files"]
    assert all(c["file"] in body for c in m["corpus"]["inputs"]) and f"{m['corpus']['train_tokens']:,} tokens" in body
    assert m["kind"] == "model" and m["tokenizer_hash"] == tok.fingerprint and m["step"] == 3


@pytest.mark.parametrize("per_rank", [
    # out of CI for the suite's time: batch2-accum2 checks the two ranks and the accumulation at once
    pytest.param({"batch_size": 4}, id="batch4", marks=pytest.mark.slow),
    pytest.param({"batch_size": 2, "grad_accum": 2}, id="batch2-accum2"),
])
def test_ddp_two_processes_equal_one_process(shards_dir, tmp_path, per_rank):
    """torchrun with 2 CPU processes (gloo), batch 4 each (or 2 x 2 accumulated) == 1 process with batch 8 (dropout off)."""
    no_dropout = [*TINY, "hidden_dropout_prob=0", "attention_probs_dropout_prob=0"]
    one = cfg(shards_dir, tmp_path / "one", batch_size=8, max_steps=6, override=no_dropout)
    two = cfg(shards_dir, tmp_path / "two", max_steps=6, override=no_dropout, **per_rank)
    p = _run_cli(_args(two), nproc=2)
    assert p.returncode == 0, p.stderr[-3000:]
    main(one)
    assert np.allclose(losses(tmp_path / "one"), losses(tmp_path / "two"), atol=2e-4)
    a, b = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-4
    assert json.loads((tmp_path / "two" / "config.json").read_text())["run"]["world_size"] == 2


@pytest.mark.slow  # out of CI for the suite's time: CI checks AgreedClock alone (test_ranks_read_the_agreed_clock_one_step_late_...), not two ranks under --max-minutes
def test_time_budget_on_two_ranks_stops_every_rank_at_the_same_step(shards_dir, tmp_path):
    """--max-minutes under torchrun: one clock (rank 0's, carried by the step's all-reduce) decides,
    so both ranks stop at the same step and final/ is written. Rank 0 alone builds the held-out set
    (slow here: many instances), so each rank's own clock would disagree."""
    c = cfg(shards_dir, tmp_path, max_steps=0, max_minutes=0.08, batch_size=4, eval_instances=1000, log_every=5, save_every=1000)
    p = _run_cli(_args(c), nproc=2)
    assert p.returncode == 0, p.stderr[-3000:]
    # the two ranks write to one pipe, so their lines can interleave: match the message, not lines
    stops = dict(re.findall(r"rank (\d+) stopped at step (\d+)", p.stderr))
    assert sorted(stops) == ["0", "1"] and stops["0"] == stops["1"], p.stderr[-2000:]
    assert (tmp_path / "final" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "final" / "manifest.json").read_text())["step"] == int(stops["0"])


@pytest.mark.slow  # out of CI for the suite's time: CI keeps kill-and-resume on one process (with the refusal of another process count), pretraining without Kiwi, and two ranks equal to one; not each rank's own RNG streams
@pytest.mark.parametrize("objective", ["mlm+nsp", "electra"])
def test_kill_and_resume_on_two_ranks_with_dropout_without_kiwi(shards_dir, tmp_path, no_kiwi, objective):
    """2 gloo ranks, dropout on, kiwipiepy not importable: a run SIGKILLed after step 7 and resumed
    equals an unbroken run (each rank restores its own RNG streams: dropout, and ELECTRA's generator
    samples), and exports final/. Resuming it with another number of processes is refused with a clear message."""
    whole = cfg(shards_dir, tmp_path / "whole", batch_size=4, num_workers=1, objective=objective)
    broken = cfg(shards_dir, tmp_path / "broken", batch_size=4, num_workers=1, objective=objective)
    p = _run_cli(_args(whole), env=no_kiwi, nproc=2)
    assert p.returncode == 0, p.stderr[-3000:]
    p = _run_cli(_args(broken), env=no_kiwi, nproc=2, kill_at=7)
    assert p.returncode != 0 and not (tmp_path / "broken" / "final").exists()
    with pytest.raises(InputError, match="written by 2 process"):
        main(broken)
    p = _run_cli(_args(broken), env=no_kiwi, nproc=2)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resuming" in p.stdout and "kiwipiepy" not in p.stderr
    assert losses(tmp_path / "broken") == losses(tmp_path / "whole")
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "broken")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "broken" / "final" / "model.safetensors").is_file()


def test_pretrain_runs_and_exports_without_kiwi(shards_dir, tmp_path, no_kiwi):
    """One process where `import kiwipiepy` fails: pretraining, a resume and the export work."""
    c = cfg(shards_dir, tmp_path, max_steps=6, save_every=2, log_every=1)
    p = _run_cli(_args(c), env=no_kiwi, kill_at=3)
    assert p.returncode == -9, p.stderr[-2000:]
    p = _run_cli(_args(c), env=no_kiwi)
    assert p.returncode == 0 and "resuming" in p.stdout, p.stderr[-2000:]
    assert (tmp_path / "final" / "model.safetensors").is_file() and len(losses(tmp_path)) == 6


@pytest.mark.parametrize("kw", [
    {"rows_per_step": 8, "parts": 2}, {"tokens_per_step": 1024, "parts": 2}, {"tokens_per_step": 1024, "parts": 4, "buckets": True},
    {"tokens_per_step": 1024, "pack": True, "parts": 2}, {"tokens_per_step": 1024, "pack": True, "buckets": True},
])
def test_batch_plan_budget_and_epoch_coverage(shards_dir, kw):
    """Every global batch stays within its token budget (rows x padded length) and splits into equal
    micro-batches; over an epoch every instance is used exactly once; the plan is a pure function of
    (seed, step): a fresh plan (a resumed run) gives the same batches."""
    from corpus_tools.shard_format import open_shards

    lengths = instance_lengths(open_shards(shards_dir, verify=False))
    plan, again = BatchPlan(lengths, 5, 128, **kw), BatchPlan(lengths, 5, 128, **kw)
    seen, step, shapes = [], 0, set()
    while plan.locate(step)[0] == 0:
        epoch, rows, length = plan(step)
        filled = [len(lengths[r]) and int(lengths[r].sum()) for r in rows]
        assert max(filled) <= length <= 128
        if "tokens_per_step" in kw:
            assert len(rows) * length <= kw["tokens_per_step"]
        parts = kw.get("parts", 1)
        micro = [m for r in range(parts) for m in micro_batches(rows, parts, r, 1)]  # world = parts, no accumulation
        assert len({len(m) for m in micro}) == 1 and sum(micro, []) == rows
        seen += [int(i) for r in rows for i in r]
        shapes.add((len(rows), length))
        step += 1
    assert sorted(seen) == list(range(len(lengths)))  # none lost, none repeated
    for s in (0, step // 2, step - 1, step, step + 3):
        a, b = plan(s), again(s)
        assert a[0] == b[0] and a[2] == b[2] and all(np.array_equal(x, y) for x, y in zip(a[1], b[1]))
    if kw.get("buckets"):
        assert len(shapes) <= 9  # a handful of (rows, length) shapes for torch.compile
    if kw.get("pack"):
        assert sum(lengths) / sum(len(plan(s)[1]) * 128 for s in range(step)) > 0.9  # packed rows are nearly full


def test_packed_rows_equal_separate_instances(shards_dir):
    """Packing is exact: instances side by side in one row (block-diagonal attention, positions and
    [CLS] per instance) give the losses and predictions of the same instances one per row."""
    from corpus_tools.shard_format import open_shards
    from korbert.model import KorBertForPreTraining, bert_config

    reader = open_shards(shards_dir, verify=False)
    torch.manual_seed(0)
    model = KorBertForPreTraining(bert_config("tiny", 3000, 128, {"hidden_size": 64, "intermediate_size": 128})).eval()
    one_per_row = make_batch(reader, [np.array([i]) for i in (0, 5, 9, 14)], seed=0, epoch=0)
    packed = make_batch(reader, [np.array([0, 5, 9]), np.array([14])], 128, seed=0, epoch=0)
    with torch.no_grad():
        a = model(**{k: one_per_row[k] for k in MODEL_INPUTS}, packed=one_per_row["packed"], sparse=True)  # the key padding mask
        b = model(**{k: packed[k] for k in MODEL_INPUTS}, packed=packed["packed"], sparse=True)  # block-diagonal
    for f in ("mlm_loss_sum", "nsp_loss_sum"):
        assert abs(float(getattr(a, f)) - float(getattr(b, f))) < 1e-4, f
    for f in ("mlm_correct", "mlm_count", "nsp_correct", "nsp_count"):
        assert int(getattr(a, f)) == int(getattr(b, f)), f
    assert packed["counts"] == one_per_row["counts"] and packed["input_ids"].shape == (2, 128)
    assert packed["packed"] and not one_per_row["packed"]


def test_training_step_never_reads_the_device(shards_dir, tmp_path):
    """No host-device sync in the hot loop: one optimizer step (counts, all-reduce, forward,
    backward, clipping) calls no op that copies a value back to the host (.item(), float(t),
    .nonzero(), bool(t)). The optimizer's own step is left out (fused AdamW on GPU keeps its step
    counts on the device; the CPU AdamW reads them on the host, where they live)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    reads = []

    class Watch(TorchDispatchMode):
        paused = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket)
            if not self.paused and any(s in name for s in ("_local_scalar_dense", "nonzero", "is_nonzero", "aten.equal")):
                reads.append(name)
            return func(*args, **(kwargs or {}))

    tr = Trainer(cfg(shards_dir, tmp_path, max_steps=4, grad_accum=2))
    tr.train = Trainer.train.__get__(tr)
    opt_step, watch = tr.opt.step, Watch()

    def step_unwatched(*a, **kw):
        watch.paused = True
        try:
            return opt_step(*a, **kw)
        finally:
            watch.paused = False

    tr.opt.step = step_unwatched
    real_step = tr.step

    def watched(micro):
        with watch:
            real_step(micro)

    tr.step = watched
    tr.train()
    assert tr.step_no == 4 and reads == [], reads


@pytest.mark.slow  # out of CI for the suite's time (run with -m slow)
def test_compile_matches_eager_with_few_graphs(shards_dir, tmp_path):
    """--compile on CPU: 50 steps of batches of varied lengths give eager's losses (the same
    batches, padded to a bucket length) and compile a bounded number of graphs (lengths come in
    buckets, the masked-token and pair counts are dynamic sizes)."""
    common = dict(override=[*TINY, "hidden_dropout_prob=0", "attention_probs_dropout_prob=0"], max_steps=50, batch_size=16, log_every=1)
    main(cfg(shards_dir, tmp_path / "eager", **common))
    main(cfg(shards_dir, tmp_path / "compiled", compile=True, **common))
    e, c = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert len(e) == 50 and np.allclose(e[:5], c[:5], atol=1e-3), (e[:5], c[:5])  # later steps drift apart with float rounding
    assert abs(np.mean(e[-10:]) - np.mean(c[-10:])) < 0.1
    last = json.loads((tmp_path / "compiled" / "log.jsonl").read_text().splitlines()[-1])
    assert last["batch_shapes"] >= 3 and 1 <= last["compiled_graphs"] <= 4, last


def test_compiled_packed_run_has_fixed_shapes_and_one_graph(shards_dir, tmp_path):
    """--compile --pack turns fixed shapes on: every micro-batch has one shape, torch.compile makes one
    graph (fullgraph, static shapes), and the losses are eager's on the same padded batches."""
    common = dict(override=[*TINY, "hidden_dropout_prob=0", "attention_probs_dropout_prob=0"], max_steps=12, tokens_per_batch=1024, pack=True)
    main(cfg(shards_dir, tmp_path / "eager", fixed_shapes="on", **common))
    main(cfg(shards_dir, tmp_path / "compiled", compile=True, **common))
    e, c = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert np.allclose(e[:4], c[:4], atol=1e-3), (e[:4], c[:4])
    last = json.loads((tmp_path / "compiled" / "log.jsonl").read_text().splitlines()[-1])
    assert last["compiled_graphs"] == 1 and last["batch_shapes"] == 1, last
    with pytest.raises(InputError, match="needs --pack"):
        main(cfg(shards_dir, tmp_path / "x", fixed_shapes="on"))


def test_learning_rate_schedule_and_mfu_accounting():
    """Warmup given in steps with a time budget reaches the peak (it stayed at peak/N before);
    the device's bf16 peak comes from its name; the step's FLOPs count the tied decoder at the
    predicted positions."""
    from transformers import BertConfig

    from korbert.model import step_flops

    c = PretrainConfig(max_steps=0, max_minutes=10, warmup=10, lr=1e-3)
    assert lr_at(5, 0.01, c, None) == pytest.approx(5e-4)
    assert lr_at(10, 0.02, c, None) == pytest.approx(1e-3)  # the step warmup ends: the peak (0.98 x peak before: a cliff)
    assert lr_at(11, 0.03, c, None, warm_end=0.02) == pytest.approx(1e-3 * (1 - 0.01 / 0.98))  # decay from there
    assert lr_at(30, 1.0, c, None, warm_end=0.02) == 0.0
    s = PretrainConfig(max_steps=100, warmup=10, lr=1e-3)
    assert lr_at(10, 0.1, s, 100) == pytest.approx(1e-3) and lr_at(55, 0.55, s, 100) == pytest.approx(5e-4)
    assert peak_flops("NVIDIA H100 PCIe") == 756e12 and peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H200") == 989e12 and peak_flops("NVIDIA A100-SXM4-80GB") == 312e12 and peak_flops("Tesla T4") is None
    b = BertConfig(hidden_size=768, num_hidden_layers=12, intermediate_size=3072, vocab_size=32000)
    head = step_flops(b, 0, 0, 1, 0)
    assert head == 6 * (768 * 768 + 768 * 32000)
    assert step_flops(b, 1, 0, 0, 0) == 6 * 12 * (4 * 768 * 768 + 2 * 768 * 3072)  # 6 N per token, N = 85M


def test_step_warmup_under_a_time_budget_peaks_then_decays_without_a_drop(shards_dir, tmp_path):
    """--warmup in steps with --max-minutes: the loop records where warmup ended, so the lr reaches the
    peak and decays from it (before, the decay ran from progress 0: the lr fell by the progress made
    during warmup at its last step, -9% in the 5.5-minute H100 run)."""
    main(cfg(shards_dir, tmp_path, max_steps=0, max_minutes=0.1, warmup=6, lr=2e-3, save_every=1000))
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    n = len(lrs)  # how many steps 6 s allow depends on the machine's load
    assert n >= 12 and lrs[:6] == pytest.approx([2e-3 * s / 6 for s in range(6)])
    assert lrs[6] == pytest.approx(2e-3)
    # the first decayed step loses about one step's share of the decay (1/(n-6)); decaying from progress 0
    # (the bug) lost the warmup's 6 steps' share as well (~7/n)
    assert all(b <= a for a, b in zip(lrs[6:], lrs[7:])) and 1 - lrs[7] / 2e-3 < 3 / (n - 6)


def test_ranks_read_the_agreed_clock_one_step_late_without_waiting_on_the_current_step():
    """With several ranks, step s reads rank 0's clock from step s-1's all-reduce and waits only for
    that copy's event, never for the event of the step it just queued (before: `event.synchronize()`
    on the current step, so every step waited for the GPU)."""
    waited = []

    class Event:  # a CUDA event's one method the clock uses, recording which step's copy is waited for
        def __init__(self, step):
            self.step = step

        def synchronize(self):
            waited.append(self.step)

    clock = AgreedClock(100.0)
    seen = [clock.push(torch.tensor(100.0 + s), Event(s)) for s in range(4)]
    assert seen == [100.0, 100.0, 101.0, 102.0] and waited == [0, 1, 2]


def test_loader_workers_default_from_the_machine(monkeypatch):
    """--num-workers -1 on GPUs: the cores this process may use / the processes on this machine, minus
    one (not divided again when the launcher pinned each process to its own cores); on a CPU: 1."""
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert default_workers() == 3 and default_workers(cuda=False) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))  # pinned: these 4 cores are this rank's
    assert default_workers() == 3
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert default_workers() == 15
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert default_workers() == 0


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


def test_time_budget_warmup_is_not_spent_on_start_up_or_compiling(shards_dir, tmp_path):
    """A --max-minutes budget with a fractional warmup: a slow first step (torch.compile compiling,
    DataLoader workers starting) is not training time. Counted, it ended the warmup before the first
    optimizer step (seen on an H100: 1e-3 from step 1, BERT-small stuck at the unigram loss)."""
    c = cfg(shards_dir, tmp_path, max_steps=0, max_minutes=0.1, warmup=0.25, lr=1e-3, save_every=10**6)
    tr = Trainer(c)
    forward, calls = tr.wrapped, []

    def slow_first_call(*a, **kw):  # what compiling does to the first step: seconds before any arithmetic
        if not calls:
            time.sleep(3.0)
        calls.append(1)
        return forward(*a, **kw)

    tr.wrapped = slow_first_call
    tr.train()
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    # 3 s counted would be half the 6 s budget: past the 1.5 s warmup, lr already decaying at step 1
    assert log[0]["step"] == 1 and log[0]["lr"] < 0.25e-3, log[0]
    assert len(log) > 2 and log[-1]["seconds"] >= 6.0  # then trained on until the budget was spent (no upper time bound)


def test_torch_floor_has_the_names_the_loop_uses():
    """pyproject's torch floor is a release that has torch._dynamo.config.recompile_limit (2.7) and
    torch.OutOfMemoryError (2.5); it allowed 2.4, where `--compile` and the OOM message broke."""
    floor = re.search(r'"torch>=([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert tuple(int(x) for x in floor.split(".")[:2]) >= (2, 7), floor
    assert hasattr(torch._dynamo.config, "recompile_limit") and issubclass(torch.OutOfMemoryError, RuntimeError)


@pytest.fixture(scope="module")
def long_shards_dir(tmp_path_factory, vocab_dir, corpus_file) -> Path:
    """The same corpus and tokenizer as `shards_dir`, at max_seq_len 256: the long phase's shards."""
    from corpus_tools.shards import main as shards_main
    from corpus_tools.shards_config import ShardsConfig

    out = tmp_path_factory.mktemp("shards256")
    shards_main(ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(corpus_file)], out=str(out), valid_fraction=0.05, show=0, seed=1, max_seq_len=256))
    return out


def test_long_phase_switches_at_the_planned_step_trains_the_positions_and_resumes_exactly(shards_dir, long_shards_dir, tmp_path):
    """--long-shards (256 tokens) with --long-phase 0.3 of 10 steps: steps 0-6 equal a run without it,
    steps 7-9 read rows of 256 tokens with the same tokens per step, positions 128..255 move away from
    their initialization (without the phase they only shrink by weight decay), final/manifest.json says
    256; a run SIGKILLed inside the long phase resumes exactly (runs stopped before the switch, at it and after it,
    under the long phase's own schedule: tests/test_long_positions.py)."""
    from safetensors.torch import load_file

    from korbert.model import KorBertForPreTraining

    # (the long phase as before issue 58: the run's one schedule, new positions from their initialization; today's: test_long_positions.py)
    common = dict(tokens_per_batch=2048, pack=True, lr=3e-3, warmup=2, num_workers=1, long_schedule="shared", long_init="keep")
    short = main(cfg(shards_dir, tmp_path / "short", **common))
    whole = main(cfg(shards_dir, tmp_path / "whole", long_shards=str(long_shards_dir), long_phase=0.3, **common))
    log = [json.loads(line) for line in (tmp_path / "whole" / "log.jsonl").read_text().splitlines()]
    assert [r["seq_len"] for r in log] == [128] * 7 + [256] * 3
    assert losses(tmp_path / "whole")[:7] == losses(tmp_path / "short")[:7] and losses(tmp_path / "whole")[7:] != losses(tmp_path / "short")[7:]
    assert all(r["tokens"] - p["tokens"] <= 2048 for p, r in zip(log, log[1:]))
    assert whole["trained_seq_len"] == 256 and short["trained_seq_len"] == 128 and whole["long_from_step"] == 7
    fm = json.loads((tmp_path / "whole" / "final" / "manifest.json").read_text())
    assert fm["trained_seq_len"] == 256 and fm["long_steps"] == 3 and fm["long_corpus"]["max_seq_len"] == 256
    assert json.loads((tmp_path / "whole" / "final" / "tokenizer_config.json").read_text())["model_max_length"] == 256  # issue 65
    assert 0 < fm["eval"]["long_mlm_acc"] < 1 and fm["eval"]["long_instances"] > 0  # the long phase's own held-out figure
    assert all("eval_long_mlm_loss" not in r for r in log[:7]) and "eval_long_mlm_loss" in log[-1]
    card = (tmp_path / "whole" / "final" / "README.md").read_text()
    assert "The long phase (the last 3 steps) read instances of up to 256 tokens made from the same files" in card

    torch.manual_seed(3)  # the run's initialization (seed 3, the same model config)
    from transformers import BertConfig

    init = KorBertForPreTraining(BertConfig.from_dict(whole["model_config"])).bert.embeddings.position_embeddings.weight.detach()
    key = "bert.embeddings.position_embeddings.weight"
    moved = {r: (load_file(str(tmp_path / r / "final" / "model.safetensors"))[key][128:256] - init[128:256]).abs().mean().item() for r in ("short", "whole")}
    assert moved["whole"] > 10 * moved["short"], moved

    # SIGKILLed inside the long phase (checkpoint at 8), resumed
    broken = cfg(shards_dir, tmp_path / "broken", long_shards=str(long_shards_dir), long_phase=0.3, **common)
    p = _run_cli(_args(broken), kill_at=9)
    assert p.returncode == -9, p.stderr[-2000:]
    main(broken)
    assert losses(tmp_path / "broken") == losses(tmp_path / "whole")
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "broken")
    assert all(torch.equal(a[k], b[k]) for k in a), (max(float((a[k] - b[k]).abs().max()) for k in a), [k for k in a if not torch.equal(a[k], b[k])][:5])


def test_long_phase_under_a_row_budget_keeps_the_real_tokens_per_step(shards_dir, long_shards_dir, tmp_path):
    """--batch-size rows of 128-token document instances, then the long phase on 256-token ones: its rows
    are as many as keep the real tokens per step (rows x 128 / 256 kept them only for full rows)."""
    for pack in (False, True):
        t = Trainer(cfg(shards_dir, tmp_path / f"rows{pack}", batch_size=16, pack=pack, long_shards=str(long_shards_dir), long_phase=0.5))
        mean = []
        for phase in t.phases:  # real tokens per step, over a whole epoch of each phase's plan
            steps = len(phase.plan._epoch(0)[3])
            mean.append(np.mean([phase.plan.token_stats(i)[0] for i in range(steps)]))
        assert abs(mean[1] / mean[0] - 1) < 0.05, (pack, mean)


def test_held_out_instances_are_drawn_from_the_whole_valid_split(shards_dir, monkeypatch):
    """The valid split is in input order (the first file's documents first): the held-out set is a seeded
    sample of all of it, not its first n instances, and the same for the same seed."""
    import korbert.data as D
    from corpus_tools.shard_format import open_shards

    valid = open_shards(shards_dir, split="valid", verify=False)
    make_batch, seen = D.make_batch, []

    def recording(reader, rows, *a, **kw):
        seen.extend(int(r[0]) for r in rows)
        return make_batch(reader, rows, *a, **kw)

    monkeypatch.setattr(D, "make_batch", recording)
    picks = []
    for seed in (3, 3, 4):
        seen.clear()
        D.eval_batches(valid, 32, 8, seed)
        picks.append(sorted(seen))
    n = len(valid)
    assert n > 100 and len(picks[0]) == len(set(picks[0])) == 32
    assert picks[0] == picks[1] != picks[2]  # seeded
    assert max(picks[0]) > n // 2 and min(picks[0]) < n // 2  # from both halves of the split, not its first 32
    seen.clear()
    D.eval_batches(valid, n + 10, 64, 3)
    assert sorted(seen) == list(range(n))  # asking for more than the split holds: all of it, once


def test_long_phase_takes_the_last_share_of_a_step_budget_in_whole_steps():
    """The switch compares integers: every share of 1-99% of 10-3,000 steps gets its whole steps in the long
    phase (the float comparison step / steps >= 1 - share lost one in 1,470 of these combinations: 0.29 of 100
    gave 28)."""
    from korbert.schedule import long_phase_due, long_phase_steps

    lost = []
    for pct in range(1, 100):
        for steps in range(10, 3001):
            want = steps * pct // 100  # whole steps, in integers
            assert long_phase_steps(steps, pct / 100) == want
            if want == 0:
                continue
            c = PretrainConfig(max_steps=steps, long_phase=pct / 100)
            first = steps - want
            if long_phase_due(first - 1, 0, 0.0, c) or not long_phase_due(first, 0, 0.0, c):
                lost.append((pct, steps))
    assert not lost, lost[:5]


def test_a_longer_budget_after_a_finished_run_replans_the_long_phase(shards_dir, long_shards_dir, tmp_path):
    """10 steps with the last 3 long, then a budget of 20: steps 11-14 go back to the short phase (its plan
    where it stopped), the last 6 (of 20) are long, and the long plan continues after its 3 steps."""
    common = dict(tokens_per_batch=2048, pack=True, num_workers=0, long_shards=str(long_shards_dir), long_phase=0.3)
    main(cfg(shards_dir, tmp_path / "run", **common))
    r = main(cfg(shards_dir, tmp_path / "run", **{**common, "max_steps": 20}))
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [x["seq_len"] for x in log] == [128] * 7 + [256] * 3 + [128] * 4 + [256] * 6
    assert r["long_steps"] == 9 and r["long_from_step"] == 14 and r["trained_seq_len"] == 256
    assert "The long phase (9 steps in all, the last 6 from step 14)" in (tmp_path / "run" / "final" / "README.md").read_text()
    state = torch.load(tmp_path / "run" / "ckpt.pt", weights_only=False)["state"]
    assert state["phase_pos"] == [11, 9]


def test_a_token_budget_without_packing_is_not_resumed_across_compile(shards_dir, tmp_path):
    """--compile rounds a token budget's batches to buckets (other batches): a run is resumed only as it was cut."""
    from corpus_tools.shard_format import open_shards
    from korbert.checkpoint import run_key

    eager = PretrainConfig(tokens_per_batch=4096)
    compiled = PretrainConfig(tokens_per_batch=4096, compile=True)
    assert run_key(eager, "s", "t", 1, "fp32", False) != run_key(compiled, "s", "t", 1, "fp32", False)
    packed = [PretrainConfig(tokens_per_batch=4096, pack=True, compile=c) for c in (False, True)]
    assert run_key(packed[0], "s", "t", 1, "fp32", False) == run_key(packed[1], "s", "t", 1, "fp32", False)  # one cut either way
    lengths = instance_lengths(open_shards(shards_dir, split="train", verify=False))
    cuts = [len(BatchPlan(lengths, 0, 128, tokens_per_step=2048, buckets=b)._epoch(0)[3]) for b in (False, True)]
    assert cuts[0] != cuts[1]  # why: the two cut one epoch into different batches
    main(cfg(shards_dir, tmp_path / "run", tokens_per_batch=1024, max_steps=4))
    with pytest.raises(InputError, match="was trained without --compile .*resume it without --compile"):
        Trainer(cfg(shards_dir, tmp_path / "run", tokens_per_batch=1024, max_steps=8, compile=True))


def test_long_shards_are_checked(shards_dir, long_shards_dir, tmp_path):
    with pytest.raises(InputError, match="not longer"):
        main(cfg(shards_dir, tmp_path / "a", long_shards=str(shards_dir)))
    with pytest.raises(InputError, match="--long-phase must be in"):
        main(cfg(shards_dir, tmp_path / "b", long_shards=str(long_shards_dir), long_phase=1.0))
    with pytest.raises(InputError, match="less than one step"):
        main(cfg(shards_dir, tmp_path / "c", long_shards=str(long_shards_dir), long_phase=0.05))  # of 10 steps
    from corpus_tools.shards import main as shards_main
    from corpus_tools.shards_config import ShardsConfig

    m = json.loads((long_shards_dir / "manifest.json").read_text())
    other = tmp_path / "by-token"
    shards_main(ShardsConfig(tokenizer=str(long_shards_dir / "tokenizer"), inputs=[m["inputs"][0]["path"]], out=str(other), show=0, max_seq_len=256, mask_unit="token"))
    with pytest.raises(InputError, match="built with other --mask-unit than --shards"):
        main(cfg(shards_dir, tmp_path / "d", long_shards=str(other), long_phase=0.3))
    # long shards from other files: refused, unless asked for; the card then lists the long phase's files
    half = tmp_path / "half.jsonl"
    lines = Path(m["inputs"][0]["path"]).read_text(encoding="utf-8").splitlines(keepends=True)
    half.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    shards_main(ShardsConfig(tokenizer=str(long_shards_dir / "tokenizer"), inputs=[str(half)], out=str(elsewhere), valid_fraction=0.05, show=0, seed=1, max_seq_len=256))
    with pytest.raises(InputError, match="built from other input files than --shards .*half.jsonl.*--long-other-inputs"):
        main(cfg(shards_dir, tmp_path / "e", long_shards=str(elsewhere), long_phase=0.3))
    # long shards guarded against other evaluation text than --shards (or under the other policy): refused
    from conftest import SAMPLE

    guarded = tmp_path / "guarded"
    shards_main(ShardsConfig(tokenizer=str(long_shards_dir / "tokenizer"), inputs=[str(half)], out=str(guarded), valid_fraction=0.05, show=0,
                             seed=1, max_seq_len=256, eval_nsmc_test=str(SAMPLE / "nsmc_test.txt"), keep_eval_text=True))
    with pytest.raises(InputError, match=r"evaluation-text guard \(keep the text of nsmc_test\) is not --shards' \(drop the text of no evaluation file\)"):
        main(cfg(shards_dir, tmp_path / "g", long_shards=str(guarded), long_phase=0.3, long_other_inputs=True))
    main(cfg(shards_dir, tmp_path / "f", long_shards=str(elsewhere), long_phase=0.3, long_other_inputs=True))
    card = (tmp_path / "f" / "final" / "README.md").read_text()
    assert "made from other files" in card and "| long-phase file | bytes | sha256 |" in card and "| half.jsonl |" in card
    assert "packed" not in card
    # packed long shards after document instances (NSP both): the loop reads them alike; the card says which
    packed = tmp_path / "packed"
    shards_main(ShardsConfig(tokenizer=str(long_shards_dir / "tokenizer"), inputs=[m["inputs"][0]["path"]], out=str(packed), valid_fraction=0.05,
                             show=0, seed=1, max_seq_len=256, instances="packed"))
    main(cfg(shards_dir, tmp_path / "p", long_shards=str(packed), long_phase=0.3))
    card = (tmp_path / "p" / "final" / "README.md").read_text()
    assert "read instances of up to 256 tokens (packed: consecutive sentences across documents) made from the same files" in card
    m = json.loads((tmp_path / "p" / "final" / "manifest.json").read_text())
    assert (m["trained_seq_len"], m["long_steps"], m["long_corpus"]["instances"]) == (256, 3, "packed")
    # --no-long-nsp: the same run up to the switch; then MLM alone (no NSP figure in the log), and the card says so
    main(cfg(shards_dir, tmp_path / "q", long_shards=str(packed), long_phase=0.3, long_nsp=False))
    rows = {k: [json.loads(x) for x in (tmp_path / k / "log.jsonl").read_text().splitlines()] for k in ("p", "q")}
    assert [r["loss"] for r in rows["p"][:7]] == [r["loss"] for r in rows["q"][:7]] and all("nsp_loss" in r for r in rows["q"][:7])
    assert [r["seq_len"] for r in rows["q"][7:]] == [256] * 3 and not any("nsp_loss" in r for r in rows["q"][7:])
    assert all("nsp_loss" in r for r in rows["p"][7:]) and [r["mlm_loss"] for r in rows["p"][7:]] != [r["mlm_loss"] for r in rows["q"][7:]]
    assert "It trained MLM alone (no NSP loss)." in (tmp_path / "q" / "final" / "README.md").read_text()
    # held out: NSP still scored at the short length; the long split's batches carry no NSP labels, so no figure for them
    last = rows["q"][-1]
    assert "eval_nsp_acc" in last and "eval_long_mlm_acc" in last and "eval_long_nsp_acc" not in last and "eval_long_nsp_acc" in rows["p"][-1]
    from korbert.checkpoint import run_key

    assert run_key(cfg(shards_dir, "o", long_shards="l"), "s", "t", 1, "fp32", False, long_key="k") != \
        run_key(cfg(shards_dir, "o", long_shards="l", long_nsp=False), "s", "t", 1, "fp32", False, long_key="k")
    assert run_key(cfg(shards_dir, "o"), "s", "t", 1, "fp32", False) == run_key(cfg(shards_dir, "o", long_nsp=False), "s", "t", 1, "fp32", False)
    with pytest.raises(InputError, match="--no-long-nsp: --objective mlm trains no NSP to turn off"):
        main(cfg(shards_dir, tmp_path / "r", long_shards=str(packed), long_phase=0.3, long_nsp=False, objective="mlm"))


def test_run_key_reads_500_and_500_0_as_one_setting():
    """A float setting given as an int (a config file's `"warmup": 500`, a call's warmup=2) and as the
    command line's float (500.0) is the same run: resuming one with the other was refused as "another run"."""
    from korbert.checkpoint import run_key

    a, b = PretrainConfig(warmup=500, lr=1), PretrainConfig(warmup=500.0, lr=1.0)
    assert run_key(a, "s", "t", 1, "fp32", False) == run_key(b, "s", "t", 1, "fp32", False)
    assert run_key(a, "s", "t", 1, "fp32", False) != run_key(PretrainConfig(warmup=501), "s", "t", 1, "fp32", False)


def test_evaluation_settings_and_a_longer_budget_continue_the_same_run(shards_dir, tmp_path, capsys):
    """Only what changes the weights keys a run: evaluating more often or on more instances gives the
    same losses, and a longer budget continues from the checkpoint instead of being refused."""
    main(cfg(shards_dir, tmp_path / "quiet", max_steps=4, eval_every=0))
    main(cfg(shards_dir, tmp_path / "evals", max_steps=4, eval_every=2, eval_instances=32))
    assert losses(tmp_path / "evals") == losses(tmp_path / "quiet")  # evaluating does not touch the training streams
    out = tmp_path / "quiet"
    longer = main(cfg(shards_dir, out, max_steps=6, eval_every=2))
    assert longer["step"] == 6 and longer["budget"]["max_steps"] == 6
    logged = losses(out)
    assert len(logged) == 6 and logged[:4] == losses(tmp_path / "evals")  # steps 1-4 kept, 5-6 trained on
    capsys.readouterr()
    again = main(cfg(shards_dir, out, max_steps=6, eval_every=2))
    assert "up to date" in capsys.readouterr().out and again["step"] == 6


def test_profile_reports_where_the_time_goes_without_changing_the_run(shards_dir, tmp_path, capsys):
    """--profile N: the 5 steps after step N under torch.profiler give profile.json (time by kind, top operators,
    busy share) and profile.txt; the losses are the unprofiled run's, and the run key ignores it."""
    from korbert.runtime import profile_kind

    main(cfg(shards_dir, tmp_path / "plain", max_steps=8, eval_every=0))
    main(cfg(shards_dir, tmp_path / "prof", max_steps=8, eval_every=0, profile=2))
    assert losses(tmp_path / "prof") == losses(tmp_path / "plain")
    p = json.loads((tmp_path / "prof" / "profile.json").read_text())
    assert p["steps"] == [3, 7] and 0 < p["busy_seconds"]  # the 5 steps after step 2, as the log numbers them
    assert p["by_kind"]["matmul"]["seconds"] > 0  # a BERT step is matmuls first
    assert abs(sum(k["share"] for k in p["by_kind"].values()) - 1) < 0.01
    assert p["top"] and all(t["kind"] == profile_kind(t["name"]) for t in p["top"])
    table = (tmp_path / "prof" / "profile.txt").read_text()
    assert re.search(r"Optimizer\.step#AdamW\.step .* 5 *$", table, re.M)  # exactly 5 optimizer steps were profiled
    # a run ending inside the profiled steps writes what it profiled
    main(cfg(shards_dir, tmp_path / "short", max_steps=3, eval_every=0, profile=2))
    assert json.loads((tmp_path / "short" / "profile.json").read_text())["steps"] == [3, 3]
    assert re.search(r"Optimizer\.step#AdamW\.step .* 1 *$", (tmp_path / "short" / "profile.txt").read_text(), re.M)
    # profiling is not part of the run: the unprofiled run is up to date for it
    capsys.readouterr()
    main(cfg(shards_dir, tmp_path / "plain", max_steps=8, eval_every=0, profile=2))
    assert "up to date" in capsys.readouterr().out
    # GPU kernel names: CUTLASS attention is attention, cuBLAS / nvjet GEMMs are matmuls, inductor's are fused
    assert profile_kind("fmha_cutlassF_bf16_aligned_64x64_rf_sm80") == "attention"
    assert profile_kind("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*)") == "attention"  # SDPA backward's
    assert profile_kind("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT") == "matmul"
    assert profile_kind("sm90_xmma_gemm_bf16bf16_bf16f32") == "matmul"
    assert profile_kind("triton_per_fused_native_layer_norm_0") == "fused (inductor)"
    assert profile_kind("multi_tensor_apply_kernel<FusedAdamMathFunctor>") == "optimizer"
    with pytest.raises(InputError, match="--profile"):
        main(cfg(shards_dir, tmp_path / "bad", max_steps=3, profile=-1))


def test_a_gpu_profile_counts_each_kernel_once():
    """On a GPU, torch's profiler also reports each user annotation (the optimizer's
    `Optimizer.step#AdamW.step`) as a device-side range whose time is that of the kernels inside it: the
    fifth H200 lease's profile added the annotation's 0.96 ms per step to the AdamW kernels' 1.34 ms.
    Those rows are left out."""
    from types import SimpleNamespace as E

    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent, FunctionEventAvg

    from korbert.runtime import device_rows

    # torch's own averages carry the flag device_rows reads (a rename would make its fallback keep them)
    real = FunctionEventAvg()
    real.add(FunctionEvent(id=0, name="Optimizer.step#AdamW.step", thread=0, start_us=0, end_us=1, device_type=DeviceType.CUDA, is_user_annotation=True))
    assert real.is_user_annotation and device_rows([real], True) == []

    avgs = [
        E(key="Optimizer.step#AdamW.step", self_device_time_total=960.0, self_cpu_time_total=50.0, count=1, device_type=DeviceType.CUDA, is_user_annotation=True),
        E(key="multi_tensor_apply_kernel<FusedAdamMathFunctor>", self_device_time_total=940.0, self_cpu_time_total=0.0, count=10, device_type=DeviceType.CUDA, is_user_annotation=False),
        E(key="nvjet_sm90_tst_256x128", self_device_time_total=10000.0, self_cpu_time_total=0.0, count=60, device_type=DeviceType.CUDA, is_user_annotation=False),
        E(key="aten::mm", self_device_time_total=0.0, self_cpu_time_total=300.0, count=60, device_type=DeviceType.CPU, is_user_annotation=False),
    ]
    assert device_rows(avgs, True) == [("multi_tensor_apply_kernel<FusedAdamMathFunctor>", 940.0, 10), ("nvjet_sm90_tst_256x128", 10000.0, 60)]
    assert [r[0] for r in device_rows(avgs, False)] == [e.key for e in avgs]  # CPU: self times, nested ones included once


# -- continued pretraining (--init-from) -----------------------------------------------------------


@pytest.fixture(scope="module")
def released(shards_dir, tmp_path_factory) -> Path:
    """The "released model" to continue: a short run's final/ (its tokenizer is the shards')."""
    out = tmp_path_factory.mktemp("released")
    main(cfg(shards_dir, out, max_steps=2))
    return out / "final"


def _continued(shards_dir, out, folder, **kw) -> PretrainConfig:
    return cfg(shards_dir, out, **{"model_size": "mini", "override": [], "init_from": str(folder), **kw})


def test_init_from_starts_from_the_folders_weights_then_trains_them(shards_dir, released, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    start = load_file(released / "model.safetensors")
    trainer = Trainer(_continued(shards_dir, tmp_path / "cont", released, max_steps=3))
    before = trainer.model.state_dict()
    assert all(torch.equal(before[k], v) for k, v in start.items()) and trainer.init["fresh"] == []
    assert trainer.mcfg.hidden_size == 64 and trainer.mcfg.num_hidden_layers == 2  # the folder's shape, not --model-size mini
    trainer.train()
    r = trainer.export()
    trainer.dist.close()
    after = load_file(tmp_path / "cont" / "final" / "model.safetensors")
    assert not torch.equal(after["bert.embeddings.word_embeddings.weight"], start["bert.embeddings.word_embeddings.weight"])
    m = json.loads((tmp_path / "cont" / "final" / "manifest.json").read_text())
    assert m["init_from"]["folder"] == str(released.resolve()) and m["init_from"]["fresh"] == [] and r["step"] == 3
    # plain transformers loads the result with the folder's tokenizer
    tok = AutoTokenizer.from_pretrained(tmp_path / "cont" / "final")
    ref = AutoTokenizer.from_pretrained(released)
    assert tok("영화가 정말 재미있었다")["input_ids"] == ref("영화가 정말 재미있었다")["input_ids"]
    assert AutoModelForMaskedLM.from_pretrained(tmp_path / "cont" / "final").config.hidden_size == 64
    # the same command again is up to date; another starting folder is another run
    assert main(_continued(shards_dir, tmp_path / "cont", released, max_steps=3))["step"] == 3


def test_continued_model_keeps_the_positions_its_start_had_trained(shards_dir, released, tmp_path):
    """A start pretrained to 256 tokens, continued on 128-token shards: the result has trained 256."""
    import shutil

    start = shutil.copytree(released, tmp_path / "start")
    m = json.loads((start / "manifest.json").read_text())
    (start / "manifest.json").write_text(json.dumps({**m, "trained_seq_len": 256}))
    assert main(_continued(shards_dir, tmp_path / "cont", start, max_steps=1))["trained_seq_len"] == 256
    assert main(_continued(shards_dir, tmp_path / "cont128", released, max_steps=1))["trained_seq_len"] == 128


def test_init_from_a_bare_encoder_starts_its_missing_heads_fresh(shards_dir, released, tmp_path, no_kiwi):
    import shutil

    from transformers import BertModel

    bare = tmp_path / "bare"
    BertModel.from_pretrained(released).save_pretrained(bare)
    for name in ("tokenizer.json", "tokenizer_config.json", "spm.model"):
        shutil.copy(released / name, bare / name)
    r = main(_continued(shards_dir, tmp_path / "cont", bare, max_steps=2))
    fresh = r["init_from"]["fresh"]
    assert {"cls.seq_relationship.weight", "cls.predictions.transform.dense.weight"} <= set(fresh)
    assert not any(k.startswith("bert.") for k in fresh)  # every encoder weight came from the folder
    # where Kiwi is not installed (a GPU box with torch + transformers), the same run
    p = _run_cli(_args(_continued(shards_dir, tmp_path / "nokiwi", bare, max_steps=2)), env=no_kiwi)
    assert p.returncode == 0, p.stderr[-2000:]
    m = json.loads((tmp_path / "nokiwi" / "final" / "manifest.json").read_text())
    assert m["init_from"]["fresh"] == fresh and losses(tmp_path / "nokiwi") == losses(tmp_path / "cont")


def test_init_from_refuses_what_it_cannot_continue(shards_dir, released, bert_dir, tmp_path):
    import shutil

    with pytest.raises(InputError, match=r"BertTokenizer.*\(files sha256\) [0-9a-f]{12}\) is not the one the shards were made with \([0-9a-f]{12}\)"):
        main(_continued(shards_dir, tmp_path / "a", bert_dir))
    with pytest.raises(InputError, match="drop --model-size"):
        main(_continued(shards_dir, tmp_path / "b", released, model_size="tiny"))
    roberta = tmp_path / "roberta"
    shutil.copytree(released, roberta)
    c = json.loads((roberta / "config.json").read_text())
    (roberta / "config.json").write_text(json.dumps({**c, "model_type": "roberta", "architectures": ["RobertaForMaskedLM"]}))
    with pytest.raises(InputError, match="a roberta model; korbert continues BERT"):
        main(_continued(shards_dir, tmp_path / "c", roberta))
