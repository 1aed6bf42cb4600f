"""Issue 58: the long phase's own schedule and copied positions (resumed exactly across the switch), the
run key and card that record them, the position measure on a hand-made model, and KorQuAD budgets that do
not shrink with the window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from corpus_tools.text import InputError
from korbert.checkpoint import run_key
from korbert.pretrain import Trainer, main
from korbert.pretrain_config import PretrainConfig
from test_pretrain import TINY, cfg, long_shards_dir, losses, weights  # noqa: F401 (long_shards_dir: a fixture)

POS = "bert.embeddings.position_embeddings.weight"


class Stopped(Exception):
    pass


def _stop_after(step: int):
    """Trainer.interval that raises once step `step` is logged (and checkpointed when due), as a crash would."""
    interval = Trainer.interval

    def stop(self, done):
        interval(self, done)
        if self.step_no == step:
            raise Stopped(step)

    return stop


def lrs(out) -> list[float]:
    return [json.loads(line)["lr"] for line in Path(out, "log.jsonl").read_text().splitlines()]


def test_long_phase_own_schedule_warms_up_and_decays_inside_the_phase():
    """--long-schedule own: the short phase decays to 0 at the switch (step 80 of 100), the long phase warms up
    over its first quarter to --long-lr and decays to 0 at the end; shared: the run's one schedule, as before."""
    from korbert.schedule import lr_for

    own = PretrainConfig(max_steps=100, warmup=10, lr=1e-3, long_shards="x", long_phase=0.2, long_schedule="own", long_warmup=0.25, long_lr=5e-4)
    assert lr_for(10, 0.10, own, 100, None, None) == pytest.approx(1e-3)
    assert lr_for(45, 0.45, own, 100, None, None) == pytest.approx(5e-4)  # halfway from the peak (step 10) to the switch (80)
    assert lr_for(79, 0.79, own, 100, None, None) == pytest.approx(1e-3 / 70)
    assert lr_for(80, 0.80, own, 100, None, 0.80) == 0.0  # the long phase's warmup starts
    assert lr_for(85, 0.85, own, 100, None, 0.80) == pytest.approx(5e-4)  # its peak, a quarter of the way in
    assert lr_for(90, 0.90, own, 100, None, 0.80) == pytest.approx(5e-4 * 10 / 15)
    assert lr_for(100, 1.0, own, 100, None, 0.80) == 0.0
    shared = PretrainConfig(max_steps=100, warmup=10, lr=1e-3, long_shards="x", long_phase=0.2, long_schedule="shared")
    assert lr_for(90, 0.90, shared, 100, None, 0.80) == pytest.approx(1e-3 * 10 / 90)  # the tail of the run's decay


def test_long_phase_own_schedule_and_copied_positions_resume_exactly_across_the_switch(shards_dir, long_shards_dir, tmp_path):
    """10 steps, the last 3 long (from step 7) with their own warmup and decay and positions 128..255 copied
    from 0..127 at the switch: the logged lr follows that schedule; runs killed before the switch (checkpoint
    at 4), at it (checkpoint at 7: the copy happens on resuming) and after it (checkpoint at 8: the copy is not
    made again) resume to the same losses and weights; the card states the positions and the schedule."""
    own = dict(tokens_per_batch=2048, pack=True, lr=3e-3, warmup=2, num_workers=0, long_shards=str(long_shards_dir), long_phase=0.3,
               long_schedule="own", long_warmup=0.34, long_lr=1e-3, long_init="copy", long_nsp=False)  # (NSP off: on in test_pretrain's)
    whole = main(cfg(shards_dir, tmp_path / "whole", **own))
    got = lrs(tmp_path / "whole")
    # short phase: warmup 2 steps, then linear decay to 0 at step 7; long: progress (step - 7) / 3, warmup 0.34
    short = [0.0, 1.5e-3, 3e-3, 3e-3 * 4 / 5, 3e-3 * 3 / 5, 3e-3 * 2 / 5, 3e-3 * 1 / 5]
    long_ = [0.0, 1e-3 * (1 / 3) / 0.34, 1e-3 * (1 - (2 / 3 - 0.34) / 0.66)]
    assert got == pytest.approx(short + long_), got
    assert whole["long_phase"] == {"schedule": "own", "warmup": 0.34, "peak_lr": 1e-3, "positions": "copy", "short_len": 128, "nsp": False}
    card = (tmp_path / "whole" / "final" / "README.md").read_text()
    assert "Positions 0–127 were trained through the whole run, 128–255 only in the long phase, starting as copies of 0–127" in card, card
    assert "its own learning-rate schedule: warmup over 34% of it to a peak of 1.0e-03, then linear decay to 0. It trained MLM alone" in card

    for kill, save_every in ((6, 4), (8, 7), (9, 4)):  # before the switch, at it, after it
        out = tmp_path / f"broken{kill}"
        broken = cfg(shards_dir, out, save_every=save_every, **own)
        # stopped in this process after step `kill`, as a crash would (a SIGKILLed subprocess inside the long phase:
        # test_pretrain's long-phase test; here the three cuts cost no further starts of torch)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Trainer, "interval", _stop_after(kill))
            with pytest.raises(Stopped):
                main(broken)
        assert len(losses(out)) == kill
        main(broken)
        assert losses(out) == losses(tmp_path / "whole") and lrs(out) == got, kill
        a, b = weights(tmp_path / "whole"), weights(out)
        assert all(torch.equal(a[k], b[k]) for k in a), (kill, [k for k in a if not torch.equal(a[k], b[k])][:5])


def test_copied_positions_equal_the_trained_rows_tiled_and_leave_128_tokens_unchanged(shards_dir, long_shards_dir, tmp_path):
    """The copy itself: rows 128..255 become rows 0..127 (tiled), rows 0..127 and a 128-token forward pass are
    unchanged. In a run of 4 steps, the last one long with lr 0 (the start of its warmup), final/ holds the
    copy as made: its rows 128..255 equal its rows 0..127, and a run with --long-init keep has other rows."""
    from safetensors.torch import load_file
    from transformers import BertConfig

    from korbert.model import KorBertForPreTraining
    from korbert.phases import tile_positions

    torch.manual_seed(0)
    m = KorBertForPreTraining(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                         max_position_embeddings=300)).eval()
    ids = torch.randint(5, 100, (2, 128))
    before_rows = m.bert.embeddings.position_embeddings.weight.detach().clone()
    with torch.no_grad():
        before = m.bert(input_ids=ids).last_hidden_state
    tile_positions(m, 128, 300)
    rows = m.bert.embeddings.position_embeddings.weight.detach()
    assert torch.equal(rows[:128], before_rows[:128]) and torch.equal(rows[128:256], before_rows[:128]) and torch.equal(rows[256:300], before_rows[:44])
    with torch.no_grad():
        assert torch.equal(m.bert(input_ids=ids).last_hidden_state, before)

    common = dict(tokens_per_batch=2048, pack=True, max_steps=4, num_workers=0, long_shards=str(long_shards_dir), long_phase=0.25,
                  long_schedule="own", long_warmup=0.5)
    rows = {}
    for init in ("copy", "keep"):
        main(cfg(shards_dir, tmp_path / init, long_init=init, **common))
        rows[init] = load_file(str(tmp_path / init / "final" / "model.safetensors"))[POS]
    assert torch.equal(rows["copy"][128:256], rows["copy"][:128]) and torch.equal(rows["copy"][:128], rows["keep"][:128])
    assert not torch.equal(rows["keep"][128:256], rows["keep"][:128])


def test_run_key_keeps_old_runs_and_names_the_new_settings():
    """The keys below were computed before the long-phase settings existed: a run at what it then did (shared,
    keep: the defaults until issue 58) keeps its key, so it resumes; own / copy / their warmup and lr make another
    run, and so do today's defaults (own, copy); without long shards, none of them counts."""
    old_plain = "e6e5cc9d7483efc46b4abf0e978fd229209b65abfe5efd1eb9ddb1fa6b453f22"
    old_long = "70e08e017783ce879c14df795b5f11c70e61ea7d571a030fd3c0338ef136d644"

    def key(**kw):
        c = PretrainConfig(shards="s", out="o", **kw)
        return run_key(c, "sk", "th", 1, "fp32", False, "lk" if c.long_shards else "")

    assert key() == old_plain and key(long_schedule="own", long_init="copy", long_lr=1e-4) == old_plain
    long = dict(long_shards="l", long_phase=0.2)
    old = dict(long, long_schedule="shared", long_init="keep")
    assert key(**old) == old_long == key(**old, long_warmup=0.3, long_lr=1e-4)  # (they apply only to an own schedule)
    own = dict(long, long_init="keep")
    keys = {key(**own), key(**own, long_warmup=0.3), key(**own, long_lr=1e-4), key(**dict(old, long_init="copy")), old_long, key(**long)}
    assert len(keys) == 6 and (PretrainConfig.long_schedule, PretrainConfig.long_init) == ("own", "copy")
    # a switch.pt's short key (korbert/fork.py), computed with aadebec's code (before the defaults changed): either long_init forks from it
    from korbert.fork import short_key

    def short(**kw):
        return short_key(PretrainConfig(shards="s", out="o", **long, **kw), lambda c, lk: run_key(c, "sk", "th", 1, "fp32", False, lk), 512)

    assert short(long_schedule="own", long_init="copy") == short(long_schedule="own", long_init="keep") == \
        "56614eb9f47623c5f3dd29a6347336eda5f52948002af5ec4ba0fc6cc016a663"


def test_a_run_from_before_the_defaults_changed_says_how_to_resume_it(shards_dir, long_shards_dir, tmp_path):
    """A checkpoint of a run at the long phase's old defaults (shared, keep), resumed at today's: refused with the two
    flags that resume it (not as "another run"); with them it resumes."""
    old = dict(long_shards=str(long_shards_dir), long_phase=0.3, max_steps=5)
    main(cfg(shards_dir, tmp_path / "run", long_schedule="shared", long_init="keep", **old))
    with pytest.raises(InputError, match="trained with --long-schedule shared --long-init keep, .*: pass both to resume it"):
        main(cfg(shards_dir, tmp_path / "run", **{**old, "max_steps": 10}))
    assert main(cfg(shards_dir, tmp_path / "run", long_schedule="shared", long_init="keep", **{**old, "max_steps": 10}))["step"] == 10


def test_long_settings_are_checked(shards_dir, long_shards_dir, tmp_path):
    with pytest.raises(InputError, match="--long-warmup must be in"):
        main(cfg(shards_dir, tmp_path / "a", long_shards=str(long_shards_dir), long_phase=0.3, long_schedule="own", long_warmup=1.0))
    with pytest.raises(InputError, match="--long-lr must be"):
        main(cfg(shards_dir, tmp_path / "b", long_shards=str(long_shards_dir), long_phase=0.3, long_schedule="own", long_lr=-1))


def test_long_init_copy_refuses_a_start_whose_long_positions_are_trained(shards_dir, long_shards_dir, model_dir, tmp_path):
    """--init-from a model trained over 512 positions (a folder with no manifest counts as trained over all
    it has): copying rows 0..127 over its 128..511 at the switch would throw its training away."""
    with pytest.raises(InputError, match="already trained positions up to 512.*--long-init keep"):
        main(cfg(shards_dir, tmp_path / "c", long_shards=str(long_shards_dir), long_phase=0.3, long_init="copy", init_from=str(model_dir),
                 model_size="mini", override=""))


def test_korquad_budgets_at_128_and_384_give_the_steps_their_settings_say(model_dir, tmp_path, one_thread):
    """The same questions make fewer windows at 384 than at 128, so the same --epochs take fewer steps;
    --epoch-window 128/32/40 counts an epoch in 128-token windows (the steps a run at 128 takes), and
    --epochs 0 --max-steps N takes N steps at either length."""
    import math

    from evals.korquad import KorquadConfig, main as korquad

    def run(name, **kw):
        r = korquad(KorquadConfig(model=str(model_dir), out=str(tmp_path / name), features=str(tmp_path / "features"), max_train_examples=12,
                                  max_eval_examples=1, batch_size=8, device="cpu", seed=3, threads=1, **kw))
        return r["training"]["steps"], r["n"]["train_windows"], r

    short = dict(max_len=128, stride=32, max_query_len=40)
    s128, w128, _ = run("a", epochs=1, **short)
    s384, w384, _ = run("b", epochs=1)
    assert w128 > w384 and s128 == math.ceil(w128 / 8) > s384 == math.ceil(w384 / 8)
    matched, _, r = run("c", epochs=2, epoch_window="128/32/40")
    assert matched == 2 * s128 and r["training"]["budget"] == {"epochs": 2, "epoch_window": "128/32/40", "windows_per_epoch": w128, "max_steps": 2 * s128}
    assert run("d", epochs=0, max_steps=3)[0] == run("e", epochs=0, max_steps=3, **short)[0] == 3
    with pytest.raises(InputError, match="--epoch-window"):
        run("f", epochs=1, epoch_window="128x32")


def test_korquad_results_cached_before_epoch_window_keep_their_key():
    """The eval key of a KorQuAD config at the default --epoch-window is the key it had before the
    setting existed (its config without the field); another window is another key."""
    import hashlib

    from corpus_tools import config as C
    from evals.korquad import KorquadConfig
    from korbert.recipe import _inputs_key, eval_key

    c = KorquadConfig(model="m", dev_file="", out="o")
    before = {k: v for k, v in C.to_dict(c).items() if k != "epoch_window"}
    old_key = hashlib.sha256(json.dumps([before, "up", _inputs_key(c)], sort_keys=True, default=str).encode()).hexdigest()
    assert eval_key(c, "up") == old_key
    assert eval_key(KorquadConfig(model="m", dev_file="", out="o", epoch_window="128/32/40"), "up") != old_key


def test_arms_after_before_read_its_shards_and_keep_the_choice_they_started_with(tmp_path):
    """benchmarks/long_positions.py: an arm reads the before arm's shards (the long ones too unless it sets
    shards_long.*, none if it sets shards.*) by the strings before's recipe recorded; once its recipe recorded
    a choice it keeps it (another is another run key); reading shards that are gone is refused."""
    from conftest import load_benchmark

    lp = load_benchmark("long_positions")
    work = tmp_path / "lp"
    before = work / "before"
    for sub in ("shards", "shards-long"):
        (before / sub).mkdir(parents=True)
        (before / sub / "manifest.json").write_text("{}")
    (before / "recipe-config.json").write_text(json.dumps({
        "shards": {"out": str(before / "shards"), "tokenizer": str(before / "vocab")}, "shards_long": {"out": str(before / "shards-long")}}))
    copy, docs = work / "copy", work / "docs"
    got = lp.reused_shards(work, "copy", ["pretrain.long_init=copy"], copy)
    assert got == [f"shards.out={before / 'shards'}", f"shards.tokenizer={before / 'vocab'}", "shards.replace=false",
                   f"pretrain.shards={before / 'shards'}", f"shards_long.out={before / 'shards-long'}"]
    assert lp.reused_shards(work, "docs", ["shards_long.min_chars=1000"], docs)[-2:] == [f"shards_long.tokenizer={docs / 'vocab'}", "shards_long.replace=true"]
    # another arm's long shards, named: its strings stand (no own-vocabulary tokenizer, no replace=true after them)
    named = ["shards_long.instances=packed", f"shards_long.out={work / 'packed' / 'shards-long'}", "shards_long.replace=false"]
    assert lp.reused_shards(work, "after", named, work / "after") == got[:4]
    assert lp.reused_shards(work, "x", ["shards.seed=3"], work / "x") == [] == lp.reused_shards(work, "before", [], before)
    # an arm whose recipe recorded its own shards keeps them, even now that before's exist
    own = work / "own"
    own.mkdir()
    (own / "recipe-config.json").write_text(json.dumps({"shards": {"out": str(own / "shards")}, "shards_long": {"out": str(own / "shards-long")}}))
    assert lp.reused_shards(work, "own", [], own) == []
    # one that recorded before's keeps reading them, and is refused once they are gone
    copy.mkdir()
    (copy / "recipe-config.json").write_text(json.dumps({"shards": {"out": str(before / "shards")}, "shards_long": {"out": str(before / "shards-long")}}))
    assert lp.reused_shards(work, "copy", ["pretrain.long_init=copy"], copy) == got
    (before / "shards" / "manifest.json").unlink()
    with pytest.raises(SystemExit, match="holds no finished shards"):
        lp.reused_shards(work, "copy", ["pretrain.long_init=copy"], copy)
    assert lp.reused_shards(work, "new", [], work / "new") == []  # (a new arm builds its own)


def test_collect_writes_both_arms_with_their_ratios_and_refuses_mixed_precisions(tmp_path):
    """benchmarks/long_positions.py --collect: before, after and the decomposition's arms in one file, each
    with its ratios (bucket over its 128-token reference; KorQuAD F1 384 over 128), from the arms' files."""
    from conftest import load_benchmark

    lp = load_benchmark("long_positions")
    work = tmp_path / "lp"
    buckets = ("0-127", "128-255", "256-383", "384-511")

    def write(name, acc, f1=None, precision="bf16", ref=0.25):
        r = {"mlm_acc_by_position": dict(zip(buckets, acc)), "mlm_acc_128_reference": dict.fromkeys(buckets, ref),
             "precision": precision, **(f1 or {})}
        (work / name).mkdir(parents=True, exist_ok=True)
        (work / name / "long-positions-arm.json").write_text(json.dumps(r))

    write("before", [0.25, 0.125, 0.125, 0.1], {"korquad_f1_128": 12.0, "korquad_f1_384": 9.0})
    write("after", [0.25, 0.3, 0.25, 0.25], {"korquad_f1_128": 12.0, "korquad_f1_384": 13.2})
    write("copy", [0.25, 0.2, 0.2, 0.2])
    write("empty", [0.0, 0.0, 0.0, None], ref=0.0)  # (a tiny smoke model: nothing right in the reference)
    out = tmp_path / "result.json"
    lp.main(["--collect", "--work", str(work), "--result", str(out)])
    got = json.loads(out.read_text())
    assert set(got["decomposition"]["empty"][k] for k in got["decomposition"]["empty"] if k.startswith("ratio_")) == {None}  # no reference: no ratio
    assert got["before"]["ratio_position_384-511"] == 0.4 and got["before"]["ratio_korquad_f1_384_to_128"] == 0.75
    assert got["after"]["ratio_position_128-255"] == 1.2 and got["after"]["ratio_korquad_f1_384_to_128"] == 1.1
    assert got["decomposition"]["copy"]["ratio_position_256-383"] == 0.8 and "ratio_korquad_f1_384_to_128" not in got["decomposition"]["copy"]
    write("copy", [0.25, 0.2, 0.2, 0.2], precision="fp32")
    with pytest.raises(SystemExit, match="other precisions"):
        lp.main(["--collect", "--work", str(work), "--result", str(out)])


def test_every_arm_starts_from_the_preset_as_it_was_and_packed_lr5e_4_is_todays_preset(tmp_path):
    """The arms were measured from the cpu preset's long phase before issue 58 made the fix its default: the
    benchmark pins those settings (shared schedule, positions as initialized, document instances), so `before`
    is still that preset and each arm's --set its change; `packed-lr5e-4`'s five settings are today's preset."""
    import argparse

    from conftest import load_benchmark
    from corpus_tools import config as C
    from korbert.recipe import RecipeConfig, stage_configs
    from test_recipe import sample_data_folder

    lp = load_benchmark("long_positions")
    data = sample_data_folder(tmp_path / "data")
    args = argparse.Namespace(steps=10, precision="auto", seeds=[42], smoke=False, data=str(data), workers=0)

    def long_phase(cfgs):
        p = cfgs["pretrain"]
        return cfgs["shards_long"].instances, p.long_schedule, p.long_init, p.long_lr, p.long_warmup

    def arm(*sets):
        cmd = lp.recipe_command(args, tmp_path / "arm", list(sets))
        return long_phase(stage_configs(C.parse(RecipeConfig, cmd[cmd.index("run") + 1:], prog="korbert run"))["cfgs"])

    assert arm() == ("document", "shared", "keep", 0.0, 0.1)
    chosen = ["pretrain.long_schedule=own", "pretrain.long_warmup=0.1", "pretrain.long_init=copy", "pretrain.long_lr=5e-4", "shards_long.instances=packed"]
    today = long_phase(stage_configs(RecipeConfig(preset="cpu", out=str(tmp_path / "now"), data=str(data)))["cfgs"])
    assert arm(*chosen) == today == ("packed", "own", "copy", 5e-4, 0.1)


def test_controls_only_takes_a_run_folder_from_before_the_pins_and_refuses_another_configuration(tmp_path, monkeypatch):
    """--controls-only on a run folder whose recipe-config.json an earlier invocation wrote (its --set without the pinned
    long phase, every stage's settings the same): it goes on to the vocabulary; a stage setting that differs stops it."""
    import argparse

    from conftest import load_benchmark

    lp = load_benchmark("long_positions")
    args = argparse.Namespace(work=str(tmp_path), arm="before", set=[], after_set=[], steps=10, precision="auto", seeds=[42], smoke=True,
                              data="", workers=0, stages=str(tmp_path / "stages"), final_manifest="x", force=False)

    class Reached(Exception):
        pass

    def vocab(c):
        raise Reached

    monkeypatch.setattr("corpus_tools.vocab.main", vocab)
    saved_file = tmp_path / "before" / "recipe-config.json"
    with pytest.raises(Reached):
        lp.controls_only(args)  # (no folder yet: it writes the recipe's config)
    saved = json.loads(saved_file.read_text())
    saved["recipe"]["set"] = [s for s in saved["recipe"]["set"] if s not in lp.PINNED]
    saved_file.write_text(json.dumps(saved))
    with pytest.raises(Reached):
        lp.controls_only(args)
    saved["pretrain"]["lr"] *= 2
    saved_file.write_text(json.dumps(saved))
    with pytest.raises(SystemExit, match="holds another configuration"):
        lp.controls_only(args)


def test_a_fork_at_the_switch_trains_the_same_long_phase_as_a_whole_run(shards_dir, long_shards_dir, tmp_path):
    """A run writes switch.pt at its switch (step 7 of 10, before any long step). A run that differs only in the
    long phase's settings (--long-init, --long-warmup, --long-lr) started from it with --fork-from trains the
    long phase alone (its first 7 log lines are the source's, timings included) and ends with the same losses
    and weights as the same run trained whole; so does a fork from a switch.pt written before it held its short
    key and budgets (checked through the config.json beside it). Refused: anything else differs, a checkpoint
    inside the long phase, no config.json, another budget, a source extended to another budget."""
    import shutil

    base = dict(tokens_per_batch=2048, pack=True, lr=3e-3, warmup=2, num_workers=0, long_shards=str(long_shards_dir), long_phase=0.3,
                long_schedule="own")
    main(cfg(shards_dir, tmp_path / "source", long_init="keep", long_warmup=0.1, **base))
    s = torch.load(tmp_path / "source" / "switch.pt", map_location="cpu", weights_only=False)
    assert s["state"]["step"] == 7 and s["state"]["long_from"] is None and s["state"]["budgets"] == [{"max_steps": 10, "max_tokens": 0, "max_minutes": 0.0}]

    other = dict(long_init="copy", long_warmup=0.34, long_lr=1e-3, long_nsp=False, **base)
    main(cfg(shards_dir, tmp_path / "whole", **other))
    # a switch.pt from before the short key and budgets were recorded, beside its run's config.json
    (tmp_path / "old").mkdir()
    shutil.copy(tmp_path / "source" / "config.json", tmp_path / "old")
    shutil.copy(tmp_path / "source" / "log.jsonl", tmp_path / "old")
    del s["state"]["short_key"], s["state"]["budgets"]
    torch.save(s, tmp_path / "old" / "switch.pt")
    src_lines = (tmp_path / "source" / "log.jsonl").read_text().splitlines()
    for name, source in (("fork", tmp_path / "source"), ("fork-old", tmp_path / "old" / "switch.pt")):
        r = main(cfg(shards_dir, tmp_path / name, fork_from=str(source), **other))
        assert r["run_key"] == json.loads((tmp_path / "whole" / "final" / "manifest.json").read_text())["run_key"]
        assert (tmp_path / name / "log.jsonl").read_text().splitlines()[:7] == src_lines[:7]  # copied, not trained again
        assert losses(tmp_path / name) == losses(tmp_path / "whole") and lrs(tmp_path / name) == lrs(tmp_path / "whole"), name
        assert losses(tmp_path / name)[7:] != losses(tmp_path / "source")[7:]
        a, b = weights(tmp_path / "whole"), weights(tmp_path / name)
        assert all(torch.equal(a[k], b[k]) for k in a), (name, [k for k in a if not torch.equal(a[k], b[k])][:5])
        assert not (tmp_path / name / "switch.pt").exists()

    switch = str(tmp_path / "source" / "switch.pt")
    for i, (fork_from, change, match) in enumerate((
        (switch, {"lr": 2e-3}, "not only another long phase .*differ in lr"),
        (str(tmp_path / "old"), {"lr": 2e-3}, "not only another long phase .*differ in lr"),
        (switch, {"long_schedule": "shared"}, "not only another long phase .*long_schedule"),
        (str(tmp_path / "source" / "ckpt.pt"), {}, "comes after long-phase steps"),
        (switch, {"max_steps": 20}, "budget"),
    )):
        with pytest.raises(InputError, match=match):
            main(cfg(shards_dir, tmp_path / f"x{i}", fork_from=fork_from, **{**other, **change}))
    shutil.copy(switch, tmp_path / "lone.pt")
    with pytest.raises(InputError, match="no readable config.json"):
        main(cfg(shards_dir, tmp_path / "x9", fork_from=str(tmp_path / "lone.pt"), **other))

    # killed right after the checkpoint at the switch (before the loop's own copy): the resume writes switch.pt
    out = tmp_path / "cut"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Trainer, "interval", _stop_after(7))
        with pytest.raises(Stopped):
            main(cfg(shards_dir, out, save_every=7, long_init="keep", long_warmup=0.1, **base))
    assert not (out / "switch.pt").exists()
    main(cfg(shards_dir, out, save_every=7, long_init="keep", long_warmup=0.1, **base))
    cut = torch.load(out / "switch.pt", map_location="cpu", weights_only=False)
    assert cut["state"]["step"] == 7 and all(torch.equal(cut["model"][k], s["model"][k]) for k in s["model"])
    # a run extended past its first long phase goes back to the short phase: no new switch.pt, and none to fork at 20
    main(cfg(shards_dir, tmp_path / "source", long_init="keep", long_warmup=0.1, **{**base, "max_steps": 20}))
    assert torch.load(switch, map_location="cpu", weights_only=False)["state"]["step"] == 7
    with pytest.raises(InputError, match="budget"):
        main(cfg(shards_dir, tmp_path / "x10", fork_from=switch, **{**other, "max_steps": 20}))


def test_an_arm_run_for_later_seeds_keeps_the_recipe_at_the_first(tmp_path):
    """`--seeds 43 44` on an arm whose recipe fine-tuned seed 42: the recipe's command still says 42, so its
    folder (seed 42's results) is found up to date, not fine-tuned again under 43 over them."""
    import argparse

    from conftest import load_benchmark

    lp = load_benchmark("long_positions")
    args = argparse.Namespace(steps=10, precision="auto", seeds=[43, 44], smoke=False, data="", workers=0)
    cmd = lp.recipe_command(args, tmp_path / "arm", [])
    assert "nsmc.seed=42" in cmd and "korquad.seed=42" in cmd and not any("seed=43" in c for c in cmd)


def test_a_control_stand_in_holds_what_the_real_export_holds_and_the_kept_markers_come_back(shards_dir, long_shards_dir, vocab_dir, tmp_path):
    """benchmarks/long_positions.py --controls-only: the stand-in final/ (no pretraining) has the config.json and
    tokenizer files a real run's export wrote, byte for byte, so a control keyed on it is that run's control; it
    holds no weights and its manifest is no model's, so a pretraining in the same folder still runs and replaces
    it. A model of another shape is refused. The kept markers go back into a fresh run folder, never over one
    it holds."""
    from dataclasses import asdict

    from conftest import load_benchmark
    from korbert.folders import open_folder

    lp = load_benchmark("long_positions")
    c = cfg(shards_dir, tmp_path / "real", long_shards=str(long_shards_dir), long_phase=0.3)
    main(c)
    manifest = tmp_path / "real" / "final" / "manifest.json"
    saved = {"pretrain": {**asdict(c), "out": str(tmp_path / "stand" / "pretrain")}, "vocab": {"out": str(vocab_dir)},
             "shards": {"max_seq_len": 128}, "shards_long": {"max_seq_len": 256}}
    final = lp.stand_in_final(saved, manifest)
    assert not (final / "model.safetensors").exists()
    assert json.loads((final / "manifest.json").read_text())["kind"] == lp.STAND_IN
    real = open_folder(str(tmp_path / "real" / "final"))
    stand = open_folder(str(final), weights=False)
    assert stand.tokenizer_sha256 == real.tokenizer_sha256
    assert (final / "config.json").read_bytes() == (tmp_path / "real" / "final" / "config.json").read_bytes()
    with pytest.raises(InputError, match="no model.safetensors"):
        open_folder(str(final))  # (a pretrained model's eval cannot read it)
    r = main(PretrainConfig(**saved["pretrain"]))  # a pretraining there is not fooled by it
    assert r["step"] == 10 and (final / "model.safetensors").is_file()
    with pytest.raises(SystemExit, match="holds a pretrained model"):  # and a stand-in never replaces the model it exported
        lp.stand_in_final(saved, manifest)
    (final / "manifest.json").write_text("{")  # (weights there, its manifest unreadable: still a model)
    with pytest.raises(SystemExit, match="holds a pretrained model"):
        lp.stand_in_final(saved, manifest)
    assert (final / "model.safetensors").is_file()
    wider = {**saved, "pretrain": {**saved["pretrain"], "out": str(tmp_path / "wide"), "override": ["hidden_size=96", *TINY[1:]]}}
    with pytest.raises(SystemExit, match="config.json"):
        lp.stand_in_final(wider, manifest)

    stages, run = tmp_path / "stages", tmp_path / "work" / "before"
    (stages / "before" / "nsmc" / "control").mkdir(parents=True)
    (stages / "before" / "nsmc" / "control" / "recipe-stage.json").write_text('{"key": "k", "result": {}}')
    (stages / "before" / "seed-43" / "korquad" / "control").mkdir(parents=True)
    (stages / "before" / "seed-43" / "korquad" / "control" / "recipe-stage.json").write_text('{"key": "k43", "result": {}}')
    (run / "nsmc" / "control").mkdir(parents=True)
    (run / "nsmc" / "control" / "recipe-stage.json").write_text('{"key": "mine", "result": {}}')
    assert lp.restore_stages(run, stages) == 1 and lp.restore_stages(tmp_path / "work" / "after", stages) == 0
    assert json.loads((run / "nsmc" / "control" / "recipe-stage.json").read_text())["key"] == "mine"
    assert json.loads((run / "seed-43" / "korquad" / "control" / "recipe-stage.json").read_text())["key"] == "k43"


def test_collect_from_the_committed_files_reads_markers_and_results_and_shares_a_control_only_between_equal_folders(tmp_path):
    """--collect --committed ARM: each arm from its committed position measure, final/ manifest, kept markers (in
    the folders its recipe config names, written by keep_stages) and result files; ARM stands as `after`, and takes
    the before arm's control when its final/ held the same config.json and tokenizer files and its settings leave
    the fine-tunings alone, not otherwise. A marker of other settings, and arms of other precisions, are refused."""
    from conftest import load_benchmark
    from corpus_tools import config as C

    lp = load_benchmark("long_positions")
    results = tmp_path / "results"
    stages = results / "stages"
    buckets = ("0-127", "128-255", "256-383", "384-511")

    def arm(name, acc, files, settings=(), precision="bf16"):
        run = tmp_path / "runs" / "lp" / name
        pos = {"mlm_acc_by_position": dict(zip(buckets, acc)), "mlm_acc_128_reference": dict.fromkeys(buckets, 0.25), "gap_se": {},
               "masked_tokens": dict.fromkeys(buckets, 9), "windows": 3, "texts": {"path": "t", "sha256": "x", "documents": 1},
               "config": {"model": f"{run}/pretrain/final", "texts": "t", "out": f"{run}/positions"}}
        (results / f"{name}-positions.json").write_text(json.dumps(pos))
        pm = {"config": {"shards": "s", "out": f"{run}/pretrain", "max_steps": 10, "precision_used": precision},
              "files": {"config.json": files, "model.safetensors": name}, "step": 10}
        (results / f"{name}-pretrain-manifest.json").write_text(json.dumps(pm))
        (results / f"{name}-arm.json").write_text(json.dumps({"settings": list(settings)}))
        return run

    def result(task, f1_or_acc, c):
        if task.startswith("nsmc"):
            return {"metrics": {"accuracy": f1_or_acc}, "config": C.to_dict(c)}
        return {"metrics": {"f1": f1_or_acc, "exact_match": f1_or_acc / 2}, "training": {"steps": 100}, "config": C.to_dict(c)}

    results.mkdir()
    run = arm("before", [0.25, 0.125, 0.125, 0.1], "same")
    saved = {t: {"model": f"{run}/pretrain/final", "out": f"{run}/{t.split('_')[0]}/{'control' if 'control' in t else 'model'}",
                 "control": "control" in t, "seed": 42} for t in ("nsmc", "nsmc_control", "korquad", "korquad_control")}
    run.mkdir(parents=True)
    (run / "recipe-config.json").write_text(json.dumps(saved))
    configs = {seed: lp.eval_configs(run, seed) for seed in (42, 43)}
    done = {}
    for (task, seed), value in {("korquad_control", 42): 7.0, ("korquad_control", 43): 9.0, ("korquad384_control", 43): 8.0,
                                ("korquad", 42): 12.0}.items():
        c = configs[seed][task]
        Path(c.out).mkdir(parents=True)
        (Path(c.out) / "recipe-stage.json").write_text(json.dumps({"key": "k", "result": result(task, value, c)}))
        done[(task, seed)] = (None, "cmd")
    kept = lp.keep_stages(run, done, stages)  # (what an arm's run commits)
    assert len(kept) == 4 and json.loads((stages / "before" / "recipe-config.json").read_text()) == saved
    (results / "before-nsmc-seed42.json").write_text(json.dumps(result("nsmc", 0.8444, configs[42]["nsmc"])))
    arm("cand", [0.25, 0.25, 0.25, 0.25], "same")
    (results / "cand-nsmc-seed43.json").write_text(json.dumps(result("nsmc", 0.84, configs[43]["nsmc"])))
    arm("other", [0.25, 0.2, 0.2, 0.2], "another")
    arm("tuned", [0.25, 0.2, 0.2, 0.2], "same", settings=["korquad.lr=1e-4"])
    arm("after", [0.25, 0.25, 0.2, 0.2], "same")
    out = tmp_path / "r.json"
    argv = ["--collect", "--committed", "cand", "--stages", str(stages), "--result", str(out), "--seeds", "42", "43"]
    got = lp.main(argv)
    b, a = got["before"], got["after"]
    assert b["control"]["korquad_f1_128"] == {"mean": 8.0, "range": [7.0, 9.0], "seeds": {42: 7.0, 43: 9.0}}
    assert b["control"]["korquad_f1_384"]["seeds"] == {43: 8.0} and b["korquad_f1_128"] == 12.0 and b["nsmc"] == 84.44
    assert a["arm"] == "cand" and a["nsmc"] == 84.0 and a["control"] == b["control"] and "control_from" in a
    assert got["decomposition"]["other"].get("control", {}) == {} and "control_from" not in got["decomposition"]["other"]
    assert "control_from" not in got["decomposition"]["tuned"]  # (its own fine-tuning settings: another control)
    assert got["decomposition"]["after (earlier arm)"]["ratio_position_256-383"] == 0.8  # (not overwritten by cand)
    assert b["precision"] == "bf16" and got["steps"]["before"] == 10
    assert a["ratio_position_128-255"] == 1.0 and json.loads(out.read_text())["after"]["arm"] == "cand"
    assert any(c.startswith("korbert pretrain") for c in b["commands"]) and any(c.startswith("korbert eval korquad") for c in b["commands"])
    for name in ("nowhere", "before"):  # (one line, not a KeyError)
        with pytest.raises(SystemExit, match="before and it are needed"):
            lp.main([*argv[:2], name, *argv[3:]])
    stale = stages / "before" / "seed-43" / "korquad" / "control" / "recipe-stage.json"  # a marker of another configuration
    marker = json.loads(stale.read_text())
    stale.write_text(json.dumps({**marker, "result": {**marker["result"], "config": {**marker["result"]["config"], "lr": 1.0}}}))
    with pytest.raises(SystemExit, match="other settings .lr."):
        lp.main(argv)
    moved = {**marker["result"]["config"], "features": "/elsewhere/features"}  # (the cache's absolute path: another checkout)
    moved.pop("epoch_window")  # (and a setting added since it ran: its default)
    stale.write_text(json.dumps({**marker, "result": {**marker["result"], "config": moved}}))
    assert lp.main(argv)["before"]["control"]["korquad_f1_128"]["seeds"][43] == 9.0
    stale.write_text(json.dumps(marker))
    arm("other", [0.25, 0.2, 0.2, 0.2], "another", precision="fp32")
    with pytest.raises(SystemExit, match="other precisions"):
        lp.main(argv)


def test_an_arm_made_again_takes_tasks_only_where_committed_and_must_be_the_committed_model(tmp_path, monkeypatch, capsys):
    """before (or after) with --positions-only --tasks: refused unless its pretraining is committed beside --stages; the
    arm made again stops before any fine-tuning unless its final/ holds the committed weights and config.json."""
    from conftest import load_benchmark
    from safetensors.torch import save_file

    from corpus_tools.artifacts import sha256_file

    lp = load_benchmark("long_positions")
    stages = tmp_path / "results" / "stages"
    stages.mkdir(parents=True)
    argv = ["--arm", "before", "--positions-only", "--tasks", "korquad", "--stages", str(stages)]
    with pytest.raises(SystemExit):
        lp.main(argv)
    assert "unless the arm's pretraining is committed" in capsys.readouterr().err
    final = tmp_path / "final"
    final.mkdir()
    save_file({"w": torch.arange(6, dtype=torch.float32)}, str(final / "model.safetensors"))
    config = '{"model_type": "bert", "transformers_version": "%s"}'
    (final / "config.json").write_text(config % "5.24.0")
    (final / "spm.model").write_bytes(b"pieces")
    committed = tmp_path / "results" / "before-pretrain-manifest.json"
    committed.write_text(json.dumps({"hardware": "Intel(R) Xeon(R) Processor", "versions": {"transformers": "5.24.0"}, "files": {
        n: sha256_file(final / n) for n in ("config.json", "model.safetensors", "spm.model")}}))
    ran = []
    monkeypatch.setattr(lp, "arm", lambda args: ran.append((args.arm, args.tasks, args.positions_only)))
    lp.main(argv)
    assert ran == [("before", ["korquad"], True)]
    with pytest.raises(SystemExit):  # without --positions-only the recipe would fine-tune before the check
        lp.main(["--arm", "before", "--tasks", "korquad", "--stages", str(stages)])
    assert "make it again with --positions-only" in capsys.readouterr().err and len(ran) == 1
    lp.same_as_committed(final, committed)  # the same model: no stop
    (final / "config.json").write_text(config % "5.25.0")  # exported by a later transformers: its stamp alone differs
    lp.same_as_committed(final, committed)
    (final / "config.json").write_text(config.replace("bert", "roberta") % "5.24.0")
    with pytest.raises(SystemExit, match=r": config.json differ"):
        lp.same_as_committed(final, committed)
    (final / "config.json").write_text(config % "5.24.0")
    lp.same_as_committed(final, tmp_path / "nowhere.json")  # nothing committed: nothing to match
    save_file({"w": torch.arange(6, dtype=torch.float32) + 1e-3}, str(final / "model.safetensors"))  # (another CPU's bf16 weights)
    with pytest.raises(SystemExit, match=r"model.safetensors differ from .*Intel\(R\) Xeon"):
        lp.same_as_committed(final, committed)
    (final / "config.json").unlink()
    with pytest.raises(SystemExit, match="config.json, model.safetensors differ"):
        lp.same_as_committed(final, committed)
    (final / "config.json").write_text(config % "5.24.0")
    save_file({"w": torch.arange(6, dtype=torch.float32)}, str(final / "model.safetensors"))
    lp.same_as_committed(final, committed)
    (final / "korbert_text.py").write_text("# the code's copy")  # (the code's, not the run's: a later commit may change it)
    committed.write_text(json.dumps({**json.loads(committed.read_text()), "files": {
        **json.loads(committed.read_text())["files"], "korbert_text.py": "older"}}))
    lp.same_as_committed(final, committed)
    (final / "spm.model").write_bytes(b"other pieces")  # (the same weights over another vocabulary: another model)
    with pytest.raises(SystemExit, match=r": spm.model differ"):
        lp.same_as_committed(final, committed)


def test_keep_stages_commits_the_arms_manifest_first_and_run_evals_keeps_each_fine_tuning_as_it_ends(tmp_path, monkeypatch):
    """A killed arm keeps the markers of the fine-tunings it finished, and the arm's final/ manifest beside them (what a
    rerun's same_as_committed checks its model against): never a control's stand-in's, never over a committed one."""
    from conftest import load_benchmark
    import korbert.recipe as R

    lp = load_benchmark("long_positions")
    run, stages = tmp_path / "runs" / "arm1", tmp_path / "results" / "stages"
    saved = {t: {"model": f"{run}/pretrain/final", "out": f"{run}/{t.split('_')[0]}/{'control' if 'control' in t else 'model'}",
                 "control": "control" in t, "seed": 42} for t in ("nsmc", "nsmc_control", "korquad", "korquad_control")}
    run.mkdir(parents=True)
    (run / "recipe-config.json").write_text(json.dumps(saved))
    final, manifest = run / "pretrain" / "final", tmp_path / "results" / "arm1-pretrain-manifest.json"
    final.mkdir(parents=True)
    (final / "manifest.json").write_text(json.dumps({"kind": lp.STAND_IN}))
    ran = []

    def cached(out, key, fn, force):  # (the fine-tuning: its marker written, as _cached does; killed in korquad384's)
        if out.parent.name == "korquad384":
            raise KeyboardInterrupt
        ran.append(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "recipe-stage.json").write_text(json.dumps({"key": f"k{len(ran)}"}))
        return {"metrics": {}}, False

    monkeypatch.setattr(R, "_cached", cached)
    monkeypatch.setattr(R, "_folder_key", lambda *a, **k: "folder")
    with pytest.raises(KeyboardInterrupt):
        lp.run_evals(run, [43], False, ["nsmc_control", "korquad_control", "korquad384_control"], stages, final)
    kept = sorted(str(p.relative_to(stages / "arm1")) for p in stages.rglob("recipe-stage.json"))
    assert kept == ["seed-43/korquad/control/recipe-stage.json", "seed-43/nsmc/control/recipe-stage.json"]
    assert not manifest.exists()  # (a stand-in is no model to check a rerun against)
    (final / "manifest.json").write_text(json.dumps({"kind": "model", "files": {"model.safetensors": "a"}}))
    assert lp.keep_stages(run, {}, stages, final) == [] and not manifest.exists()  # (nothing kept: nothing committed)
    lp.run_evals(run, [43], False, ["nsmc_control"], stages)  # (controls_only's call: no model it checked)
    assert not manifest.exists()
    lp.run_evals(run, [43], False, ["nsmc_control"], stages, final)  # (arm()'s)
    assert json.loads(manifest.read_text())["files"] == {"model.safetensors": "a"}
    (final / "manifest.json").write_text(json.dumps({"kind": "model", "files": {"model.safetensors": "b"}}))
    lp.run_evals(run, [43], False, ["nsmc_control"], stages, final)
    assert json.loads(manifest.read_text())["files"] == {"model.safetensors": "a"}  # (never over a committed one)
