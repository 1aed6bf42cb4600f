"""Using a model: AutoTokenizer / pipeline loading (korbert/hub.py), fill-mask and embeddings (korbert/use.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import without_korbert

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "runs" / "demo" / "pretrain" / "final"
TEXTS = ["나는 학교에 갔다", "영화가 정말 재미있었어요", "오늘은 날씨가 좋아서 공원에 산책을 나갔는데 사람이 아주 많았다"]


@pytest.fixture(scope="module")
def model4(tmp_path_factory, vocab_dir) -> Path:
    """An exported tiny model (random BertForPreTraining, 4 layers so that concat4/sum4 apply) through
    korbert.checkpoint.export: config, weights, tokenizer, the AutoTokenizer files and manifest.json."""
    from transformers import BertConfig, BertForPreTraining

    from korbert.checkpoint import export
    from korbert.tokenizer import KorBertTokenizer

    tok = KorBertTokenizer.from_pretrained(vocab_dir)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    out = tmp_path_factory.mktemp("use") / "final"
    export(BertForPreTraining(config), tok, out, {"step": 0})
    return out


@pytest.fixture(scope="module")
def enc(model4):
    from korbert.use import Encoder

    return Encoder(model4, device="cpu")


# -- loading like a Hub model -------------------------------------------------------------------


def test_export_writes_auto_files_into_manifest(model4):
    from corpus_tools.artifacts import read_manifest

    m = read_manifest(model4, "model", verify=True)
    assert {"tokenization_korbert.py", "korbert_morph.py", "korbert_text.py", "tokenizer_config.json"} <= set(m["files"])
    cfg = json.loads((model4 / "tokenizer_config.json").read_text())
    assert cfg["auto_map"]["AutoTokenizer"] == [None, "tokenization_korbert.KorBertTokenizer"]
    assert cfg["tokenizer_class"] == "KorBertTokenizer"
    for name in ("tokenization_korbert.py", "korbert_morph.py"):
        src = (model4 / name).read_text()
        assert not re.search(r"^\s*(from corpus_tools|import korbert|from korbert)", src, re.M)  # self-contained


def test_autotokenizer_returns_korbert_tokenizer_issue13(model4, enc):
    """Was: a generic TokenizersBackend splitting 갔다 without Kiwi, silently."""
    from transformers import AutoTokenizer

    from korbert.tokenizer import KorBertTokenizer

    tok = AutoTokenizer.from_pretrained(model4)
    assert type(tok) is KorBertTokenizer
    text = "나는 학교에 갔다"
    assert tok(text)["input_ids"] == enc.tok(text)["input_ids"]
    assert tok.fingerprint == enc.tok.fingerprint


def _run(code: str, cwd: Path, env: dict | None = None) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_registration_when_korbert_is_imported_first(model4, tmp_path):
    """A fresh process: `import korbert` before transformers' auto module exists (the lazy hook)."""
    out = _run(
        "import sys, korbert\n"
        "assert 'transformers.models.auto.tokenization_auto' not in sys.modules\n"
        "from transformers import AutoTokenizer\n"
        f"t = AutoTokenizer.from_pretrained({str(model4)!r})\n"
        "print(type(t).__module__, type(t).__name__)",
        tmp_path,
    )
    assert out.split() == ["korbert.tokenizer", "KorBertTokenizer"]


def test_plain_transformers_trust_remote_code(model4, enc, tmp_path):
    """Without korbert (nor corpus_tools) importable: the folder's own tokenizer module, as for a Hub
    model with a custom tokenizer; the fill-mask pipeline too. The ids equal korbert's."""
    texts = ["나는 학교에 갔다", unicodedata.normalize("NFD", "한국어 문장을 [MASK] 합니다")]
    r = without_korbert(
        "import json, importlib.util\n"
        "from transformers import AutoTokenizer, pipeline\n"
        f"t = AutoTokenizer.from_pretrained({str(model4)!r}, trust_remote_code=True)\n"
        f"texts = {texts!r}\n"
        "enc = t(texts, return_offsets_mapping=True)\n"
        f"fm = pipeline('fill-mask', model={str(model4)!r}, trust_remote_code=True, top_k=3)\n"
        "print(json.dumps({'cls': type(t).__module__ + '.' + type(t).__name__, 'ids': enc['input_ids'],\n"
        "    'offsets': enc['offset_mapping'], 'pipe_tok': type(fm.tokenizer).__name__, 'fill': fm(texts[1])}))",
        tmp_path,
    )
    assert r["cls"].startswith("transformers_modules.") and r["cls"].endswith("tokenization_korbert.KorBertTokenizer")
    want = enc.tok(texts, return_offsets_mapping=True)
    assert r["ids"] == want["input_ids"]
    assert [[list(p) for p in row] for row in want["offset_mapping"]] == r["offsets"]
    assert r["pipe_tok"] == "KorBertTokenizer"
    from korbert.use import fill_mask

    mine = fill_mask(enc, [texts[1]], top_k=3)[0]["masks"][0]["candidates"]
    assert [c["id"] for c in mine] == [x["token"] for x in r["fill"]]
    np.testing.assert_allclose([c["prob"] for c in mine], [x["score"] for x in r["fill"]], atol=1e-5)


def test_plain_transformers_without_trust_remote_code_fails_and_says_how(model4, tmp_path):
    """Was: a generic TokenizersBackend that splits eojeols, not morphemes, without a word. Now the
    generic loaders (AutoTokenizer, pipeline, tokenizers itself) refuse tokenizer.json and quote
    how to load it; AutoModel still loads the weights."""
    r = without_korbert(
        "import json\n"
        "from transformers import AutoModel, AutoTokenizer, pipeline\n"
        "from tokenizers import Tokenizer\n"
        "errors = []\n"
        f"for load in (lambda: AutoTokenizer.from_pretrained({str(model4)!r}),\n"
        f"             lambda: pipeline('fill-mask', model={str(model4)!r}),\n"
        f"             lambda: Tokenizer.from_file({str(model4 / 'tokenizer.json')!r})):\n"
        "    try:\n        load()\n        errors.append(None)\n"
        "    except Exception as e:\n        errors.append(str(e))\n"
        f"m = AutoModel.from_pretrained({str(model4)!r})\n"
        "print(json.dumps({'errors': errors, 'model': type(m).__name__}))",
        tmp_path,
    )
    assert r["model"] == "BertModel"
    for err in r["errors"]:
        assert err is not None and "import korbert" in err and "trust_remote_code=True" in err, err


def test_folder_saved_before_the_guard_loads_and_gets_it(model4, enc, tmp_path):
    """tokenizer.json written before the guard (plain "▁" placeholder) still loads with the same
    hash; add_auto_files(update_manifest=True) adds the guard and re-hashes the manifest."""
    import shutil

    from corpus_tools.artifacts import read_manifest
    from korbert.hub import add_auto_files
    from korbert.tokenizer import GUARD, KorBertTokenizer

    old = tmp_path / "old"
    shutil.copytree(model4, old)
    state = json.loads((old / "tokenizer.json").read_text(encoding="utf-8"))
    assert state["pre_tokenizer"]["replacement"] == GUARD
    state["pre_tokenizer"]["replacement"] = "▁"
    (old / "tokenizer.json").write_text(json.dumps(state), encoding="utf-8")
    tok = KorBertTokenizer.from_pretrained(old)
    assert tok.fingerprint == enc.tok.fingerprint and tok(TEXTS)["input_ids"] == enc.tok(TEXTS)["input_ids"]
    weights = next(p for p in old.iterdir() if p.suffix in (".safetensors", ".bin"))
    weights.chmod(0o600)  # as safetensors left an export before issue 65
    assert "tokenizer.json" in add_auto_files(old, update_manifest=True)
    assert GUARD in (old / "tokenizer.json").read_text(encoding="utf-8")
    from corpus_tools.artifacts import file_mode

    assert weights.stat().st_mode & 0o777 == file_mode()  # readable by the group and others again
    read_manifest(old, "model", verify=True)
    assert "tokenizer.json" not in add_auto_files(old)  # already guarded: left as it is


def test_pipelines_with_the_folder_name_alone(model4, enc):
    from transformers import pipeline

    from korbert.tokenizer import KorBertTokenizer
    from korbert.use import fill_mask, token_states

    fm = pipeline("fill-mask", model=str(model4), top_k=4)
    assert type(fm.tokenizer) is KorBertTokenizer
    got = fm("영화가 정말 [MASK]")
    mine = fill_mask(enc, ["영화가 정말 [MASK]"], top_k=4)[0]["masks"][0]["candidates"]
    assert [g["token"] for g in got] == [c["id"] for c in mine]
    np.testing.assert_allclose([g["score"] for g in got], [c["prob"] for c in mine], atol=1e-6)

    fe = pipeline("feature-extraction", model=str(model4))
    assert type(fe.tokenizer) is KorBertTokenizer
    feats = np.asarray(fe(TEXTS[0]))[0]  # (T, H): the last layer, [CLS] ... [SEP]
    _, inputs = enc.batch([TEXTS[0]])
    want = token_states(enc.hidden_states(inputs).hidden_states, -1)[0].numpy()
    np.testing.assert_allclose(feats, want, atol=1e-5)


# -- fill-mask ----------------------------------------------------------------------------------


def test_fill_mask_several_masks_and_pairs(enc):
    from transformers import BertForMaskedLM

    from korbert.use import fill_mask

    text, pair = "나는 [MASK]에 갔다", "그리고 [MASK]을 먹었다"
    (r,) = fill_mask(enc, [text], [pair], top_k=5)
    assert [m["segment"] for m in r["masks"]] == [0, 1]
    assert text[r["masks"][0]["start"] : r["masks"][0]["end"]] == "[MASK]"
    assert pair[r["masks"][1]["start"] : r["masks"][1]["end"]] == "[MASK]"
    # the probabilities are the MLM head's softmax at each masked position
    ref = BertForMaskedLM.from_pretrained(enc.folder).eval()
    b = enc.tok(text, pair, return_tensors="pt")
    with torch.no_grad():
        p = torch.softmax(ref(**b).logits[0], -1)
    pos = (b["input_ids"][0] == enc.tok.mask_token_id).nonzero().flatten().tolist()
    for m, at in zip(r["masks"], pos):
        probs = [c["prob"] for c in m["candidates"]]
        assert probs == sorted(probs, reverse=True) and len(probs) == 5
        np.testing.assert_allclose(probs, torch.topk(p[at], 5).values.numpy(), atol=1e-6)
    a, bb = r["filled"]
    assert "[MASK]" not in a + bb and a.startswith("나는 ") and bb.startswith("그리고 ")
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        fill_mask(enc, ["마스크가 없는 문장"])


def test_fill_mask_cli_json(model4, capsys):
    from korbert.cli import main

    assert main(["fill-mask", str(model4), "영화가 정말 [MASK] [MASK]", "--json", "--top-k", "2"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert len(r["masks"]) == 2 and all(len(m["candidates"]) == 2 for m in r["masks"])
    assert main(["fill-mask", str(model4), "마스크 없음"]) == 2  # a clear error, not a traceback


# -- embeddings ---------------------------------------------------------------------------------


def test_pooling_shapes_and_definitions(enc):
    from korbert.use import sentence_vectors

    _, inputs = enc.batch(TEXTS)
    hs = enc.hidden_states(inputs).hidden_states  # 5 x (3, T, 32)
    m = inputs["attention_mask"].unsqueeze(-1).float()
    mean = lambda x: ((x * m).sum(1) / m.sum(1)).numpy()  # noqa: E731
    cases = {
        ("cls", -1): hs[-1][:, 0].numpy(),
        ("cls", 2): hs[2][:, 0].numpy(),
        ("mean", -1): mean(hs[-1]),
        ("mean", 0): mean(hs[0]),
        ("mean", "concat4"): mean(torch.cat(hs[-4:], -1)),
        ("cls", "sum4"): sum(hs[-4:])[:, 0].numpy(),
    }
    for (pooling, layer), want in cases.items():
        got = sentence_vectors(enc, TEXTS, pooling, layer)
        assert got.shape == (3, 128 if layer == "concat4" else 32) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"{pooling} {layer}")
    for bad in (5, -6, "concat3", "x"):
        with pytest.raises(ValueError, match="layer"):
            sentence_vectors(enc, TEXTS, "mean", bad)
    with pytest.raises(ValueError, match="pooling"):
        sentence_vectors(enc, TEXTS, "max")


def test_padding_invariance(enc):
    """A sentence alone and inside a padded batch (next to much longer ones) give the same vectors."""
    from korbert.use import sentence_vectors, token_vectors

    batch = [TEXTS[2] * 2, TEXTS[0], "짧다"]
    for pooling in ("cls", "mean"):
        for layer in (-1, "concat4", "sum4"):
            alone = sentence_vectors(enc, [TEXTS[0]], pooling, layer)[0]
            padded = sentence_vectors(enc, batch, pooling, layer)[1]
            np.testing.assert_allclose(alone, padded, atol=1e-5, rtol=0)
    alone, padded = token_vectors(enc, [TEXTS[0]], "morpheme")[0], token_vectors(enc, batch, "morpheme")[1]
    assert alone.spans == padded.spans
    np.testing.assert_allclose(alone.vectors, padded.vectors, atol=1e-5, rtol=0)


def test_token_vectors_are_aligned_by_offsets(enc):
    from korbert.use import token_vectors

    text = "나는  학교에 갔다. 한국어\t문장!"
    nfd = unicodedata.normalize("NFD", text)
    toks = token_vectors(enc, [text], "token")[0]
    b = enc.tok(text, return_offsets_mapping=True, add_special_tokens=False)
    assert toks.spans == [tuple(o) for o in b["offset_mapping"]]
    assert "".join(t for t in toks.texts if not t.isspace()) == "".join(text.split())
    eoj = token_vectors(enc, [text, nfd], "eojeol")
    assert eoj[0].texts == text.split()  # every span slices the user's string
    assert [unicodedata.normalize("NFC", t) for t in eoj[1].texts] == text.split()
    assert all(nfd[s:e] == t for (s, e), t in zip(eoj[1].spans, eoj[1].texts))
    mor = token_vectors(enc, [text], "morpheme")[0]
    assert mor.texts[:3] == ["나", "는", "학교"] and "".join(mor.texts) == "".join(text.split())
    assert len(mor.spans) == mor.vectors.shape[0] and mor.vectors.shape[1] == 32
    # a unit's vector is the mean of its tokens' vectors
    tok_rows = {s: v for s, v in zip(toks.spans, toks.vectors)}
    for (s, e), v in zip(mor.spans, mor.vectors):
        inside = [tv for (a, z), tv in tok_rows.items() if s <= a and z <= e and not text[a:z].isspace()]
        np.testing.assert_allclose(v, np.mean(inside, 0), atol=1e-6)


def test_embed_file_streams_npy_and_index(model4, enc, tmp_path):
    from korbert.cli import main as cli
    from korbert.use import sentence_vectors, token_vectors

    lines = [TEXTS[i % 3] + (" 그리고" * (i % 7)) for i in range(45)] + ["", "끝"]
    src = tmp_path / "texts.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "emb"
    args = ["embed", str(model4), "--input", str(src), "--out", str(out), "--pooling", "cls", "--layer", "sum4", "--unit", "eojeol", "--batch-size", "4", "--max-length", "16", "--no-progress"]
    assert cli(args) == 0
    sent = np.load(out / "sentences.npy")
    assert sent.shape == (47, 32)
    from korbert.use import Encoder

    short = Encoder(model4, max_length=16)
    np.testing.assert_allclose(sent, sentence_vectors(short, lines, "cls", "sum4"), atol=1e-5)
    index = [json.loads(x) for x in (out / "index.jsonl").read_text().splitlines()]
    assert [r["row"] for r in index] == list(range(47))
    assert any(r["truncated"] for r in index) and not index[0]["truncated"]
    toks = np.load(out / "tokens.npy")
    want = token_vectors(short, lines, "eojeol", "sum4")
    assert index[-1]["tokens"][1] == len(toks)
    for r, w, line in zip(index, want, lines):
        a, z = r["tokens"]
        assert [tuple(s) for s in r["spans"]] == w.spans
        assert all(line[s:e] for s, e in w.spans)
        np.testing.assert_allclose(toks[a:z], w.vectors, atol=1e-5)
    m = json.loads((out / "manifest.json").read_text())
    assert m["kind"] == "embeddings" and m["texts"] == 47 and m["layer"] == "sum4" and m["tokenizer_hash"] == enc.tok.fingerprint


@pytest.mark.slow
def test_same_word_closer_in_similar_sentence_demo_model():
    """The check people make by hand, on the model the demo recipe pretrains: a word's vector in two
    similar sentences is closer than in an unrelated one."""
    if not (DEMO / "model.safetensors").is_file():
        pytest.skip(f"{DEMO}: run `korbert run --preset demo` first")
    from korbert.use import Encoder, token_vectors

    enc = Encoder(DEMO, device="cpu")
    cases = [
        ("어제 본 영화가 정말 재미있었다", "오늘 본 영화가 정말 재미있었다", "영화 산업의 매출이 크게 줄었다", "영화"),
        ("이 영화 정말 최고다", "이 영화 진짜 최고다", "회사 실적이 최고 수준을 기록했다", "최고"),
        ("우리는 배를 타고 바다로 나갔다", "그들은 배를 타고 바다로 나갔다", "점심을 먹고 배가 아파서 병원에 갔다", "배"),
    ]

    def vec(text, word):
        tv = token_vectors(enc, [text], "morpheme")[0]
        return tv.vectors[tv.texts.index(word)]

    cos = lambda x, y: float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))  # noqa: E731
    for similar_a, similar_b, unrelated, word in cases:
        a, b, c = vec(similar_a, word), vec(similar_b, word), vec(unrelated, word)
        assert cos(a, b) > cos(a, c), word


# -- attention views ----------------------------------------------------------------------------


def test_attention_views(model4, tmp_path):
    from PIL import Image

    from korbert.attention import attention, hangul_font, main, missing_glyphs
    from korbert.use import Encoder

    font = hangul_font()
    r = main(str(model4), "나는 학교에 갔다", "영화가 정말 재미있었어요", out=str(tmp_path / "att"), device="cpu")
    L, H, T, T2 = r["shape"]
    assert (L, H) == (4, 2) and T == T2 == len(r["tokens"])
    assert not missing_glyphs(font, "".join(r["tokens"]).replace("▁", "")), "labels would draw as empty boxes"
    with Image.open(r["png"]) as im:
        assert im.size[0] > 400 and im.size[1] > 400
    page = Path(r["html"]).read_text(encoding="utf-8")
    assert "학교" in page and "<script src" not in page and "http" not in page  # self-contained, no network
    data = json.loads(Path(r["json"]).read_text(encoding="utf-8"))
    att = np.asarray(data["attention"])
    assert att.shape == (L, H, T, T) and data["tokens"] == r["tokens"]
    np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)  # one batch of one: no padding, rows are distributions
    # the probabilities are the model's own (eager attention of transformers' BertModel)
    from transformers import BertModel

    ref = BertModel.from_pretrained(model4, attn_implementation="eager").eval()
    enc = Encoder(model4, device="cpu", attention=True)
    b = enc.tok("나는 학교에 갔다", "영화가 정말 재미있었어요", return_tensors="pt")
    with torch.no_grad():
        want = torch.stack(ref(**b, output_attentions=True).attentions)[:, 0].numpy()
    np.testing.assert_allclose(att, want, atol=1e-5)
    np.testing.assert_allclose(attention(enc, "나는 학교에 갔다", "영화가 정말 재미있었어요")["attention"], want, atol=1e-6)
    with pytest.raises(RuntimeError, match="Hangul"):
        hangul_font(str(tmp_path / "att" / "attention.json"))
