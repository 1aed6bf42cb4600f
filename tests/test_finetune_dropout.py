"""Fine-tuning sets its own dropout (--dropout, BERT's 0.1), never the pretraining config's: a model
folder whose config.json says hidden_dropout_prob=0 and attention_probs_dropout_prob=0 (what GPU
pretraining without dropout exports) is still fine-tuned with dropout, checked on the nn.Dropout
modules of the model that NSMC and KorQuAD fine-tune."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import SAMPLE, sample_texts

TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def no_dropout_config(folder: Path) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=None)
    path.write_text(json.dumps(config), encoding="utf-8")


@pytest.fixture(scope="module")
def nodrop_dir(tmp_path_factory) -> Path:
    """A tiny plain BERT folder (WordPiece on 300 sample reviews, 1 layer, hidden 16) pretrained
    "without dropout": its config.json says 0 for both dropouts."""
    from evals.make_bert_folder import build

    out = tmp_path_factory.mktemp("nodrop")
    build(sample_texts(300), out, vocab_size=400, layers=1, hidden=16, heads=2, intermediate=32, seed=0)
    no_dropout_config(out)
    return out


def dropouts(model) -> list[float]:
    return [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]


@pytest.mark.parametrize("task", ["cls", "qa"])
@pytest.mark.parametrize("control", [False, True])
def test_load_model_replaces_a_no_dropout_pretraining_config(nodrop_dir, task, control):
    from evals.finetune import load_model
    from korbert.folders import open_folder

    assert open_folder(str(nodrop_dir)).config.hidden_dropout_prob == 0.0  # what the folder says
    model = load_model(str(nodrop_dir), task, control, 0).model  # NSMC's and KorQuAD's loader, its default
    ps = dropouts(model)
    assert len(ps) >= 4 and set(ps) == {0.1}, ps  # embeddings, attention probabilities, hidden, (head)
    assert model.bert.encoder.layer[0].attention.self.dropout.p == 0.1  # the attention probabilities'
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.1
    if task == "cls":
        assert model.dropout.p == 0.1  # the classification head's (classifier_dropout)

    loaded = load_model(str(nodrop_dir), task, control, 0, dropout=0.2)
    assert set(dropouts(loaded.model)) == {0.2}
    assert loaded.info["dropout"]["config_said"]["hidden_dropout_prob"] == 0.0
    assert loaded.info["dropout"]["set"]["attention_probs_dropout_prob"] == 0.2


def test_foreign_configs(nodrop_dir, tmp_path, capsys):
    """ELECTRA (same field names): set. DistilBERT (other names): left as its config says, no crash."""
    from transformers import DistilBertConfig, ElectraConfig, ElectraForMaskedLM

    from evals.finetune import load_model

    vocab = json.loads((nodrop_dir / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    electra, distil = tmp_path / "electra", tmp_path / "distil"
    for folder in (electra, distil):
        folder.mkdir()
        for name in TOKENIZER:
            if (nodrop_dir / name).is_file():
                shutil.copy(nodrop_dir / name, folder / name)
    ElectraForMaskedLM(ElectraConfig(vocab_size=vocab, embedding_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).save_pretrained(electra)
    for task in ("cls", "qa"):
        assert set(dropouts(load_model(str(electra), task, False, 0).model)) == {0.1}
        assert set(dropouts(load_model(str(electra), task, True, 0, dropout=0.3).model)) == {0.3}
    DistilBertConfig(vocab_size=vocab, dim=16, n_layers=1, n_heads=2, hidden_dim=32, dropout=0.0, attention_dropout=0.0,
                     seq_classif_dropout=0.0, qa_dropout=0.0).save_pretrained(distil)
    loaded = load_model(str(distil), "cls", True, 0)
    assert set(dropouts(loaded.model)) == {0.0} and loaded.info["dropout"]["set"] == {}
    assert "fine-tuned with its own dropout" in capsys.readouterr().err


def test_dropout_option_and_recipe_key(tmp_path):
    from dataclasses import replace

    from corpus_tools import config as C
    from corpus_tools.text import InputError
    from evals.finetune import set_dropout
    from evals.korquad import KorquadConfig
    from evals.nsmc import NsmcConfig
    from korbert.recipe import RecipeConfig, _key, stage_configs

    for cls in (NsmcConfig, KorquadConfig):
        assert C.parse(cls, []).dropout == 0.1
        assert C.parse(cls, ["--dropout", "0.2"]).dropout == 0.2
    cfgs = stage_configs(RecipeConfig(preset="demo", out=str(tmp_path), set=["nsmc.dropout=0.2"]))["cfgs"]
    assert cfgs["nsmc"].dropout == cfgs["nsmc_control"].dropout == 0.2 and cfgs["korquad"].dropout == 0.0  # the demo preset's own
    # the recipe reuses an eval's results by a key over its config: another --dropout is another key
    assert _key(C.to_dict(cfgs["nsmc"])) != _key(C.to_dict(replace(cfgs["nsmc"], dropout=0.1)))
    with pytest.raises(InputError, match="--dropout must be in"):
        set_dropout(object(), 1.0)


def _small_nsmc(tmp_path: Path) -> tuple[Path, Path]:
    lines = (SAMPLE / "nsmc_train.txt").read_text(encoding="utf-8").splitlines()
    train, test = tmp_path / "train.txt", tmp_path / "test.txt"
    train.write_text("\n".join(lines[:41]) + "\n", encoding="utf-8")
    test.write_text("\n".join([lines[0], *lines[41:51]]) + "\n", encoding="utf-8")
    return train, test


@pytest.mark.parametrize("dropout", [None, 0.2])
def test_nsmc_and_korquad_fine_tune_with_their_dropout(nodrop_dir, tmp_path, monkeypatch, one_thread, dropout):
    """The model each eval hands to fine_tune has --dropout (default 0.1); results.json records it."""
    import evals.finetune
    import evals.korquad
    import evals.nsmc

    seen = {}

    def spy(name):
        def fine_tune(model, *a, **kw):
            seen[name] = set(dropouts(model))
            return evals.finetune.fine_tune(model, *a, **kw)
        return fine_tune

    monkeypatch.setattr(evals.nsmc, "fine_tune", spy("nsmc"))
    monkeypatch.setattr(evals.korquad, "fine_tune", spy("korquad"))
    want = 0.1 if dropout is None else dropout
    extra = {} if dropout is None else {"dropout": dropout}
    train, test = _small_nsmc(tmp_path)
    common = dict(model=str(nodrop_dir), max_steps=1, batch_size=4, device="cpu", threads=1, max_len=64)
    r = evals.nsmc.main(evals.nsmc.NsmcConfig(train=str(train), test=str(test), out=str(tmp_path / "n"), valid_size=0, **common, **extra))
    assert seen["nsmc"] == {want}
    saved = json.loads((tmp_path / "n" / "results.json").read_text(encoding="utf-8"))
    assert saved["config"]["dropout"] == want and saved["model"]["dropout"]["config_said"]["hidden_dropout_prob"] == 0.0
    r = evals.korquad.main(evals.korquad.KorquadConfig(out=str(tmp_path / "k"), max_train_examples=4, max_eval_examples=4,
                                                        stride=16, max_query_len=24, **common, **extra))
    assert seen["korquad"] == {want} and r["config"]["dropout"] == want
