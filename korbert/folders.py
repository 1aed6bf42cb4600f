"""Model folders: an exported korbert folder, or any local transformers encoder folder with its
tokenizer files, opened and checked without loading the tokenizer (so fine-tuning from cached
features runs where Kiwi is not installed). Every consumer (evals, `korbert embed`, the service,
the recipe's --compare) opens folders through `open_folder`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from corpus_tools.text import InputError

MODEL_HELP = (
    "model folder: an exported korbert model (pretrain/final) or any local transformers encoder folder "
    "(BERT, ELECTRA, RoBERTa, ...): config.json + weights + its tokenizer files"
)


TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.txt", "vocab.json", "merges.txt", "spm.model", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
)


NO_LIMIT = int(1e30)  # transformers' model_max_length for "no limit" (VERY_LARGE_INTEGER)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")


def files_sha256(path: Path, names: tuple[str, ...], canonical: dict[str, bytes] | None = None) -> str:
    """sha256 over those of `names` that the folder holds (each name and its bytes' sha256; for a name
    in `canonical`, those bytes instead of the file's)."""
    import hashlib

    from corpus_tools.artifacts import sha256_file

    h = hashlib.sha256()
    for name in names:
        if name in (canonical or {}):
            h.update(name.encode() + b"\0" + hashlib.sha256(canonical[name]).digest())
        elif (Path(path) / name).is_file():
            h.update(name.encode() + b"\0" + bytes.fromhex(sha256_file(Path(path) / name)))
    return h.hexdigest()


def file_sha256_as_written_by(path: Path, transformers_version: str | None) -> str:
    """sha256 of a file as it would read had `transformers_version` written it: config.json's
    "transformers_version" stamp names the library that saved it, not the model (other files, or None: as they are)."""
    import hashlib
    import re

    from corpus_tools.artifacts import sha256_file

    if Path(path).name != "config.json" or not transformers_version:
        return sha256_file(path)  # (streamed: the weights are not read whole)
    data = re.sub(rb'"transformers_version": "[^"]*"', b'"transformers_version": "' + transformers_version.encode() + b'"', Path(path).read_bytes())
    return hashlib.sha256(data).hexdigest()


def tokenizer_files_sha256(path: Path) -> str:
    """The tokenizer's identity that can be computed without loading it (no Kiwi needed). A plain-kind
    export's tokenizer_config.json counts as its vocabulary folder's file: the export sets the length
    the model trained at (model_max_length) where transformers saved its "no limit", and is still the
    tokenizer its shards were made with."""
    cfg_path = Path(path) / "tokenizer_config.json"
    canonical = None
    if cfg_path.is_file():
        cfg = _read_json(cfg_path, str(path))
        length = cfg.get("model_max_length")
        if cfg.get("korbert_kind") == "plain" and isinstance(length, int) and length < NO_LIMIT:  # (korbert.plain.KIND_KEY)
            text = json.dumps({**cfg, "model_max_length": NO_LIMIT}, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            canonical = {cfg_path.name: text.encode("utf-8")}  # the file as transformers wrote it (tokenizer.save_pretrained)
    return files_sha256(path, TOKENIZER_FILES, canonical)


def weights_sha256(path: Path) -> str:
    """The weights' identity: what a model folder's fine-tuning results depend on, with its config and
    tokenizer. A sharded checkpoint's index counts with the shard files it names."""
    names = list(WEIGHT_FILES)
    for index in WEIGHT_FILES[2:]:
        if (Path(path) / index).is_file():
            names += sorted(set(_read_json(Path(path) / index, str(path)).get("weight_map", {}).values()))
    return files_sha256(path, tuple(names))


@dataclass
class ModelFolder:
    """A local model folder, checked, with its tokenizer loaded only when asked for (`tokenizer()`):
    fine-tuning from cached features never loads it, so it runs where Kiwi is not installed.

    kind "korbert": a folder exported by korbert (tokenizer_class KorBertTokenizer): the tokenizer
    must be the one manifest.json says the model was trained with. kind "transformers": any other
    transformers encoder folder (BERT, ELECTRA, RoBERTa, ...) with its own tokenizer files."""

    path: Path
    kind: str
    config: object
    manifest: dict
    tokenizer_sha256: str
    where: str
    tokenizer_class: str = ""  # tokenizer_config.json's, when it names one
    _tok: object = None

    @property
    def trained_positions(self) -> int:
        """The positions its pretraining trained: a korbert export's manifest says (`trained_seq_len`);
        any other folder, or an older export, is taken as trained over all it has."""
        return (self.manifest.get("trained_seq_len") if self.kind == "korbert" else None) or self.config.max_position_embeddings

    @property
    def trained_tokenizer_hash(self) -> str | None:
        return self.manifest.get("tokenizer_hash")

    def tokenizer(self):
        if self._tok is None:
            self._tok = self._load_tokenizer()
        return self._tok

    def _load_tokenizer(self):
        if self.kind == "korbert":
            from korbert.tokenizer import KorBertTokenizer

            tok = KorBertTokenizer.from_pretrained(self.path)
            want = self.trained_tokenizer_hash
            if want and want != tok.fingerprint:
                raise InputError(
                    f"{self.where}: the tokenizer files have hash {tok.fingerprint[:12]}, but manifest.json says the "
                    f"model was trained with {want[:12]}: the folder mixes a model and a foreign tokenizer"
                )
            return tok
        return load_auto_tokenizer(self.path, self.where)

    def tokenizer_fingerprint(self, tok=None) -> str:
        """korbert: the tokenizer's own fingerprint (what shards and models record); otherwise the
        sha256 of the tokenizer files."""
        if self.kind == "korbert":
            return (tok or self.tokenizer()).fingerprint
        return self.tokenizer_sha256


def load_auto_tokenizer(path: Path, where: str):
    """AutoTokenizer.from_pretrained(path), local only and quiet; a folder it cannot load: one line."""
    import transformers
    from transformers import AutoTokenizer

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError, ImportError) as e:
        raise InputError(f"{where}: cannot load its tokenizer with AutoTokenizer ({first_line(e)})") from None
    finally:
        transformers.logging.set_verbosity(verbosity)


def first_line(e: BaseException) -> str:
    """An exception's first line (transformers' messages run to paragraphs), or its type."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _read_json(path: Path, where: str) -> dict:
    """A folder's optional JSON file ({} when absent or not an object); unreadable: one line."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{where}: unreadable {path.name} ({e})") from None
    return value if isinstance(value, dict) else {}


def open_folder(folder: str, weights: bool = True, label: str | None = None) -> ModelFolder:
    """The checks every consumer of a model folder makes, without loading the tokenizer: config.json,
    weights (unless `weights` is False: a control needs only the config), tokenizer files beside
    them, a readable manifest.json. Errors name the folder as `label` (default "--model FOLDER")."""
    from transformers import AutoConfig

    where = label or f"--model {folder}"
    if not folder:
        raise InputError(f"--model is required ({MODEL_HELP})")
    path = Path(folder)
    if not path.is_dir():
        raise InputError(f"{where}: no such folder ({MODEL_HELP})")
    if not (path / "config.json").is_file():
        raise InputError(f"{where}: no config.json, not a model folder ({MODEL_HELP})")
    found = [n for n in WEIGHT_FILES if (path / n).is_file()]
    if weights and not found:
        raise InputError(f"{where}: no model.safetensors or pytorch_model.bin ({MODEL_HELP}); --control needs only config.json")
    tcfg = _read_json(path / "tokenizer_config.json", where)
    kind = "korbert" if tcfg.get("tokenizer_class") == "KorBertTokenizer" else "transformers"
    if kind == "korbert" and not (path / "tokenizer.json").is_file():
        raise InputError(f"{where}: no tokenizer.json: the korbert tokenizer files must sit beside the model")
    if not any((path / n).is_file() for n in TOKENIZER_FILES if n not in ("tokenizer_config.json", "special_tokens_map.json")):
        raise InputError(f"{where}: no tokenizer files (tokenizer.json, vocab.txt, ...): save the tokenizer with the model (tokenizer.save_pretrained)")
    manifest = _read_json(path / "manifest.json", where)
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"{where}: config.json: {first_line(e)}") from None
    return ModelFolder(path, kind, config, manifest, tokenizer_files_sha256(path), where, tcfg.get("tokenizer_class", ""))


def check_trained_positions(mf: ModelFolder, max_len: int, allow: bool, control: bool, window_hint: str) -> None:
    """Refuse fine-tuning windows longer than the model's pretraining trained: positions past it are
    still at their random initialization. Only korbert exports say how long (manifest.json
    `trained_seq_len`); other folders, older exports and controls (random everywhere) pass."""
    trained = mf.manifest.get("trained_seq_len")
    if allow or control or mf.kind != "korbert" or not trained or max_len <= trained:
        return
    raise InputError(
        f"{mf.where}: --max-len {max_len} is longer than the {trained} tokens this model was pretrained on: positions "
        f"{trained}..{max_len - 1} were never trained. Pretrain a long phase (korbert pretrain --long-shards SHARDS-512 "
        f"--long-phase 0.1), or use windows within {trained} tokens ({window_hint}); --allow-untrained-positions goes on anyway"
    )


def open_model_folder(folder: str, weights: bool = True, label: str | None = None):
    """A korbert model folder -> (path, tokenizer, manifest, config), the tokenizer checked against
    the manifest and the config's vocabulary (korbert.use.Encoder's entry)."""
    mf = open_folder(folder, weights, label)
    if mf.kind != "korbert":
        raise InputError(f"{mf.where}: not a korbert model folder (tokenizer_config.json does not name KorBertTokenizer)")
    tok = mf.tokenizer()
    if mf.config.vocab_size < len(tok):
        raise InputError(f"{mf.where}: config.json vocab_size {mf.config.vocab_size} < the tokenizer's {len(tok)} tokens")
    return mf.path, tok, mf.manifest, mf.config
