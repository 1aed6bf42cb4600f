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
    # the libraries that shape the pieces, Kiwi's weights included: a package pip updates apart from kiwipiepy
    assert {"kiwipiepy", "kiwipiepy_model", "sentencepiece"} <= set(m["versions"])


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


def test_only_a_seeded_sample_of_documents_goes_through_kiwi(corpus_file, tmp_path, monkeypatch):
    """--max-sentences smaller than the corpus: documents are sampled before Kiwi (Kiwi analyzes only
    the sample), the manifest says how much was read and how much sampled, the same seed and inputs
    give a byte-identical vocabulary whatever the inputs' order, and another seed another sample."""
    from corpus_tools import vocab

    analyzed = []
    real = vocab.segmented_sentences
    monkeypatch.setattr(vocab, "segmented_sentences", lambda texts, threads: analyzed.extend(texts) or real(texts, threads))
    half = tmp_path / "half.jsonl"
    lines = corpus_file.read_text(encoding="utf-8").splitlines(keepends=True)
    half.write_text("".join(lines[1500:]), encoding="utf-8")
    first = tmp_path / "first.jsonl"
    first.write_text("".join(lines[:1500]), encoding="utf-8")

    def build(out, inputs, seed=0):
        analyzed.clear()
        m = main(VocabConfig(inputs=[str(p) for p in inputs], out=str(tmp_path / out), vocab_size=1500, num_unused=5, show=0,
                             max_sentences=1200, seed=seed))
        return m, list(analyzed)

    a, kiwi_a = build("a", [first, half])
    b, _ = build("b", [half, first])  # the inputs the other way round: the same documents, the same sample
    c, kiwi_c = build("c", [first, half], seed=1)
    n = a["counts"]
    assert n["documents_used"] == 3040 and n["documents_sampled"] == len(kiwi_a) < 3040 / 2
    assert n["characters_sampled"] == sum(map(len, kiwi_a)) < n["characters"] / 2
    assert 1200 <= n["sentences"] and n["sentences_trained_on"] == 1200
    assert sorted(kiwi_a) != sorted(kiwi_c)
    assert sha256_file(tmp_path / "a" / "spm.model") != sha256_file(tmp_path / "c" / "spm.model")
    build("a2", [first, half])
    assert sha256_file(tmp_path / "a" / "spm.model") == sha256_file(tmp_path / "a2" / "spm.model")
    assert b["counts"]["documents_sampled"] == n["documents_sampled"] and b["counts"]["characters_sampled"] == n["characters_sampled"]


def test_estimate_sentences_counts_endings_and_lines():
    from corpus_tools.vocab import estimate_sentences

    assert [estimate_sentences(t) for t in ("영화 재밌다", "재밌다. 또 볼래요!", "첫 문장.\n둘째 줄\n셋째?", "3.5점 줬어요")] == [1, 2, 3, 1]


def test_machine_names_its_vector_units(monkeypatch):
    """Two "AMD EPYC" machines can differ in AVX-512 and bf16, and torch's CPU kernels with them: the
    record says which one a number came from."""
    import corpus_tools.artifacts as A

    flags = {"flags": "fpu sse4_2 avx avx2 fma", "model name": "AMD EPYC"}
    monkeypatch.setattr(A, "cpuinfo", lambda field: flags.get(field))
    assert (A.machine()["simd"], A.machine()["bf16"]) == ("avx2", False)
    flags["flags"] += " avx512f avx512_bf16"
    assert (A.machine()["simd"], A.machine()["bf16"]) == ("avx512", True)
    flags.pop("flags")  # no /proc/cpuinfo flags (another OS): nothing claimed
    assert "simd" not in A.machine() and A.machine()["cpu"] == "AMD EPYC"
