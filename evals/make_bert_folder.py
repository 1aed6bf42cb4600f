"""A plain transformers BERT folder that is not korbert's, for trying `--compare` and `korbert eval`
on a machine that cannot download one: a WordPiece vocabulary trained with `tokenizers` on the
given corpus (no lowercasing, no accent stripping), BertTokenizerFast, and a seeded random-init
BertForMaskedLM of the given size, saved with save_pretrained.

    python -m evals.make_bert_folder --out runs/bert-wordpiece-mini
    korbert run --preset demo --compare runs/bert-wordpiece-mini

Its scores are those of a randomly initialized BERT with a WordPiece vocabulary (a second control,
with another tokenizer), not of a pretrained model.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from corpus_tools import SAMPLE_DATA

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8)}
# the vocabulary's first ids: BERT's own layout (KLUE-BERT, KcBERT), multilingual BERT's ([unused] first, [UNK] at 100), KoBERT's
LAYOUTS = {
    "bert": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    "multilingual": ["[PAD]", *(f"[unused{i}]" for i in range(1, 100)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    "kobert": ["[UNK]", "[PAD]", "[CLS]", "[SEP]", "[MASK]"],
    "rotated": ["[MASK]", "[PAD]", "[UNK]", "[CLS]", "[SEP]"],  # (a test layout whose id map is a 5-cycle, not its own inverse)
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", nargs="+", default=[str(SAMPLE_DATA / "reviews.jsonl.gz")], help="JSONL(.gz) with a text field")
    p.add_argument("--out", default=str(ROOT / "runs" / "bert-wordpiece-mini"))
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--size", default="mini", choices=list(SIZES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layout", default="bert", choices=list(LAYOUTS),
                   help="the special tokens' ids: bert [PAD] [UNK] [CLS] [SEP] [MASK] = 0..4; multilingual [PAD] 0, [unused1..99], "
                        "[UNK] [CLS] [SEP] [MASK] = 100..103; kobert [UNK] 0, [PAD] 1, [CLS] [SEP] [MASK] = 2..4; rotated [MASK] 0, [PAD] [UNK] [CLS] [SEP] = 1..4")
    a = p.parse_args()

    def texts():
        for path in a.corpus:
            with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)["text"]

    layers, hidden, heads = SIZES[a.size]
    tok = build(texts(), Path(a.out), a.vocab_size, layers, hidden, heads, 4 * hidden, a.seed, a.layout)
    print(f"{a.out}: BERT-{a.size} (random init), WordPiece vocabulary {len(tok)}; "
          f"영화가 정말 재밌었어요 -> {tok.tokenize('영화가 정말 재밌었어요')}")


def build(texts, out: Path, vocab_size: int, layers: int, hidden: int, heads: int, intermediate: int, seed: int = 0, layout: str = "bert"):
    """Train the WordPiece vocabulary on `texts` (its first ids: LAYOUTS[layout]), save BertTokenizerFast
    and a seeded random BertForMaskedLM to `out`; returns the tokenizer. (tests/conftest.py's `bert_dir`
    uses it too.)"""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False, clean_text=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = LAYOUTS[layout]
    backend.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials))
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", backend.token_to_id("[CLS]")), ("[SEP]", backend.token_to_id("[SEP]"))],
    )
    tok = BertTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]", do_lower_case=False)
    tok.save_pretrained(out)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=intermediate, max_position_embeddings=512, pad_token_id=tok.pad_token_id)
    BertForMaskedLM(config).save_pretrained(out)
    return tok


if __name__ == "__main__":
    main()
