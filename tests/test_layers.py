"""The import layers (docs/layers.md): every module of corpus_tools/, korbert/ and evals/ sits in one
layer and imports only from its own layer or those below it, lazy imports and annotation-only ones
included, and no two modules import each other, directly or round a circle. Read from the source
with `ast`: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("corpus_tools", "korbert", "evals")

# bottom to top; the module names without their package
LAYERS = [
    ("text and files", "corpus_tools", {"__init__", "text", "morph", "artifacts", "config", "shard_format", "masking", "guard"}),
    ("the tokenizer", "korbert", {"__init__", "tokenizer", "segmenter", "word_cache", "hub", "foreign", "folders", "plain"}),
    ("corpus stages", "corpus_tools", {"vocab", "shards_config", "shards", "pieces", "shard_task", "pairs", "engine", "make_sample"}),
    ("model and pretraining", "korbert", {
        "model", "data", "heldout", "schedule", "runtime", "distributed", "pretrain_config", "phases", "checkpoint", "fork", "pretrain",
        "pretrain_model", "card", "table", "electra",
    }),
    ("evaluations", "evals", {
        "__init__", "data", "features", "finetune", "nsmc", "korquad", "korquad_metric", "baseline", "make_bert_folder", "cli",
        "tokenizer_metrics", "positions", "klue_metric", "klue_data", "klue",
    }),
    ("the recipe and using a model", "korbert", {"recipe", "report", "cli", "use", "embed", "attention", "serve", "data_get", "download", "petitions", "corpora", "recipe_klue"}),
]


def module_names() -> dict[str, Path]:
    names = {}
    for package in PACKAGES:
        for f in sorted((ROOT / package).glob("*.py")):
            names[package if f.stem == "__init__" else f"{package}.{f.stem}"] = f
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its file (a package import is its __init__)."""
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)  # `from korbert import foreign`
        graph[name] = {t for t in map(resolve, found) if t and t != name and t.split(".")[0] in PACKAGES}
    return graph


def layer_of(module: str) -> int | None:
    package, _, stem = module.partition(".")
    hits = [i for i, (_, pkg, stems) in enumerate(LAYERS) if pkg == package and (stem or "__init__") in stems]
    return hits[0] if len(hits) == 1 else None


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a)
    )


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_one_layer():
    unplaced = [m for m in module_names() if layer_of(m) is None]
    assert not unplaced, f"place these in one layer of tests/test_layers.py and docs/layers.md: {unplaced}"


def test_imports_go_down_the_layers_and_round_no_circle():
    graph = import_graph(module_names())
    assert not upward(graph), "\n".join(upward(graph))
    assert not circles(graph), circles(graph)
    # pretraining reads shards through their format (layer 1), never through the stage that wrote them
    stages, training = ([m for m in graph if layer_of(m) == i] for i in (2, 3))
    assert not [(a, b) for a in training for b in graph[a] if b in stages]


def test_the_checks_catch_an_upward_import_and_a_circle():
    graph = {"corpus_tools.text": {"korbert.recipe"}, "korbert.recipe": {"corpus_tools.text"}}
    assert upward(graph) == ["corpus_tools.text (text and files) imports korbert.recipe (the recipe and using a model)"]
    assert circles(graph) == [["corpus_tools.text", "korbert.recipe"]]
