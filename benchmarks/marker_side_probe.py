"""Which side of the word should the marker take (issue 45)? A probe, not a tokenizer kind: the morpheme
kinds put "▁" before a word (on its first segment); SentencePiece's treat_whitespace_as_suffix puts it after
(on the last segment). Korean words end in a small set of particles and endings, so a word-end marker
might need fewer fallback pieces than a word-start one. Measured on the same Kiwi training lines:

    python benchmarks/marker_side_probe.py --lines runs/attached-policies-shared/lines-8000.pkl \
        --morpheme-vocab runs/tk-shared/vocab-morpheme --with-prefix --out benchmarks/results/tokenizer-marker-side-shared.json

--lines is the training-line cache of benchmarks/attached_reserve_policies.py (the lines `korbert vocab
--kind morpheme-attached` trains on); the suffix lines are the same lines with each space moved to the
other side of its word boundary (a sentence followed by another one in its document ends in a space).
Each arm is SentencePiece plus `corpus_tools.vocab.reserve_markers` (suffix=True mirrors it), encoded by
the tokenizer backend korbert builds (`korbert.tokenizer.spm_backend`: "▁" alone never chosen where a
piece fits) over the held-out text's Kiwi segments, each segment with its marker. The morpheme kind's
own vocabulary (--morpheme-vocab, built from the same lines) is the baseline; its tokens per character
here are `tokenizer_kinds.py`'s to four decimals (a few tokens in a million differ: this is not the whole
tokenizer). Arms: morpheme; suffix (SentencePiece alone); suffix-attached (the
reserve); with --with-prefix also prefix-attached (today's kind: a check that this way of measuring
gives what attached_reserve_policies.py gives).
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

SHARED = default_folder()


def suffix_lines(lines: list[str]) -> list[str]:
    """The training lines with the marker after each word: a line's leading space (it follows another
    sentence of its document) moves to the end of the line before it."""
    out = []
    for i, line in enumerate(lines):
        text = line[1:] if line.startswith(" ") else line
        out.append(text + " " if i + 1 < len(lines) and lines[i + 1].startswith(" ") else text)
    return out


def segments(texts: list[str], threads: int) -> list[list[tuple[str, bool, bool]]]:
    """Each text's Kiwi surface segments: (segment, starts a word after a space, ends a word before one)."""
    from corpus_tools.morph import analyze

    out = []
    for a in analyze(texts, split_sents=False, num_workers=threads):
        s = [(a.text[x:y], first) for (x, y), first in zip(a.segments, a.eojeol_start)]
        out.append([(seg, first and k > 0, k + 1 < len(s) and s[k + 1][1]) for k, (seg, first) in enumerate(s)])
    return out


def measure(model: bytes, added: dict | None, segs: list, chars: int, suffix: bool) -> dict:
    from korbert.segmenter import SPACE
    from korbert.tokenizer import spm_backend

    backend = spm_backend(model, "unigram", added or None)
    strs = [(seg + SPACE if end else seg) if suffix else (SPACE + seg if start else seg) for t in segs for seg, start, end in t]
    tokens = [e.tokens for e in backend.encode_batch(strs, add_special_tokens=False)]
    n = sum(map(len, tokens))
    lone = sum(p == SPACE for t in tokens for p in t)
    return {"characters": chars, "tokens": n, "tokens_per_char": round(n / chars, 4), "lone_marker_share_of_tokens": round(lone / n, 4),
            "byte_fallback_share": round(sum(p.startswith("<0x") for t in tokens for p in t) / n, 5)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", required=True, help="a lines-N.pkl cache of benchmarks/attached_reserve_policies.py")
    ap.add_argument("--morpheme-vocab", required=True, help="the morpheme kind's vocabulary from the same inputs and size")
    ap.add_argument("--policy", default="0.10:0.995", help="EXTRA:COVERAGE of reserve_markers, for both sides (today's kind's)")
    ap.add_argument("--with-prefix", action="store_true", help="also measure today's kind (prefix-attached) this way")
    ap.add_argument("--with-suffix-alone", action="store_true", help="also measure the suffix lines' SentencePiece with no reserve")
    ap.add_argument("--korquad", default=str(SHARED / "korquad" / "KorQuAD_v1.0_dev.json"))
    ap.add_argument("--nsmc", default=str(SHARED / "nsmc" / "ratings_test.txt"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import corpus_tools.vocab as V
    from attached_reserve_policies import check_morpheme_baseline, parse_policy
    from corpus_tools.artifacts import atomic_write_json, machine, sha256_file
    from tokenizer_kinds import held_out

    got = pickle.loads(Path(a.lines).read_bytes())
    lines, cfg, threads = got["lines"], got["cfg"], got["threads"]
    mdir = Path(a.morpheme_vocab)
    content = got["key"].get("inputs") if isinstance(got.get("key"), dict) else None
    mm = check_morpheme_baseline(mdir, content, cfg)
    if len(lines) >= cfg.max_sentences:  # the vocabulary's reservoir sample: lines no longer follow their documents
        sys.exit(f"{a.lines}: {len(lines)} lines, a sample of --max-sentences; suffix_lines needs every sentence in document order")
    extra, cover = parse_policy(ap, a.policy)

    texts = {k: [" ".join(t.split()) for t in v] for k, v in held_out(Path(a.korquad), Path(a.nsmc))[0].items()}
    segs = {k: segments(v, threads) for k, v in texts.items()}
    chars = {k: sum(map(len, v)) for k, v in texts.items()}

    def arm(model: bytes, pieces: dict | None, suffix: bool, **info) -> dict:
        m = {k: measure(model, pieces, segs[k], chars[k], suffix) for k in texts}
        return {**m, **info}

    res = {"stage": "tokenizer", "what": "the word marker before the word (today's kinds) or after it (a probe), morpheme segments, "
           "with and without the reserve of corpus_tools.vocab.reserve_markers; tokens per character on the KorQuAD dev contexts "
           "and the NSMC-R test reviews", "command": "python " + " ".join(sys.argv), "machine": machine(),
           "lines": a.lines, "inputs": content, "vocab_size": cfg.vocab_size, "training_lines": len(lines), "policy": a.policy,
           "morpheme_vocab": str(mdir), "morpheme_tokenizer_hash": mm.get("tokenizer_hash"), "arms": {}}
    res["arms"]["morpheme"] = arm((mdir / "spm.model").read_bytes(), None, False, spm_sha256=sha256_file(mdir / "spm.model"))
    suf = suffix_lines(lines)
    todo = [("suffix-attached", True)] + ([("prefix-attached", False)] if a.with_prefix else [])
    if a.with_suffix_alone:
        t0 = time.time()
        res["arms"]["suffix"] = arm(V.train_spm(suf, cfg, threads, suffix=True), None, True, seconds=round(time.time() - t0, 1))
    for name, suffix in todo:
        t0 = time.time()
        model, added, n_fb, reserve = V.reserve_markers(suf if suffix else lines, cfg, threads, extra, cover, suffix=suffix)
        res["arms"][name] = arm(model, added, suffix, fallbacks=n_fb, reserve=reserve, added=len(added),
                                seconds=round(time.time() - t0, 1))
    base = res["arms"]["morpheme"]
    for name, m in res["arms"].items():
        for k in texts:
            m[f"ratio_vs_morpheme_tokens_per_char_{k}"] = round(m[k]["tokens_per_char"] / base[k]["tokens_per_char"], 3)
            if name != "morpheme":
                res[f"ratio_{name}_vs_morpheme_tokens_per_char_{k}"] = m[f"ratio_vs_morpheme_tokens_per_char_{k}"]
        print(f"{name}: tokens/char contexts {m['korquad_contexts']['tokens_per_char']} ({m['ratio_vs_morpheme_tokens_per_char_korquad_contexts']}x), "
              f"reviews {m['nsmc_test_reviews']['tokens_per_char']} ({m['ratio_vs_morpheme_tokens_per_char_nsmc_test_reviews']}x); "
              f"lone {m['korquad_contexts']['lone_marker_share_of_tokens']} / {m['nsmc_test_reviews']['lone_marker_share_of_tokens']}", flush=True)
    atomic_write_json(Path(a.out), res)
    print("->", a.out)


if __name__ == "__main__":
    main()
