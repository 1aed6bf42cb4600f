"""Stage 1: raw text -> Kiwi morphemes -> a SentencePiece vocabulary -> a tokenizer folder.

(`--kind plain`: no Kiwi, SentencePiece over the NFC text, a standard fast tokenizer: korbert/plain.py;
`--kind morpheme-attached`: the morphemes with no lone word-start "▁" but before rare first characters:
`attach_markers` below.)

    korbert vocab --inputs corpus/*.jsonl.gz --out runs/vocab --vocab-size 32000

SentencePiece is trained on morpheme-segmented text: eojeols stay separated by spaces (so "▁"
marks a word start, as in every SentencePiece model) and the morphemes inside an eojeol are
separated by a delimiter that SentencePiece never lets a piece cross (`pretokenization_delimiter`):

    "학교에 갔다" -> "학교<d>에 갔다"  ->  pieces like "학교", "에", "▁갔다", never "교에"

so a learned piece never crosses a morpheme boundary — the same rule the tokenizer applies at
encode time. The folder written is a complete tokenizer (KorBertTokenizer.from_pretrained(out)).
Same inputs + same options -> byte-identical spm.model, tokenizer.json and tokenizer hash.
"""

from __future__ import annotations

import hashlib
import heapq
import io
import math
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from corpus_tools import SAMPLE_DATA
from corpus_tools import config as C
from corpus_tools.artifacts import file_record, read_manifest, sha256_file, write_manifest
from corpus_tools.guard import EvalText, Found, policy
from corpus_tools.morph import DEFAULT_KIWI, analyze, default_threads
from corpus_tools.text import InputError, ReadStats, clean, expand_inputs, iter_documents

DELIM = "\x1f"  # unit separator: a control character, so cleaning guarantees it is not in the text
FORMAT_VERSION = 1
SAMPLE_MARGIN = 1.25  # documents are sampled until their estimated sentences are this many times --max-sentences
ATTACH_VERSION = 3  # how morpheme-attached picks its word-start pieces (attach_markers): a change is another vocabulary
SAMPLING = "documents-by-key-1"  # how the training sentences are drawn (in the config: a vocabulary drawn otherwise is other work)


@dataclass
class VocabConfig:
    """Train a SentencePiece vocabulary (morpheme-aware by default) and write a tokenizer folder."""

    inputs: list[str] = C.field(
        [str(SAMPLE_DATA / "reviews.jsonl.gz"), str(SAMPLE_DATA / "petitions.jsonl.gz")],
        "text files, folders or globs: .txt (blank line between documents), .jsonl, optionally .gz; .parquet (--text-field columns)",
    )
    out: str = C.field("runs/vocab", "output folder (a tokenizer folder with manifest.json)")
    kind: str = C.field(
        "morpheme", "morpheme: SentencePiece over Kiwi's morphemes (korbert's tokenizer); morpheme-attached: the same, with the "
        "word-start marker inside a word's first piece, a token of its own only before a rare first character "
        "(unigram only); plain: SentencePiece "
        "over the NFC text with no Kiwi, a standard fast tokenizer (the arm the morphemes are measured against)",
        choices=["morpheme", "morpheme-attached", "plain"],
    )
    vocab_size: int = C.field(32000, "vocabulary size, special/unused/byte tokens included")
    model_type: str = C.field("unigram", "SentencePiece model type", choices=["unigram", "bpe"])
    num_unused: int = C.field(100, "number of [unusedN] tokens reserved after the specials")
    character_coverage: float = C.field(0.9995, "share of characters covered by pieces; the rest use byte fallback")
    max_sentences: int = C.field(
        2_000_000, "sentences SentencePiece trains on. Documents are sampled first (seeded, whole documents, about 1.25x this "
        "many sentences by punctuation), so Kiwi analyzes only the sample; beyond this many, a seeded sample of its sentences",
    )
    text_field: list[str] = C.field(["title", "text"], "JSON Lines field(s) or Parquet column(s) holding the text (joined by a newline)")
    one_doc_per_line: bool = C.field(False, "plain text: every line is a document (default: blank-line separated)")
    eval_nsmc_test: str = C.field("", "an NSMC-format test file: leave out of the sample (and count) the documents whose letters and digits alone equal one of its reviews")
    eval_korquad: str = C.field("", "a KorQuAD (SQuAD-format) file: leave out of the sample (and count) the documents sharing a 48-character run with one of its contexts")
    eval_klue: list[str] = C.field([], "KLUE dev files (NER .tsv; NLI, STS, YNAT .json): leave out of the sample (and count) the documents equal to one of their texts by letters and digits, holding one whole, or sharing a 48-character run with one")
    eval_strict: bool = C.field(False, "refuse a corpus holding such documents instead of leaving them out")
    keep_eval_text: bool = C.field(False, "keep such documents in the sample (counted) instead of leaving them out")
    seed: int = C.field(0, "seed for the sentence sample")
    threads: int = C.field(0, "Kiwi and SentencePiece threads (0 = all cores)")
    batch_docs: int = C.field(256, "documents per Kiwi batch")
    force: bool = C.field(False, "rebuild even if `out` already holds this exact vocabulary")
    show: int = C.field(3, "print this many morpheme-segmented training lines")


def special_pieces(num_unused: int) -> list[str]:
    return ["[MASK]"] + [f"[unused{i}]" for i in range(num_unused)]


def segmented_sentences(texts: list[str], threads: int) -> list[str]:
    """Kiwi-analyze texts; one SentencePiece training line per sentence."""
    lines = []
    for a in analyze(texts, split_sents=True, num_workers=threads):
        segs = list(zip(a.segments, a.eojeol_start))
        i = 0
        for k, (s_start, s_end) in enumerate(a.sentences):
            parts: list[str] = []
            while i < len(segs) and segs[i][0][0] < s_end:
                (x, y), first = segs[i]
                if parts:
                    parts.append(" " if first else DELIM)
                parts.append(a.text[x:y])
                i += 1
            if parts:
                # A sentence after the first follows a space in the document, so at encode time
                # its first segment carries "▁": train on it the same way.
                lines.append((" " if k else "") + "".join(parts))
    return lines


_SENTENCE_END = re.compile(r"[.!?…。]+[\"'”’)\]]*(?:\s|$)|\n+")


def estimate_sentences(text: str) -> int:
    """Sentences in a document by its punctuation and line breaks: no Kiwi, a guess that sizes the sample."""
    t = text.rstrip()
    ends = len(_SENTENCE_END.findall(t))
    return max(1, ends + (not _SENTENCE_END.search(t[-1:])))  # + the last sentence when it has no ending mark


def doc_key(seed: int, sha256: str, ordinal: int) -> int:
    """A document's place in the sample order: a hash of the seed, its file's content and its ordinal
    in that file, so the sample depends on neither the order of the inputs nor their paths."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{sha256}:{ordinal}".encode(), digest_size=8).digest(), "little")


def sample_documents(files: list, inputs: list[dict], cfg: "VocabConfig", stats: ReadStats,
                     guard=None, found: Found | None = None) -> tuple[list[str], int]:
    """Read every document once (no Kiwi) and keep a seeded sample of whole documents: those with the
    smallest `doc_key`s, as few as hold an estimated SAMPLE_MARGIN x --max-sentences sentences (all of
    them in a smaller corpus). -> (the sample's cleaned texts in input order, characters read).
    Memory is the sample's size, not the corpus's. `guard` (corpus_tools.guard.EvalText): every
    document holding evaluation text is counted in `found` and, unless --keep-eval-text, skipped
    ("eval_text") before the draw, so it never enters the sample (--eval-strict: refused)."""
    from tqdm import tqdm

    target = int(cfg.max_sentences * SAMPLE_MARGIN)
    heap: list[tuple] = []  # (-key, file, ordinal, text, estimated sentences): the largest key on top
    kept = chars = 0
    current, ordinal, n = -1, 0, 0
    bar = tqdm(desc="read", unit="doc", unit_scale=True, disable=None, file=sys.stderr)
    for where, raw in iter_documents(files, text_field=cfg.text_field, one_doc_per_line=cfg.one_doc_per_line, stats=stats):
        if stats.files - 1 != current:
            current, ordinal = stats.files - 1, 0
        ordinal += 1  # the document's identity: its file's sha256 and this ordinal
        n += 1
        if n % 4096 == 0:
            bar.update(4096)
            bar.set_postfix(MB=f"{stats.bytes / 1e6:.1f}", sampled=len(heap))
        text = clean(raw)
        if not text:
            stats.skip("empty", where)
            continue
        if guard is not None and (hit := guard.check(text)):
            if cfg.eval_strict:
                raise InputError(f"{where}: {hit.replace('_', ' ')} in the corpus (eval_strict)")
            found.add(hit, where, str(files[current]))
            if not cfg.keep_eval_text:
                stats.skip("eval_text", where)
                continue
        stats.documents_out += 1
        chars += len(text)
        key = doc_key(cfg.seed, inputs[current]["sha256"], ordinal)
        if kept >= target and key > -heap[0][0]:
            continue  # later in the order than the whole sample: never kept
        est = estimate_sentences(text)
        heapq.heappush(heap, (-key, current, ordinal, text, est))
        kept += est
        while kept - heap[0][4] >= target:  # the latest document is not needed to reach the target
            kept -= heapq.heappop(heap)[4]
    bar.update(n % 4096)
    bar.close()
    return [item[3] for item in sorted(heap, key=lambda item: (item[1], item[2]))], chars


def _same_work(old: dict, config: dict, inputs: list[dict]) -> bool:
    """Up to date = same options and same input *contents* (a path spelled another way is the same file)."""
    def content(i):
        return [(x["bytes"], x["sha256"], x.get("first_documents")) for x in i]

    def options(c):
        return {k: v for k, v in c.items() if k != "inputs"}

    return options(old.get("config", {})) == options(config) and content(old.get("inputs", [])) == content(inputs)


def main(cfg: VocabConfig, ready_only: bool = False) -> dict:
    """Build the vocabulary (or find it up to date). ready_only: never build; an InputError when
    `cfg.out` does not hold this vocabulary."""
    from tqdm import tqdm

    from corpus_tools.morph import kiwi_differs

    if cfg.kind == "morpheme-attached" and cfg.model_type != "unigram":
        raise InputError("--kind morpheme-attached needs --model-type unigram")
    out = Path(cfg.out)
    threads = cfg.threads or default_threads()
    files = expand_inputs(cfg.inputs)
    inputs = [file_record(f) for f in files]
    config = {**C.to_dict(cfg), "threads": threads, "kiwi": DEFAULT_KIWI, "sampling": SAMPLING}
    config.pop("force"), config.pop("show"), config.pop("out")
    evals = [config.pop(k) for k in ("eval_nsmc_test", "eval_korquad")] + config.pop("eval_klue")
    config.pop("eval_strict"), config.pop("keep_eval_text")  # (strict refuses; it changes nothing built)
    if any(evals):  # the evaluation files' content and the policy (without them: the vocabulary's identity is as before)
        config["eval_text"] = [*(sha256_file(f) if f else "" for f in evals), policy(cfg.keep_eval_text)]
    if cfg.kind == "morpheme":
        config.pop("kind")  # added later: at its default the vocabulary's identity is as before
    elif cfg.kind == "plain":
        from korbert.plain import VERSION

        config.pop("kiwi")
        config["plain_version"] = VERSION
    else:
        config["attach_version"] = ATTACH_VERSION
    if not cfg.force and (out / "manifest.json").is_file():
        old = read_manifest(out, "vocab")
        other_kiwi = cfg.kind != "plain" and kiwi_differs(old.get("versions", {}), strict=True)  # what SentencePiece trained on
        if other_kiwi and _same_work(old, config, inputs):
            print(f"{out}: built with {other_kiwi}; {'not rebuilt (ready only)' if ready_only else 'rebuilding it'}")
        if _same_work(old, config, inputs) and not other_kiwi:
            if cfg.eval_strict and old["counts"].get("eval_text"):  # built before --strict was asked for: its counts decide
                kind, where = next(iter(old["counts"]["eval_text_first_at"].items()))
                raise InputError(f"{where}: {kind.replace('_', ' ')} in the corpus (eval_strict; {old['counts']['eval_text']})")
            print(f"{out}: vocabulary up to date (tokenizer {old['tokenizer_hash'][:12]}); --force rebuilds it")
            return old
    if ready_only:
        raise InputError(f"{out}: no vocabulary built from these inputs and options yet")

    t0 = time.time()
    stats = ReadStats()
    guard = EvalText(nsmc_test=[evals[0]] if evals[0] else [], korquad=[evals[1]] if evals[1] else [], klue=evals[2:]) if any(evals) else None
    found = Found()
    docs, chars = sample_documents(files, inputs, cfg, stats, guard, found)
    t_read = time.time() - t0
    sampled_chars = sum(len(t) for t in docs)
    rng = random.Random(cfg.seed)
    lines: list[str] = []
    seen = 0
    bar = tqdm(total=len(docs), desc="sentences (sample)" if cfg.kind == "plain" else "kiwi (sample)", unit="doc",
               unit_scale=True, disable=None, file=sys.stderr)
    for i in range(0, len(docs), cfg.batch_docs):
        batch = docs[i : i + cfg.batch_docs]
        for line in (plain_sentences(batch) if cfg.kind == "plain" else segmented_sentences(batch, threads)):
            seen += 1
            if len(lines) < cfg.max_sentences:
                lines.append(line)
            else:  # reservoir sample: every sentence of the sample is kept with the same probability
                j = rng.randrange(seen)
                if j < cfg.max_sentences:
                    lines[j] = line
        bar.update(len(batch))
        bar.set_postfix(sents=seen)
    bar.close()
    if not lines:
        raise InputError(
            f"no usable text in {', '.join(map(str, cfg.inputs))}: {stats.documents_in} documents read, "
            f"skipped {dict(stats.skipped) or 'none'}"
        )
    t_kiwi = time.time() - t0 - t_read
    for line in lines[: cfg.show]:
        print("  " + line.replace(DELIM, " + ").strip())

    attached = None
    if cfg.kind == "morpheme-attached":
        model_bytes, attached = attach_markers(lines, cfg, threads)
    else:
        model_bytes = train_spm(lines, cfg, threads)
    t_spm = time.time() - t0 - t_read - t_kiwi

    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").unlink(missing_ok=True)  # the folder is unfinished until the manifest is back
    from corpus_tools.artifacts import atomic_write_bytes

    from korbert.tokenizer import SPM_FILE, KorBertTokenizer  # (imports no Kiwi)

    atomic_write_bytes(out / SPM_FILE, model_bytes)
    if cfg.kind == "plain":
        from korbert.folders import TOKENIZER_FILES, tokenizer_files_sha256
        from korbert.plain import save_plain

        for name in TOKENIZER_FILES:  # files of an earlier tokenizer here would count in the fingerprint
            if name != SPM_FILE:
                (out / name).unlink(missing_ok=True)
        tok = save_plain(model_bytes, cfg.model_type, out)
        fingerprint = tokenizer_files_sha256(out)  # what the shards will record (korbert.foreign)
    else:
        tok = KorBertTokenizer.from_spm(out / SPM_FILE, cfg.model_type, dict(DEFAULT_KIWI), attached=attached)
        tok.save_pretrained(str(out))
        fingerprint = tok.fingerprint
    counts = {
        **stats.as_dict(),
        "characters": chars,
        **(found.counts() if guard is not None else {}),
        "documents_sampled": len(docs),
        "characters_sampled": sampled_chars,
        "sentences": seen,
        "sentences_trained_on": len(lines),
        "vocab_size": len(tok),
        "seconds_read": round(t_read, 1),
        "seconds_sentences" if cfg.kind == "plain" else "seconds_kiwi": round(t_kiwi, 1),
        "seconds_sentencepiece": round(t_spm, 1),
    }
    manifest = write_manifest(
        out,
        "vocab",
        FORMAT_VERSION,
        files=[SPM_FILE, "tokenizer.json", "tokenizer_config.json"],
        config=config,
        inputs=inputs,
        counts=counts,
        tokenizer_hash=fingerprint,
    )
    skipped = sum(stats.skipped.values())
    print(
        f"vocab ({cfg.kind}): {len(tok)} tokens from {seen} sentences of {len(docs)} sampled documents of {stats.documents_out} "
        f"({skipped} skipped{': ' + str(dict(stats.skipped)) if skipped else ''}) "
        f"in {time.time() - t0:.1f}s -> {out} (tokenizer {manifest['tokenizer_hash'][:12]})"
    )
    return manifest


def _marked_segments(lines: list[str], suffix: bool = False) -> Counter:
    """The segments of the training lines that carry a word's "▁", counted: the segment after each
    space (a text's first segment has none); with `suffix`, the segment before each space."""
    words: Counter = Counter()
    for line in lines:
        if suffix:
            words.update(part.rsplit(DELIM, 1)[-1] for part in line.split(" ")[:-1] if part)
        else:
            words.update(part.split(DELIM, 1)[0] for part in line.split(" ")[1:] if part)
    return words


def attach_markers(lines: list[str], cfg: VocabConfig, threads: int) -> tuple[bytes, dict[str, float]]:
    """The morpheme-attached kind: `reserve_markers` at this kind's settings -> (model, {"▁" + p: score})."""
    model, added, _, _ = reserve_markers(lines, cfg, threads)
    return model, added


def reserve_markers(lines: list[str], cfg: VocabConfig, threads: int, extra_frac: float = 0.10,
                    start_coverage: float = 0.995, suffix: bool = False) -> tuple[bytes, dict[str, float], int, int]:
    """The morpheme-attached kind: a unigram vocabulary of --vocab-size pieces in which a word's "▁"
    stands alone only before a rare first character (or a lacking one). SentencePiece learns "▁갔다" for frequent words,
    but a word whose start has no such piece pays a lone "▁" token before its first piece ("▁" + "싶").
    Here SentencePiece trains on fewer pieces, and the rest of the budget goes to "▁" + p pieces, each
    scored as the two-token path it replaces (score("▁") + score(p)), while the tokenizer picks "▁"
    alone only where no such piece starts the word:

      1. "▁" + c for the single-character pieces c that have no such piece and are among the most
         frequent word-start characters that together begin `start_coverage` of the lines' words: the
         fallback, so such a word always has one (a word that starts with a rarer character pays a
         lone "▁" unless step 2 adds "▁" + c; the pieces saved go to SentencePiece);
      2. then, by how many word starts they would take, "▁" + p for the pieces p that follow a lone
         "▁" in the training lines, until the vocabulary is --vocab-size again.

    The reserve is sized on a first model of the full size (its needs in 1, plus `extra_frac` of the
    budget), and grown while the model trained on what is left needs more. A word whose first character
    is not in the vocabulary at all (byte fallback) also gets a lone "▁". `extra_frac` and
    `start_coverage` are the knobs benchmarks/attached_reserve_policies.py tries; the kind uses the
    defaults (version 2 of the kind was 0.02 and 1: a fallback for every character). `suffix` (a probe,
    benchmarks/marker_side_probe.py: no tokenizer kind uses it) mirrors all of this for lines whose
    "▁" ends a word (SentencePiece's treat_whitespace_as_suffix): p + "▁" pieces, fallbacks for the
    word-final characters. -> (that SentencePiece model, {"▁" + p: score}, fallbacks, reserve)."""
    import sentencepiece as spm

    words = _marked_segments(lines, suffix)
    distinct = list(words)
    starts: Counter = Counter()  # words beginning (suffix: ending) with each character
    for w, n in words.items():
        if w:
            starts[w[-1] if suffix else w[0]] += n
    covered = _covering(starts, start_coverage)

    def mark(p: str) -> str:
        return p + "▁" if suffix else "▁" + p

    def needs(model: bytes) -> tuple[dict[str, float], list[str], Counter]:
        sp = spm.SentencePieceProcessor(model_proto=model)
        score = {sp.id_to_piece(i): sp.get_score(i) for i in range(sp.get_piece_size())
                 if not (sp.is_control(i) or sp.is_unused(i) or sp.is_byte(i) or sp.is_unknown(i))}
        initial = sorted(c for c in score if len(c) == 1 and c != "▁" and mark(c) not in score and (covered is None or c in covered))
        after: Counter = Counter()
        texts = [w + " " for w in distinct] if suffix else [" " + w for w in distinct]
        for w, pieces in zip(distinct, sp.encode(texts, out_type=str, num_threads=threads)):
            if suffix:
                pieces = pieces[::-1]  # the marker last: its neighbour is then pieces[1] as well
            if len(pieces) > 1 and pieces[0] == "▁" and pieces[1] in score and mark(pieces[1]) not in score:
                after[pieces[1]] += words[w]
        return score, initial, after

    extra = max(1, round(extra_frac * cfg.vocab_size))
    _, initial, _ = needs(train_spm(lines, cfg, threads, suffix=suffix))
    for _ in range(4):  # a smaller model can need more fallbacks than the first: then the reserve grows
        reserve = min(len(initial) + extra, cfg.vocab_size // 2)
        model = train_spm(lines, replace(cfg, vocab_size=cfg.vocab_size - reserve), threads, suffix=suffix)
        score, initial, after = needs(model)
        if len(initial) <= reserve:
            break
    if len(initial) > reserve:
        raise InputError(f"--kind morpheme-attached: {len(initial)} single characters need a word-start piece, more than half of "
                         f"--vocab-size {cfg.vocab_size}; choose a larger vocabulary")
    added = {mark(c): score["▁"] + score[c] for c in initial}
    for p, _ in sorted(after.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(added) >= reserve:
            break
        added.setdefault(mark(p), score["▁"] + score[p])
    return model, added, len(initial), reserve  # fewer than the reserve only when fewer pieces ever follow a lone "▁" (the manifest's vocab_size says)


def _covering(starts: Counter, coverage: float) -> set[str] | None:
    """The most frequent word-start characters that together begin `coverage` of the words (ties by
    character, so the set is deterministic); None at coverage >= 1: every character."""
    if coverage >= 1:
        return None
    if not 0 < coverage:
        raise ValueError(f"start coverage must be in (0, 1], got {coverage}")
    need, kept, seen = math.ceil(coverage * sum(starts.values()) - 1e-9), set(), 0  # 0.07 * 100 is 7.000000000000001
    for c, n in sorted(starts.items(), key=lambda kv: (-kv[1], kv[0])):
        if seen >= need:
            break
        kept.add(c)
        seen += n
    return kept


def plain_sentences(texts: list[str]) -> list[str]:
    """The plain kind's training lines: one per sentence, split at punctuation (no Kiwi)."""
    from korbert.plain import sentences

    return [s for t in texts for s in sentences(t)]


def train_spm(lines: list[str], cfg: VocabConfig, threads: int, suffix: bool = False) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    print(f"training SentencePiece ({cfg.model_type}, {cfg.vocab_size}) on {len(lines)} sentences ...", file=sys.stderr)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=buf,
            model_type=cfg.model_type,
            vocab_size=cfg.vocab_size,
            character_coverage=cfg.character_coverage,
            byte_fallback=True,
            pad_id=0, pad_piece="[PAD]",
            unk_id=1, unk_piece="[UNK]",
            bos_id=2, bos_piece="[CLS]",
            eos_id=3, eos_piece="[SEP]",
            control_symbols=special_pieces(cfg.num_unused),
            normalization_rule_name="identity",  # text is already NFC; never NFKC Korean
            **(dict(
                add_dummy_prefix=False,  # a text's first segment has no preceding space, so no "▁"
                remove_extra_whitespaces=False,  # keep the leading space of non-first sentences
                pretokenization_delimiter=DELIM,
                **({"treat_whitespace_as_suffix": True} if suffix else {}),  # only benchmarks/marker_side_probe.py
            ) if cfg.kind != "plain" else dict(  # plain: SentencePiece's own defaults, as korbert.plain encodes
                add_dummy_prefix=True, remove_extra_whitespaces=True,
            )),
            max_sentence_length=1 << 15,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=threads,
            minloglevel=2,
        )
    except RuntimeError as e:
        msg = str(e)
        if "Vocabulary size" in msg:
            raise InputError(f"the corpus is too small for --vocab-size {cfg.vocab_size}: {msg}") from None
        raise
    return buf.getvalue()


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(VocabConfig, argv, prog="korbert vocab"))
