"""KLUE's dev metrics (evals/klue_metric.py) on hand-made predictions, each value worked out by hand
in the comments, and the NER tags moved between characters and tokens."""

from __future__ import annotations

import pytest

from evals.klue_metric import (
    NER_TAGS, accuracy, char_tags, entities, macro_f1, ner_char_f1, ner_entity_f1, pearson, sts_f1, token_tags,
)


def test_ynat_macro_f1_nli_accuracy_and_sts_by_hand():
    # class 0: tp 1, fn 1 -> 2/3; class 1: tp 1, fp 2 -> 2/4; class 2: fn 1 -> 0; mean 7/18
    assert macro_f1([0, 0, 1, 2], [0, 1, 1, 1]) == pytest.approx(100 * 7 / 18)
    assert accuracy([0, 1, 2, 2], [0, 1, 1, 2]) == 75.0
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(100.0) and pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-100.0)
    # deviations (-1.5, -.5, .5, 1.5) and (-1.5, -.5, 1.5, .5): 4 / sqrt(5 x 5)
    assert pearson([0, 1, 2, 3], [0, 1, 3, 2]) == pytest.approx(80.0)
    # >= 3.0: gold T F T F, predicted T T F F: tp 1, fp 1, fn 1 -> 2/4
    assert sts_f1([3.0, 2.9, 4, 1], [3.1, 3.0, 2, 0]) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="all equal"):
        pearson([1, 2, 3], [2, 2, 2])
    with pytest.raises(ValueError, match="need as many"):
        accuracy([0, 1], [0])


def test_strict_iob2_entities():
    tags = ["B-PS", "I-PS", "O", "I-OG", "B-OG", "I-LC", "B-DT", "B-DT", "I-DT"]
    # a stray I- starts nothing; an I- of another type ends the open entity; B- after B- starts a new one
    assert entities(tags) == {("PS", 0, 2), ("OG", 4, 5), ("DT", 6, 7), ("DT", 7, 9)}
    # an I- opening a predicted sentence does not continue the entity that ends the sentence before
    gold, pred = [["B-PS", "I-PS"], ["B-OG"]], [["B-PS", "I-PS"], ["I-PS"]]
    assert ner_entity_f1(gold, pred) == pytest.approx(50.0)  # PS right, OG missed
    with pytest.raises(ValueError, match="no characters to score"):
        ner_char_f1([[]], [[]])


def test_one_character_too_long_is_wrong_as_an_entity_and_mostly_right_by_character():
    gold = [["B-OG", "I-OG", "O"], ["B-PS", "O"]]  # 경찰은 / 박씨
    pred = [["B-OG", "I-OG", "I-OG"], ["B-PS", "O"]]  # the particle 은 taken into the entity
    # entities: OG (0,2) against (0,3): F1 0; PS exact: 1 -> macro 1/2
    assert ner_entity_f1(gold, pred) == pytest.approx(50.0)
    # by character, 13 tags: B-OG 1, I-OG 2/3 (tp 1, fp 1), O 2/3 (tp 1, fn 1), B-PS 1, the 9 absent tags 1 each
    assert ner_char_f1(gold, pred) == pytest.approx(100 * (1 + 2 / 3 + 2 / 3 + 1 + 9) / 13)
    assert ner_entity_f1(gold, gold) == 100.0 and ner_char_f1(gold, gold) == 100.0
    assert len(NER_TAGS) == 13 and NER_TAGS[-1] == "O"
    with pytest.raises(ValueError, match="differ from the gold"):
        ner_entity_f1(gold, [pred[0]])
    with pytest.raises(ValueError, match="tags KLUE-NER does not have"):
        ner_char_f1(gold, [["B-OG", "I-OG", "X"], ["B-PS", "O"]])


def test_tags_go_to_tokens_by_their_first_character_and_back_to_every_character_covered():
    text = "경찰은 또"
    gold = ["B-OG", "I-OG", "O", "O", "O"]
    # tokens on the morpheme boundary (경찰 | 은 | 또): the round trip gives the gold tags back
    aligned = [(0, 2), (2, 3), (4, 5)]
    assert token_tags(text, gold, aligned) == ["B-OG", "O", "O"]
    assert char_tags(text, ["B-OG", "O", "O"], aligned) == gold
    # a token straddling the boundary (경찰은) forces one tag on both sides: the particle becomes I-OG
    straddling = [(0, 3), (3, 5)]  # the second token's offsets start at the space
    assert token_tags(text, gold, straddling) == ["B-OG", "O"]
    back = char_tags(text, ["B-OG", "O"], straddling)
    assert back == ["B-OG", "I-OG", "I-OG", "O", "O"]
    spaceless = [[t for c, t in zip(text, tags) if c != " "] for tags in (gold, back)]
    assert ner_entity_f1([spaceless[0]], [spaceless[1]]) == 0.0 and ner_char_f1([spaceless[0]], [spaceless[1]]) > 80
    # an I- token gives I- to all it covers; characters no token covers get O
    assert char_tags(text, ["I-OG"], [(0, 2)]) == ["I-OG", "I-OG", "O", "O", "O"]
    with pytest.raises(ValueError, match="4 tags for 5 characters"):
        token_tags(text, gold[:4], aligned)
    with pytest.raises(ValueError, match="2 token tags for 3 tokens"):
        char_tags(text, ["B-OG", "O"], aligned)


def _random_cases(seed: int, n: int = 100):
    import random

    rng = random.Random(seed)
    for _ in range(n):
        m = rng.randint(5, 60)
        g = [rng.randrange(7) for _ in range(m)]
        gs = [rng.uniform(0, 5) for _ in range(m)]
        sents = []
        for _ in range(rng.randint(1, 6)):
            sg = [rng.choice(NER_TAGS[:6] + ("O",) * 6) for _ in range(rng.randint(1, 25))]
            sents.append((sg, [rng.choice(NER_TAGS) if rng.random() < 0.3 else t for t in sg]))
        yield (g, [rng.randrange(7) if rng.random() < 0.5 else x for x in g], gs, [x + rng.gauss(0, 1) for x in gs],
               [s[0] for s in sents], [s[1] for s in sents])


def test_the_metrics_equal_klue_baselines_calls_of_scikit_learn_and_scipy():
    """KLUE-baseline's functional.py: f1_score(average="macro"), pearsonr, the binary F1 at 3, and the
    character F1 over every label index with zero_division=True; random cases."""
    import numpy as np
    from scipy.stats import pearsonr
    from sklearn.metrics import f1_score

    idx = {t: i for i, t in enumerate(NER_TAGS)}
    for g, p, gs, ps, ner_g, ner_p in _random_cases(0):
        assert macro_f1(g, p) == pytest.approx(100 * f1_score(g, p, average="macro"))
        assert pearson(gs, ps) == pytest.approx(100 * pearsonr(ps, gs)[0])
        assert sts_f1(gs, ps) == pytest.approx(100 * f1_score(np.array(gs) >= 3, np.array(ps) >= 3, average="binary", zero_division=0))
        flat_g, flat_p = [idx[t] for s in ner_g for t in s], [idx[t] for s in ner_p for t in s]
        assert ner_char_f1(ner_g, ner_p) == pytest.approx(
            100 * f1_score(flat_g, flat_p, labels=list(range(13)), average="macro", zero_division=1.0))


def test_the_entity_f1_equals_seqeval_strict_iob2_where_seqeval_is_installed():
    """mode="strict", scheme=IOB2, macro, given the sentences (KLUE-baseline passes them in one sequence
    with a [CLS] and a padded position each; that is left out here, see evals/klue_metric.py)."""
    seqeval = pytest.importorskip("seqeval.metrics")
    from seqeval.scheme import IOB2

    for *_, ner_g, ner_p in _random_cases(1):
        if not any(entities(s) for s in ner_g + ner_p):  # (seqeval: nan, the mean of no types; here 0)
            continue
        assert ner_entity_f1(ner_g, ner_p) == pytest.approx(
            100 * seqeval.f1_score(ner_g, ner_p, average="macro", mode="strict", scheme=IOB2, zero_division=0))


NER_TSV = """## 토큰, 레이블 구분자 : \\t
## 컬럼명 : CHAR\tNE_TAG
## klue-ner-v1_dev_00000-wikitree\t<경찰:OG>은 <서울 시청:OG>에
경\tB-OG
찰\tI-OG
은\tO
 \tO
서\tB-OG
울\tI-OG
 \tI-OG
시\tI-OG
청\tI-OG
에\tO

## klue-ner-v1_dev_00001-nsmc\t<김:PS>모
김\tB-PS
모\tO
"""


def test_klue_ner_tsv_and_its_entities_as_character_spans(tmp_path):
    """The TSV's own header comes before the first sentence's guid line; spaces are rows of their own; an
    entity is read over the non-space characters and given back as a span of the sentence, spaces inside."""
    from corpus_tools.text import InputError
    from evals.data import read_klue_ner
    from evals.klue_metric import entity_spans

    path = tmp_path / "ner.tsv"
    path.write_text(NER_TSV, encoding="utf-8")
    first, second = read_klue_ner(path)
    assert (first.guid, first.text, second.guid, second.text) == ("klue-ner-v1_dev_00000-wikitree", "경찰은 서울 시청에", "klue-ner-v1_dev_00001-nsmc", "김모")
    spans = entity_spans(first.text, first.tags)
    assert [(k, first.text[a:b]) for k, a, b in spans] == [("OG", "경찰"), ("OG", "서울 시청")]
    # a space tagged O inside an entity does not cut it: only the non-space characters are read
    tags = list(first.tags)
    tags[6] = "O"
    assert [first.text[a:b] for _, a, b in entity_spans(first.text, tags)] == ["경찰", "서울 시청"]
    path.write_text(NER_TSV.replace("모\tO", "모 O"), encoding="utf-8")
    with pytest.raises(InputError, match=r"ner.tsv:17: expected one character, a tab and its tag"):
        read_klue_ner(path)
