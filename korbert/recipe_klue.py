"""The recipe's KLUE stages (`korbert run --klue ...`): which tasks run, their configs beside NSMC's and
KorQuAD's (the model, its comparison row, every --compare folder), and their rows in the report.

`--klue auto` (the default) scores each KLUE task whose dev file the data folder holds under klue/
(`korbert data get klue`); the demo preset reads no data folder, so it scores none unless --data
names one (its own NSMC and KorQuAD files stay the embedded ones). With the task's
train file there too, the published protocol runs (train on train, score dev); else the KLUE
dev-split (evals/klue.py), named as such in the report and the model card.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from corpus_tools.text import InputError

TASKS = {"nli": "klue-nli", "sts": "klue-sts", "ner": "klue-ner", "ynat": "ynat"}  # --klue name -> `korbert eval` task
KLUE_HELP = ("KLUE tasks scored beside NSMC and KorQuAD: auto (each whose dev file is in the data folder's klue/), none, "
             "or any of nli sts ner ynat")


def chosen(wanted: list[str], data: Path | None) -> dict[str, tuple[str, str]]:
    """task -> (dev file, train file or ""), from the data folder."""
    from evals.klue_data import dev_files, file_name

    wanted = [w for x in wanted for w in x.split(",") if w]
    bad = [w for w in wanted if w not in (*TASKS, "auto", "none")]
    if bad or ("none" in wanted and len(wanted) > 1):
        raise InputError(f"--klue {' '.join(wanted)}: expected auto, none, or any of {', '.join(TASKS)}")
    if not wanted or wanted == ["none"]:
        return {}
    found = dev_files(data) if data is not None else {}
    names = list(found) if wanted == ["auto"] else [w for w in TASKS if w in wanted]
    missing = [t for t in names if t not in found]
    if missing:
        where = f"{data}/klue/{file_name(missing[0], 'dev')}" if data is not None else "the data folder (this preset reads none)"
        raise InputError(f"--klue {missing[0]}: no dev file ({where}); `korbert data get klue --out DATA` fetches KLUE's files")
    out = {}
    for t in names:
        train = Path(data) / "klue" / file_name(t, "train")
        out[t] = (str(found[t]), str(train) if train.is_file() else "")
    return out


def plan(tasks: dict, settings: dict, final: str, out: Path, control: str, init_from: str, compare: list[str]) -> list[dict]:
    """One entry per (task, row): {"task", "row" (model, control, start or compare), "folder" (compare's), "cfg"}."""
    from evals.klue import KlueConfig

    known = set(KlueConfig.__dataclass_fields__)
    rows = []
    for t, (dev, train) in tasks.items():
        base = KlueConfig(**{k: v for k, v in settings.items() if k in known},
                          model=final, dev_file=dev, train_file=train, out=str(out / "klue" / t / "model"))
        rows.append({"task": t, "row": "model", "folder": None, "cfg": base})
        if control == "start":
            rows.append({"task": t, "row": "start", "folder": None, "cfg": replace(base, model=init_from, out=str(out / "klue" / t / "start"))})
        else:
            rows.append({"task": t, "row": "control", "folder": None, "cfg": replace(base, control=True, out=str(out / "klue" / t / "control"))})
        for folder, slug in compare:
            rows.append({"task": t, "row": "compare", "folder": folder, "cfg": replace(base, model=folder, out=str(out / "klue" / t / slug))})
    return rows


def report_rows(done: list[dict], names: dict) -> list[dict]:
    """The report's KLUE rows: `done` = plan entries with their results.json as "result"; `names`:
    row (model, control, start) -> the system's name in the results table."""
    out = []
    for d in done:
        r = d["result"]
        out.append({"system": names[d["row"]] if d["folder"] is None else Path(d["folder"].rstrip("/")).name, "task": TASKS[d["task"]],
                    "protocol": r["protocol"]["name"], "metrics": r["metrics"], "ci95": r.get("ci95", {}),
                    "scored": r["n"]["scored"], "trained": r["n"]["train"], "epochs": d["cfg"].epochs, "lr": d["cfg"].lr})
    return out


def _num(v) -> str:
    return "undefined" if v is None else f"{v:.2f}"  # (Pearson r of a model that predicts one score for every pair)


def render(rows: list[dict]) -> list[str]:
    """The report's KLUE section (empty without KLUE rows)."""
    if not rows:
        return []
    lines = ["## KLUE", "", "| system | task | protocol | scores (95% interval) | scored | trained on |", "|---|---|---|---|---:|---:|"]
    for r in rows:
        scores = ", ".join(f"{k} {_num(v)}" + (f" [{r['ci95'][k][0]:.2f}, {r['ci95'][k][1]:.2f}]" if k in r["ci95"] else "")
                           for k, v in r["metrics"].items())
        lines.append(f"| {r['system']} | {r['task']} | {r['protocol']} | {scores} | {r['scored']:,} | {r['trained']:,} |")
    lines += ["", "Metrics as KLUE's baseline code computes them (evals/klue_metric.py). \"KLUE dev-split\": no KLUE train file "
              "in the data folder, so part of the dev file (whole premises, pairs, sentences) is trained on and the rest scored, "
              "with a bootstrap 95% interval; such numbers are not comparable with published KLUE dev scores.", ""]
    return lines


def card_note(rows: list[dict], system: str) -> str:
    """One sentence for the model card: this model's KLUE scores and the protocol they ran under."""
    ours = [r for r in rows if r["system"] == system]
    if not ours:
        return ""
    parts = [f"{r['task']} " + ", ".join(f"{k} {_num(v)}" for k, v in r["metrics"].items()) + f" ({r['protocol']}, {r['scored']:,} scored)"
             for r in ours]
    return "KLUE: " + "; ".join(parts) + "."
