"""The results table that `korbert eval` prints (one row) and the recipe's report holds (a row per
model): system, where it came from, parameter count, NSMC accuracy (the report names which NSMC), KorQuAD EM / F1."""

from __future__ import annotations

from pathlib import Path

ORIGINS = ("pretrained here", "control", "starting model", "given folder", "baseline")


def result_row(model: str, control: bool, origin: str, nsmc: dict | None = None, korquad: dict | None = None, system: str = "") -> dict:
    """A row from the results.json of an NSMC and/or a KorQuAD run of one model."""
    any_run = nsmc or korquad
    info = (any_run or {}).get("model", {})
    name = system or ("control: random init, " + Path(model).name if control else Path(str(model).rstrip("/")).name)
    return {
        "system": name,
        "origin": "control" if control else origin,
        "parameters": info.get("parameters"),
        "architecture": info.get("model_type"),
        "path": str(model),
        "nsmc_accuracy": nsmc["metrics"]["accuracy"] if nsmc else None,
        "korquad_em": korquad["metrics"]["exact_match"] / 100 if korquad else None,
        "korquad_f1": korquad["metrics"]["f1"] / 100 if korquad else None,
    }


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _params(n) -> str:
    return "-" if not n else f"{n / 1e6:.1f}M"


def render_table(rows: list[dict]) -> list[str]:
    lines = ["| system | origin | parameters | NSMC accuracy | KorQuAD EM | KorQuAD F1 |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['system']} | {r.get('origin', '-')} | {_params(r.get('parameters'))} | {pct(r['nsmc_accuracy'])} "
            f"| {pct(r['korquad_em'])} | {pct(r['korquad_f1'])} |"
        )
    return lines


def print_table(rows: list[dict]) -> None:
    print("\n".join(["", *render_table(rows)]))
