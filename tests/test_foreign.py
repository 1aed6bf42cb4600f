"""Continued pretraining of a released BERT with its own tokenizer (korbert/foreign.py): a WordPiece
BERT folder built offline (evals.make_bert_folder, the `bert_dir` fixture) stands for the released
model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import sample_texts
from corpus_tools.masking import masked_instance
from corpus_tools.text import InputError


@pytest.fixture(scope="module")
def wordpiece(bert_dir):
    from korbert import foreign

    return foreign.load(bert_dir, "test")


@pytest.fixture(scope="module")
def foreign_shards(tmp_path_factory, bert_dir, corpus_file) -> Path:
    from corpus_tools.shards import main
    from corpus_tools.shards_config import ShardsConfig

    out = tmp_path_factory.mktemp("foreign-shards")
    main(ShardsConfig(tokenizer=str(bert_dir), inputs=[str(corpus_file)], out=str(out), valid_fraction=0.05, show=1, seed=1))
    return out


def test_documents_get_the_tokenizers_own_ids_words_and_kiwis_sentences(wordpiece):
    from korbert.foreign import DocumentEncoder

    texts = ["영화가 정말 재미있었다. 배우들의 연기도 좋았고 음악도 좋았다.", "별로였어요", "다시 보고 싶은 영화입니다!! 강추"]
    encs = DocumentEncoder(wordpiece).encode_documents(texts)
    ref = wordpiece(texts, add_special_tokens=False)
    for i, (text, e) in enumerate(zip(texts, encs)):
        assert e["ids"].tolist() == ref["input_ids"][i]  # the folder's own tokens, exactly
        assert e["morpheme"].tolist() == ref.word_ids(i)  # its own words are the whole-word units
        spans = [text[a:b] for a, b in e["offsets"].tolist()]
        for unit in ("sentence", "morpheme", "eojeol"):
            assert (np.diff(e[unit]) >= 0).all()
        for k in range(1, len(spans)):  # a new eojeol exactly where whitespace came before the token
            gap = text[e["offsets"][k - 1][1] : e["offsets"][k][0]]
            assert (e["eojeol"][k] != e["eojeol"][k - 1]) == (gap.strip() == "" and gap != "")
    assert encs[0]["sentence"].max() == 1 and encs[1]["sentence"].max() == 0  # Kiwi split the first text in two


def test_whole_word_masking_never_splits_a_word(wordpiece):
    from corpus_tools.masking import instance_keys, mask_batch
    from corpus_tools.shard_format import MaskConfig
    from korbert.foreign import DocumentEncoder

    mcfg = MaskConfig.from_tokenizer(wordpiece, 0.3)
    encs = DocumentEncoder(wordpiece).encode_documents(sample_texts(200))
    split_words = 0
    for seed, e in enumerate(encs):
        if len(e["ids"]) < 4:
            continue
        _, masked = mask_batch(e["ids"], np.array([len(e["ids"])]), instance_keys(seed, 0, np.array([0])), e["morpheme"], mcfg)
        labels = np.where(masked, e["ids"], -100)
        for w in np.unique(e["morpheme"]):
            chosen = labels[e["morpheme"] == w] != -100
            split_words += chosen.any() and not chosen.all()
    assert split_words == 0


def test_shards_from_a_released_tokenizer_hold_its_ids(foreign_shards, bert_dir, wordpiece, corpus_file):
    from corpus_tools.shard_format import open_shards
    from korbert.folders import tokenizer_files_sha256

    m = json.loads((foreign_shards / "manifest.json").read_text())
    assert m["tokenizer_hash"] == tokenizer_files_sha256(bert_dir)
    copy = json.loads((foreign_shards / "tokenizer" / "manifest.json").read_text())
    assert copy["tokenizer_class"] == type(wordpiece).__name__ and copy["from_model"] == str(bert_dir)
    docs = {",".join(map(str, ids)) for ids in wordpiece([json.loads(x)["text"] for x in corpus_file.read_text().splitlines()],
                                                         add_special_tokens=False)["input_ids"]}
    haystack = "|," + ",|,".join(docs) + ",|"
    reader = open_shards(foreign_shards, split="train")
    for i in range(0, len(reader), max(1, len(reader) // 50)):
        item = reader[i]
        b = int(np.argmax(item["token_type_ids"]))
        a_ids = item["input_ids"][1 : b - 1].tolist()  # segment A: a slice of one document's own tokens
        assert item["input_ids"][0] == wordpiece.cls_token_id and "," + ",".join(map(str, a_ids)) + "," in haystack


def test_pretrain_continues_the_released_model_and_exports_its_tokenizer_unchanged(foreign_shards, bert_dir, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from korbert.folders import TOKENIZER_FILES
    from korbert.pretrain import Trainer
    from korbert.pretrain_config import PretrainConfig

    c = PretrainConfig(shards=str(foreign_shards), out=str(tmp_path), init_from=str(bert_dir), max_steps=3, batch_size=8, lr=2e-3,
                       log_every=1, eval_every=0, eval_instances=32, num_workers=0, seed=3, precision="fp32")
    start = load_file(bert_dir / "model.safetensors")
    trainer = Trainer(c)
    before = trainer.model.state_dict()
    assert all(torch.equal(before[k], v) for k, v in start.items())  # every weight the folder has (BertForMaskedLM)
    assert {"cls.seq_relationship.weight", "bert.pooler.dense.weight"} <= set(trainer.init["fresh"])
    trainer.train()
    r = trainer.export()
    trainer.dist.close()
    final = tmp_path / "final"
    assert r["init_from"]["fresh"] == trainer.init["fresh"] and r["tokenizer_class"] == type(trainer.tok).__name__ != "KorBertTokenizer"
    for name in TOKENIZER_FILES:
        if (bert_dir / name).is_file():
            assert (final / name).read_bytes() == (bert_dir / name).read_bytes()
    assert not (final / "tokenization_korbert.py").exists()
    card = (final / "README.md").read_text()
    assert f"with the {type(trainer.tok).__name__} tokenizer of the model it continues" in card and "Kiwi morphemes" not in card
    tok, ref = AutoTokenizer.from_pretrained(final), AutoTokenizer.from_pretrained(bert_dir)
    assert tok("영화가 정말 재미있었다")["input_ids"] == ref("영화가 정말 재미있었다")["input_ids"]
    moved = AutoModelForMaskedLM.from_pretrained(final).state_dict()["bert.embeddings.word_embeddings.weight"]
    assert not torch.equal(moved, start["bert.embeddings.word_embeddings.weight"])


def _bert_folder(tmp_path_factory, corpus_file, layout: str) -> Path:
    from evals.make_bert_folder import build

    out = tmp_path_factory.mktemp(f"bert-{layout}")
    texts = [json.loads(line)["text"] for line in corpus_file.read_text(encoding="utf-8").splitlines()]
    build(texts, out, vocab_size=2000, layers=2, hidden=32, heads=2, intermediate=64, seed=0, layout=layout)
    return out


def _shards(tmp_path_factory, folder: Path, corpus_file) -> Path:
    from corpus_tools.shards import main
    from corpus_tools.shards_config import ShardsConfig

    out = tmp_path_factory.mktemp("moved-shards")
    main(ShardsConfig(tokenizer=str(folder), inputs=[str(corpus_file)], out=str(out), valid_fraction=0.05, show=1, seed=1))
    return out


# layouts of released tokenizers whose specials are not at 0..4 (evals.make_bert_folder --layout); "rotated"'s map is a
# 5-cycle, not its own inverse, so a map applied the wrong way round fails
MOVED = {
    "multilingual": {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103},
    "kobert": {"pad": 1, "unk": 0, "cls": 2, "sep": 3, "mask": 4},
    "rotated": {"pad": 1, "unk": 2, "cls": 3, "sep": 4, "mask": 0},
}


@pytest.fixture(scope="module", params=list(MOVED))
def moved(request, tmp_path_factory, corpus_file) -> tuple[str, Path, Path]:
    """(layout, a BERT folder with its specials there, its shards)."""
    folder = _bert_folder(tmp_path_factory, corpus_file, request.param)
    return request.param, folder, _shards(tmp_path_factory, folder, corpus_file)


def test_specials_elsewhere_get_an_id_map_and_incomplete_specials_are_refused(bert_dir, tmp_path, corpus_file):
    from transformers import AutoTokenizer

    from evals.make_bert_folder import build
    from korbert import foreign

    texts = [json.loads(line)["text"] for line in corpus_file.read_text(encoding="utf-8").splitlines()][:300]
    maps = {}
    for layout in MOVED:
        build(texts, tmp_path / layout, vocab_size=500, layers=1, hidden=16, heads=1, intermediate=32, layout=layout)
        tok = foreign.load(tmp_path / layout, "x")
        assert foreign.special_ids(tok) == MOVED[layout]
        maps[layout] = m = foreign.id_map(tok)
        assert sorted(m.tolist()) == list(range(len(m)))  # a permutation
    m = maps["multilingual"]  # the specials to 0..4, the [unused1..4] they displace to 100..103, the rest unchanged
    assert m[[0, 100, 101, 102, 103]].tolist() == [0, 1, 2, 3, 4] and m[[1, 2, 3, 4]].tolist() == [100, 101, 102, 103]
    assert (m[104:] == np.arange(104, len(m))).all() and (m[5:100] == np.arange(5, 100)).all()
    assert maps["kobert"][:5].tolist() == [1, 0, 2, 3, 4] and (maps["kobert"][5:] == np.arange(5, len(maps["kobert"]))).all()
    assert maps["rotated"][:5].tolist() == [4, 0, 1, 2, 3]  # [MASK] 0 -> 4, [PAD] 1 -> 0, ...
    assert foreign.id_map(foreign.load(bert_dir, "x")) is None
    tok = AutoTokenizer.from_pretrained(bert_dir)
    tok.pad_token = None
    tok.save_pretrained(tmp_path / "nopad")
    with pytest.raises(InputError, match=r"special tokens have ids \{'pad': None, 'unk': 1.*five distinct"):
        foreign.load(tmp_path / "nopad", "--tokenizer x")
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_file(str(bert_dir / "tokenizer.json"))  # RoBERTa's pair frame on BERT's specials
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                            mask_token="[MASK]").save_pretrained(tmp_path / "roberta-frame")
    with pytest.raises(InputError, match=r"frames a pair as .*not BERT's \[CLS\] A \[SEP\] B \[SEP\]"):
        foreign.load(tmp_path / "roberta-frame", "--tokenizer x")


def test_a_slow_tokenizer_is_refused_with_the_reason(tmp_path):
    from transformers import ByT5Tokenizer  # a Python-only tokenizer that needs no vocabulary file

    from corpus_tools.shards import main

    from corpus_tools.shards_config import ShardsConfig

    ByT5Tokenizer().save_pretrained(tmp_path / "slow")
    with pytest.raises(InputError, match=r"--tokenizer .*slow: ByT5Tokenizer is a slow \(Python-only\) tokenizer; korbert needs a fast one"):
        main(ShardsConfig(tokenizer=str(tmp_path / "slow"), out=str(tmp_path / "shards")))


def test_shards_from_a_tokenizer_with_specials_elsewhere_hold_mapped_ids(moved, corpus_file, capsys):
    from corpus_tools.shard_format import CLS, MASK, SEP, open_shards
    from corpus_tools.shards import show
    from korbert import foreign

    layout, folder, shards = moved
    tok = foreign.load(folder, "x")
    perm = foreign.id_map(tok)
    own = perm.argsort()  # the shards' id -> the tokenizer's
    m = json.loads((shards / "manifest.json").read_text())
    assert m["id_map"]["own_special_ids"] == MOVED[layout]
    assert m["mask_config"]["mask_id"] == MASK and m["mask_config"]["random_low"] == (104 if layout == "multilingual" else 5)
    unused = perm[[i for i, t in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))) if t.startswith("[unused")]]
    docs = {",".join(map(str, ids)) for ids in tok([json.loads(x)["text"] for x in corpus_file.read_text().splitlines()],
                                                   add_special_tokens=False)["input_ids"]}
    haystack = "|," + ",|,".join(docs) + ",|"
    reader = open_shards(shards, split="train")
    masked = 0
    for i in range(0, len(reader), max(1, len(reader) // 50)):
        item = reader[i]
        ids = item["input_ids"]
        b = int(np.argmax(item["token_type_ids"]))
        assert ids[0] == CLS and ids[b - 1] == SEP and ids[-1] == SEP
        a_own = own[ids[1 : b - 1]].tolist()  # back in the tokenizer's ids: a slice of one document's own tokens
        assert "," + ",".join(map(str, a_own)) + "," in haystack
        item = masked_instance(reader, i, seed=i)
        masked += int((item["input_ids"] == MASK).sum())
        assert not np.isin(item["input_ids"], unused).any()  # random replacements are normal pieces
    assert masked > 0
    show(shards, 1)
    out = capsys.readouterr().out
    assert "[CLS]" in out and "[SEP]" in out and "[unused" not in out  # decoded through the map


def test_pretraining_moves_the_vocabulary_rows_and_the_export_moves_them_back(moved, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from korbert import foreign
    from korbert.checkpoint import export
    from korbert.pretrain import Trainer
    from korbert.pretrain_config import PretrainConfig

    layout, moved_dir, moved_shards = moved
    c = PretrainConfig(shards=str(moved_shards), out=str(tmp_path / "run"), init_from=str(moved_dir), max_steps=2, batch_size=8, lr=2e-3,
                       log_every=1, eval_every=0, eval_instances=32, num_workers=0, seed=3, precision="fp32")
    start = load_file(moved_dir / "model.safetensors")
    trainer = Trainer(c)
    perm = foreign.id_map(trainer.tok)
    emb = "bert.embeddings.word_embeddings.weight"
    ours = trainer.model.state_dict()
    assert torch.equal(ours[emb][perm], start[emb]) and torch.equal(ours["cls.predictions.bias"][perm], start["cls.predictions.bias"])
    assert trainer.model.config.pad_token_id == 0
    export(trainer.model, trainer.tok, tmp_path / "untrained", {}, trainer.tok_dir)  # before any step: the folder's own weights
    back = load_file(tmp_path / "untrained" / "model.safetensors")
    assert {emb, "cls.predictions.bias"} <= set(back) and all(torch.equal(back[k], v) for k, v in start.items() if k in back)
    trainer.train()
    trainer.export()
    trainer.dist.close()
    final = tmp_path / "run" / "final"
    tok = AutoTokenizer.from_pretrained(final)
    assert json.loads((final / "config.json").read_text())["pad_token_id"] == tok.pad_token_id == MOVED[layout]["pad"]
    assert json.loads((final / "manifest.json").read_text())["model_config"]["pad_token_id"] == tok.pad_token_id
    exported = AutoModelForMaskedLM.from_pretrained(final).eval()
    internal = trainer.model.eval()
    enc = tok("영화가 정말 [MASK] 재미있었다", return_tensors="pt")
    with torch.no_grad():
        theirs = exported(**enc).logits[0]  # the tokenizer's own ids in and out
        mine = internal(input_ids=torch.as_tensor(perm)[enc["input_ids"]], attention_mask=enc["attention_mask"],
                        token_type_ids=enc["token_type_ids"]).prediction_logits[0]
    assert torch.allclose(theirs, mine[:, perm], atol=1e-4)


def test_pretraining_on_foreign_shards_needs_no_kiwi(foreign_shards, bert_dir, tmp_path):
    """A GPU box with torch + transformers only: pretraining from carried shards never imports Kiwi."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    (tmp_path / "kiwipiepy.py").write_text('raise ImportError("kiwipiepy is not installed here (test)")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    args = ["--shards", str(foreign_shards), "--out", str(tmp_path / "out"), "--init-from", str(bert_dir), "--max-steps", "2",
            "--batch-size", "8", "--eval-instances", "16", "--num-workers", "0", "--precision", "fp32"]
    p = subprocess.run([sys.executable, "-m", "korbert.pretrain", *args], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "final" / "manifest.json").read_text())["step"] == 2
