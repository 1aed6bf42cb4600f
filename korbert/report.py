"""The recipe's report: report.json (every number) and report.md (the same, for people) + plots."""

from __future__ import annotations

import io
import json
from pathlib import Path

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, atomic_write_json, machine
from corpus_tools.guard import KINDS, policy
from korbert import recipe_klue
from korbert.card import long_steps_text
from korbert.data_get import NSMC_NAMES, nsmc_protocol
from korbert.table import pct, render_table, result_row

_SHAPE = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")


def model_name(pre) -> str:
    """"BERT-tiny", or with the shape overrides that make it another model: "BERT-tiny, num_hidden_layers=4"."""
    from korbert.model import parse_overrides  # the one parser of --override key=value

    shape = [f"{k}={v}" for k, v in parse_overrides(pre.override).items() if k in _SHAPE]
    arch = f"ELECTRA-{pre.model_size} (generator {pre.generator_size:g} of its width)" if pre.objective == "electra" else f"BERT-{pre.model_size}"
    return ", ".join([arch, *shape])


def folder_name(folder: str) -> str:
    """A model folder's name for a table: its own, or for a korbert run's final/ the run's ("demo/final")."""
    path = Path(folder.rstrip("/"))
    return f"{path.parent.parent.name}/{path.name}" if path.name == "final" and path.parent.name == "pretrain" else path.name


def _read_log(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def plot_curves(log: list[dict], folder: Path) -> list[str]:
    """plots/pretrain_loss.png and plots/pretrain_mlm_acc.png against tokens seen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not log:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    tok = [r["tokens"] / 1e6 for r in log]
    ev = [r for r in log if "eval_mlm_acc" in r]
    names = []
    for name, series in (
        ("pretrain_loss.png", [("training loss", tok, [r["loss"] for r in log]),
                               ("held-out MLM loss", [r["tokens"] / 1e6 for r in ev], [r["eval_mlm_loss"] for r in ev])]),
        ("pretrain_mlm_acc.png", [("training MLM accuracy", tok, [r["mlm_acc"] for r in log]),
                                  ("held-out MLM accuracy", [r["tokens"] / 1e6 for r in ev], [r["eval_mlm_acc"] for r in ev])]),
    ):
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
        for label, x, y in series:
            if x:
                ax.plot(x, y, marker="o" if len(x) < 30 else None, ms=3, label=label)
        ax.set_xlabel("training tokens seen (millions)")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        png = io.BytesIO()
        fig.savefig(png, format="png")
        plt.close(fig)
        atomic_write_bytes(folder / name, png.getvalue())
        names.append(f"plots/{name}")
    return names


def write_report(out: Path, cfg, preset: dict, cfgs: dict, vm: dict | None, sm: dict, pm: dict, results: dict, times: dict, seconds: float,
                 compared: list[dict] = (), control: str = "random", klue: list[dict] = ()) -> dict:
    """vm: the vocabulary's manifest (None when --init-from used the model's own tokenizer); control:
    the comparison row, "random" (a random init of the same model) or "start" (the --init-from model);
    klue: the KLUE stages run (korbert/recipe_klue.py), with their results."""
    pre = cfgs["pretrain"]
    log = _read_log(Path(pre.out) / "log.jsonl")
    plots = plot_curves(log, out / "plots")
    pr = results
    base = pr["baseline"]
    final = cfgs["nsmc"].model
    start = folder_name(cfg.init_from) if cfg.init_from else ""
    name = f"{start}, continued" if start else model_name(pre)
    rows = [result_row(final, False, "pretrained here", pr["nsmc"], pr["korquad"], system=f"korbert {name}")]
    if control == "start":
        rows.append(result_row(cfg.init_from, False, "starting model", pr["nsmc_control"], pr["korquad_control"], system=f"start: {start}, as it was"))
    else:
        rows.append(result_row(final, True, "control", pr["nsmc_control"], pr["korquad_control"], system=f"control: {name}, random init"))
    for c in compared:
        rows.append(result_row(c["folder"], False, "given folder", c["nsmc"], c["korquad"]))
    for kind, r in base["baselines"].items():
        rows.append({"system": f"TF-IDF + LR: {r['features']}", "origin": "baseline", "parameters": None,
                     "nsmc_accuracy": r["accuracy"], "korquad_em": None, "korquad_f1": None})
    tr = sm["counts"]["train"]
    pre_eval = pm.get("eval") or {}
    dev = pr["nsmc"].get("device", {})
    report = {
        "preset": cfg.preset, "about": preset["about"], "machine": {**machine(), "device": dev},
        "seconds": round(seconds, 1), "stage_seconds": times,
        "corpus": {
            **({
                "documents": vm["counts"]["documents_used"], "sentences": vm["counts"].get("sentences"), "characters": vm["counts"].get("characters"),
                "vocab_size": vm["counts"].get("vocab_size", vm["config"].get("vocab_size")),
                "tokenizer_kind": vm["config"].get("kind", "morpheme"),
            } if vm else {  # --init-from: no vocabulary stage; the shards counted the corpus
                "documents": sm["counts"]["documents_used"], "sentences": sm["counts"].get("sentences"), "characters": None,
                "vocab_size": pm["model_config"]["vocab_size"], "tokenizer_from": cfg.init_from,
            }),
            "tokenizer_hash": sm["tokenizer_hash"],
            "eval_text": sm["counts"].get("eval_text", {}), "eval_text_first_at": sm["counts"].get("eval_text_first_at", {}),
            "eval_text_by_file": sm["counts"].get("eval_text_by_file", {}), "eval_text_policy": policy(sm["config"].get("keep_eval_text", True)),
            "train_instances": tr["instances"], "train_tokens": tr["tokens"], "valid_instances": sm["counts"]["valid"]["instances"],
            "isnext_share": tr.get("isnext_share"), "masking": tr.get("masking"),
        },
        "pretraining": {
            "model_size": pre.model_size, "model": name, "parameters": pm["parameters"], "steps": pm["step"], "tokens": pm["tokens"],
            "seconds": pm["seconds"], "tokens_per_s": round(pm["tokens"] / max(pm["seconds"], 1e-9), 1),
            "budget": {k: getattr(pre, k) for k in ("max_steps", "max_tokens", "max_minutes") if getattr(pre, k)},
            "global_batch": pm["config"]["global_batch"], "lr": pre.lr, "objective": pre.objective,
            "instances": sm["config"].get("instances", "document"), "tokens_per_instance": tr.get("tokens_per_instance"),
            "held_out_mlm_accuracy": pre_eval.get("mlm_acc"), "held_out_mlm_loss": pre_eval.get("mlm_loss"), "held_out_nsp_accuracy": pre_eval.get("nsp_acc"),
            **({"held_out_disc_accuracy": pre_eval.get("disc_acc"), "held_out_disc_auc": pre_eval.get("disc_auc"),
                "generator_parameters": pm.get("generator_parameters"), "disc_weight": pre.disc_weight} if pre.objective == "electra" else {}),
            **({"long_phase": {
                "steps": pm.get("long_steps"), "from_step": pm.get("long_from_step"), "steps_text": long_steps_text(pm),
                "max_seq_len": pm["long_corpus"]["max_seq_len"],
                "shards": pm.get("long_shards_path"), "corpus": pm["long_corpus"],
                "held_out_mlm_accuracy": pre_eval.get("long_mlm_acc"), "held_out_mlm_loss": pre_eval.get("long_mlm_loss"),
            }} if pm.get("long_corpus") and pm.get("long_steps") else {}),
        },
        "finetuning": {
            "nsmc": {"protocol": NSMC_NAMES[nsmc_protocol(cfgs["nsmc"].train, cfgs["nsmc"].test)], "n": pr["nsmc"]["n"], "epochs": cfgs["nsmc"].epochs, "lr": cfgs["nsmc"].lr, "examples_per_s": pr["nsmc"]["examples_per_s"], "full_test": pr["nsmc"]["full_test"]},
            "korquad": {"n": pr["korquad"]["n"], "epochs": cfgs["korquad"].epochs, "lr": cfgs["korquad"].lr, "examples_per_s": pr["korquad"]["examples_per_s"], "protocol": _korquad_protocol(pr["korquad"].get("protocol"), cfgs["korquad"])},
        },
        "table": rows, "plots": plots, "config": {"recipe": C.to_dict(cfg)},
        "klue": recipe_klue.report_rows(klue, {"model": rows[0]["system"], "control": rows[1]["system"], "start": rows[1]["system"]}),
    }
    atomic_write_json(out / "report.json", report)
    atomic_write_bytes(out / "report.md", render(report).encode("utf-8"))
    return report


def _korquad_protocol(p, cfg):
    """The run's protocol, with a train file named by the two files' content ("official" or "custom
    train file"): a result fine-tuned before that check said "official" for any train file."""
    if isinstance(p, dict) and p.get("name") != "dev-split" and cfg.train_file:
        from evals.data import korquad_protocol

        return {**p, "name": korquad_protocol(cfg.train_file, cfg.dev_file)}
    return p


def _protocol(p) -> str:
    if isinstance(p, dict) and p.get("name") == "dev-split":
        return f"dev split by article: every {p['holdout_every']}th of the dev articles scored, {p['train_articles']} trained on"
    return p.get("name", "") if isinstance(p, dict) else str(p or "")


def _eval_text_line(c: dict) -> str:
    """What of the scored evaluation text the corpus holds, and what became of it (the shards' counts:
    left out of the vocabulary's sample and the shards by default, pretrained on with --keep-eval-text)."""
    if "eval_text" not in c:
        return ""
    if not c["eval_text"]:
        return ("Evaluation text in the corpus: none found (no document equal to an NSMC test review by letters and digits, "
                "none sharing a 48-character run with a KorQuAD context, none holding KLUE dev text where KLUE's files were given), "
                "so nothing was left out.")
    found = "; ".join(f"{n:,} {KINDS.get(k, k)} (first: {c['eval_text_first_at'].get(k)})" for k, n in c["eval_text"].items())
    short = {"nsmc_test_review": "NSMC test reviews", "korquad_context": "KorQuAD context runs", "klue_review": "KLUE dev texts",
             "klue_text": "holding KLUE dev text"}
    by_file = "; ".join(f"{Path(f).name}: " + ", ".join(f"{n:,} {short.get(k, k)}" for k, n in kinds.items())
                        for f, kinds in c.get("eval_text_by_file", {}).items())
    by_file = f" By file: {by_file}." if by_file else ""
    if c.get("eval_text_policy") == "keep":
        return (f"**Evaluation text in the corpus**: {found}.{by_file} **They were pretrained on** (`--keep-eval-text`; "
                "without it they are left out, and `--strict` refuses such a corpus).")
    return (f"Evaluation text left out of pretraining: {found}.{by_file} Neither the vocabulary's sample nor the shards hold them "
            "(`--keep-eval-text` keeps them; `--strict` refuses such a corpus).")


def _long_phase_lines(lp: dict | None) -> list[str]:
    """The long phase's paragraph: its steps, its shards' corpus and its own held-out figure."""
    if not lp:
        return []
    lc = lp["corpus"]
    files = ", ".join(i["file"] + (f" (first {i['first_documents']:,} documents)" if i.get("first_documents") else "") for i in lc["inputs"])
    held = (f" Held-out MLM accuracy on its {lp['max_seq_len']}-token instances {pct(lp['held_out_mlm_accuracy'])}%, "
            f"MLM loss {lp['held_out_mlm_loss']:.3f}." if lp.get("held_out_mlm_accuracy") is not None else "")
    return [f"Long phase ({lp['steps_text']}) on instances of up to {lp['max_seq_len']} tokens "
            f"({lp['shards']}: {lc['documents']:,} documents of {files}; {lc['train_instances']:,} training instances, "
            f"{lc['train_tokens']:,} tokens).{held}"]


def render(r: dict) -> str:
    c, p, f = r["corpus"], r["pretraining"], r["finetuning"]
    dev = r["machine"].get("device") or {}
    budget = ", ".join(f"{k.replace('max_', '')} {v}" for k, v in p["budget"].items())
    per_instance = f" ({p['tokens_per_instance']} tokens each on average)" if p.get("tokens_per_instance") else ""
    lines = [
        f"# korbert report: preset `{r['preset']}`",
        "",
        f"{r['about']}." + (f" Changed with --set: `{' '.join(r['config']['recipe']['set'])}`." if r["config"]["recipe"]["set"] else "")
        + (f" Corpus given with --corpus, instead of the preset's: `{' '.join(r['config']['recipe']['corpus'])}`."
           if r["config"]["recipe"].get("corpus") else "")
        + (f" Continued from `{r['config']['recipe']['init_from']}` (--init-from), not from a random initialization."
           if r["config"]["recipe"].get("init_from") else ""),
        f"Machine: {r['machine']['cpu']} ({r['machine']['cores']} cores){'; ' + dev.get('name', '') if dev.get('name') else ''}. "
        f"This invocation of the recipe: {r['seconds'] / 60:.1f} min (stages already up to date are not redone).",
        "",
        "## Results",
        "",
        *render_table(r["table"]),
    ]
    kq = f["korquad"]
    lines += [
        "",
        f"NSMC ({f['nsmc'].get('protocol', 'NSMC-R')}): {f['nsmc']['n']['train']:,} training reviews ({f['nsmc']['n']['valid']:,} held out of train for model selection), "
        f"{f['nsmc']['n']['test']:,} test reviews{'' if f['nsmc']['full_test'] else ' (a prefix of the test file)'}; "
        f"{f['nsmc']['epochs']} epoch(s), lr {f['nsmc']['lr']}, {f['nsmc']['examples_per_s']} examples/s.",
        f"KorQuAD 1.0 ({_protocol(kq.get('protocol'))}): {kq['n']['train_questions']:,} training questions ({kq['n']['train_windows']:,} windows), "
        f"{kq['n']['scored_questions']:,} scored; {kq['epochs']} epoch(s), lr {kq['lr']}, {kq['examples_per_s']} windows/s. "
        "EM/F1 by the official KorQuAD 1.0 scorer (character-level F1).",
        ("The comparison row is the starting model (--init-from) as it was, fine-tuned the same way; " if any(x.get("origin") == "starting model" for x in r["table"])
         else "The control is the same architecture from a random initialization with the same fine-tuning; ")
        + 
        "models given with --compare are fine-tuned with the same settings and seed, each with its own tokenizer.",
        "",
        *recipe_klue.render(r.get("klue", [])),
        "## Pretraining",
        "",
        f"{p['model']} ({p['parameters'] / 1e6:.1f}M parameters), budget: {budget}; global batch {p['global_batch']}, peak lr {p['lr']}.",
        f"{p['steps']:,} steps, {p['tokens']:,} tokens in {p['seconds'] / 60:.1f} min ({p['tokens_per_s']:,.0f} tokens/s).",
        f"Objective {p.get('objective', 'mlm+nsp')}, {p.get('instances', 'document')} instances{per_instance}.",
        f"Held-out {'generator ' if 'disc_weight' in p else ''}MLM accuracy {pct(p['held_out_mlm_accuracy'])}%, MLM loss {p['held_out_mlm_loss'] or float('nan'):.3f}"
        + (f", NSP accuracy {pct(p['held_out_nsp_accuracy'])}%." if p.get("held_out_nsp_accuracy") is not None else
           f"; discriminator accuracy {pct(p['held_out_disc_accuracy'])}%, AUC {p['held_out_disc_auc'] or float('nan'):.3f} on replaced "
           f"tokens (generator {p['generator_parameters'] / 1e6:.1f}M parameters, discriminator loss weight {p['disc_weight']:g})."
           if "disc_weight" in p else " (MLM only: no NSP)."),
        *_long_phase_lines(p.get("long_phase")),
        "",
    ]
    lines += [f"![{Path(x).stem}]({x})" for x in r["plots"]]
    lines += [
        "",
        "## Corpus and vocabulary",
        "",
        f"{c['documents']:,} documents, {c['sentences']:,} sentences"
        + (f", {c['characters']:,} characters" if c.get("characters") is not None else "")
        + f"; vocabulary {c['vocab_size']:,}"
        + {"morpheme": " of Kiwi morphemes", "morpheme-attached": " of Kiwi morphemes, the word-start marker inside the first piece",
           "plain": " of plain SentencePiece pieces (no Kiwi)"}.get(c.get("tokenizer_kind"), "")
        + f" (tokenizer {c['tokenizer_hash'][:12]}"
        + (f", the one of {c['tokenizer_from']}" if c.get("tokenizer_from") else "") + ").",
        f"{c['train_instances']:,} training instances ({c['train_tokens']:,} tokens), {c['valid_instances']:,} held out; "
        f"IsNext share {c['isnext_share']}.",
        _eval_text_line(c),
        "",
        "## Time per stage (seconds; absent = already up to date)",
        "",
        " | ".join(f"{k} {v}" for k, v in r["stage_seconds"].items()),
        "",
    ]
    return "\n".join(lines)
