"""What a tokenizer does to text, measured (benchmarks/tokenizer_kinds.py compares the kinds of
`korbert vocab --kind` with these): tokens per character, byte fallback, lone word-start markers,
and how many KorQuAD answers fall on token boundaries. Any fast tokenizer with offsets."""

from __future__ import annotations


def text_stats(tok, texts: list[str], batch: int = 256) -> dict:
    """Tokens per character, and the shares of byte-fallback tokens (<0x..>) and of lone "▁" tokens
    (of all tokens, and of the tokens that start with "▁"), without [CLS]/[SEP]."""
    tokens = chars = byte = lone = starts = 0
    for i in range(0, len(texts), batch):
        part = texts[i : i + batch]
        enc = tok(part, add_special_tokens=False)
        for ids in enc["input_ids"]:
            pieces = tok.convert_ids_to_tokens(ids)
            tokens += len(pieces)
            byte += sum(p.startswith("<0x") and p.endswith(">") and len(p) == 6 for p in pieces)
            lone += sum(p == "▁" for p in pieces)
            starts += sum(p.startswith("▁") for p in pieces)
        chars += sum(len(t) for t in part)
    return {"characters": chars, "tokens": tokens, "tokens_per_char": round(tokens / chars, 4),
            "byte_fallback_share": round(byte / tokens, 5), "lone_marker_share_of_tokens": round(lone / tokens, 4),
            "lone_marker_share_of_word_starts": round(lone / max(starts, 1), 4)}


def answer_alignment(tok, answers: list[tuple[str, int, str]]) -> dict:
    """The share of answers (context, answer_start, answer text) whose first character starts a token
    and whose last character ends one, by the tokenizer's offsets. A lone "▁" token bounds no text
    (korbert's spans the space before a word, a Metaspace tokenizer's the word's first character),
    so it is left out. A tokenizer whose tokens end at the answer's edges can predict the span exactly:
    서울에서 holds the answer 서울."""
    by_context: dict[str, list[tuple[int, int]]] = {}
    for ctx, start, text in answers:
        by_context.setdefault(ctx, []).append((start, start + len(text)))
    ok = n = 0
    contexts = list(by_context)
    for i in range(0, len(contexts), 64):
        part = contexts[i : i + 64]
        enc = tok(part, add_special_tokens=False, return_offsets_mapping=True)
        for ctx, ids, offsets in zip(part, enc["input_ids"], enc["offset_mapping"]):
            pieces = tok.convert_ids_to_tokens(ids)
            spans = [(a, b) for (a, b), p in zip(offsets, pieces) if p != "▁"]  # a lone "▁" bounds no text (plain's spans a character)
            begins, ends = {a for a, _ in spans}, {b for _, b in spans}
            for s, e in by_context[ctx]:
                n += 1
                ok += s in begins and e in ends
    return {"answers": n, "aligned": ok, "aligned_share": round(ok / max(n, 1), 4)}
