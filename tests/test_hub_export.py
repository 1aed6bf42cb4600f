"""An export as users' tools see it (issue 65): a length limit in tokenizer_config.json, a tokenizer
that survives pickle and deepcopy (so `datasets` caches its maps and `num_proc` works), and files
readable under the user's umask. Real Kiwi, SentencePiece, transformers and datasets."""

from __future__ import annotations

import copy
import json
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import nsmc_test_docs, sample_texts, without_korbert, write_jsonl
from test_tokenizer import HOSTILE

TRAINED = 48  # the positions the tiny export says it was pretrained at (its config has 64)
LONG = " ".join(["영화가 정말 재미있었어요"] * 1000)  # 3,000 words


@pytest.fixture(scope="module")
def final(tmp_path_factory, vocab_dir) -> Path:
    """A tiny export through korbert.checkpoint.export, as if pretrained at 48 positions."""
    import torch
    from transformers import BertConfig, BertForPreTraining

    from korbert.checkpoint import export
    from korbert.tokenizer import KorBertTokenizer

    tok = KorBertTokenizer.from_pretrained(vocab_dir)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64)
    out = tmp_path_factory.mktemp("hub") / "final"
    export(BertForPreTraining(config), tok, out, {"step": 0, "trained_seq_len": TRAINED})
    return out


def rows(tok, texts):
    enc = tok(texts, return_offsets_mapping=True)
    return enc["input_ids"], [[tuple(p) for p in r] for r in enc["offset_mapping"]]


# -- the length limit ---------------------------------------------------------------------------


def test_export_says_its_trained_length_and_truncation_cuts_there_issue65(final):
    from korbert.card import read_card
    from korbert.tokenizer import KorBertTokenizer

    assert json.loads((final / "tokenizer_config.json").read_text())["model_max_length"] == TRAINED
    tok = KorBertTokenizer.from_pretrained(final)
    assert tok.model_max_length == TRAINED
    assert len(tok(LONG, truncation=True)["input_ids"]) == TRAINED
    assert [len(r) for r in tok([LONG, "짧은 문장"], truncation=True)["input_ids"]][0] == TRAINED
    _, body = read_card(final / "README.md")
    assert f"model_max_length {TRAINED}" in body and "cls.*" in body


def test_folder_exported_before_gets_its_length_on_load(final, tmp_path):
    """Older exports saved 1e30 (transformers' "no limit"): korbert fills it from the manifest's
    trained_seq_len, else config.json's max_position_embeddings; a length the caller passes wins."""
    import shutil

    from korbert.tokenizer import KorBertTokenizer

    old = tmp_path / "old"
    shutil.copytree(final, old)
    cfg = json.loads((old / "tokenizer_config.json").read_text())
    cfg["model_max_length"] = int(1e30)
    (old / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert KorBertTokenizer.from_pretrained(old).model_max_length == TRAINED
    assert KorBertTokenizer.from_pretrained(old, model_max_length=32).model_max_length == 32
    m = json.loads((old / "manifest.json").read_text())
    del m["trained_seq_len"]
    (old / "manifest.json").write_text(json.dumps(m))
    assert KorBertTokenizer.from_pretrained(old).model_max_length == 64


# -- pickle, deepcopy, datasets -----------------------------------------------------------------


def test_tokenizer_pickles_and_deepcopies_with_the_same_ids_and_offsets_issue65(final):
    """Was: "Error while attempting to pickle Tokenizer: Custom PreTokenizer cannot be serialized"."""
    from korbert.tokenizer import KorBertTokenizer

    tok = KorBertTokenizer.from_pretrained(final)
    texts = HOSTILE + nsmc_test_docs(50)
    want = rows(tok, texts)
    tok(texts[:3], ["둘째 문장"] * 3, truncation=True, max_length=16)  # leaves truncation set on the backend
    for again in (pickle.loads(pickle.dumps(tok)), copy.deepcopy(tok)):
        assert type(again) is KorBertTokenizer and again.fingerprint == tok.fingerprint
        assert rows(again, texts) == want
        assert again.backend_tokenizer.encode(texts[0]).ids == want[0][0]  # the Kiwi step is back
        assert again.model_max_length == TRAINED and len(again(LONG, truncation=True)["input_ids"]) == TRAINED


def test_exported_tokenizer_without_korbert_has_the_length_and_pickles_issue65(final, tmp_path):
    """AutoTokenizer(trust_remote_code=True) where neither korbert nor corpus_tools imports: the
    length limit, truncation, and a pickle / deepcopy round trip giving the same ids and offsets."""
    from korbert.tokenizer import KorBertTokenizer

    r = without_korbert(
        "import copy, json, pickle, sys\n"
        "from transformers import AutoTokenizer\n"
        f"t = AutoTokenizer.from_pretrained({str(final)!r}, trust_remote_code=True)\n"
        f"texts, long = {HOSTILE!r}, {LONG!r}\n"
        "def rows(tok):\n"
        "    e = tok(texts, return_offsets_mapping=True)\n"
        "    return e['input_ids'], e['offset_mapping']\n"
        "out = {'cls': type(t).__name__, 'max': t.model_max_length, 'cut': len(t(long, truncation=True)['input_ids']), 'rows': rows(t)}\n"
        "for name, again in (('pickle', pickle.loads(pickle.dumps(t))), ('deepcopy', copy.deepcopy(t))):\n"
        "    out[name] = rows(again) == out['rows'] and again.model_max_length == t.model_max_length\n"
        "print(json.dumps(out))\n", tmp_path)
    assert r["cls"] == "KorBertTokenizer" and r["max"] == TRAINED and r["cut"] == TRAINED
    assert r["pickle"] is True and r["deepcopy"] is True
    ids, offsets = rows(KorBertTokenizer.from_pretrained(final), HOSTILE)
    assert r["rows"][0] == ids and [[tuple(p) for p in row] for row in r["rows"][1]] == offsets


def test_dataset_map_reads_its_cache_and_num_proc_2_equals_one_process_issue65(final, tmp_path):
    """Was: "couldn't be hashed properly, a random hash was used instead": every map recomputed.
    Now the second identical map (with a tokenizer that has been used since, and a fresh one
    loaded again) reads the first one's cache file, and two processes give one process's rows."""
    from datasets import Dataset, load_from_disk
    from datasets.fingerprint import Hasher

    from korbert.tokenizer import KorBertTokenizer

    Dataset.from_dict({"document": nsmc_test_docs(300)}).save_to_disk(tmp_path / "ds")
    ds = load_from_disk(tmp_path / "ds")  # backed by a file, so maps are cached beside it
    tok = KorBertTokenizer.from_pretrained(final)

    def encode(batch):
        return tok(batch["document"], truncation=True, return_offsets_mapping=True)

    first = ds.map(encode, batched=True)
    second = ds.map(encode, batched=True)
    caches = sorted(p.name for p in (tmp_path / "ds").glob("cache-*.arrow"))
    assert len(caches) == 1 and second.cache_files == first.cache_files
    fresh = KorBertTokenizer.from_pretrained(final)
    assert Hasher.hash(fresh) == Hasher.hash(tok)
    # another process, another string-hash seed: the same hash (a cache a rerun of a script finds)
    code = (f"import korbert.tokenizer as k\nfrom datasets.fingerprint import Hasher\n"
            f"print(Hasher.hash(k.KorBertTokenizer.from_pretrained({str(final)!r})))")
    p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": "12345"}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-1] == Hasher.hash(fresh)
    two = ds.map(encode, batched=True, num_proc=2, load_from_cache_file=False)
    assert two["input_ids"] == first["input_ids"] and two["offset_mapping"] == first["offset_mapping"]


# -- file modes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["umask022", "umask027"])
def test_every_file_of_shards_checkpoint_and_export_gets_the_umask_mode_issue65(vocab_dir, tmp_path, umask):
    """Was: final/model.safetensors 0600 (safetensors writes through a private temporary file)
    while every other file was 0644."""
    from corpus_tools.shards import main as shards_main
    from corpus_tools.shards_config import ShardsConfig
    from korbert.pretrain import main as pretrain_main
    from korbert.pretrain_config import PretrainConfig

    corpus = write_jsonl(tmp_path / "corpus.jsonl", sample_texts(300))
    before = os.umask(umask)
    try:
        shards_main(ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(corpus)], out=str(tmp_path / "shards"), valid_fraction=0.05, show=0, seed=1))
        pretrain_main(PretrainConfig(
            shards=str(tmp_path / "shards"), out=str(tmp_path / "run"), model_size="tiny", batch_size=8, max_steps=2, log_every=1,
            eval_every=0, eval_instances=16, save_every=1, num_workers=0, precision="fp32",
            override=["hidden_size=32", "num_hidden_layers=1", "num_attention_heads=2", "intermediate_size=64"],
        ))
    finally:
        os.umask(before)
    files = [p for d in ("shards", "run") for p in (tmp_path / d).rglob("*") if p.is_file()]
    names = {p.relative_to(tmp_path).as_posix() for p in files}
    assert {"run/ckpt.pt", "run/final/model.safetensors", "run/final/tokenizer.json", "shards/manifest.json"} <= names
    wrong = {p.relative_to(tmp_path).as_posix(): oct(stat.S_IMODE(p.stat().st_mode)) for p in files
             if stat.S_IMODE(p.stat().st_mode) != 0o666 & ~umask}
    assert not wrong, f"want {oct(0o666 & ~umask)}: {wrong}"
