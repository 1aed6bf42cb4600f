"""`korbert run` end to end on a tiny budget: every stage, the report, skipping, partial redo, replacing."""

from __future__ import annotations

import json

import pytest

from corpus_tools.text import InputError
from korbert.recipe import RecipeConfig, main

TINY = [
    "vocab.vocab_size=3000", "vocab.num_unused=5",
    "pretrain.model_size=tiny", "pretrain.override=hidden_size=64,num_hidden_layers=2,num_attention_heads=2,intermediate_size=128",
    "pretrain.max_steps=8", "pretrain.batch_size=16", "pretrain.eval_instances=64", "pretrain.log_every=2", "pretrain.num_workers=0",
    "nsmc.max_train_examples=200", "nsmc.valid_size=100", "nsmc.max_eval_examples=200", "nsmc.batch_size=32",
    "korquad.max_train_examples=24", "korquad.max_eval_examples=20", "korquad.max_len=128", "korquad.stride=32", "korquad.epochs=1",
    "baseline.max_train_examples=2000", "baseline.max_eval_examples=500",
]


def test_recipe_runs_every_stage_then_skips_and_redoes_only_what_changed(tmp_path, corpus_file, bert_dir, capsys):
    import shutil

    from corpus_tools import SAMPLE_DATA as SAMPLE

    from test_klue import ner_file, nli_file

    out = tmp_path / "run"
    nsmc_test = shutil.copy(SAMPLE / "nsmc_test.txt", tmp_path / "ratings_test.txt")  # edited in place at the end
    data = tmp_path / "data"  # (the demo reads its own NSMC and KorQuAD; KLUE's files from --data)
    (data / "klue").mkdir(parents=True)
    nli_file(data / "klue" / "klue-nli-v1.1_dev.json", premises=20), ner_file(data / "klue" / "klue-ner-v1.1_dev.tsv", 30)
    klue_set = ["klue.epochs=1", "klue.batch_size=8", "klue.bootstrap=50"]
    cfg = RecipeConfig(preset="demo", out=str(out), corpus=[str(corpus_file)], set=TINY + klue_set, compare=[str(bert_dir)],
                       nsmc_test=str(nsmc_test), data=str(data))
    r = main(cfg)
    rows = {row["system"].split(":")[0].split(",")[0]: row for row in r["table"]}
    assert len(r["table"]) == 5 and all(0 <= row["nsmc_accuracy"] <= 1 for row in r["table"])
    assert [row["origin"] for row in r["table"]] == ["pretrained here", "control", "given folder", "baseline", "baseline"]
    assert all(row["korquad_f1"] is not None and row["parameters"] > 0 for row in r["table"][:3])
    assert r["table"][2]["system"] == bert_dir.name and r["table"][2]["architecture"] == "bert"
    # the model and its control read one feature cache per task; the other tokenizer has its own
    nsmc_feats = [json.loads((out / "nsmc" / x / "results.json").read_text())["features"] for x in ("model", "control")]
    assert nsmc_feats[0]["folders"] == nsmc_feats[1]["folders"] and nsmc_feats[1]["built"] == 0
    assert len(list((out / "nsmc" / "features").glob("nsmc-*"))) == 4  # (train, test) x (korbert, the BERT folder)
    assert any(k.startswith("TF-IDF") for k in rows)
    report = json.loads((out / "report.json").read_text())
    assert report["pretraining"]["steps"] == 8 and report["corpus"]["vocab_size"] == 3000
    # the NSMC files are named by content: the sample's train with a copied test is still the sample's pair
    assert report["finetuning"]["nsmc"]["protocol"] == "NSMC-R sample (the embedded demo files)"
    md = (out / "report.md").read_text()
    assert "| system | origin | parameters | NSMC accuracy | KorQuAD EM | KorQuAD F1 |" in md and "control" in md
    # the embedded sample holds none of its scored text (corpus_tools/make_sample.py): checked, and said in one line
    assert report["corpus"]["eval_text"] == {} and report["corpus"]["eval_text_policy"] == "drop"
    assert "Evaluation text in the corpus: none found (no document equal to an NSMC test review" in md
    assert "(the NSMC test file, the KorQuAD file and the KLUE dev files): no corpus document held their text." in (
        out / "pretrain" / "final" / "README.md").read_text()
    # KLUE: the tasks whose dev files --data holds, for the model, its control and the --compare folder, dev-split
    klue = report["klue"]
    assert [(k["task"], k["system"]) for k in klue] == [(t, s) for t in ("klue-nli", "klue-ner") for s in (
        r["table"][0]["system"], r["table"][1]["system"], bert_dir.name)]
    assert {k["protocol"] for k in klue} == {"KLUE dev-split"} and all(k["ci95"] for k in klue)
    assert "## KLUE" in md and "| klue-ner | KLUE dev-split | entity_f1 " in md
    assert "KLUE: klue-nli accuracy " in (out / "pretrain" / "final" / "README.md").read_text()
    assert f"Corpus given with --corpus, instead of the preset's: `{corpus_file}`" in md  # the preset's description is not the run's
    for plot in report["plots"]:
        assert (out / plot).stat().st_size > 1000
    assert (out / "pretrain" / "final" / "model.safetensors").is_file()
    assert json.loads((out / "nsmc" / "control" / "results.json").read_text())["control"] is True
    # the model card: Hub front matter whose metrics are the results files', and the table
    from korbert.card import read_card

    meta, body = read_card(out / "pretrain" / "final" / "README.md")
    assert meta["language"] == ["ko"] and meta["pipeline_tag"] == "fill-mask" and meta["library_name"] == "transformers"
    nsmc = json.loads((out / "nsmc" / "model" / "results.json").read_text())["metrics"]
    korquad = json.loads((out / "korquad" / "model" / "results.json").read_text())["metrics"]
    scores = {m["type"]: m["value"] for res in meta["model-index"][0]["results"] for m in res["metrics"]}
    assert scores == {"accuracy": round(100 * nsmc["accuracy"], 2), "exact_match": round(korquad["exact_match"], 2), "f1": round(korquad["f1"], 2)}
    assert "| system | origin | parameters | NSMC accuracy | KorQuAD EM | KorQuAD F1 |" in body and "control" in body
    names = {res["dataset"]["type"]: res["dataset"]["name"] for res in meta["model-index"][0]["results"]}
    assert names["nsmc"].startswith("NSMC-R sample") and names["korquad"].startswith("KorQuAD 1.0 (dev split by article")
    assert f"{report['pretraining']['steps']:,} optimizer steps" in body and corpus_file.name in body

    capsys.readouterr()
    again = main(cfg)  # nothing changed: every stage is up to date
    text = capsys.readouterr().out
    assert text.count("up to date") >= 10 and again["table"] == r["table"]

    changed = main(RecipeConfig(preset="demo", out=str(out), corpus=[str(corpus_file)], set=[*TINY, *klue_set, "nsmc.lr=3e-4"],
                                nsmc_test=str(nsmc_test), data=str(data)))
    assert {"nsmc", "nsmc (control)"} <= set(changed["stage_seconds"])
    assert not {"korquad", "korquad (control)", "baseline", "klue-nli (model)", "klue-ner (control)"} & set(changed["stage_seconds"])
    assert changed["table"][2:] == r["table"][3:]  # the baselines were not redone (and no --compare this time)

    # a shards option: shards and pretraining are replaced (not refused), the new model's evals redone; the control
    # reads no weights (its architecture and tokenizer are the same): not redone
    capsys.readouterr()
    redo_cfg = RecipeConfig(preset="demo", out=str(out), corpus=[str(corpus_file)], set=[*TINY, *klue_set, "shards.seed=5"],
                            nsmc_test=str(nsmc_test), data=str(data))
    redo = main(redo_cfg)
    said = capsys.readouterr()
    assert "rebuilding" in said.err and "starting over" in said.out and "vocabulary up to date" in said.out
    assert json.loads((out / "shards" / "manifest.json").read_text())["config"]["seed"] == 5
    assert {"korquad", "klue-nli (model)"} <= set(redo["stage_seconds"]) and not {"korquad (control)", "baseline", "klue-nli (control)"} & set(redo["stage_seconds"])

    # the NSMC-R test file edited in place (same path): the stages that read it are redone, not reused
    lines = nsmc_test.read_text(encoding="utf-8").splitlines(keepends=True)
    nsmc_test.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    edited = main(redo_cfg)
    assert {"nsmc", "nsmc (control)", "baseline"} <= set(edited["stage_seconds"])
    assert not {"korquad", "korquad (control)"} & set(edited["stage_seconds"])

    # a longer budget: pretraining goes on to step 12 and re-exports final/, whose model the evals are keyed on: it is
    # scored again; the control (no weights read) and the baseline are not
    from dataclasses import replace

    longer = main(replace(redo_cfg, set=[*redo_cfg.set, "pretrain.max_steps=12"]))
    assert {"pretrain", "nsmc", "korquad"} <= set(longer["stage_seconds"]) and longer["pretraining"]["steps"] == 12
    assert not {"nsmc (control)", "korquad (control)", "baseline"} & set(longer["stage_seconds"])
    nsmc = json.loads((out / "nsmc" / "model" / "results.json").read_text())["metrics"]
    meta, body = read_card(out / "pretrain" / "final" / "README.md")
    scores = {m["type"]: m["value"] for res in meta["model-index"][0]["results"] for m in res["metrics"]}
    assert scores["accuracy"] == round(100 * nsmc["accuracy"], 2) and "12 optimizer steps" in body


def test_recipe_errors_name_the_problem(tmp_path):
    from corpus_tools.text import InputError

    with pytest.raises(InputError, match="no such file"):
        main(RecipeConfig(preset="demo", out=str(tmp_path), nsmc_train=str(tmp_path / "missing.txt")))
    with pytest.raises(InputError, match="stage.field=value"):
        main(RecipeConfig(preset="demo", out=str(tmp_path), set=["lr=1"]))
    with pytest.raises(InputError, match="no field"):
        main(RecipeConfig(preset="demo", out=str(tmp_path), set=["pretrain.learning_rate=1"]))


def test_report_names_the_model_with_its_shape_overrides():
    """A size preset whose shape is overridden is another model: the report's rows say so."""
    from korbert.pretrain_config import PretrainConfig
    from korbert.report import model_name

    assert model_name(PretrainConfig(model_size="tiny")) == "BERT-tiny"
    assert model_name(PretrainConfig(model_size="tiny", override=["num_hidden_layers=4", "hidden_dropout_prob=0"])) == "BERT-tiny, num_hidden_layers=4"


RANK0_FIRST = """
import os, sys, time
from pathlib import Path
import torch
from korbert.distributed import Dist as _Dist
from korbert.recipe import rank0_first
done, launch = Path(sys.argv[1]), sys.argv[2]
def preprocess():
    done.unlink(missing_ok=True)
    time.sleep(2)  # rank 1 must wait for this
    done.write_text(launch)
rank0_first(preprocess)
assert done.read_text() == launch, (os.environ["RANK"], done.read_text(), launch)
d = _Dist("cpu")  # pretraining's own process group opens after the barrier's is closed
t = torch.ones(1)
d.all_sum(t)
assert t.item() == 2
d.close()
"""


def test_torchrun_ranks_wait_for_rank_0s_preprocessing_on_every_launch(tmp_path):
    """Under torchrun the other ranks wait at a barrier of the launch until rank 0's preprocessing is
    done, also when the recipe is run a second time in the same place (the `.shards-ready` marker
    file it replaces stayed behind, so on a rerun ranks 1..N went on while rank 0 rebuilt)."""
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "rank0_first.py"
    script.write_text(RANK0_FIRST)
    root = Path(__file__).resolve().parent.parent
    for launch in ("1", "2"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1", f"--master_port={port}",
             str(script), str(tmp_path / "done.txt"), launch],
            cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True, timeout=120,
        )
        assert p.returncode == 0, p.stderr[-3000:]


def test_presets_wire_the_long_phase_and_windows_within_the_trained_length(tmp_path):
    """The GPU presets and cpu build 512-token shards and give them to pretraining's last 10%; demo
    pretrains at 128; demo and cpu fine-tune KorQuAD in windows of 128; `--set shards_long.max_seq_len=256`
    turns the long phase on anywhere."""
    from korbert.recipe import stage_configs

    data = sample_data_folder(tmp_path / "data")  # no ../shared needed: a data folder from the embedded sample

    def stages(preset, *sets):
        return stage_configs(RecipeConfig(preset=preset, out=str(tmp_path / preset), data=str(data), set=list(sets)))["cfgs"]

    for preset in ("gpu-small", "gpu-base", "cpu"):
        gpu = stages(preset)
        assert gpu["shards_long"].max_seq_len == 512 and gpu["shards_long"].out == str(tmp_path / preset / "shards-long")
        assert gpu["pretrain"].long_shards == gpu["shards_long"].out and gpu["pretrain"].long_phase == 0.1
        # issue 58's long phase: packed 512-token instances, its own warmup and decay from half the peak, new positions copied
        p = gpu["pretrain"]
        assert (gpu["shards_long"].instances, p.long_schedule, p.long_init, p.long_lr) == ("packed", "own", "copy", p.lr / 2), preset
        assert gpu["shards"].instances == "document"  # (the short phase's instances stay BERT's)
    demo = stages("demo")
    assert "shards_long" not in demo and not demo["pretrain"].long_shards
    for preset in ("demo", "cpu"):  # windows within the 128 tokens of the short phase (cpu: the best KorQuAD F1 of the two seeds)
        c = stages(preset)
        assert c["korquad"].max_len <= c["shards"].max_seq_len
    on = stages("demo", "shards_long.max_seq_len=256")
    assert on["pretrain"].long_shards and on["shards_long"].instances == on["shards"].instances == "packed"
    eojeol = stages("gpu-small", "shards.mask_unit=eojeol", "shards.out=elsewhere")  # --set shards.* reaches the long shards too
    assert eojeol["shards_long"].mask_unit == "eojeol" and eojeol["shards_long"].out != "elsewhere"
    from corpus_tools.text import InputError

    with pytest.raises(InputError, match="korquad.max_len 384 is longer than the 128 tokens"):  # before hours of pretraining
        stages("demo", "korquad.max_len=384")
    assert stages("demo", "korquad.max_len=384", "korquad.allow_untrained_positions=true")["korquad"].max_len == 384


def test_klue_settings_are_checked_before_pretraining(tmp_path, corpus_file):
    """KLUE windows past the trained positions are refused before hours of pretraining, as KorQuAD's are,
    and the per-row fields (the model, its output folder, the files) cannot be set for every row at once."""
    from korbert.recipe import stage_configs

    from test_klue import ner_file

    (tmp_path / "data" / "klue").mkdir(parents=True)
    ner_file(tmp_path / "data" / "klue" / "klue-ner-v1.1_dev.tsv", 10)

    def plan(*sets, klue=("auto",)):
        return stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "run"), corpus=[str(corpus_file)], data=str(tmp_path / "data"),
                                          set=[*TINY, *sets], klue=list(klue)))

    with pytest.raises(InputError, match="klue.max_len 256 is longer than the 128 tokens pretraining trains"):
        plan("klue.max_len=256")
    assert [k["cfg"].max_len for k in plan("klue.max_len=256", "klue.allow_untrained_positions=true")["klue"]] == [256, 256]
    assert plan("klue.max_len=256", klue=["none"])["klue"] == []
    for field in ("model=elsewhere", "out=elsewhere", "dev_file=x.tsv", "control=true"):
        with pytest.raises(InputError, match=f"the recipe sets klue.{field.split('=')[0]} for each row"):
            plan(f"klue.{field}")


def test_preprocess_only_builds_vocab_and_shards_then_stops_and_ready_checks_never_build(tmp_path, corpus_file, capsys):
    """Under torchrun the recipe only checks (read-only) that preprocessing is done; --preprocess-only
    is the command that does it first, here on a local Dask cluster of 2 workers."""
    from corpus_tools import shards, vocab
    from corpus_tools.text import InputError
    from korbert.recipe import stage_configs

    cfg = RecipeConfig(preset="demo", out=str(tmp_path / "run"), corpus=[str(corpus_file)], set=TINY, workers=2, preprocess_only=True)
    cfgs = stage_configs(cfg)["cfgs"]
    assert cfgs["shards"].workers == 2
    with pytest.raises(InputError, match="no vocabulary built"):
        vocab.main(cfgs["vocab"], ready_only=True)
    r = main(cfg)
    assert r["preprocessed"] == str(tmp_path / "run") and set(r["times"]) == {"vocab", "shards"}
    assert not (tmp_path / "run" / "pretrain").exists() and "without --preprocess-only" in capsys.readouterr().out
    m = shards.main(cfgs["shards"], ready_only=True)
    assert m["run"]["engine"] == "dask, 2 local workers" and vocab.main(cfgs["vocab"], ready_only=True)["kind"] == "vocab"
    from dataclasses import replace

    with pytest.raises(InputError, match="no shards built"):
        shards.main(replace(cfgs["shards"], seed=7), ready_only=True)


@pytest.mark.slow  # out of CI for the suite's time: CI keeps --init-from end to end (test_init_from_a_released_wordpiece_bert_end_to_end) and its unit tests in test_pretrain.py
def test_init_from_continues_a_korbert_model_and_compares_with_where_it_started(tmp_path, corpus_file):
    """`korbert run --init-from final/`: no vocabulary stage (the model's tokenizer), its shape, and the
    comparison row is the starting model fine-tuned the same way."""
    from korbert.card import read_card

    first = main(RecipeConfig(preset="demo", out=str(tmp_path / "first"), corpus=[str(corpus_file)], set=TINY))
    start = tmp_path / "first" / "pretrain" / "final"
    sets = [x for x in TINY if not x.startswith(("vocab.", "pretrain.model_size", "pretrain.override"))]
    r = main(RecipeConfig(preset="demo", out=str(tmp_path / "cont"), corpus=[str(corpus_file)], set=sets, init_from=str(start)))
    assert "vocab" not in r["stage_seconds"] and not (tmp_path / "cont" / "vocab").exists()
    assert [row["origin"] for row in r["table"][:2]] == ["pretrained here", "starting model"] and r["table"][1]["path"] == str(start)
    # the starting row is the first run's model, fine-tuned with the same settings and seed: the first run's own numbers
    assert (r["table"][1]["nsmc_accuracy"], r["table"][1]["korquad_f1"]) == (first["table"][0]["nsmc_accuracy"], first["table"][0]["korquad_f1"])
    pm = json.loads((tmp_path / "cont" / "pretrain" / "final" / "manifest.json").read_text())
    fm = json.loads((start / "manifest.json").read_text())
    assert pm["init_from"]["folder"] == str(start.resolve()) and pm["tokenizer_hash"] == fm["tokenizer_hash"]
    assert pm["model_config"]["hidden_size"] == fm["model_config"]["hidden_size"] == 64
    meta, body = read_card(tmp_path / "cont" / "pretrain" / "final" / "README.md")
    assert meta["base_model"] == str(start.resolve()) and "| start: first/final, as it was | starting model |" in body
    md = (tmp_path / "cont" / "report.md").read_text()
    assert "The comparison row is the starting model" in md and f"the one of {start}" in md


def test_starting_model_rows_are_checked_against_their_trained_positions_before_pretraining(tmp_path, corpus_file, model_dir):
    """--control start fine-tunes the --init-from folder as it is: windows past the positions it was
    pretrained on are refused before any work; the continued model counts the start's trained positions."""
    import shutil

    from korbert.recipe import stage_configs

    start = shutil.copytree(model_dir, tmp_path / "start")
    (start / "manifest.json").write_text(json.dumps({"trained_seq_len": 128}))
    sets = ["korquad.max_len=256", "korquad.stride=64", "shards_long.max_seq_len=256"]
    with pytest.raises(InputError, match=r"--init-from .*start: --max-len 256 is longer than the 128 tokens"):
        stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "a"), corpus=[str(corpus_file)], init_from=str(start), set=sets))
    assert stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "b"), corpus=[str(corpus_file)], init_from=str(start),
                                      control="random", set=sets))["cfgs"]["korquad"].max_len == 256
    # a start that trained 512 positions (a folder without a korbert manifest: all it has) lets 128-token shards fine-tune at 384
    wide = stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "c"), corpus=[str(corpus_file)], init_from=str(model_dir),
                                      set=["korquad.max_len=384"]))
    assert wide["cfgs"]["korquad"].max_len == 384
    # with a long phase, positions the start trained are kept (the default copy would overwrite them at the switch); copy set
    # by hand is refused now, not after the shards (korbert/pretrain.py refuses it there too)
    longer = ["shards_long.max_seq_len=256"]
    for folder, sets, want in ((model_dir, longer, "keep"), (start, longer, "copy"), (model_dir, ["pretrain.long_shards=elsewhere"], "keep")):
        got = stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "d"), corpus=[str(corpus_file)], init_from=str(folder), set=sets))
        assert got["cfgs"]["pretrain"].long_init == want, (folder, sets)
    with pytest.raises(InputError, match=r"long_init=copy: --init-from .* trained positions up to \d+"):
        stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "e"), corpus=[str(corpus_file)], init_from=str(model_dir),
                                   set=[*longer, "pretrain.long_init=copy"]))


def test_init_from_options_are_checked_before_any_work(tmp_path, corpus_file, bert_dir):
    from korbert.recipe import stage_configs

    with pytest.raises(InputError, match="--control start compares with the model --init-from continues"):
        stage_configs(RecipeConfig(preset="demo", out=str(tmp_path), corpus=[str(corpus_file)], control="start"))
    with pytest.raises(InputError, match="drop --set pretrain.model_size"):
        stage_configs(RecipeConfig(preset="demo", out=str(tmp_path), corpus=[str(corpus_file)], init_from=str(bert_dir), set=TINY))


def test_init_from_a_released_wordpiece_bert_end_to_end(tmp_path, corpus_file, bert_dir):
    """A released BERT with its own WordPiece tokenizer, continued on the corpus: its tokenizer throughout,
    and the comparison row is that model fine-tuned the same way."""
    from korbert.card import read_card

    sets = [x for x in TINY if not x.startswith(("vocab.", "pretrain.model_size", "pretrain.override"))]
    r = main(RecipeConfig(preset="demo", out=str(tmp_path / "run"), corpus=[str(corpus_file)], set=sets, init_from=str(bert_dir)))
    assert [row["origin"] for row in r["table"][:2]] == ["pretrained here", "starting model"] and r["table"][1]["path"] == str(bert_dir)
    assert all(row["nsmc_accuracy"] is not None and row["korquad_f1"] is not None for row in r["table"][:2])
    final = tmp_path / "run" / "pretrain" / "final"
    from korbert.folders import TOKENIZER_FILES

    kept = [n for n in TOKENIZER_FILES if (bert_dir / n).is_file()]
    assert "tokenizer.json" in kept and all((final / n).read_bytes() == (bert_dir / n).read_bytes() for n in kept)
    meta, body = read_card(final / "README.md")
    assert meta["base_model"] == str(bert_dir.resolve()) and "plain transformers loads it" in body and "trust_remote_code" not in body


def test_model_card_names_a_corpus_slice_and_a_license():
    from korbert.card import card_text

    m = {
        "model_config": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "vocab_size": 3000}, "parameters": 300_000,
        "tokenizer_hash": "ab" * 32, "step": 5, "tokens": 1000, "seconds": 60.0, "license": "apache-2.0",
        "corpus": {"inputs": [{"file": "kowiki.jsonl.gz", "bytes": 10, "sha256": "cd" * 32, "first_documents": 3000}],
                   "documents": 3000, "train_instances": 7, "train_tokens": 700},
    }
    text = card_text(m, m["license"])
    assert "| kowiki.jsonl.gz (its first 3,000 documents) | 10 |" in text and "\nlicense: apache-2.0\n" in text
    assert "5 optimizer steps, 1,000 training tokens, 1.0 min" in text and "model-index" not in text
    # what the shards' guard left out of the corpus, or kept on request (issue 64); nothing said without eval files
    assert "evaluation file" not in text and "evaluation text" not in text
    guard = {"nsmc_test": "ef" * 32, "korquad": "", "policy": "drop"}
    m["corpus"] = {**m["corpus"], "eval_guard": guard, "eval_text": {}}
    assert "Checked against the evaluation files given (the NSMC test file): no corpus document held their text." in card_text(m)
    m["corpus"]["eval_text"] = {"nsmc_test_review": 1234}
    assert "Left out as evaluation text (not pretrained on): 1,234 documents equal to an NSMC test review" in card_text(m)
    m["corpus"]["eval_guard"] = {**guard, "policy": "keep"}
    assert "**Pretrained on evaluation text** (kept on request): 1,234 documents equal to an NSMC test review" in card_text(m)


def test_the_card_lists_the_fine_tuning_settings_of_every_score_it_reports(tmp_path):
    """Each task the card scores gets its settings from that eval's results.json (not from the
    presets): epochs and steps, lr, batch, warmup, weight decay, dropout, max length (and KorQuAD's
    stride); the NSMC row's TrainingArguments snippet builds, with those values."""
    import re

    from corpus_tools import config as C
    from evals.korquad import KorquadConfig
    from evals.nsmc import NsmcConfig
    from korbert.card import card_text

    m = {"model_config": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "vocab_size": 3000}, "parameters": 300_000,
         "tokenizer_hash": "ab" * 32}
    nsmc = {"config": C.to_dict(NsmcConfig(model="m", epochs=3, lr=7e-5, batch_size=24, warmup_ratio=0.06, weight_decay=0.02, dropout=0.05, max_len=96)),
            "training": {"steps": 801, "warmup_steps": 49}, "n": {"train": 6400, "valid": 711, "test": 2000},
            "model": {"dropout": {"set": {"hidden_dropout_prob": 0.05}}}}
    korquad = {"config": C.to_dict(KorquadConfig(model="m", epochs=2, lr=2e-4, batch_size=16, max_len=128, stride=32, max_query_len=40, dropout=0.0)),
               "training": {"steps": 350, "warmup_steps": 35}}
    table = [{"system": "korbert", "origin": "pretrained here", "parameters": 300_000, "nsmc_accuracy": 0.8, "korquad_em": 0.1, "korquad_f1": 0.2}]
    text = card_text(m, "", table, finetuning={"nsmc": nsmc, "korquad": korquad})
    assert "| NSMC | 3 (801 steps) | 7e-05 | 24 | 6% of the steps (49), then linear decay | 0.02 | 0.05 | 96 | - | 42 |" in text
    assert "| KorQuAD 1.0 | 2 (350 steps) | 0.0002 | 16 | 10% of the steps (35), then linear decay | 0.01 | 0 | 128 (question 40) | 32 | 42 |" in text
    assert "held out 711 of the training reviews" in text and "truncation at 96 tokens" in text
    snippet = re.search(r"args = TrainingArguments\(.*?\n\)", text, re.S).group(0)
    from transformers import TrainingArguments

    scope = {"TrainingArguments": TrainingArguments}
    exec(snippet.replace('"nsmc"', repr(str(tmp_path / "nsmc"))), scope)
    a = scope["args"]
    assert (a.num_train_epochs, a.learning_rate, a.per_device_train_batch_size, a.warmup_steps, a.weight_decay, a.seed) == (3, 7e-5, 24, 0.06, 0.02, 42)
    assert "hidden_dropout_prob=0.05, attention_probs_dropout_prob=0.05, classifier_dropout=0.05" in text
    windowed = {**korquad, "config": {**korquad["config"], "epoch_window": "128/32/40"}}
    assert "| KorQuAD 1.0 | 2, epochs counted in 128/32/40 windows (350 steps) |" in card_text(m, "", table, finetuning={"nsmc": nsmc, "korquad": windowed})
    # a task the card does not report gets no row; no results, no section
    no_korquad = [{**table[0], "korquad_em": None, "korquad_f1": None}]
    assert "| KorQuAD 1.0 |" not in card_text(m, "", no_korquad, finetuning={"nsmc": nsmc, "korquad": korquad})
    assert "How the scores were fine-tuned" not in card_text(m, "", table)


def sample_data_folder(folder):
    """A data folder with `korbert data get all`'s layout, from the embedded sample (kowiki: the petitions)."""
    import shutil

    from corpus_tools import SAMPLE_DATA

    for src, rel in [("reviews.jsonl.gz", "corpus/reviews.jsonl.gz"), ("petitions.jsonl.gz", "corpus/petitions.jsonl.gz"),
                     ("petitions.jsonl.gz", "corpus/kowiki.jsonl.gz"), ("nsmc_train.txt", "nsmc/ratings_train.txt"),
                     ("nsmc_test.txt", "nsmc/ratings_test.txt"), ("korquad_dev.json", "korquad/KorQuAD_v1.0_dev.json")]:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_DATA / src, folder / rel)
    return folder


def test_presets_read_the_data_folder_and_name_the_command_that_fills_it(tmp_path, monkeypatch):
    """--data DIR (or $KORBERT_DATA) is where the cpu and gpu presets look; a missing file names the
    `korbert data get` that brings it; KorQuAD's train file there switches on the official protocol."""
    from corpus_tools.text import InputError
    from korbert.recipe import stage_configs

    data = sample_data_folder(tmp_path / "data")
    c = stage_configs(RecipeConfig(preset="cpu", out=str(tmp_path / "run"), data=str(data)))["cfgs"]
    assert c["nsmc"].train == str(data / "nsmc" / "ratings_train.txt") and c["korquad"].dev_file == str(data / "korquad" / "KorQuAD_v1.0_dev.json")
    assert c["shards"].inputs[-1] == str(data / "corpus" / "kowiki.jsonl.gz") + "@8000"
    assert not c["korquad"].train_file  # dev only: the dev-split protocol
    monkeypatch.setenv("KORBERT_DATA", str(data))
    assert stage_configs(RecipeConfig(preset="gpu-small", out=str(tmp_path / "run2")))["cfgs"]["nsmc"].test == str(data / "nsmc" / "ratings_test.txt")
    monkeypatch.delenv("KORBERT_DATA")

    (data / "corpus" / "kowiki.jsonl.gz").unlink()
    with pytest.raises(InputError, match=r"kowiki.jsonl.gz: no such file.*`korbert data get kowiki --out "):
        stage_configs(RecipeConfig(preset="cpu", out=str(tmp_path / "run"), data=str(data)))
    with pytest.raises(InputError, match=r"nor 5 more.*`korbert data get reviews petitions kowiki nsmc korquad --out "):
        stage_configs(RecipeConfig(preset="gpu-base", out=str(tmp_path / "run"), data=str(tmp_path / "empty")))

    # the official protocol when the train file is there (a tiny SQuAD-format file)
    sample_data_folder(data)
    (data / "korquad" / "KorQuAD_v1.0_train.json").write_text(
        '{"version": "KorQuAD_v1.0_train", "data": [{"title": "t", "paragraphs": [{"context": "서울은 수도이다.", '
        '"qas": [{"id": "q1", "question": "수도는?", "answers": [{"text": "서울", "answer_start": 0}]}]}]}]}', encoding="utf-8")
    c = stage_configs(RecipeConfig(preset="cpu", out=str(tmp_path / "run"), data=str(data)))["cfgs"]
    assert c["korquad"].train_file == str(data / "korquad" / "KorQuAD_v1.0_train.json")
    assert c["korquad_control"].train_file == c["korquad"].train_file


def test_a_corpus_that_is_or_holds_an_eval_file_is_refused(tmp_path):
    """`--corpus corpus_tools/sample_data/` pretrained on nsmc_test.txt, labels and ids included:
    refused, naming both; by content, so a renamed copy is caught too."""
    import shutil

    from corpus_tools import SAMPLE_DATA
    from corpus_tools.text import InputError
    from korbert.recipe import stage_configs

    with pytest.raises(InputError, match=r"holds .*sample_data/(nsmc_t(rain|est)\.txt|korquad_dev\.json), which is the evaluation file"):
        stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "run"), corpus=[str(SAMPLE_DATA)]))
    renamed = tmp_path / "my_corpus.txt"
    shutil.copy(SAMPLE_DATA / "nsmc_test.txt", renamed)
    with pytest.raises(InputError, match=r"my_corpus.txt is the evaluation file .*nsmc_test.txt"):
        stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "run"), corpus=[str(SAMPLE_DATA / "reviews.jsonl.gz"), str(renamed)]))
    # the sample's own corpus files are not evaluation files
    stage_configs(RecipeConfig(preset="demo", out=str(tmp_path / "run"), corpus=[str(SAMPLE_DATA / "reviews.jsonl.gz")]))


def test_a_cached_stage_result_is_read_back_only_under_its_own_key(tmp_path):
    from korbert.recipe import _cached, cached_result

    calls = []

    def run(v):
        calls.append(v)
        return {"v": v}

    folder = tmp_path / "nsmc"
    assert cached_result(folder, "k1") is None  # nothing ran yet
    assert _cached(folder, "k1", lambda: run(1), False) == ({"v": 1}, False)
    assert cached_result(folder, "k1") == {"v": 1}
    assert cached_result(folder, "k2") is None  # other settings or another model: never read back
    assert _cached(folder, "k1", lambda: run(2), False) == ({"v": 1}, True) and calls == [1]
    assert _cached(folder, "k2", lambda: run(3), False) == ({"v": 3}, False)  # a new key runs again and replaces it
    assert cached_result(folder, "k1") is None and cached_result(folder, "k2") == {"v": 3}
    assert _cached(folder, "k2", lambda: run(4), True) == ({"v": 4}, False) and calls == [1, 3, 4]  # force


def test_recipe_runs_electra_end_to_end_and_names_the_objective(tmp_path, corpus_file):
    """`--set pretrain.objective=electra` (issue 61): the discriminator is fine-tuned and scored against a random-init
    ELECTRA of its shape; the report and the model card name the objective."""
    out = tmp_path / "run"
    r = main(RecipeConfig(preset="demo", out=str(out), corpus=[str(corpus_file)], set=[*TINY, "pretrain.objective=electra"], klue=["none"]))
    assert r["pretraining"]["objective"] == "electra" and r["pretraining"]["model"].startswith("ELECTRA-tiny")
    assert [row["origin"] for row in r["table"]][:2] == ["pretrained here", "control"]
    for row in ("model", "control"):
        for task in ("nsmc", "korquad"):
            res = json.loads((out / task / row / "results.json").read_text())
            arch = "ElectraForSequenceClassification" if task == "nsmc" else "ElectraForQuestionAnswering"
            assert res["model"]["architecture"] == arch, (task, row)
    md = (out / "report.md").read_text()
    assert "Objective electra" in md and "discriminator accuracy" in md
    assert "A Korean ELECTRA discriminator" in (out / "pretrain" / "final" / "README.md").read_text()
