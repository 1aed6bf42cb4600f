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
from corpus_tools.text import InputError


@pytest.fixture(scope="module")
def wordpiece(bert_dir):
    from korbert import foreign

    return foreign.load(bert_dir, "test")


@pytest.fixture(scope="module")
def foreign_shards(tmp_path_factory, bert_dir, corpus_file) -> Path:
    from corpus_tools.shards import ShardsConfig, main

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
    from corpus_tools.shard_format import MaskConfig, mask_tokens
    from korbert.foreign import DocumentEncoder

    mcfg = MaskConfig.from_tokenizer(wordpiece, 0.3)
    encs = DocumentEncoder(wordpiece).encode_documents(sample_texts(200))
    split_words = 0
    for seed, e in enumerate(encs):
        if len(e["ids"]) < 4:
            continue
        _, labels = mask_tokens(e["ids"], np.zeros(len(e["ids"]), bool), e["morpheme"], np.random.default_rng(seed), mcfg)
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
    from korbert.pretrain import PretrainConfig, Trainer

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
    tok, ref = AutoTokenizer.from_pretrained(final), AutoTokenizer.from_pretrained(bert_dir)
    assert tok("영화가 정말 재미있었다")["input_ids"] == ref("영화가 정말 재미있었다")["input_ids"]
    moved = AutoModelForMaskedLM.from_pretrained(final).state_dict()["bert.embeddings.word_embeddings.weight"]
    assert not torch.equal(moved, start["bert.embeddings.word_embeddings.weight"])


def test_a_tokenizer_with_other_special_ids_is_refused(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import BertTokenizerFast

    from korbert import foreign

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.train_from_iterator(sample_texts(300), trainers.WordPieceTrainer(vocab_size=500, special_tokens=["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]"]))
    BertTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                      mask_token="[MASK]").save_pretrained(tmp_path)
    with pytest.raises(InputError, match=r"special tokens have ids \{'pad': 1, 'unk': 0.*0\.\.4"):
        foreign.load(tmp_path, "--tokenizer x")


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
