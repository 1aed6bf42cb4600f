"""KorBertTokenizer: invariants on real and hostile text, HF compatibility, save/load, determinism."""

from __future__ import annotations

import json
import unicodedata
from contextlib import contextmanager

import pytest
import torch

from conftest import SAMPLE, nsmc_test_docs
from corpus_tools.morph import analyze

HOSTILE = [
    "👍🏽👨‍👩‍👧 이모지🤗가 섞인 문장",
    "漢字와 𠀀𪚥 확장 평면 문자",
    "ㄱ ㅋㅋㅋ ㅠㅠ ᄀ ᅡ 낱자모",
    "ＡＢＣ 전각 라틴 ｈｅｌｌｏ",
    "https://example.com/경로?q=한국어&x=1 주소",
    "탭\t과\n줄바꿈\r\n섞임",
    "   앞뒤 공백과   여러   공백   ",
    unicodedata.normalize("NFD", "분해된 한글 입력입니다"),
    "<0x41> ▁ 특수 문자열 (special tokens like [MASK] in text are recognized on purpose)",
    "\x00\x07제어\u200b문자",
]


def check_invariants(tok, text: str) -> list[str]:
    enc = tok(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    tokens = tok.convert_ids_to_tokens(enc["input_ids"])
    assert tok.unk_token_id not in enc["input_ids"], f"[UNK] in {tokens}"
    spans = [span for span, special in zip(enc["offset_mapping"], enc["special_tokens_mask"]) if not special]
    covered: list[int] = []
    prev = None
    for (s, e), t in zip(spans, [t for t, m in zip(tokens, enc["special_tokens_mask"]) if not m]):
        assert 0 <= s < e <= len(text), (t, s, e)
        if prev == (s, e):  # byte-fallback pieces of one character share its span
            assert t.startswith("<0x") and e - s <= 2, (t, s, e)
            continue
        assert prev is None or prev[1] <= s, f"overlap/out of order at {t!r} {(s, e)} after {prev}"
        if not text[s:e].isspace():
            assert not text[s].isspace() and not text[e - 1].isspace(), f"span of {t!r} has edge whitespace"
        covered += range(s, e)
        prev = (s, e)
    non_space = [i for i, c in enumerate(text) if not c.isspace()]
    assert [i for i in covered if not text[i].isspace()] == non_space, "a character was dropped or repeated"
    return tokens


@pytest.mark.parametrize("text", HOSTILE)
def test_offsets_invariants_hostile(tok, text):
    check_invariants(tok, text)


def test_offsets_invariants_real_reviews(tok):
    for text in nsmc_test_docs(300):
        check_invariants(tok, text)


def test_byte_fallback_never_widens_to_a_word(tok):
    text = "𪚥𠀀"  # two rare extension-plane characters, adjacent
    enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
    tokens = tok.convert_ids_to_tokens(enc["input_ids"])
    assert all(t.startswith("<0x") for t in tokens) and len(tokens) == 8
    assert enc["offset_mapping"] == [(0, 1)] * 4 + [(1, 2)] * 4


def test_no_token_crosses_a_morpheme_or_space(tok):
    for text in nsmc_test_docs(200):
        (a,) = analyze([text])
        enc = tok(text, return_offsets_mapping=True, add_special_tokens=False)
        for s, e in enc["offset_mapping"]:
            if text[s:e].isspace():
                continue
            assert any(a0 <= s and e <= b0 for a0, b0 in a.segments), (text, text[s:e])


def test_direct_backend_call_segments_the_same_way(tok):
    # tok.backend_tokenizer.encode(text) takes the Kiwi pre-tokenizer path, tok(text) the word path
    for text in nsmc_test_docs(200) + HOSTILE[:7]:
        assert tok.backend_tokenizer.encode(text).ids == tok(text)["input_ids"], text


def test_decode_restores_text(tok):
    for text in nsmc_test_docs(200) + HOSTILE[:6]:
        ids = tok(text)["input_ids"]
        assert " ".join(tok.decode(ids, skip_special_tokens=True).split()) == " ".join(text.split())


def test_decode_restores_nfd_input_as_nfc(tok):
    text = unicodedata.normalize("NFD", "분해된 한글")
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == "분해된 한글"


def test_special_tokens_and_pairs(tok):
    assert [tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id] == [0, 1, 2, 3, 4]
    enc = tok("질문입니다", "문맥입니다")
    assert enc["input_ids"][0] == 2 and enc["input_ids"].count(3) == 2
    sep = enc["input_ids"].index(3)
    assert enc["token_type_ids"] == [0] * (sep + 1) + [1] * (len(enc["input_ids"]) - sep - 1)
    masked = tok("오늘 [MASK] 좋다")["input_ids"]
    assert masked.count(tok.mask_token_id) == 1


def test_batch_padding_truncation_tensors(tok):
    texts = ["짧다", "이 문장은 조금 더 길어서 잘릴 것입니다 정말로 길어요"]
    single = [tok(t)["input_ids"] for t in texts]
    batch = tok(texts, padding=True, return_tensors="pt")
    assert isinstance(batch["input_ids"], torch.Tensor) and batch["input_ids"].shape[0] == 2
    assert batch["input_ids"][0].tolist()[: len(single[0])] == single[0]
    assert batch["attention_mask"][0].sum().item() == len(single[0])
    one = tok(texts[0], return_tensors="pt")  # one text is a batch of one, as in HF (fill-mask relies on it)
    assert one["input_ids"].shape == (1, len(single[0])) and one["attention_mask"].shape == (1, len(single[0]))
    cut = tok(texts, truncation=True, max_length=6)["input_ids"]
    assert [len(x) for x in cut] == [len(single[0]), 6] and cut[1][-1] == tok.sep_token_id
    pair = tok("질문은 꽤 긴 편입니다", "문맥도 깁니다 아주 아주 깁니다", truncation="only_second", max_length=20)
    assert len(pair["input_ids"]) == 20 and pair["input_ids"][: pair["input_ids"].index(3) + 1] == tok("질문은 꽤 긴 편입니다")["input_ids"]


def test_stride_overflow_windows_like_hf_fast(tok):
    context = " ".join(nsmc_test_docs(30))
    question = "이 영화는 어땠나요?"
    full = tok(question, context, return_offsets_mapping=True)
    ctx_full = [i for i, q in zip(full["input_ids"], full.sequence_ids()) if q == 1]
    ctx_offsets_full = [o for o, q in zip(full["offset_mapping"], full.sequence_ids()) if q == 1]
    enc = tok(
        [question], [context], truncation="only_second", max_length=64, stride=16,
        return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length",
    )
    assert enc["overflow_to_sample_mapping"] == [0] * len(enc["input_ids"]) and len(enc["input_ids"]) > 3
    windows = []
    for i in range(len(enc["input_ids"])):
        seq = enc.sequence_ids(i)
        assert len(enc["input_ids"][i]) == 64
        windows.append([(t, o) for t, o, q in zip(enc["input_ids"][i], enc["offset_mapping"][i], seq) if q == 1])
    # consecutive windows overlap by exactly `stride` tokens and together rebuild the context
    rebuilt = list(windows[0])
    for prev, cur in zip(windows, windows[1:]):
        assert cur[:16] == prev[-16:]
        rebuilt += cur[16:]
    assert [t for t, _ in rebuilt] == ctx_full and [o for _, o in rebuilt] == ctx_offsets_full


def prepare_train_features(examples, tokenizer, max_length=128, doc_stride=32):
    """HF examples/pytorch/question-answering/run_qa.py's preprocessing, unchanged in substance."""
    pad_on_right = tokenizer.padding_side == "right"
    tokenized = tokenizer(
        examples["question"], examples["context"], truncation="only_second", max_length=max_length,
        stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length",
    )
    sample_mapping = tokenized.pop("overflow_to_sample_mapping")
    offset_mapping = tokenized.pop("offset_mapping")
    tokenized["start_positions"], tokenized["end_positions"] = [], []
    for i, offsets in enumerate(offset_mapping):
        input_ids = tokenized["input_ids"][i]
        cls_index = input_ids.index(tokenizer.cls_token_id)
        sequence_ids = tokenized.sequence_ids(i)
        answers = examples["answers"][sample_mapping[i]]
        start_char = answers["answer_start"][0]
        end_char = start_char + len(answers["text"][0])
        token_start_index = 0
        while sequence_ids[token_start_index] != (1 if pad_on_right else 0):
            token_start_index += 1
        token_end_index = len(input_ids) - 1
        while sequence_ids[token_end_index] != (1 if pad_on_right else 0):
            token_end_index -= 1
        if not (offsets[token_start_index][0] <= start_char and offsets[token_end_index][1] >= end_char):
            tokenized["start_positions"].append(cls_index)
            tokenized["end_positions"].append(cls_index)
        else:
            while token_start_index < len(offsets) and offsets[token_start_index][0] <= start_char:
                token_start_index += 1
            tokenized["start_positions"].append(token_start_index - 1)
            while offsets[token_end_index][1] >= end_char:
                token_end_index -= 1
            tokenized["end_positions"].append(token_end_index + 1)
    return tokenized, offset_mapping, sample_mapping


def test_run_qa_preprocessing_recovers_korquad_answers(tok):
    squad = json.loads((SAMPLE / "korquad_dev.json").read_text(encoding="utf-8"))
    ex = {"question": [], "context": [], "answers": []}
    for art in squad["data"][:3]:
        for p in art["paragraphs"]:
            for qa in p["qas"]:
                ex["question"].append(qa["question"])
                ex["context"].append(p["context"])
                ex["answers"].append({"text": [qa["answers"][0]["text"]], "answer_start": [qa["answers"][0]["answer_start"]]})
    feats, offsets, mapping = prepare_train_features(ex, tok)
    found, exact, answered = set(), 0, 0
    for i, (s, e) in enumerate(zip(feats["start_positions"], feats["end_positions"])):
        if s == 0:
            continue
        j = mapping[i]
        span = ex["context"][j][offsets[i][s][0] : offsets[i][e][1]]
        answer = ex["answers"][j]["text"][0]
        assert answer in span and len(span) <= len(answer) + 10, (answer, span)
        exact += span == answer
        answered += 1
        found.add(j)
    assert len(found) == len(ex["question"])  # every answer is inside some window
    assert exact / answered > 0.6, exact / answered  # token edges mostly fall on the answer's edges


def test_save_load_roundtrip_and_fingerprint(tok, tmp_path):
    from korbert.tokenizer import KorBertTokenizer

    tok.save_pretrained(tmp_path)
    again = KorBertTokenizer.from_pretrained(tmp_path)
    assert again.fingerprint == tok.fingerprint
    for text in HOSTILE + nsmc_test_docs(50):
        assert again(text, return_offsets_mapping=True) == tok(text, return_offsets_mapping=True)
    assert (tmp_path / "spm.model").is_file()


def test_missing_folder_is_clear_error(tmp_path):
    from korbert.tokenizer import KorBertTokenizer

    with pytest.raises(FileNotFoundError, match="not a korbert tokenizer folder"):
        KorBertTokenizer.from_pretrained(tmp_path / "nope")


def test_encode_documents_ignores_an_earlier_calls_truncation(tok):
    """Regression: HF leaves truncation/padding on the backend after tok(..., max_length=N)."""
    text = "이 문장은 충분히 길어서 다섯 토큰보다 훨씬 많은 토큰으로 나뉩니다. 두 번째 문장도 있습니다."
    full = tok.encode_documents([text])[0]["ids"]
    tok(["질문", "또 질문"], ["문맥", "또 문맥"], truncation="only_second", max_length=10, padding="max_length")
    assert tok.encode_documents([text])[0]["ids"].tolist() == full.tolist() and len(full) > 10


def test_numpy_word_path_equals_the_per_word_path(tok):
    """Segmenter.batch computes the common case with numpy over a whole batch; the per-word path
    (segment_spans + pieces, used for unknown characters and uncovered text) is the reference.
    Forcing every text through the per-word path must give the same words, starts, units,
    eojeols and sentences."""
    from dataclasses import fields

    from conftest import sample_texts
    from corpus_tools.morph import get_kiwi
    from corpus_tools.text import clean

    texts = [clean(t) for t in sample_texts(400) + sample_texts(10, "petitions")] + HOSTILE
    texts += ["끝에 공백 ", "다음 문장", "", "[MASK]", "앞 [MASK]뒤 [SEP] 끝", "ㅋㅋ", " 앞 공백"]  # neighbours matter: one batch string
    seg = tok._segmenter
    plans, plain = seg.plan(texts, tok.added_tokens_encoder)
    analyses = list(get_kiwi(0, **tok.kiwi_options).tokenize(plain))
    fast = seg.batch(texts, plans, iter(analyses))
    slow = seg.batch(texts, plans, iter(analyses), vectorized=False)
    assert len(fast.words) > 5000
    for f in fields(fast):
        a, b = getattr(fast, f.name), getattr(slow, f.name)
        assert (a == b if isinstance(a, list) else a.shape == b.shape and (a == b).all()), f.name


def test_encode_documents_word_cache_stays_correct(tok):
    """The word cache of encode_documents must not outlive the backend state it was made with,
    survive a failed encode half-filled, or be pickled full."""
    import pickle

    import numpy as np

    text = ["[MASK] 영화가 정말 재밌다 [SEP] 끝"]
    first = tok.encode_documents(text)[0]["ids"].tolist()
    assert first[0] == tok.mask_token_id and first == tok(text[0], add_special_tokens=False)["input_ids"]
    tok(["x"], split_special_tokens=True)  # HF leaves this switch set on the backend
    assert tok.encode_documents(text)[0]["ids"].tolist() == first
    tok(["x"])
    cache = tok._word_cache()
    size = len(cache.index)

    def broken(words):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.lookup(["처음보는단어하나", "처음보는단어둘"], broken)
    assert len(cache.index) == size
    wid, count, *_ = cache.lookup(["처음보는단어하나"], tok._encode_words)
    assert count[wid[0]] > 0
    copy = pickle.loads(pickle.dumps(cache))  # travels empty
    assert copy.key == cache.key and len(copy.index) == 0 and isinstance(copy.ids, np.ndarray)


EDGE = [
    "", " ", "\n", "👍🏽👨‍👩‍👧", "𪚥𠀀", "[MASK]", "앞 [MASK]뒤 [SEP] 끝[CLS]", "ㅋㅋ", " 앞 공백", "끝 공백 ",
    unicodedata.normalize("NFD", "분해된 한글 입력입니다 [MASK] 끝"), "<0x41> ▁ 특수", "a" * 300, "가" * 2000,
]


@pytest.fixture
def reference_path(tok):
    """tok() the old way: HF's backend call on words from the per-word segmentation path."""

    @contextmanager
    def use():
        tok._fast_path, tok._segmenter.vectorized = False, False
        try:
            yield
        finally:
            tok._fast_path, tok._segmenter.vectorized = True, True

    return use


def assert_same_encoding(fast, ref, rows: int | None):
    assert list(fast.keys()) == list(ref.keys())
    for k in ref.keys():
        a, b = fast[k], ref[k]
        assert (a.tolist(), type(a)) == (b.tolist(), type(b)) if hasattr(b, "tolist") else a == b, k
    for i in range(rows) if rows is not None else [0]:
        assert fast.word_ids(i) == ref.word_ids(i) and fast.sequence_ids(i) == ref.sequence_ids(i), i


OPTIONS = [
    {"return_offsets_mapping": True},
    {"return_offsets_mapping": True, "add_special_tokens": False, "return_special_tokens_mask": True},
    {"truncation": True, "max_length": 16, "return_offsets_mapping": True, "return_length": True},
    {"truncation": "only_first", "max_length": 3, "add_special_tokens": False},
    {"padding": True, "pad_to_multiple_of": 8, "return_offsets_mapping": True, "return_special_tokens_mask": True},
    {"padding": "max_length", "truncation": True, "max_length": 40, "padding_side": "left", "return_tensors": "np"},
    {"return_token_type_ids": False, "return_attention_mask": False},
    # not the word-cache path: HF's call, with words from the pipelined numpy path
    {"truncation": True, "max_length": 24, "stride": 8, "return_overflowing_tokens": True, "return_offsets_mapping": True},
    {"split_special_tokens": True, "return_offsets_mapping": True},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_pipelined_batch_equals_the_reference_path(tok, reference_path, options):
    """tok(batch) runs Kiwi on the next chunk while Python assembles this chunk's rows from the word
    cache (Segmenter.pipeline, KorBertTokenizer._encode_fast in korbert/word_cache.py). It must give what HF's own backend call
    on the per-word segmentation gives: ids, offsets, word ids, masks, truncation, padding and
    overflow windows; one string per call too."""
    from conftest import sample_texts

    from korbert.segmenter import chunk_bounds

    texts = EDGE + nsmc_test_docs(300) + sample_texts(5, "petitions") + HOSTILE + [" ".join(sample_texts(20, "petitions"))] + EDGE
    assert len(chunk_bounds(texts, 8, 4096)) > 3  # the batch is pipelined over several chunks
    fast = tok(texts, **options)
    with reference_path():
        ref = tok(texts, **options)
    assert_same_encoding(fast, ref, len(ref["input_ids"]))
    for text in EDGE + HOSTILE:
        one = tok(text, **options)
        with reference_path():
            assert_same_encoding(one, tok(text, **options), len(one["input_ids"]) if options.get("return_overflowing_tokens") else None)


@pytest.mark.parametrize("options", OPTIONS[:7], ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_one_string_route_equals_the_numpy_route(tok, options):
    """One short string per call takes a plain-Python route (Segmenter.one, _row_one: no numpy);
    it must give what the numpy route gives for the same string, and so what HF's call gives."""
    from conftest import sample_texts

    texts = EDGE + HOSTILE + nsmc_test_docs(300) + sample_texts(5, "petitions")
    texts += [unicodedata.normalize("NFD", t) for t in nsmc_test_docs(20)] + ["\x00", "앞\x00", "a\x00 b"]
    got = [tok(t, **options) for t in texts]
    assert any(len(t) <= tok._ONE_MAX_CHARS and "[" not in t for t in texts)
    old, tok._ONE_MAX_CHARS = tok._ONE_MAX_CHARS, -1  # every string the numpy way
    try:
        for text, one in zip(texts, got):
            assert_same_encoding(one, tok(text, **options), None)
    finally:
        tok._ONE_MAX_CHARS = old


def test_word_cache_batch_encodings_are_made_on_first_use_and_pickle(tok):
    import copy
    import pickle

    texts = ["나는 학교에 갔다", "", "이모지 🙂 와 [MASK]"]
    enc = tok(texts, return_offsets_mapping=True)
    lazy = enc.encodings
    assert len(lazy) == 3 and lazy._make is not None  # nothing made yet
    again = pickle.loads(pickle.dumps(enc))
    assert lazy._make is None and type(again.encodings) is list and len(again.encodings) == 3
    assert [e.ids for e in again.encodings] == enc["input_ids"] == [e.ids for e in copy.deepcopy(enc).encodings]
    assert again.word_ids(2) == enc.word_ids(2) and enc[0].offsets[1:-1] != []


def test_concurrent_calls_give_the_same_rows(tok):
    from concurrent.futures import ThreadPoolExecutor

    texts = nsmc_test_docs(400)
    want = tok(texts, return_offsets_mapping=True)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: tok(texts[i::4], return_offsets_mapping=True), range(4)))
    for i, g in enumerate(got):
        assert g["input_ids"] == want["input_ids"][i::4] and g["offset_mapping"] == want["offset_mapping"][i::4]
    import gc

    assert gc.isenabled()  # the collector is back on once every call has left
