"""The vocabulary stage: determinism, manifest, options, clear errors."""

from __future__ import annotations

import json

import pytest

from corpus_tools.artifacts import read_manifest, sha256_file
from corpus_tools.text import InputError
from corpus_tools.vocab import VocabConfig, main


def test_same_input_same_seed_byte_identical(vocab_dir, corpus_file, tmp_path):
    again = main(VocabConfig(inputs=[str(corpus_file)], out=str(tmp_path), vocab_size=3000, num_unused=5, show=0))
    for name in ("spm.model", "tokenizer.json"):
        assert sha256_file(tmp_path / name) == sha256_file(vocab_dir / name), name
    assert again["tokenizer_hash"] == read_manifest(vocab_dir, "vocab")["tokenizer_hash"]


def test_manifest_describes_the_folder(vocab_dir, corpus_file, tok):
    m = read_manifest(vocab_dir, "vocab", verify=True)
    assert m["tokenizer_hash"] == tok.fingerprint
    assert m["config"]["vocab_size"] == 3000 and m["config"]["model_type"] == "unigram"
    assert m["inputs"][0]["sha256"] == sha256_file(corpus_file)
    c = m["counts"]
    assert c["documents_in"] == c["documents_used"] + sum(c["documents_skipped"].values()) == 3040
    assert c["vocab_size"] == len(tok) and c["sentences"] >= 3040
    assert set(m["files"]) == {"spm.model", "tokenizer.json", "tokenizer_config.json"}


def test_vocab_layout_specials_unused_bytes(tok):
    assert tok.convert_ids_to_tokens(list(range(7))) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]
    vocab = tok.get_vocab()
    assert all(f"<0x{b:02X}>" in vocab for b in range(256))
    # pieces never cross a morpheme boundary: the frequent particle 는 never fuses with its noun
    assert "영화는" not in vocab and "▁영화는" not in vocab


def test_up_to_date_folder_is_not_rebuilt(vocab_dir, corpus_file, capsys):
    before = sha256_file(vocab_dir / "spm.model")
    main(VocabConfig(inputs=[str(corpus_file)], out=str(vocab_dir), vocab_size=3000, num_unused=5, show=0))
    assert "up to date" in capsys.readouterr().out
    assert sha256_file(vocab_dir / "spm.model") == before
    # the same file spelled through another path is the same work (the check is by content)
    other = corpus_file.parent / ".." / corpus_file.parent.name / corpus_file.name
    main(VocabConfig(inputs=[str(other)], out=str(vocab_dir), vocab_size=3000, num_unused=5, show=0))
    assert "up to date" in capsys.readouterr().out


def test_bpe_option(corpus_file, tmp_path):
    from korbert.tokenizer import KorBertTokenizer

    main(VocabConfig(inputs=[str(corpus_file)], out=str(tmp_path), vocab_size=2000, model_type="bpe", num_unused=0, show=0))
    tok = KorBertTokenizer.from_pretrained(tmp_path)
    text = "정말 재밌는 영화였어요 🤗"
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    assert tok.unk_token_id not in enc["input_ids"]
    assert tok.decode(enc["input_ids"]) == text
    assert json.loads((tmp_path / "tokenizer.json").read_text())["model"]["type"] == "BPE"


def test_empty_and_unreadable_input_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="no usable text"):
        main(VocabConfig(inputs=[str(empty)], out=str(tmp_path / "v")))
    with pytest.raises(InputError, match="not found"):
        main(VocabConfig(inputs=[str(tmp_path / "missing.jsonl")], out=str(tmp_path / "v")))


def test_too_small_corpus_for_vocab_size(tmp_path):
    small = tmp_path / "s.txt"
    small.write_text("아주 작은 말뭉치입니다.\n", encoding="utf-8")
    with pytest.raises(InputError, match="too small"):
        main(VocabConfig(inputs=[str(small)], out=str(tmp_path / "v"), vocab_size=5000))


def test_cli_reports_user_errors_without_traceback(tmp_path, capsys):
    from korbert.cli import main as korbert

    assert korbert(["vocab", "--inputs", str(tmp_path / "missing"), "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert "error: input not found" in err and "Traceback" not in err
