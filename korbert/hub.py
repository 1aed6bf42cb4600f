"""Loading a korbert model folder the way any Hub model loads: AutoTokenizer, pipelines.

Two paths, both tested (tests/test_use.py):

1. **korbert installed** (`import korbert`, or any korbert module): `AutoTokenizer.from_pretrained(folder)`
   returns `KorBertTokenizer`. `korbert/__init__.py` calls `install_registration()`, which costs
   nothing at import: it registers the class with `AutoTokenizer.register` the moment transformers'
   auto-tokenizer module is imported (at once when it already is).
2. **plain transformers** (kiwipiepy installed, korbert not): the tokenizer's source is saved in the
   folder (`tokenization_korbert.py` + its helper modules, imports made relative) and named by an
   `auto_map` entry in `tokenizer_config.json`, so
   `AutoTokenizer.from_pretrained(folder, trust_remote_code=True)` runs that code — the convention
   Korean models with custom tokenizers follow. `pipeline("fill-mask", model=folder)` and
   `pipeline("feature-extraction", model=folder)` work either way (with `trust_remote_code=True`
   in case 2).

3. **plain transformers, no `trust_remote_code`**: transformers 5 falls back to a generic
   `TokenizersBackend` for a tokenizer class it does not know (model_type `bert` counts as "local
   code", so it never asks for remote code), and that backend would split eojeols, not morphemes.
   So tokenizer.json carries a guard (`korbert.tokenizer.GUARD`, see that module's doc): the
   generic loader refuses the file with an error that quotes how to load it. Never a different
   tokenizer in silence.

`add_auto_files(folder)` writes the files; `korbert.pretrain.export` calls it for every `final/`;
`add_auto_files(folder, update_manifest=True)` adds them (and the guard) to a folder exported before.
Only the standard library is imported at module level (`korbert/__init__.py` imports this).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import re
import sys
from pathlib import Path

MODULE = "tokenization_korbert"  # the tokenizer's source, saved in the folder
HELPERS = {
    "corpus_tools.morph": "korbert_morph",
    "corpus_tools.text": "korbert_text",
    "korbert.segmenter": "korbert_segmenter",
    "korbert.word_cache": "korbert_word_cache",
}
AUTO_MAP = {"AutoTokenizer": [None, f"{MODULE}.KorBertTokenizer"]}
_AUTO_MODULE = "transformers.models.auto.tokenization_auto"
_REPO = Path(__file__).resolve().parent.parent


# -- registration (path 1) ------------------------------------------------------------------------


def register() -> None:
    """`AutoTokenizer.register` KorBertTokenizer. AutoTokenizer looks a folder's `tokenizer_class`
    up among registered classes; registering needs a config class, so a private marker config is
    used (BERT's own mapping is left alone)."""
    import importlib

    from transformers.configuration_utils import PreTrainedConfig

    from korbert.tokenizer import KorBertTokenizer

    AutoTokenizer = importlib.import_module(_AUTO_MODULE).AutoTokenizer  # (may run inside that module's import)

    class KorBertTokenizerMarkerConfig(PreTrainedConfig):
        model_type = "korbert-tokenizer-marker"

    AutoTokenizer.register(KorBertTokenizerMarkerConfig, tokenizer_class=KorBertTokenizer, exist_ok=True)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `register()` right after transformers' auto-tokenizer module is executed."""

    def find_spec(self, name, path, target=None):
        if name != _AUTO_MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _AfterImport)]
            register()

        loader.exec_module = exec_and_register
        return spec


def install_registration() -> None:
    """Register now if transformers' auto module is loaded, else as soon as it is (no import cost)."""
    if _AUTO_MODULE in sys.modules:
        register()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


# -- the folder's own copy of the tokenizer (path 2) ----------------------------------------------


def remote_code_sources() -> dict[str, str]:
    """File name -> source for the folder: korbert/tokenizer.py and the modules
    it needs, with the absolute imports made relative (transformers copies relative imports along).
    Fails loudly when the tokenizer starts importing another korbert module."""
    files = {f"{MODULE}.py": _REPO / "korbert" / "tokenizer.py"}
    files.update({f"{new}.py": _REPO / (old.replace(".", "/") + ".py") for old, new in HELPERS.items()})
    out = {}
    for name, src in files.items():
        text = src.read_text(encoding="utf-8")
        for old, new in HELPERS.items():
            text = re.sub(rf"^(\s*)from {re.escape(old)} import", rf"\1from .{new} import", text, flags=re.M)
        left = re.findall(r"^\s*(?:from|import)\s+((?:korbert|corpus_tools|evals)\b[\w.]*)", text, flags=re.M)
        if left:
            raise RuntimeError(f"{src}: imports {left}; add them to korbert.hub.HELPERS so the model folder stays self-contained")
        header = f"# Saved by korbert ({src.relative_to(_REPO)}) for AutoTokenizer.from_pretrained(folder, trust_remote_code=True).\n"
        out[name] = header + text
    return out


def add_auto_files(folder: str | Path, update_manifest: bool = False, model_max_length: int | None = None) -> list[str]:
    """Write the tokenizer's source into `folder` and the `auto_map` entry into its
    tokenizer_config.json, with `model_max_length` (None: a length saved there stays; with none
    saved, a model folder gets `korbert.tokenizer.folder_max_length`). Returns the names written.
    `update_manifest`: re-hash the files into the folder's manifest.json (for a folder exported earlier)."""
    folder = Path(folder)
    cfg_path = folder / "tokenizer_config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{folder}: no tokenizer_config.json (not a tokenizer or model folder)")
    names = []
    for name, text in remote_code_sources().items():
        (folder / name).write_text(text, encoding="utf-8")
        names.append(name)
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["auto_map"] = AUTO_MAP
    from korbert.tokenizer import _saved_max_length, folder_max_length

    length = model_max_length or _saved_max_length(folder) or folder_max_length(folder)
    if length:
        cfg["model_max_length"] = int(length)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    names.append("tokenizer_config.json")
    backend = folder / "tokenizer.json"
    if backend.is_file():  # a folder saved before the guard: add it (the tokenizer's hash does not change)
        from korbert.tokenizer import GUARD, guarded_json

        text = backend.read_text(encoding="utf-8")
        if GUARD not in text:
            backend.write_text(guarded_json(text), encoding="utf-8")
            names.append("tokenizer.json")
    if update_manifest and (folder / "manifest.json").is_file():
        from corpus_tools.artifacts import atomic_write_json, plain_modes, sha256_file

        plain_modes(folder)  # an older export's files safetensors left 0600 get the umask's mode too

        m = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        for name in names:
            m.setdefault("files", {})[name] = sha256_file(folder / name)
        m["files"] = dict(sorted(m["files"].items()))
        atomic_write_json(folder / "manifest.json", m)
    return names

