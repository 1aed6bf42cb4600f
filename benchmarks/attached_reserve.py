"""How a morpheme-attached vocabulary spends its reserve (issue 45): of the "▁" + piece entries appended to
SentencePiece's own pieces, how many are single-character fallbacks, how many of each kind held-out text
uses, and what share of its tokens they make.

    python benchmarks/attached_reserve.py --vocab runs/tkq-morpheme-attached/vocab \
        --korquad ../shared/data/korquad/KorQuAD_v1.0_dev.json --nsmc ../shared/data/nsmc/ratings_test.txt \
        --out benchmarks/results/tokenizer-attached-reserve.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def usage(tok, texts: list[str], reserve: set[str], fallback: set[str]) -> dict:
    inv = {i: p for p, i in tok.get_vocab().items()}
    counts: collections.Counter = collections.Counter()
    for i in range(0, len(texts), 256):
        for ids in tok(texts[i : i + 256], add_special_tokens=False)["input_ids"]:
            counts.update(ids)
    total = sum(counts.values())
    used = {inv[i]: n for i, n in counts.items() if inv[i] in reserve}
    fb = {p: n for p, n in used.items() if p in fallback}
    return {
        "texts": len(texts), "tokens": total, "characters": sum(len(t) for t in texts),
        "fallbacks_used": len(fb), "fallback_tokens": sum(fb.values()), "fallback_tokens_share": round(sum(fb.values()) / max(total, 1), 4),
        "multi_character_used": len(used) - len(fb), "multi_character_tokens_share": round((sum(used.values()) - sum(fb.values())) / max(total, 1), 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", required=True, help="a morpheme-attached vocabulary folder (korbert vocab --kind morpheme-attached)")
    ap.add_argument("--korquad", required=True, help="KorQuAD_v1.0_dev.json: its contexts")
    ap.add_argument("--nsmc", required=True, help="ratings_test.txt: its reviews")
    ap.add_argument("--nsmc-limit", type=int, default=0, help="reviews read (the first N; 0: all, as benchmarks/tokenizer_kinds.py reads them)")
    ap.add_argument("--out", default="benchmarks/results/tokenizer-attached-reserve.json")
    a = ap.parse_args()
    import sentencepiece as spm

    from corpus_tools.artifacts import atomic_write_json, machine
    from korbert.tokenizer import KorBertTokenizer

    manifest = json.loads((Path(a.vocab) / "manifest.json").read_text())
    if (manifest.get("config") or {}).get("kind") != "morpheme-attached":
        sys.exit(f"{a.vocab} is not a morpheme-attached vocabulary (its manifest's config says another kind)")
    sp = spm.SentencePieceProcessor(model_file=str(Path(a.vocab) / "spm.model"))
    tok = KorBertTokenizer.from_pretrained(a.vocab)
    # the reserve: "▁" + piece entries that are not SentencePiece's own pieces
    reserve = {p for p in tok.get_vocab() if p.startswith("▁") and len(p) > 1 and sp.piece_to_id(p) == sp.unk_id()}
    fallback = {p for p in reserve if len(p) == 2}
    kq = json.loads(Path(a.korquad).read_text(encoding="utf-8"))
    contexts = [p["context"] for art in kq["data"] for p in art["paragraphs"]]
    rows = Path(a.nsmc).read_text(encoding="utf-8").splitlines()[1:]
    reviews = [line.split("\t")[1] for line in (rows[: a.nsmc_limit] if a.nsmc_limit else rows) if line.count("\t") >= 2]
    res = {
        "stage": "tokenizer", "what": "how a morpheme-attached vocabulary's reserve of '▁' + piece entries is spent: single-character fallbacks "
        "against multi-character pieces, and how many of each held-out text uses",
        "command": "python " + " ".join(sys.argv), "machine": machine(), "vocab": a.vocab, "tokenizer_hash": manifest.get("tokenizer_hash"),
        "vocab_size": len(tok.get_vocab()), "sentencepiece_pieces": sp.get_piece_size(), "reserve": len(reserve),
        "reserve_fallbacks": len(fallback), "reserve_multi_character": len(reserve) - len(fallback),
        "korquad_contexts": usage(tok, contexts, reserve, fallback), "nsmc_test_reviews": usage(tok, reviews, reserve, fallback),
    }
    res["ratio_fallbacks_used_korquad_contexts"] = round(res["korquad_contexts"]["fallbacks_used"] / max(len(fallback), 1), 3)
    res["ratio_fallbacks_used_nsmc_test_reviews"] = round(res["nsmc_test_reviews"]["fallbacks_used"] / max(len(fallback), 1), 3)
    atomic_write_json(Path(a.out), res)
    print(json.dumps({k: v for k, v in res.items() if k not in ("machine", "command")}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
