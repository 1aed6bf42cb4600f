"""Shared fixtures: a real (small) vocabulary trained once per session on the embedded sample."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from corpus_tools import SAMPLE_DATA as SAMPLE


def without_korbert(code: str, tmp_path: Path) -> dict:
    """Run `code` in a fresh Python where neither korbert nor corpus_tools imports (a user with transformers and
    kiwipiepy only; remote code cached under tmp_path) and return the JSON its last line prints."""
    import os
    import subprocess
    import sys

    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    for mod in ("korbert", "corpus_tools"):
        (shim / f"{mod}.py").write_text(f'raise ImportError("{mod} is not installed here (test)")\n')
    env = {**os.environ, "PYTHONPATH": str(shim), "HF_MODULES_CACHE": str(tmp_path / "modules")}
    guard = "try:\n    import korbert\n    raise SystemExit('korbert importable')\nexcept ImportError:\n    pass\n"
    p = subprocess.run([sys.executable, "-c", guard + code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def load_benchmark(name: str):
    """benchmarks/NAME.py as a module (the folder is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def data_file(*parts: str) -> Path:
    """A file of the data folder the tests are given, $KORBERT_DATA (`.ci/run` points it at the data
    beside the clone; the product's own default is never guessed here). Missing: in CI (CI=true) the
    test fails, since a skip there would hide it; elsewhere it is skipped, saying why."""
    import os

    root = os.environ.get("KORBERT_DATA")
    path = Path(root, *parts) if root else None
    if path is None or not path.is_file():
        why = f"{path} is not there" if path else "$KORBERT_DATA is not set"
        msg = f"needs {'/'.join(parts)} from the data folder ($KORBERT_DATA, `korbert data get`): {why}"
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return path


def sample_texts(n: int = 3000, name: str = "reviews") -> list[str]:
    with gzip.open(SAMPLE / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(n), f)]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    """A JSON Lines corpus, one {"text": ...} per line."""
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")
    return path


def nsmc_test_docs(n: int = 500) -> list[str]:
    lines = (SAMPLE / "nsmc_test.txt").read_text(encoding="utf-8").splitlines()[1 : n + 1]
    return [line.split("\t")[1] for line in lines]


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    """A small JSONL corpus: 3,000 sampled reviews + 40 petitions (real text)."""
    return write_jsonl(tmp_path_factory.mktemp("corpus") / "small.jsonl", sample_texts(3000) + sample_texts(40, "petitions"))


@pytest.fixture(scope="session")
def vocab_dir(tmp_path_factory, corpus_file) -> Path:
    from corpus_tools.vocab import VocabConfig, main

    out = tmp_path_factory.mktemp("vocab")
    main(VocabConfig(inputs=[str(corpus_file)], out=str(out), vocab_size=3000, num_unused=5, show=0))
    return out


@pytest.fixture(scope="session")
def shards_dir(tmp_path_factory, vocab_dir, corpus_file) -> Path:
    """Shards of `corpus_file` (dynamic masking, document instances, NSP; 5% valid), built once."""
    from corpus_tools.shards import main as shards_main
    from corpus_tools.shards_config import ShardsConfig

    out = tmp_path_factory.mktemp("shards")
    shards_main(ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(corpus_file)], out=str(out), valid_fraction=0.05, show=0, seed=1))
    return out


@pytest.fixture(scope="session")
def tok(vocab_dir):
    from korbert.tokenizer import KorBertTokenizer

    return KorBertTokenizer.from_pretrained(vocab_dir)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory, vocab_dir) -> Path:
    """A tiny exported korbert model (random BertForPreTraining, hidden 32, 2 layers) + the tokenizer."""
    import torch
    from transformers import BertConfig, BertForPreTraining

    from korbert.tokenizer import KorBertTokenizer

    out = tmp_path_factory.mktemp("model")
    torch.manual_seed(0)
    tok = KorBertTokenizer.from_pretrained(vocab_dir)
    tok.save_pretrained(out)
    config = BertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=512,
    )
    BertForPreTraining(config).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory, corpus_file) -> Path:
    """A small plain-transformers BERT folder, not korbert's: a WordPiece vocabulary trained with
    `tokenizers` on the sample, BertTokenizerFast + a random BertForMaskedLM (hidden 32, 2 layers),
    both saved with save_pretrained. Nothing is downloaded."""
    from evals.make_bert_folder import build

    out = tmp_path_factory.mktemp("bert")
    texts = [json.loads(line)["text"] for line in corpus_file.read_text(encoding="utf-8").splitlines()]
    build(texts, out, vocab_size=2000, layers=2, hidden=32, heads=2, intermediate=64, seed=0)
    return out


@pytest.fixture
def one_thread():
    """Fine-tuning tests run torch on one thread (a tiny model gains nothing from more, and on a busy
    shared machine multi-threaded tiny ops crawl); torch's thread count is restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
