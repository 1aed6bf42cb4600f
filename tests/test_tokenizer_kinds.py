"""The tokenizer kinds of `korbert vocab --kind`. morpheme-attached: a word-start "▁" stands alone only before a rare character,
at the same vocabulary size, with fewer tokens and the same offsets and decoding. plain
(korbert/plain.py): SentencePiece over the NFC text, no Kiwi. Its vocabulary is deterministic and built without Kiwi; its folder is a standard
fast tokenizer that AutoTokenizer loads with neither korbert nor Kiwi importable; its shards split
sentences at punctuation and mask whole eojeols, without Kiwi; and `korbert run --set
vocab.kind=plain` runs every stage with kiwipiepy unimportable. Real SentencePiece, tokenizers,
transformers; the sample's text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import load_benchmark, sample_texts, write_jsonl

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ["영화가 정말 재미있었다. 배우들의 연기도 좋았고 음악도 좋았다.", "별로였어요", "다시 보고  싶은 영화입니다!! 강추", "신용 대출을 신청하고 싶어요"]


def blocked(tmp: Path, *modules: str) -> dict:
    """An environment where importing each of `modules` fails (shadowed on PYTHONPATH)."""
    d = tmp / ("blocked-" + "-".join(modules))
    d.mkdir(exist_ok=True)
    for m in modules:
        (d / f"{m}.py").write_text(f'raise ImportError("{m} is not installed here (test)")\n', encoding="utf-8")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(d), str(ROOT)])}


def korbert_cli(args: list[str], env: dict, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "korbert.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory, corpus_file) -> Path:
    """A plain vocabulary of the session corpus, built in a process where kiwipiepy cannot be imported."""
    tmp = tmp_path_factory.mktemp("plain")
    out = tmp / "vocab"
    korbert_cli(["vocab", "--kind", "plain", "--inputs", str(corpus_file), "--out", str(out), "--vocab-size", "3000",
                 "--num-unused", "5", "--show", "0"], blocked(tmp, "kiwipiepy"), tmp)
    return out


@pytest.fixture(scope="module")
def plain(plain_dir):
    from korbert import foreign

    return foreign.load(plain_dir, "test")


def test_the_plain_vocabulary_is_deterministic_and_needs_no_kiwi(plain_dir, corpus_file, tmp_path):
    from corpus_tools.vocab import VocabConfig, main

    again = tmp_path / "again"
    m = main(VocabConfig(inputs=[str(corpus_file)], out=str(again), vocab_size=3000, num_unused=5, show=0, kind="plain"))
    for name in ("spm.model", "tokenizer.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (plain_dir / name).read_bytes(), name
    first = json.loads((plain_dir / "manifest.json").read_text())
    assert m["tokenizer_hash"] == first["tokenizer_hash"] and first["config"]["kind"] == "plain" and "kiwi" not in first["config"]
    assert first["counts"]["vocab_size"] == 3000 and "seconds_kiwi" not in first["counts"]
    # another seed samples the same small corpus whole, so: another corpus gives another vocabulary
    other = main(VocabConfig(inputs=[str(write_jsonl(tmp_path / "other.jsonl", sample_texts(3000)[::-1][:2000]))],
                             out=str(tmp_path / "other"), vocab_size=3000, num_unused=5, show=0, kind="plain"))
    assert other["tokenizer_hash"] != m["tokenizer_hash"]


def test_autotokenizer_loads_a_plain_folder_with_neither_korbert_nor_kiwi(plain_dir, plain, tmp_path):
    import unicodedata

    texts = TEXTS + [unicodedata.normalize("NFD", TEXTS[0])]
    script = (
        "import json, sys\n"
        "from transformers import AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained({str(plain_dir)!r})\n"
        f"enc = tok({texts!r}, return_offsets_mapping=True)\n"
        "pair = tok('가', '나')\n"
        "print(json.dumps({'ids': enc['input_ids'], 'offsets': enc['offset_mapping'], 'pair': pair['input_ids'],\n"
        "                  'types': pair['token_type_ids'], 'cls': type(tok).__name__,\n"
        "                  'decoded': [tok.decode(i, skip_special_tokens=True) for i in enc['input_ids']]}))\n"
    )
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=blocked(tmp_path, "korbert", "corpus_tools", "kiwipiepy"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    ref = plain(texts, return_offsets_mapping=True)
    assert out["ids"] == ref["input_ids"] and out["cls"] != "KorBertTokenizer"
    assert out["ids"][-1] == out["ids"][0]  # NFD input: the same tokens as its NFC form
    assert out["pair"][0] == 2 and out["pair"].count(3) == 2 and out["types"][-1] == 1  # [CLS] A [SEP] B [SEP] at korbert's ids
    for text, offsets, ids in zip(texts[:-1], out["offsets"], out["ids"]):  # NFC text: exact spans
        pieces = plain.convert_ids_to_tokens(ids)[1:-1]
        spans = [text[a:b] for (a, b), p in zip(offsets[1:-1], pieces) if p != "▁"]  # a lone "▁" spans the next character
        assert all(s and not s.isspace() for s in spans)  # offsets index the string given, and never hold a space
        assert "".join(spans) == "".join(text.split())
    # NFD text: tokenizers' NFC can end a span inside a decomposed syllable (huggingface/tokenizers#1201),
    # but the spans stay inside the string, in order
    nfd_offsets = out["offsets"][-1][1:-1]
    assert all(0 <= a < b <= len(texts[-1]) for a, b in nfd_offsets) and [a for a, _ in nfd_offsets] == sorted(a for a, _ in nfd_offsets)
    assert out["decoded"][:4] == [" ".join(t.split()) for t in TEXTS]  # decodes back to the text (whitespace runs as one space)


def test_plain_byte_fallback_offsets_are_per_character_issue_59(plain_dir, plain):
    """齋藤實: three characters the vocabulary lacks. SentencePiece merges them into one unknown run, and
    its nine byte tokens all carried the run's span (3, 6); each character's bytes now carry its own,
    in AutoTokenizer's load of tokenizer.json too, and the ids stay SentencePiece's own."""
    import sentencepiece as spm
    from transformers import AutoTokenizer

    text = "나는 齋藤實 씨와 齋 藤를 만났다"
    for tok in (plain, AutoTokenizer.from_pretrained(str(plain_dir))):
        enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
        spans = [o for o, p in zip(enc["offset_mapping"], tok.convert_ids_to_tokens(enc["input_ids"])) if p.startswith("<0x")]
        assert spans == [(3, 4)] * 3 + [(4, 5)] * 3 + [(5, 6)] * 3 + [(10, 11)] * 3 + [(12, 13)] * 3
        assert [text[a:b] for a, b in spans[::3]] == ["齋", "藤", "實", "齋", "藤"]
        assert enc["input_ids"] == spm.SentencePieceProcessor(model_file=str(plain_dir / "spm.model")).encode(text)
    assert json.loads((plain_dir / "manifest.json").read_text(encoding="utf-8"))["config"]["plain_version"] == 2


def test_plain_documents_split_sentences_at_punctuation_and_eojeols_at_spaces_without_kiwi(plain):
    from korbert.foreign import DocumentEncoder
    from korbert.plain import sentence_starts

    assert sentence_starts("좋다. 정말!! 그래?") == [0, 4, 9] and sentence_starts("끝.") == [0]
    assert sentence_starts('그는 "가자." 했다') == [0, 9]  # a closing quote stays with its sentence
    enc = DocumentEncoder(plain)
    assert enc.plain
    encs = enc.encode_documents(TEXTS)
    ref = plain(TEXTS, add_special_tokens=False)
    for i, (text, e) in enumerate(zip(TEXTS, encs)):
        assert e["ids"].tolist() == ref["input_ids"][i]
        for k in range(1, len(e["ids"])):  # a new eojeol exactly where whitespace came before the token
            gap = text[e["offsets"][k - 1][1] : e["offsets"][k][0]]
            assert (e["eojeol"][k] != e["eojeol"][k - 1]) == (gap != "" and gap.strip() == "")
        assert e["morpheme"].tolist() == ref.word_ids(i)  # the tokenizer's words: the eojeols
    assert encs[0]["sentence"].max() == 1 and encs[1]["sentence"].max() == 0 and encs[2]["sentence"].max() == 1


def test_plain_shards_without_kiwi_mask_whole_eojeols(plain_dir, plain, corpus_file, tmp_path):
    from corpus_tools.masking import instance_keys, mask_batch
    from corpus_tools.shard_format import MaskConfig
    from korbert.foreign import DocumentEncoder

    out = tmp_path / "shards"
    korbert_cli(["shards", "--tokenizer", str(plain_dir), "--inputs", str(corpus_file), "--out", str(out), "--mask-unit", "eojeol",
                 "--valid-fraction", "0.05", "--show", "0"], blocked(tmp_path, "kiwipiepy"), tmp_path)
    m = json.loads((out / "manifest.json").read_text())
    assert m["tokenizer_hash"] == json.loads((plain_dir / "manifest.json").read_text())["tokenizer_hash"]
    assert m["counts"]["train"]["instances"] > 1000 and m["config"]["mask_unit"] == "eojeol"

    mcfg = MaskConfig.from_tokenizer(plain, 0.3)
    split = 0
    for seed, e in enumerate(DocumentEncoder(plain).encode_documents(sample_texts(200))):
        if len(e["ids"]) < 4:
            continue
        _, masked = mask_batch(e["ids"], np.array([len(e["ids"])]), instance_keys(seed, 0, np.array([0])), e["eojeol"], mcfg)
        for w in np.unique(e["eojeol"]):
            chosen = masked[e["eojeol"] == w]
            split += bool(chosen.any() and not chosen.all())
    assert split == 0


def test_the_recipe_runs_the_plain_kind_end_to_end_without_kiwi(corpus_file, tmp_path):
    from test_recipe import TINY

    out = tmp_path / "run"
    korbert_cli(["run", "--preset", "demo", "--out", str(out), "--corpus", str(corpus_file), "--set", *TINY, "vocab.kind=plain"],
                blocked(tmp_path, "kiwipiepy"), tmp_path, timeout=900)
    report = json.loads((out / "report.json").read_text())
    assert report["corpus"]["tokenizer_kind"] == "plain"
    assert "of plain SentencePiece pieces (no Kiwi)" in (out / "report.md").read_text()
    assert all(row["korquad_f1"] is not None for row in report["table"][:2])
    assert list(json.loads((out / "nsmc" / "baseline" / "results.json").read_text())["baselines"]) == ["char"]  # no Kiwi n-grams
    final = out / "pretrain" / "final"
    assert json.loads((final / "manifest.json").read_text())["tokenizer_kind"] == "plain"
    card = (final / "README.md").read_text()
    assert "a plain SentencePiece vocabulary" in card and "kiwi" not in card.split("---")[1]
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(str(final))
    assert auto("영화 좋다")["input_ids"][0] == 2
    # it cuts where the model was trained (issue 65), and is still the tokenizer the shards were made with
    m = json.loads((final / "manifest.json").read_text())
    assert auto.model_max_length == m["trained_seq_len"] < 10_000 and f"model_max_length {m['trained_seq_len']}:" in card
    shards = json.loads((out / "shards" / "manifest.json").read_text())
    assert m["tokenizer_hash"] == shards["tokenizer_hash"]
    from korbert.folders import TOKENIZER_FILES, files_sha256, tokenizer_files_sha256

    assert tokenizer_files_sha256(out / "vocab") == files_sha256(out / "vocab", TOKENIZER_FILES)  # a vocabulary's: its files, as before


@pytest.fixture(scope="module")
def attached_dir(tmp_path_factory, corpus_file) -> Path:
    """The morpheme-attached vocabulary of the session corpus, the size of the `vocab_dir` fixture's."""
    from corpus_tools.vocab import VocabConfig, main

    out = tmp_path_factory.mktemp("attached")
    main(VocabConfig(inputs=[str(corpus_file)], out=str(out), vocab_size=3000, num_unused=5, show=0, kind="morpheme-attached"))
    return out


def test_the_attached_kind_leaves_a_word_start_alone_only_before_rare_characters_and_keeps_offsets_and_decoding(attached_dir, vocab_dir, corpus_file, tmp_path):
    from corpus_tools import SAMPLE_DATA
    from corpus_tools.guard import korquad_contexts
    from corpus_tools.vocab import VocabConfig, main
    from korbert.tokenizer import KorBertTokenizer

    attached, morpheme = KorBertTokenizer.from_pretrained(attached_dir), KorBertTokenizer.from_pretrained(vocab_dir)
    assert len(attached) == len(morpheme) == 3000
    texts = [" ".join(t.split()) for t in sample_texts(3500)[3000:]] + [" ".join(c.split()) for _, c in korquad_contexts(SAMPLE_DATA / "korquad_dev.json")]
    lone, tokens, vocab, after_lone = {}, {}, attached.get_vocab(), set()  # after_lone: the characters a lone "▁" precedes
    for name, tok in (("attached", attached), ("morpheme", morpheme)):
        enc = tok(texts, add_special_tokens=False, return_offsets_mapping=True)
        lone[name] = tokens[name] = 0
        for text, ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"]):
            pieces = tok.convert_ids_to_tokens(ids)
            tokens[name] += len(pieces)
            for k, p in enumerate(pieces):
                if p == "▁":
                    lone[name] += 1
                    if name == "attached":  # only where no piece starts the word: a rare word-start character, or byte fallback
                        assert k + 1 < len(pieces) and (pieces[k + 1].startswith("<0x") or "▁" + pieces[k + 1][0] not in vocab), \
                            (text, pieces[k : k + 2])
                        if not pieces[k + 1].startswith("<0x"):
                            after_lone.add(pieces[k + 1][0])
            assert tok.decode(ids) == text  # decodes back to the text
            spans = [tuple(o) for o, p in zip(offsets, pieces) if p != "▁"]
            spans = [o for k, o in enumerate(spans) if k == 0 or o != spans[k - 1]]  # a character's byte pieces share its span
            assert "".join(text[a:b] for a, b in spans) == text.replace(" ", "")  # the offsets cover the text exactly, spaces aside
    assert lone["morpheme"] > 0.05 * tokens["morpheme"] and lone["attached"] < 0.01 * tokens["attached"]
    assert lone["attached"] < 0.1 * lone["morpheme"]
    # rare: the characters a lone "▁" precedes begin few of the held-out words (2.1% here: the KorQuAD contexts start
    # words with Latin letters and hanja the review corpus rarely does; fallbacks kept for the rarest would make it most)
    starts = Counter(w[0] for t in texts for w in t.split(" ")[1:] if w)
    assert after_lone and sum(starts[c] for c in after_lone) < 0.05 * sum(starts.values())
    assert tokens["attached"] < 0.95 * tokens["morpheme"]

    # trained as the morpheme kind is: no piece holds the morpheme delimiter, a text's first word has no "▁"
    from corpus_tools.vocab import DELIM

    assert not any(DELIM in p for p in attached.get_vocab()) and not any(DELIM in p for p in morpheme.get_vocab())
    assert all(not attached.convert_ids_to_tokens(attached(t, add_special_tokens=False)["input_ids"])[0].startswith("▁") for t in texts)
    m = json.loads((attached_dir / "manifest.json").read_text())
    assert m["config"]["kind"] == "morpheme-attached"
    again = main(VocabConfig(inputs=[str(corpus_file)], out=str(tmp_path / "again"), vocab_size=3000, num_unused=5, show=0,
                             kind="morpheme-attached", force=True))
    assert again["tokenizer_hash"] == m["tokenizer_hash"]
    assert (tmp_path / "again" / "tokenizer.json").read_bytes() == (attached_dir / "tokenizer.json").read_bytes()


def test_the_stages_that_run_kiwi_key_on_its_version_and_plain_does_not_issue_59(vocab_dir, plain_dir, tmp_path, monkeypatch, capsys):
    """After `pip install -U kiwipiepy` a vocabulary and shards built with another analyzer were reused
    in silence. The upgrade itself is out of a test's reach: the recorded version is changed, or the
    installed one stood in for. Plain runs no Kiwi: its vocabulary and shards keys stay as they were."""
    import shutil

    from corpus_tools import morph
    from corpus_tools.shards import main as shards_main
    from corpus_tools.shards_config import ShardsConfig
    from corpus_tools.text import InputError
    from corpus_tools.vocab import VocabConfig, main
    from korbert.tokenizer import KorBertTokenizer

    corpus = write_jsonl(tmp_path / "c.jsonl", sample_texts(200))
    installed = morph.kiwi_versions()
    assert set(installed) == {"kiwipiepy", "kiwipiepy_model"}
    for kind, src in (("morpheme", vocab_dir), ("plain", plain_dir)):
        folder = tmp_path / kind
        shutil.copytree(src, folder)
        m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        cfg = VocabConfig(inputs=[i["path"] for i in m["inputs"]], out=str(folder), vocab_size=3000, num_unused=5, show=0, kind=kind)
        assert main(cfg, ready_only=True)["tokenizer_hash"] == m["tokenizer_hash"]  # up to date as built
        m["versions"]["kiwipiepy"] = "0.0.1"  # built under another Kiwi
        (folder / "manifest.json").write_text(json.dumps(m), encoding="utf-8")
        if kind == "plain":
            assert main(cfg, ready_only=True)["tokenizer_hash"] == m["tokenizer_hash"]
            continue
        with pytest.raises(InputError, match="no vocabulary built"):  # a redo, not a reuse
            main(cfg, ready_only=True)
        assert f"built with kiwipiepy 0.0.1 / kiwipiepy_model {installed['kiwipiepy_model']} (installed here" in capsys.readouterr().out
        KorBertTokenizer.from_pretrained(folder)  # the same tokenizer, loaded with one warning line
        warned = [line for line in capsys.readouterr().err.splitlines() if "kiwipiepy 0.0.1" in line]
        assert len(warned) == 1 and warned[0].startswith("WARNING: ") and "segment" in warned[0]

    for kind, tokenizer in (("morpheme", vocab_dir), ("plain", plain_dir)):
        cfg = ShardsConfig(tokenizer=str(tokenizer), inputs=[str(corpus)], out=str(tmp_path / f"shards-{kind}"), show=0, seed=1)
        key = shards_main(cfg)["key"]
        monkeypatch.setattr(morph, "kiwi_versions", lambda: {**installed, "kiwipiepy": "0.0.1"})
        if kind == "plain":
            assert shards_main(cfg, ready_only=True)["key"] == key
        else:
            with pytest.raises(InputError, match="no shards built"):
                shards_main(cfg, ready_only=True)
            monkeypatch.setattr(morph, "kiwi_versions", lambda: {})  # no Kiwi here: the shards' own record stands
            assert shards_main(cfg, ready_only=True)["key"] == key
        monkeypatch.undo()


def test_shards_and_a_vocabulary_built_before_the_kiwi_keys_stay_usable_under_the_same_kiwi(vocab_dir, tmp_path, monkeypatch, capsys):
    """Shards keyed before korbert keyed on Kiwi (and a vocabulary recorded before kiwipiepy_model was)
    are reused when the Kiwi they record is the installed one, so the pretraining runs keyed on them
    continue; under another recorded Kiwi they are not."""
    import shutil

    import corpus_tools.shards as shards_mod
    from corpus_tools.shards_config import ShardsConfig
    from corpus_tools.text import InputError
    from corpus_tools.vocab import VocabConfig, main

    corpus = write_jsonl(tmp_path / "c.jsonl", sample_texts(200))
    cfg = ShardsConfig(tokenizer=str(vocab_dir), inputs=[str(corpus)], out=str(tmp_path / "shards"), show=0, seed=1)
    with monkeypatch.context() as m:
        m.setattr(shards_mod, "_same_kiwi_key", lambda folder, before, key: before)  # what korbert keyed before
        old_key = shards_mod.main(cfg)["key"]
    assert shards_mod.main(cfg, ready_only=True)["key"] == old_key  # reused: no rebuild, the same key
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text(encoding="utf-8"))
    manifest["versions"]["kiwipiepy"] = "0.0.1"
    (tmp_path / "shards" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(InputError, match="no shards built"):
        shards_mod.main(cfg, ready_only=True)
    # a vocabulary whose record lacks kiwipiepy_model (recorded later) is up to date; one without kiwipiepy is not
    folder = tmp_path / "vocab"
    shutil.copytree(vocab_dir, folder)
    vm = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    vcfg = VocabConfig(inputs=[i["path"] for i in vm["inputs"]], out=str(folder), vocab_size=3000, num_unused=5, show=0)
    del vm["versions"]["kiwipiepy_model"]
    (folder / "manifest.json").write_text(json.dumps(vm), encoding="utf-8")
    assert main(vcfg, ready_only=True)["tokenizer_hash"] == vm["tokenizer_hash"]
    del vm["versions"]["kiwipiepy"]
    (folder / "manifest.json").write_text(json.dumps(vm), encoding="utf-8")
    with pytest.raises(InputError, match="no vocabulary built"):
        main(vcfg, ready_only=True)


def test_a_vocabulary_of_another_kind_is_rebuilt_and_an_older_morpheme_one_is_not(vocab_dir, corpus_file, tmp_path, capsys):
    """The default kind leaves the vocabulary's identity as before (folders built before --kind stay
    up to date); another kind in the same folder is another vocabulary, and korbert's own class
    refuses to load it."""
    import shutil

    from corpus_tools.vocab import VocabConfig, main
    from korbert.tokenizer import KorBertTokenizer

    old = json.loads((vocab_dir / "manifest.json").read_text())
    assert "kind" not in old["config"]
    folder = tmp_path / "v"
    shutil.copytree(vocab_dir, folder)
    capsys.readouterr()
    main(VocabConfig(inputs=[str(corpus_file)], out=str(folder), vocab_size=3000, num_unused=5, show=0))
    assert "vocabulary up to date" in capsys.readouterr().out
    m = main(VocabConfig(inputs=[str(corpus_file)], out=str(folder), vocab_size=3000, num_unused=5, show=0, kind="plain"))
    assert "up to date" not in capsys.readouterr().out and m["tokenizer_hash"] != old["tokenizer_hash"]
    assert not (folder / "special_tokens_map.json").exists() or json.loads((folder / "tokenizer_config.json").read_text())["korbert_kind"] == "plain"
    with pytest.raises(ValueError, match="not a korbert .*AutoTokenizer"):
        KorBertTokenizer.from_pretrained(folder)


def test_an_attached_vocabulary_of_another_attach_version_is_rebuilt(attached_dir, corpus_file, tmp_path, capsys, monkeypatch):
    """ATTACH_VERSION is part of the vocabulary's key: a folder built under another rule is not reused."""
    import shutil

    import corpus_tools.vocab as V

    folder = tmp_path / "v"
    shutil.copytree(attached_dir, folder)
    cfg = V.VocabConfig(inputs=[str(corpus_file)], out=str(folder), vocab_size=3000, num_unused=5, show=0, kind="morpheme-attached")
    capsys.readouterr()
    V.main(cfg)
    assert "vocabulary up to date" in capsys.readouterr().out
    monkeypatch.setattr(V, "ATTACH_VERSION", V.ATTACH_VERSION - 1)
    m = V.main(cfg)
    assert "up to date" not in capsys.readouterr().out and m["config"]["attach_version"] == V.ATTACH_VERSION


def hand_made_tokenizer(pieces: dict[str, float]):
    """A real fast tokenizer whose segmentation the test chooses: a Unigram model over `pieces`
    (scores), words at whitespace, "▁" before each (Metaspace), as the plain kind."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.Unigram([("[UNK]", 0.0), *pieces.items()], unk_id=0))
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=False)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_answer_alignment_and_text_stats_on_hand_made_cases():
    from evals.tokenizer_metrics import answer_alignment, text_stats

    # 서울에서 as one piece cannot hold the answer 서울; 서울 | 에서 can
    whole = hand_made_tokenizer({"▁서울에서": -1.0, "▁열렸다": -1.0, "▁": -2.0, "서울": -3.0, "에서": -3.0})
    split = hand_made_tokenizer({"▁서울": -1.0, "에서": -1.0, "▁열렸다": -1.0, "▁": -2.0, "서울에서": -5.0})
    ctx = "서울에서 열렸다"
    answers = [(ctx, 0, "서울"), (ctx, 0, "서울에서"), (ctx, 5, "열렸다"), (ctx, 5, "열렸")]
    assert whole.convert_ids_to_tokens(whole(ctx)["input_ids"]) == ["▁서울에서", "▁열렸다"]
    assert answer_alignment(whole, answers) == {"answers": 4, "aligned": 2, "aligned_share": 0.5}
    assert answer_alignment(split, answers) == {"answers": 4, "aligned": 3, "aligned_share": 0.75}

    # a lone "▁" spans the next character in a Metaspace tokenizer: it is no boundary of the text
    lone = hand_made_tokenizer({"▁가": -1.0, "▁": -2.0, "나다": -2.0, "나": -5.0, "다": -5.0})
    ctx = "가 나다"
    assert lone.convert_ids_to_tokens(lone(ctx)["input_ids"]) == ["▁가", "▁", "나다"]
    assert lone(ctx, return_offsets_mapping=True)["offset_mapping"][1] == (2, 3)  # the lone "▁" over 나
    assert answer_alignment(lone, [(ctx, 2, "나"), (ctx, 2, "나다")]) == {"answers": 2, "aligned": 1, "aligned_share": 0.5}

    s = text_stats(lone, ["가 나다", "가"])
    assert (s["characters"], s["tokens"]) == (5, 4) and s["tokens_per_char"] == 0.8
    assert s["lone_marker_share_of_tokens"] == 0.25 and s["lone_marker_share_of_word_starts"] == round(1 / 3, 4)
    assert s["byte_fallback_share"] == 0


def test_klue_ner_entities_on_token_boundaries_in_the_kinds_benchmark(tmp_path):
    """benchmarks/tokenizer_kinds.py's KLUE-NER measure: each gold entity is an answer of answer_alignment.
    A token holding the entity and its particle (경찰은) bounds neither 경찰 nor, across words, 서울 시청."""
    from evals.tokenizer_metrics import answer_alignment
    from test_klue_metric import NER_TSV

    path = tmp_path / "ner.tsv"
    path.write_text(NER_TSV, encoding="utf-8")
    entities = load_benchmark("tokenizer_kinds").ner_entities(path)
    assert [(e[1], e[2]) for e in entities] == [(0, "경찰"), (4, "서울 시청"), (0, "김")]
    whole = hand_made_tokenizer({"▁경찰은": -1.0, "▁서울": -1.0, "▁시청에": -1.0, "▁김모": -1.0, "▁": -2.0})
    split = hand_made_tokenizer({"▁경찰": -1.0, "은": -1.0, "▁서울": -1.0, "▁시청": -1.0, "에": -1.0, "▁김": -1.0, "모": -1.0, "▁": -2.0})
    assert answer_alignment(whole, entities) == {"answers": 3, "aligned": 0, "aligned_share": 0.0}
    assert answer_alignment(split, entities) == {"answers": 3, "aligned": 3, "aligned_share": 1.0}


def test_start_coverage_keeps_the_most_frequent_word_start_characters():
    """morpheme-attached's fallback knob on hand-made counts: the fewest most frequent characters that
    begin the asked share of words (ties by character), every character at 1."""
    from corpus_tools.vocab import _covering

    starts = Counter({"가": 50, "나": 30, "다": 15, "라": 5})
    assert _covering(starts, 1.0) is None
    assert _covering(starts, 0.5) == {"가"}
    assert _covering(starts, 0.8) == {"가", "나"}
    assert _covering(starts, 0.81) == {"가", "나", "다"}
    assert _covering(starts, 0.999) == {"가", "나", "다", "라"}
    assert _covering(Counter({"나": 5, "가": 5, "다": 5}), 0.5) == {"가", "나"}
    even = Counter({chr(0xAC00 + i): 7 for i in range(14)}) + Counter({"힣": 2})  # 100 starts; 0.07 * 100 is 7.000000000000001
    assert _covering(even, 0.07) == {"가"}
    with pytest.raises(ValueError, match="start coverage"):
        _covering(starts, 0.0)


def test_the_marker_side_probe_moves_each_space_and_mirrors_the_reserve():
    """benchmarks/marker_side_probe.py: a line's leading space (it follows another sentence) moves to the
    end of the line before it; reserve_markers(suffix=True) trains SentencePiece with the marker after the
    word and reserves p + "▁" pieces, so a held-out word's end marker rarely stands alone."""
    from corpus_tools.vocab import DELIM, VocabConfig, reserve_markers, segmented_sentences, train_spm

    probe = load_benchmark("marker_side_probe")
    assert probe.suffix_lines(["a\x1fb c", " d e", "f", " g"]) == ["a\x1fb c ", "d e", "f ", "g"]

    lines = segmented_sentences(sample_texts(5000)[:4500], threads=2)
    suf = probe.suffix_lines(lines)
    assert [line.replace(" ", "") for line in suf] == [line.replace(" ", "") for line in lines]
    cfg = VocabConfig(vocab_size=3000, num_unused=5, kind="morpheme-attached")
    model, added, fallbacks, reserve = reserve_markers(suf, cfg, 2, suffix=True)
    assert added and len(added) <= reserve and fallbacks <= len(added)
    assert all(p.endswith("▁") and not p.startswith("▁") and len(p) > 1 for p in added)
    assert any(len(p) > 2 for p in added)  # the longer pieces that precede a lone end marker (step 2), not only fallbacks
    assert not any(DELIM in p for p in added)

    held = probe.segments([" ".join(t.split()) for t in sample_texts(5000)[4500:]], threads=2)
    chars = sum(len(seg) for t in held for seg, _, _ in t)
    attached = probe.measure(model, added, held, chars, suffix=True)
    alone = probe.measure(train_spm(suf, cfg, 2, suffix=True), None, held, chars, suffix=True)  # no reserve: lone end markers
    assert alone["lone_marker_share_of_tokens"] > 0.03
    assert attached["lone_marker_share_of_tokens"] < 0.2 * alone["lone_marker_share_of_tokens"]
    assert attached["tokens"] < alone["tokens"]


def test_train_spm_asks_for_a_word_end_marker_only_for_the_probe(monkeypatch):
    """suffix=False (every kind) passes no treat_whitespace_as_suffix at all, so the SentencePiece
    model's bytes are as they were before the probe's option existed."""
    import sentencepiece as spm

    from corpus_tools.vocab import VocabConfig, train_spm

    seen = []

    def capture(**kw):
        seen.append(kw)
        raise RuntimeError("captured")

    monkeypatch.setattr(spm.SentencePieceTrainer, "train", capture)
    cfg = VocabConfig(vocab_size=100, num_unused=5)
    for suffix in (False, True):
        with pytest.raises(RuntimeError, match="captured"):
            train_spm(["가 나"], cfg, 1, suffix=suffix)
    assert "treat_whitespace_as_suffix" not in seen[0] and seen[1]["treat_whitespace_as_suffix"] is True
