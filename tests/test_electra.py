"""ELECTRA pretraining (issue 61): replaced-token labels, the shared embeddings, exact resume, the export
that plain transformers loads, and the held-out AUC."""

from __future__ import annotations

import json

import pytest
import torch

from corpus_tools.shard_format import CLS, MASK, PAD, SEP
from korbert.electra import KorElectraForPreTraining, auc, discriminator_config, generator_config, sample_from
from korbert.heldout import MODEL_INPUTS
from korbert.model import bert_config, cu_seqlens_of
from korbert.pretrain import main

from conftest import without_korbert
from test_pretrain import _args, _run_cli, cfg, long_shards_dir, losses, weights  # noqa: F401 (long_shards_dir: a fixture)

ELECTRA = dict(objective="electra", generator_size=0.25, disc_weight=50.0)


def tiny_model(seed: int = 0) -> KorElectraForPreTraining:
    torch.manual_seed(seed)
    disc = discriminator_config(bert_config("tiny", 40, 16, {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                                             "intermediate_size": 128}))
    return KorElectraForPreTraining(disc, generator_config(disc, 0.25), 50.0)


def batch() -> dict:
    """Two rows: [CLS] a b [SEP] c [SEP] and a shorter one, padded; 4 masked positions."""
    ids = torch.tensor([[CLS, 10, 11, SEP, 12, SEP], [CLS, 13, 14, SEP, PAD, PAD]])
    original = ids.clone()
    positions = torch.tensor([1, 2, 4, 6 + 2])  # flat r*T+t
    ids.view(-1)[positions] = MASK
    return {
        "input_ids": ids, "token_type_ids": torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]]),
        "position_ids": torch.arange(6).expand(2, 6), "segments": (original != PAD).long(),
        "mlm_positions": torch.cat((positions, torch.zeros(2, dtype=torch.long))),  # 2 padding entries, at position 0
        "mlm_labels": torch.cat((original.view(-1)[positions], torch.full((2,), -100))),
        "nsp_positions": torch.tensor([0, 6]), "nsp_labels": torch.full((2,), -100), "cu_seqlens": cu_seqlens_of((original != PAD).long()),
    }


def test_electra_shapes_follow_the_paper():
    disc = discriminator_config(bert_config("small", 8000))
    gen = generator_config(disc, 0.25)
    assert (disc.hidden_size, disc.embedding_size, disc.num_attention_heads) == (512, 512, 8)
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size, gen.embedding_size) == (128, 2, 512, 512)
    assert gen.num_hidden_layers == disc.num_hidden_layers and gen.vocab_size == disc.vocab_size == 8000
    tiny = generator_config(discriminator_config(bert_config("tiny", 100)), 1 / 3)  # 2 heads x 1/3: at least one head, a width it divides
    assert tiny.num_attention_heads == 1 and tiny.hidden_size == 43


def test_replaced_tokens_are_1_sampled_right_are_0_and_specials_and_padding_never_scored():
    m = tiny_model().eval()  # (the labels come back held out only: korbert/heldout.py's AUC)
    with torch.no_grad():  # a generator that always samples token 11: right at the masked 11, wrong at 10, 12 and 14
        m.generator.generator_lm_head.bias.fill_(-1e4)
        m.generator.generator_lm_head.bias[11] = 1e4
    b = batch()
    seen = []  # the ids each encoder reads: the shared embeddings run for the generator, then for the discriminator
    m.embeddings.register_forward_hook(lambda mod, args, kw, out: seen.append(kw["input_ids"].clone()), with_kwargs=True)
    o = m(**{k: b[k] for k in MODEL_INPUTS})
    labels = o.disc_labels.view(2, 6).tolist()
    assert labels == [[-1, 1, 0, -1, 1, -1], [-1, 0, 1, -1, -1, -1]]
    # the discriminator reads the samples at the masked positions and the text elsewhere (the padding entries of
    # mlm_positions, at position 0, write back its [CLS])
    assert torch.equal(seen[0], b["input_ids"]) and seen[1].tolist() == [[CLS, 11, 11, SEP, 11, SEP], [CLS, 13, 11, SEP, PAD, PAD]]
    assert int(o.nsp_count) == 5 and int(o.mlm_count) == 4  # scored: the five text tokens (10..14), the unmasked 13 included
    assert m.train()(**{k: b[k] for k in MODEL_INPUTS}).disc_labels is None  # training: the counts alone


def test_the_generator_samples_from_its_softmax_and_never_an_entry_of_probability_zero(monkeypatch):
    torch.manual_seed(0)
    logits = torch.tensor([[-1e4, 1.0, 2.0, -1.0, -1e4], [-1e4, 3.0, -1e4, -1e4, -1e4]])
    draws = sample_from(logits.log_softmax(-1).repeat(100_000, 1)).view(100_000, 2)
    freq = torch.stack([torch.bincount(draws[:, i], minlength=5).double() / len(draws) for i in range(2)])
    want = logits.double().softmax(-1)
    assert (freq - want).abs().max() < 0.005  # (binomial s.e. at most 0.0016)
    assert freq[0, 0] == freq[0, 4] == 0 and freq[1].tolist() == [0, 1, 0, 0, 0]
    # the uniform's edge: a draw of 0 gives u = the total, the last entry that has probability (not index 4, or 0, at -1e4)
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.zeros(*shape, **kw))
    assert sample_from(logits.log_softmax(-1)).tolist() == [3, 1]


def test_the_embeddings_are_one_tensor_and_both_losses_train_it():
    m = tiny_model()
    word = m.discriminator.electra.embeddings.word_embeddings.weight
    assert m.generator.electra.embeddings.word_embeddings.weight is word and m.generator.generator_lm_head.weight is word
    b = batch()
    inputs = {k: b[k] for k in MODEL_INPUTS}
    # the generator's loss alone (the discriminator's weighted 0)
    m.disc_weight = 0.0
    m(**inputs).loss.backward()
    assert word.grad.abs().sum() > 0 and m.discriminator.discriminator_predictions.dense.weight.grad.abs().sum() == 0
    m.zero_grad(set_to_none=True)
    # the discriminator's alone (the generator's divided by infinity): no gradient flows back through the samples
    m.disc_weight = 50.0
    m(**inputs, mlm_norm=torch.tensor(float("inf"))).loss.backward()
    assert word.grad.abs().sum() > 0 and m.generator.generator_predictions.dense.weight.grad.abs().sum() == 0
    assert m.discriminator.electra.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0


def _linear_macs(model, b: dict) -> int:
    """The multiply-adds the model's Linear layers run in one sparse training forward of batch `b`."""
    macs = []
    hooks = [m.register_forward_hook(lambda m, i, o: macs.append(i[0].numel() // m.in_features * m.in_features * m.out_features))
             for m in model.modules() if isinstance(m, torch.nn.Linear)]
    try:
        model(**b, sparse=True)
    finally:
        for h in hooks:
            h.remove()
    return sum(macs)


def test_step_flops_of_either_model_count_the_matmuls_its_training_forward_runs():
    """model.step_flops (the loop's tflops and MFU) of ELECTRA and of BERT, attention scores aside, = 6 x the
    multiply-adds their Linear layers run on the batch: 12 token slots, 6 predicted entries, 2 [CLS]."""
    from korbert.model import KorBertForPreTraining

    b = batch()
    electra = tiny_model()
    assert electra.step_flops(electra.config, 12, 0, 6, 0) == 6 * _linear_macs(electra, b)
    bert = KorBertForPreTraining(bert_config("tiny", 40, 16, {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                                              "intermediate_size": 128}))
    assert bert.step_flops(bert.config, 12, 0, 6, 2) == 6 * _linear_macs(bert, b)
    # attention scores: QK^T and the weighted sum (2 x hidden per attended pair), in each layer of both encoders
    both = sum(c.num_hidden_layers * c.hidden_size for c in (electra.config, electra.generator.config))
    assert electra.step_flops(electra.config, 12, 10, 6, 0) - electra.step_flops(electra.config, 12, 0, 6, 0) == 6 * 2 * 10 * both


def test_auc_is_the_mann_whitney_statistic_with_ties_half():
    assert auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0.0, 0.0, 1.0, 1.0])) == 0.75
    assert auc(torch.tensor([1.0, 1.0, 0.0, 5.0]), torch.tensor([1.0, 0.0, 0.0, -1.0])) == 0.75  # a tie counts half; -1 unscored
    assert auc(torch.tensor([1.0, 2.0]), torch.tensor([0.0, -1.0])) is None


def test_electra_kill_and_resume_is_exact_generator_included(shards_dir, tmp_path):
    packed = dict(tokens_per_batch=1024, pack=True)  # (BERT's packed kill-and-resume test is slow-tagged: this one covers the path)
    whole = cfg(shards_dir, tmp_path / "whole", num_workers=1, **packed, **ELECTRA)
    r = main(whole)
    log = [json.loads(line) for line in (tmp_path / "whole" / "log.jsonl").read_text().splitlines()]
    assert {"disc_loss", "disc_acc", "mlm_loss"} <= set(log[-1]) and "nsp_loss" not in log[-1]
    assert r["objective"] == "electra" and r["electra"]["disc_weight"] == 50.0 and r["generator_parameters"] < r["parameters"]
    broken = cfg(shards_dir, tmp_path / "broken", num_workers=1, **packed, **ELECTRA)
    p = _run_cli(_args(broken), kill_at=7)
    assert p.returncode == -9, p.stderr[-2000:]
    main(broken)
    assert losses(tmp_path / "broken") == losses(tmp_path / "whole")
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "broken")
    assert any(k.startswith("generator.generator_predictions") for k in a) and all(torch.equal(a[k], b[k]) for k in a)
    # held-out figures: the generator's MLM, the discriminator's accuracy and AUC
    e = main(cfg(shards_dir, tmp_path / "eval", eval_every=5, **ELECTRA))["eval"]
    assert 0 <= e["disc_acc"] <= 1 and 0 <= e["disc_auc"] <= 1 and 0 < e["replaced"] < 0.2 and "nsp_acc" not in e


def test_electra_export_loads_where_korbert_cannot_be_imported(shards_dir, tmp_path):
    """final/ is an ElectraForPreTraining that AutoModel, the sequence-classification and QA classes load;
    final/generator/ an ElectraForMaskedLM that the fill-mask pipeline uses, with the same tokenizer."""
    main(cfg(shards_dir, tmp_path, max_steps=3, **ELECTRA))
    final = tmp_path / "final"
    m = json.loads((final / "manifest.json").read_text())
    assert m["objective"] == "electra" and "generator/model.safetensors" in m["files"]
    assert json.loads((final / "config.json").read_text())["architectures"] == ["ElectraForPreTraining"]
    card = (final / "README.md").read_text()
    assert "A Korean ELECTRA discriminator" in card and 'pipeline("fill-mask", model="PATH/generator"' in card
    # korbert's own uses: fill-mask through the generator; vectors and attention from the discriminator
    from transformers import ElectraModel

    from korbert.attention import attention
    from korbert.use import Encoder, fill_mask, sentence_vectors

    enc = Encoder(final, device="cpu")
    assert len(fill_mask(enc, ["영화가 정말 [MASK]"])[0]["masks"][0]["candidates"]) == 5
    disc = ElectraModel.from_pretrained(final).eval()
    b, inputs = enc.batch(["영화가 정말 재미있었다"])
    with torch.no_grad():
        want = disc(**inputs).last_hidden_state.mean(1)
    assert torch.allclose(torch.from_numpy(sentence_vectors(enc, ["영화가 정말 재미있었다"], layer=-1)), want, atol=1e-5)
    view = attention(Encoder(final, device="cpu", attention=True), "영화가 정말 재미있었다")
    assert view["attention"].shape[:2] == (2, 2)  # (layers, heads, T, T) of the discriminator
    r = without_korbert(
        "import json, torch\n"
        "from transformers import (AutoModel, AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoTokenizer,\n"
        "    ElectraForSequenceClassification, pipeline)\n"
        f"final = {str(final)!r}\n"
        "tok = AutoTokenizer.from_pretrained(final, trust_remote_code=True)\n"
        "out = {'base': type(AutoModel.from_pretrained(final)).__name__, 'qa': type(AutoModelForQuestionAnswering.from_pretrained(final)).__name__}\n"
        "torch.manual_seed(0)\n"
        "clf = AutoModelForSequenceClassification.from_pretrained(final, num_labels=2)\n"
        "out['cls'] = type(clf).__name__\n"
        "enc = tok(['영화가 정말 재미있었다', '배우들의 연기는 별로였어요'], padding=True, return_tensors='pt')\n"
        "y = torch.tensor([1, 0])\n"
        "opt = torch.optim.AdamW(clf.parameters(), lr=1e-3)\n"
        "first = None\n"
        "for _ in range(5):\n"
        "    loss = clf(**enc, labels=y).loss\n"
        "    first = first if first is not None else float(loss)\n"
        "    loss.backward(); opt.step(); opt.zero_grad()\n"
        "out['first'], out['last'] = first, float(clf(**enc, labels=y).loss)\n"
        "fill = pipeline('fill-mask', model=final + '/generator', tokenizer=AutoTokenizer.from_pretrained(final + '/generator', trust_remote_code=True))\n"
        "out['fill'] = [p['token_str'] for p in fill('영화가 정말 ' + tok.mask_token)]\n"
        "print(json.dumps(out, ensure_ascii=False))\n", tmp_path)
    assert (r["base"], r["qa"], r["cls"]) == ("ElectraModel", "ElectraForQuestionAnswering", "ElectraForSequenceClassification")
    assert r["last"] < r["first"] and len(r["fill"]) == 5


def test_electra_is_refused_where_it_cannot_run(shards_dir, bert_dir, tmp_path):
    from corpus_tools.text import InputError

    with pytest.raises(InputError, match="ELECTRA starts from scratch"):
        main(cfg(shards_dir, tmp_path, init_from=str(bert_dir), model_size="mini", override=[], **ELECTRA))
    for bad in ({"generator_size": 0.0}, {"generator_size": 1.5}, {"disc_weight": -1.0}):
        with pytest.raises(InputError, match="must be in"):
            main(cfg(shards_dir, tmp_path, **{**ELECTRA, **bad}))


def test_electra_evaluation_leaves_the_training_streams_alone_and_the_loop_counts_what_the_model_scores(shards_dir, tmp_path):
    """The generator samples in the held-out evaluation too: how often it runs (not part of the run's identity) must
    not change the training, and two evaluations of the same weights agree. The loop's normalizer (counted by the
    collate, korbert.data.make_batch, in the loader workers) is the model's count of scored tokens."""
    from korbert.pretrain import Trainer

    quiet = main(cfg(shards_dir, tmp_path / "quiet", eval_every=0, **ELECTRA))
    busy = main(cfg(shards_dir, tmp_path / "busy", eval_every=2, **ELECTRA))
    assert losses(tmp_path / "quiet") == losses(tmp_path / "busy") and quiet["eval"] == busy["eval"]
    t = Trainer(cfg(shards_dir, tmp_path / "t", **ELECTRA))
    b = next(iter(t._loader()))
    with torch.no_grad():
        o = t.model(**{k: b[k] for k in MODEL_INPUTS}, packed=b["packed"])
    assert int(o.nsp_count) == b["counts"][3] > 0
    assert t._evaluate(t.held_out) == t._evaluate(t.held_out)


def test_electra_long_phase_trains_the_shared_positions(shards_dir, long_shards_dir, tmp_path):
    """BERT's second phase under ELECTRA: the last 30% on 256-token rows, the new positions started as copies; the
    held-out figures of both lengths; the discriminator and the generator export the same position rows."""
    from safetensors.torch import load_file

    r = main(cfg(shards_dir, tmp_path, long_shards=str(long_shards_dir), long_phase=0.3, long_init="copy", eval_every=5, **ELECTRA))
    assert r["long_steps"] == 3 and r["trained_seq_len"] == 256 and {"disc_acc", "long_disc_acc", "long_disc_auc"} <= set(r["eval"])
    disc, gen = load_file(tmp_path / "final" / "model.safetensors"), load_file(tmp_path / "final" / "generator" / "model.safetensors")
    rows = "electra.embeddings.position_embeddings.weight"
    assert torch.equal(disc[rows], gen[rows]) and not torch.equal(disc[rows][128:256], disc[rows][:128])


@pytest.mark.parametrize("preset", ["demo", "cpu"])
def test_the_comparison_builds_shards_the_shards_stage_accepts_for_every_preset_it_runs(preset, tmp_path):
    """benchmarks/electra_vs_mlm.py: both arms' MLM-only shards, short and long, pass the shards stage's checks.
    The cpu preset's document instances without NSP were refused after the vocabulary (10 minutes in)."""
    from conftest import data_file, load_benchmark
    from corpus_tools.shards import _check

    data = str(data_file("corpus", "kowiki.jsonl.gz").parents[1]) if preset == "cpu" else ""  # (the cpu preset reads the data folder)
    plan = load_benchmark("electra_vs_mlm").arms_plan(preset, tmp_path, data, 0, [], [])
    built = [plan["cfgs"][k] for k in ("shards", "shards_long") if k in plan["cfgs"]]
    assert len(built) == (2 if preset == "cpu" else 1)
    for c in built:
        _check(c)
        assert not c.nsp
    assert plan["cfgs"]["pretrain"].long_shards == (built[1].out if preset == "cpu" else "")
    p = plan["cfgs"]["pretrain"]  # (the long phase as the committed comparison ran it, whatever the presets' defaults now)
    assert (p.long_schedule, p.long_init, p.long_lr) == ("shared", "keep", 0.0)


def test_the_replacements_probe_scores_each_source_and_refuses_an_mlm_of_another_vocabulary(shards_dir, bert_dir, tmp_path, monkeypatch):
    """benchmarks/electra_replacements.py on a 3-step export: every source replaces about 15% of the scored
    tokens (never a special), each AUC is a probability; the baseline MLM must read the same vocabulary."""
    import sys
    from pathlib import Path

    from conftest import load_benchmark

    main(cfg(shards_dir, tmp_path / "electra", max_steps=3, **ELECTRA))
    main(cfg(shards_dir, tmp_path / "mlm", max_steps=3, objective="mlm"))
    test = Path(__file__).resolve().parent.parent / "corpus_tools" / "sample_data" / "nsmc_test.txt"
    probe, out = load_benchmark("electra_replacements"), tmp_path / "probe.json"
    base = ["electra_replacements.py", "--electra", str(tmp_path / "electra" / "final"), "--test", str(test), "--reviews", "300"]
    monkeypatch.setattr(sys, "argv", [*base, "--mlm", str(tmp_path / "mlm" / "final"), "--out", str(out)])
    probe.main()
    r = json.loads(out.read_text())
    assert set(r["sources"]) == {"generator", "unigram", "uniform"} and r["texts"]["reviews"] == 300
    from transformers import AutoTokenizer

    from corpus_tools.shard_format import first_normal_id
    from evals.data import read_nsmc

    tok = AutoTokenizer.from_pretrained(tmp_path / "electra" / "final", trust_remote_code=True)
    texts = [r.text for r in read_nsmc(test) if len(r.text) >= 30][:300]
    ids = tok(texts, truncation=True, max_length=128)["input_ids"]
    assert r["texts"]["tokens_scored"] == sum(i not in tok.all_special_ids for row in ids for i in row)
    picked = r["texts"]["picked"] / r["texts"]["tokens_scored"]
    assert 0.13 < picked < 0.17 and first_normal_id(tok) > len(tok.all_special_ids)  # (byte pieces sit between: uniform draws skip them)
    for source, row in r["sources"].items():
        assert row["replaced_share"] <= picked + 5e-5 and 0 <= row["auc_discriminator"] <= 1 and 0 <= row["auc_mlm_surprise"] <= 1
        assert row["replaced_share"] > (0.99 if source == "uniform" else 0.5) * picked  # (a draw equal to the original is no replacement; the share is rounded to 4 places)
    monkeypatch.setattr(sys, "argv", [*base, "--mlm", str(bert_dir), "--out", str(tmp_path / "other.json")])
    with pytest.raises(SystemExit, match="another vocabulary"):
        probe.main()
    assert not (tmp_path / "other.json").exists()


def test_scores_from_an_earlier_run_stand_only_where_its_pretraining_is_reproduced_and_klue_gains_are_summed(tmp_path):
    """benchmarks/electra_vs_mlm.py --scores-from: the earlier run's logs must equal this run's in every field but
    the clock's, and its steps, tokens and held-out metrics too; gains cover every task, KLUE's included."""
    import json

    from conftest import load_benchmark

    bench = load_benchmark("electra_vs_mlm")
    log = [{"step": 20, "loss": 9.5, "mlm_acc": 0.02, "seconds": 11.1, "tokens_per_s": 1e4},
           {"step": 40, "loss": 9.0, "mlm_acc": 0.09, "seconds": 21.7, "tokens_per_s": 1.2e4, "eval_mlm_loss": 8.9}]
    kept = tmp_path / "earlier"
    kept.mkdir()
    (kept / "mlm-pretrain-log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log), encoding="utf-8")
    pm = {"step": 40, "tokens": 1000, "eval": {"mlm_loss": 8.9}}
    earlier = {"rows": [{"objective": "mlm", "row": "model", "seed": 42, "steps": 40, "tokens": 1000, "held_out": {"mlm_loss": 8.9}}]}

    def now(rows):
        p = tmp_path / "log.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return p

    slower = [{**r, "seconds": r["seconds"] * 2, "tokens_per_s": r["tokens_per_s"] / 2} for r in log]
    assert bench.reproduced("mlm", pm, now(slower), earlier, kept) == []  # (the clock may differ)
    other = [log[0], {**log[1], "loss": 9.01}]
    assert any("row 2" in d for d in bench.reproduced("mlm", pm, now(other), earlier, kept))
    assert any("row 3" in d for d in bench.reproduced("mlm", pm, now(log + [log[1]]), earlier, kept))
    assert any("held_out" in d for d in bench.reproduced("mlm", {**pm, "eval": {"mlm_loss": 8.8}}, now(log), earlier, kept))
    assert any("steps" in d for d in bench.reproduced("mlm", {**pm, "step": 41}, now(log), earlier, kept))
    assert any("no kept" in d for d in bench.reproduced("mlm", pm, now(log), earlier, tmp_path / "nowhere"))
    assert bench.reproduced("electra", pm, now(log), earlier, kept) == ["electra: the earlier result has no rows"]

    rows = [{"objective": "mlm", "row": row, "seed": seed,
             "scores": {"nsmc": {"accuracy": acc, "valid_accuracy": 0.5},
                        "klue-ner": {"protocol": "KLUE dev-split", "entity_f1": f1, "char_f1": None if (row, seed) == ("model", 42) else f1 + 10}}}
            for row, seed, acc, f1 in (("model", 42, 0.84, 58.0), ("control", 42, 0.845, 46.5), ("model", 43, 0.85, 59.0), ("control", 43, 0.84, 46.0))]
    g = bench.gains(rows, [42, 43])
    assert g["mlm nsmc accuracy gain"] == {"per_seed": [-0.5, 1.0], "mean": 0.25, "range": 1.5}
    assert g["mlm klue-ner entity_f1 gain"] == {"per_seed": [11.5, 13.0], "mean": 12.25, "range": 1.5}
    assert g["mlm klue-ner char_f1 gain"]["per_seed"] == [13.0]  # (a seed whose metric is missing is left out, the first row's too)
    assert not any("valid_accuracy" in k or "protocol" in k or k.startswith("electra") for k in g)

    # the earlier file is checked before any work, one line each
    full = {"steps": {"mlm": 40, "electra": 32}, "step_seconds": {"mlm": 0.5, "electra": 0.6},
            "rows": [{"objective": o, "row": row, "seed": 42, "steps": 40, "tokens": 1000, "held_out": {}, "scores": {}}
                     for o in ("mlm", "electra") for row in ("model", "control")]}
    good = tmp_path / "earlier.json"
    good.write_text(json.dumps(full), encoding="utf-8")
    assert bench.read_earlier(str(good), [42], 40) == full
    for what, content, args in (("not readable", None, ([42], 40)), ("not a result", {"rows": [{"objective": "mlm"}]}, ([42], 40)),
                                ("no steps", {**full, "step_seconds": {"mlm": 0.5}}, ([42], 40)),
                                ("not --steps 41", full, ([42], 41)), ("no row for mlm model seed 43", full, ([42, 43], 40))):
        f = tmp_path / "bad.json"
        f.unlink(missing_ok=True)
        if content is not None:
            f.write_text(json.dumps(content), encoding="utf-8")
        with pytest.raises(SystemExit, match=what):
            bench.read_earlier(str(f), *args)
    then = {"model": "/a/final", "out": "/a/nsmc/model-42", "train": "/data/nsmc/ratings_train.txt", "seed": 42, "lr": 1e-4, "epochs": 1}
    assert bench.settings_differ(then, {**then, "model": "b/final", "out": "b/x", "train": "../d/ratings_train.txt", "seed": 43}) == []
    assert bench.settings_differ(then, {**then, "lr": 2e-4}) == ["lr"]
    assert bench.settings_differ(then, {**then, "max_train_examples": 300}) == ["max_train_examples"]
