"""The model card: final/README.md in the Hugging Face Hub's format (YAML front matter + markdown).

`korbert pretrain` writes it at export from final/manifest.json alone; `korbert run` writes it again
after its evaluations, adding the results table (the model, its comparison rows, TF-IDF) and a
`model-index` block with the NSMC and KorQuAD metrics (each dataset named with its protocol). Every figure comes from the manifest or
the results: nothing is typed by hand. README.md is not in the manifest's file list (the card is
rewritten after the manifest is final).
"""

from __future__ import annotations

import json
from pathlib import Path

from corpus_tools.artifacts import atomic_write_bytes
from korbert.phases import input_ids
from korbert.table import pct, render_table

CARD = "README.md"
TAGS = ["korbert", "bert", "korean", "kiwi", "morpheme"]


def _front_matter(m: dict, license: str, ours: dict | None, name: str, datasets: dict) -> str:
    import yaml

    tags = TAGS if m.get("tokenizer_kind") != "plain" else TAGS[:3]
    if m.get("objective") == "electra":  # a discriminator: no fill-mask widget (its generator/ fills masks)
        meta: dict = {"language": ["ko"], "library_name": "transformers", "tags": [t if t != "bert" else "electra" for t in tags]}
    else:
        meta = {"language": ["ko"], "library_name": "transformers", "pipeline_tag": "fill-mask", "tags": tags}
    if license:
        meta["license"] = license
    if m.get("init_from"):
        meta["base_model"] = m["init_from"]["folder"]  # the local folder it continued (the card says: put its Hub id here)
    if ours is not None:
        results = []
        if ours.get("nsmc_accuracy") is not None:
            results.append({
                "task": {"type": "text-classification", "name": "Sentiment analysis"},
                "dataset": {"name": datasets.get("nsmc", "NSMC-R"), "type": "nsmc"},
                "metrics": [{"type": "accuracy", "value": round(100 * ours["nsmc_accuracy"], 2), "name": "accuracy"}],
            })
        if ours.get("korquad_f1") is not None:
            results.append({
                "task": {"type": "question-answering", "name": "Extractive question answering"},
                "dataset": {"name": datasets.get("korquad", "KorQuAD 1.0"), "type": "korquad"},
                "metrics": [
                    {"type": "exact_match", "value": round(100 * ours["korquad_em"], 2), "name": "EM"},
                    {"type": "f1", "value": round(100 * ours["korquad_f1"], 2), "name": "F1"},
                ],
            })
        if results:
            meta["model-index"] = [{"name": name, "results": results}]
    return "---\n" + yaml.safe_dump(meta, allow_unicode=True, sort_keys=False) + "---\n"


def long_steps_text(m: dict) -> str:
    """"the last 3 steps", or after a longer budget re-planned it: "9 steps in all, the last 6 from step 14"."""
    n, start, end = m["long_steps"], m.get("long_from_step"), m.get("step")
    last = end - start if start is not None and end is not None else n
    return f"the last {n:,} steps" if last == n else f"{n:,} steps in all, the last {last:,} from step {start:,}"


def long_phase_text(m: dict, long_len: int) -> str:
    """" Positions 0–127 were trained through the whole run, 128–511 only in the long phase, ...", from the
    manifest's `long_phase` record (korbert.phases.long_phase_record; "" for an export made before it)."""
    lp = m.get("long_phase")
    if not lp:
        return ""
    s, decay = lp["short_len"], (m.get("config") or {}).get("schedule", "linear")
    start = f", starting as copies of 0–{s - 1} (tiled)" if lp["positions"] == "copy" else ", from their random initialization"
    if lp["schedule"] == "own":
        lr = (f"its own learning-rate schedule: warmup over {lp['warmup']:.0%} of it to a peak of {lp['peak_lr']:.1e}, "
              f"then {decay} decay to 0")
    else:
        at = f", from {lp['lr_at_switch']:.1e} at the switch" if lp.get("lr_at_switch") is not None else ""
        lr = f"the tail of the run's learning-rate schedule ({decay} decay to 0{at})"
    nsp = " It trained MLM alone (no NSP loss)." if lp.get("nsp") is False else ""
    return f" Positions 0–{s - 1} were trained through the whole run, {s}–{long_len - 1} only in the long phase{start}; it trained with {lr}.{nsp}"


def _dropout(r: dict) -> str:
    set_ = ((r.get("model") or {}).get("dropout") or {}).get("set")
    if set_ == {}:  # a config without BERT's dropout fields keeps its own
        return "the model config's own"
    return f"{r['config']['dropout']:g}"


def finetuning_lines(results: dict) -> list[str]:
    """How each score was fine-tuned, from the results.json its eval wrote (`results`: {"nsmc": ...,
    "korquad": ...}; a task absent is not reported): the settings behind the row, and a transformers
    `TrainingArguments` that reproduces the NSMC row (korbert's fine-tuning is AdamW with no decay on
    biases and LayerNorm, linear warmup then linear decay, gradients clipped at 1.0, as `Trainer`'s)."""
    head = ["| task | epochs (steps) | learning rate | batch size | warmup | weight decay | dropout | max length | stride | seed |",
            "|---|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    rows = []
    for task, name in (("nsmc", "NSMC"), ("korquad", "KorQuAD 1.0")):
        r = results.get(task)
        if not r:
            continue
        c, t = r["config"], r.get("training") or {}
        cap = f", at most {c['max_steps']:,} steps" if c.get("max_steps") else ""
        cap += f", epochs counted in {c['epoch_window']} windows" if c.get("epoch_window") else ""  # (len/stride/question)
        steps = f" ({t['steps']:,} steps)" if "steps" in t else ""
        warmup = f"{c['warmup_ratio']:.0%} of the steps" + (f" ({t['warmup_steps']:,})" if "warmup_steps" in t else "") + ", then linear decay"
        stride = f"{c['stride']}" if task == "korquad" else "-"
        max_len = f"{c['max_len']}" + (f" (question {c['max_query_len']})" if task == "korquad" else "")
        rows.append(f"| {name} | {c['epochs']}{cap}{steps} | {c['lr']:g} | {c['batch_size']} | {warmup} | {c['weight_decay']:g} | "
                    f"{_dropout(r)} | {max_len} | {stride} | {c['seed']} |")
    if not rows:
        return []
    lines = ["", "### How the scores were fine-tuned", "", *head, *rows]
    n = results.get("nsmc")
    if n:
        c = n["config"]
        held = (f" korbert held out {n['n']['valid']:,} of the training reviews (`valid_size` {c['valid_size']:g}, seed {c['seed']}) "
                "to pick the best epoch and trained on the rest;" if n.get("n", {}).get("valid") else "")
        drop = _dropout(n)
        kwargs = (f", hidden_dropout_prob={drop}, attention_probs_dropout_prob={drop}, classifier_dropout={drop}"
                  if drop != "the model config's own" else "")
        lines += [
            "",
            f"The NSMC row with transformers' `Trainer` (reviews tokenized with truncation at {c['max_len']} tokens):{held} "
            "`warmup_steps` below 1 is a share of the steps. `Trainer`'s defaults (no warmup, no weight decay) score lower.",
            "",
            "```python",
            "from transformers import AutoModelForSequenceClassification, TrainingArguments",
            "",
            f'model = AutoModelForSequenceClassification.from_pretrained("PATH", num_labels=2{kwargs})',
            "args = TrainingArguments(",
            f'    "nsmc", num_train_epochs={c["epochs"]}, learning_rate={c["lr"]:g}, per_device_train_batch_size={c["batch_size"]},'
            + (f" max_steps={c['max_steps']}," if c.get("max_steps") else ""),
            f'    warmup_steps={c["warmup_ratio"]:g}, weight_decay={c["weight_decay"]:g}, lr_scheduler_type="linear", max_grad_norm=1.0,',
            f'    train_sampling_strategy="group_by_length", seed={c["seed"]},',  # (transformers 5: warmup_steps < 1 is a share)
            ")",
            "```",
        ]
    return lines


def _file_table(head: str, inputs: list[dict]) -> list[str]:
    rows = [f"| {head} | bytes | sha256 |", "|---|---:|---|"]
    for c in inputs:
        part = f" (its first {c['first_documents']:,} documents)" if c.get("first_documents") else ""
        rows.append(f"| {c['file']}{part} | {c['bytes']:,} | {c['sha256'][:16]} |")
    return rows


def eval_text_sentence(corpus: dict) -> str:
    """What the shards' guard found of the evaluation text they were checked against, and what became of it."""
    from corpus_tools.guard import KINDS

    g = corpus.get("eval_guard") or {}
    files = [name for key, name in (("nsmc_test", "the NSMC test file"), ("korquad", "the KorQuAD file"), ("klue", "the KLUE dev files"))
             if g.get(key)]
    if not files:
        return ""
    found = corpus.get("eval_text") or {}
    if not found:
        named = files[0] if len(files) == 1 else f"{', '.join(files[:-1])} and {files[-1]}"
        return f" Checked against the evaluation files given ({named}): no corpus document held their text."
    what = "; ".join(f"{n:,} {KINDS.get(k, k)}" for k, n in found.items())
    if g.get("policy") == "keep":
        return f" **Pretrained on evaluation text** (kept on request): {what}."
    return f" Left out as evaluation text (not pretrained on): {what}."


def card_text(m: dict, license: str = "", table: list[dict] | None = None, notes: list[str] | None = None, datasets: dict | None = None,
              finetuning: dict | None = None) -> str:
    """The card for a model manifest `m` (final/manifest.json); `table`: result rows (korbert.table's),
    the one with origin "pretrained here" being this model; `datasets`: what each task was scored on
    ({"nsmc": ..., "korquad": ...}); `finetuning`: this model's results.json per task, whose settings
    the card lists (`finetuning_lines`)."""
    mc = m["model_config"]
    run = m.get("config", {})
    electra = m.get("electra") if m.get("objective") == "electra" else None
    arch = "ELECTRA" if electra else "BERT"
    name = f"korbert {arch} ({mc['num_hidden_layers']} layers, hidden {mc['hidden_size']})"
    ours = next((r for r in table or [] if r.get("origin") == "pretrained here"), None)
    objective = {"mlm+nsp": "masked LM + next-sentence prediction", "mlm": "masked LM (no NSP)"}.get(m.get("objective", "mlm+nsp"), "")
    if electra:
        g = electra["generator_config"]
        objective = (f"replaced-token detection (ELECTRA: a generator of hidden {g['hidden_size']}, {g['num_attention_heads']} head(s), "
                     f"{m.get('generator_parameters', 0) / 1e6:.1f}M parameters, fills the masked positions by sampling; this "
                     f"discriminator tells every replaced token from the original ones; discriminator loss weight {electra['disc_weight']:g})")
    ours_tok = m.get("tokenizer_class", "KorBertTokenizer") == "KorBertTokenizer"
    plain = m.get("tokenizer_kind") == "plain"
    whose = "the model it continues" if m.get("init_from") else "another model"
    vocabulary = ("a vocabulary of Kiwi morphemes" if ours_tok else "a plain SentencePiece vocabulary (no morpheme analysis)" if plain
                  else f"the {m['tokenizer_class']} tokenizer of {whose}")
    lines = [
        _front_matter(m, license, ours, name, datasets or {}),
        f"# {name}",
        "",
        f"A Korean {arch}{' discriminator' if electra else ''} ({m['parameters'] / 1e6:.1f}M parameters; {mc['num_hidden_layers']} layers, "
        f"hidden {mc['hidden_size']}, {mc['num_attention_heads']} heads, vocabulary {mc['vocab_size']:,}) pretrained with korbert on "
        f"{objective}, with {vocabulary}." + (" The generator is in `generator/` (an ElectraForMaskedLM with the same tokenizer)." if electra else ""),
    ]
    init = m.get("init_from")
    if init:
        fresh = init.get("fresh") or []
        lines += ["", f"Continued from `{init['folder']}` (weights sha256 {init['weights_sha256'][:12]}), whose tokenizer it "
                  "keeps. Before uploading, replace `base_model` above by that model's Hub id."
                  + (f" Started fresh (the folder lacked them): {', '.join(f'`{k}`' for k in fresh)}." if fresh else "")]
    corpus = m.get("corpus")
    lines += ["", "## Training data", ""]
    if corpus:
        lines += _file_table("file", corpus["inputs"])
        lines += ["", f"{corpus['documents']:,} documents; {corpus['train_instances']:,} training instances of "
                  f"{corpus['train_tokens']:,} tokens (the shards' counts)." + eval_text_sentence(corpus)]
        long = m.get("long_corpus")
        if long and m.get("long_steps"):
            same = input_ids(long) == input_ids(corpus)
            packed = " (packed: consecutive sentences across documents)" if long.get("instances") == "packed" else ""
            lines += ["", f"The long phase ({long_steps_text(m)}) read instances of up to {long['max_seq_len']} tokens{packed} "
                      f"made from {'the same files' if same else 'other files'}: {long['documents']:,} documents, "
                      f"{long['train_instances']:,} training instances of {long['train_tokens']:,} tokens."
                      + long_phase_text(m, long["max_seq_len"])]
            if not same:
                lines += ["", *_file_table("long-phase file", long["inputs"])]
    else:
        lines += ["Not recorded (a model exported before korbert wrote the corpus into its manifest)."]
    held = m.get("eval") or {}
    lines += ["", "## Training", ""]
    if not {"step", "tokens", "seconds"} <= m.keys():
        lines += ["Not recorded (exported without a training run's manifest)."]
    else:
        heldout = ""
        if "mlm_acc" in held:
            heldout = f" Held-out {'generator ' if electra else ''}MLM accuracy {held['mlm_acc']:.4f}" + (f", NSP accuracy {held['nsp_acc']:.4f}" if "nsp_acc" in held else "")
            if "disc_acc" in held:
                auc = f", AUC {held['disc_auc']:.4f} on replaced tokens" if held.get("disc_auc") is not None else ""
                heldout += f", discriminator accuracy {held['disc_acc']:.4f}{auc} ({held.get('replaced', 0):.1%} of the tokens replaced)"
            if "long_mlm_acc" in held:
                heldout += f"; on the long phase's held-out instances, MLM accuracy {held['long_mlm_acc']:.4f}"
            heldout += "."
        lines.append(
            f"{m['step']:,} optimizer steps, {m['tokens']:,} training tokens, {m['seconds'] / 60:.1f} min of training on "
            f"{m.get('hardware', run.get('device', '?'))} ({run.get('precision_used', '?')}, {run.get('world_size', 1)} process(es)); "
            f"sequences of up to {m.get('trained_seq_len', '?')} tokens.{heldout}"
        )
    if m.get("untrained"):
        lines += ["", f"Left as initialized (MLM only): {', '.join(f'`{u}`' for u in m['untrained'])}."]
    remote = ", trust_remote_code=True" if ours_tok else ""
    lines += ["", "## Tokenizer", ""]
    if ours_tok:
        lines.append(
            f"Kiwi morphemes, then SentencePiece pieces (korbert tokenizer {m['tokenizer_hash'][:12]}); offsets index the string "
            "you pass. It needs `kiwipiepy`. With korbert installed, `import korbert` and load as usual; without it, the folder "
            "carries the tokenizer's code: pass `trust_remote_code=True`."
        )
    elif plain:
        lines.append(
            f"SentencePiece pieces over the NFC text, no morpheme analysis (korbert's plain kind; files sha256 "
            f"{m['tokenizer_hash'][:12]}): a standard fast tokenizer, which plain transformers loads with no korbert or Kiwi. "
            "Pretraining cut its pairs at sentence-ending punctuation."
        )
    else:
        lines.append(
            f"The starting model's own tokenizer ({m['tokenizer_class']}, its files unchanged: sha256 {m['tokenizer_hash'][:12]}); "
            "plain transformers loads it, no korbert or Kiwi needed. Pretraining cut its pairs at Kiwi's sentence boundaries."
        )
    if ours_tok or plain:  # korbert's own kinds: the export writes the length (korbert.checkpoint.export)
        length, src = ((m["trained_seq_len"], "the longest sequences pretraining trained") if m.get("trained_seq_len")
                       else (mc.get("max_position_embeddings"), "max_position_embeddings"))
        if length:
            lines += ["", f"`truncation=True` cuts at the tokenizer's model_max_length {length}: {src}."]
    lines += [
        "", "## Usage", "",
        "```python",
        "from transformers import AutoModel, AutoTokenizer, pipeline",
        "",
        f'tok = AutoTokenizer.from_pretrained("PATH"{remote})' + ("   # or: import korbert, then without the flag" if ours_tok else ""),
        'model = AutoModel.from_pretrained("PATH")',
        f'fill = pipeline("fill-mask", model="PATH{"/generator" if electra else ""}"{remote})',
        'fill("영화가 정말 [MASK]")',
        "```",
        "",
        ("Loading it for a task (AutoModelForSequenceClassification, ...) makes transformers report unused "
         "`discriminator_predictions.*` keys (the pretraining head): expected of an ELECTRA discriminator." if electra else
         "Loading it for a task (AutoModelForSequenceClassification, ...) makes transformers report unused `cls.*` keys "
         "(the pretraining heads) and, for token-level heads, `bert.pooler.*`: expected of a pretraining checkpoint."),
    ]
    if table:
        lines += ["", "## Evaluation", "", *render_table(table), ""]
        lines += notes or []
        if ours is not None:
            lines += ["", f"This model: {(datasets or {}).get('nsmc', 'NSMC')} accuracy {pct(ours.get('nsmc_accuracy'))}, KorQuAD EM {pct(ours.get('korquad_em'))} / "
                      f"F1 {pct(ours.get('korquad_f1'))}."]
        if ours is not None:  # the settings of the scores this card reports
            scored = {"nsmc": ours.get("nsmc_accuracy") is not None, "korquad": ours.get("korquad_f1") is not None}
            lines += finetuning_lines({k: v for k, v in (finetuning or {}).items() if scored.get(k)})
    return "\n".join(lines).rstrip("\n") + "\n"


def write_card(
    folder: str | Path, table: list[dict] | None = None, notes: list[str] | None = None, license: str | None = None, datasets: dict | None = None,
    finetuning: dict | None = None,
) -> Path:
    """final/README.md from final/manifest.json (and the results rows, when there are any). The
    license is the manifest's (`korbert pretrain --license`) unless given."""
    folder = Path(folder)
    m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    path = folder / CARD
    text = card_text(m, m.get("license", "") if license is None else license, table, notes, datasets, finetuning)
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def read_card(path: str | Path) -> tuple[dict, str]:
    """(front matter, markdown body) of a card (the tests' parser, and anyone's)."""
    import yaml

    text = Path(path).read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise ValueError(f"{path}: no YAML front matter")
    head, _, body = text[4:].partition("\n---\n")
    return yaml.safe_load(head), body
