"""`korbert run`: raw corpus -> vocabulary -> shards -> pretraining -> NSMC + KorQuAD -> report.

    korbert run --preset demo                    # the embedded sample, <= 10 min on 2 CPU cores
    korbert run --preset cpu --data DIR          # a data folder (`korbert data get all --out DIR`), CPU
    torchrun --nproc_per_node 8 -m korbert.recipe --preset gpu-base

Each stage writes its folder under --out and is skipped when that folder already holds the same
work (same inputs, same settings, same upstream artifact), so an interrupted recipe resumes and a
changed setting redoes only the stages it reaches:

    out/vocab/     tokenizer (korbert vocab)          out/nsmc/{model,control,baseline}/
    out/shards/    NSP/MLM shards (korbert shards)    out/korquad/{model,control}/
    out/shards-long/  512-token shards for BERT's second phase (cpu and the GPU presets: the last 10% of pretraining)
    out/pretrain/  ckpt.pt, log.jsonl, final/         out/report.md, report.json, plots/

Every preset also fine-tunes the control (same architecture, random initialization, same
fine-tuning) and runs the TF-IDF + logistic regression baselines, so the report shows what
pretraining bought; `--compare DIR ...` adds other models (any local transformers encoder folder)
as rows, fine-tuned the same way. Fine-tuning features are built once per tokenizer and cached
(out/nsmc/features, out/korquad/features). Any stage setting can be changed with --set stage.field=value.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

from corpus_tools import SAMPLE_DATA
from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_json, read_manifest
from corpus_tools.text import InputError
from korbert.recipe_klue import KLUE_HELP

STAGES = ("vocab", "shards", "shards_long", "pretrain", "nsmc", "korquad", "baseline")

_sample = {
    "corpus": [str(SAMPLE_DATA / "reviews.jsonl.gz"), str(SAMPLE_DATA / "petitions.jsonl.gz")],
    "nsmc_train": str(SAMPLE_DATA / "nsmc_train.txt"), "nsmc_test": str(SAMPLE_DATA / "nsmc_test.txt"),
    "korquad_dev": str(SAMPLE_DATA / "korquad_dev.json"),
}
# paths in the data folder (--data, $KORBERT_DATA; `korbert data get all` fills one): korbert/data_get.py
_data = {
    "data_folder": True,
    "corpus": ["corpus/reviews.jsonl.gz", "corpus/petitions.jsonl.gz"],
    "nsmc_train": "nsmc/ratings_train.txt", "nsmc_test": "nsmc/ratings_test.txt",
    "korquad_dev": "korquad/KorQuAD_v1.0_dev.json",
    "korquad_train": "korquad/KorQuAD_v1.0_train.json",  # when present: the official protocol
}

# the long phase's settings before issue 58 made its fix the default: the benchmarks that measured the old presets pin them
LONG_PHASE_BEFORE_58 = ["pretrain.long_schedule=shared", "pretrain.long_init=keep", "pretrain.long_lr=0"]
# preset -> data + per-stage settings (fields of VocabConfig, ShardsConfig, PretrainConfig, NsmcConfig, ...)
PRESETS = {
    "demo": {
        **_sample,
        "about": "the embedded sample (20k reviews + 150 petitions; NSMC-R 8k/2k; 14 KorQuAD articles); BERT-mini, 0.56M tokens, "
                 "packed instances, MLM only, no dropout (benchmarks/results/pretrain-ablation-demo.json)",
        "vocab": {"vocab_size": 8000},
        "shards": {"instances": "packed", "nsp": False},
        "pretrain": {
            "model_size": "mini", "objective": "mlm", "override": ["hidden_dropout_prob=0", "attention_probs_dropout_prob=0"],
            "max_steps": 0, "max_tokens": 560_000, "tokens_per_batch": 1024, "lr": 3e-4, "eval_every": 200, "eval_instances": 1000,
        },
        # fine-tuning without dropout, as its pretraining (set here: fine-tuning never inherits it; docs/results.md)
        "nsmc": {"epochs": 1, "lr": 1e-4, "batch_size": 32, "dropout": 0.0},
        # windows within the 128 tokens pretraining trains (positions past them would be untrained)
        "korquad": {"epochs": 2, "lr": 2e-4, "batch_size": 16, "max_len": 128, "stride": 32, "max_query_len": 40, "dropout": 0.0},
        "baseline": {},
    },
    "cpu": {
        **_data,
        "corpus": [*_data["corpus"], "corpus/kowiki.jsonl.gz@8000"],
        "about": "the data folder's reviews + petitions + the first 8,000 kowiki articles (KorQuAD's domain); "
                 "all of its NSMC and KorQuAD (the official protocol with the train file, else the dev split); 16k vocabulary; BERT-tiny deepened to 4 layers (L4/H128, "
                 "sized for the budget: benchmarks/results/recipe-cpu/README.txt), 30 min of CPU pretraining, the last 10% at 512 tokens "
                 "(BERT's recipe: document instances, MLM + NSP, 64 instances per step at lr 1e-3; the long phase on packed instances, "
                 "re-warmed to half the peak, its new positions copied from the trained ones: issue 58, docs/results.md)",
        "vocab": {"vocab_size": 16000},
        "shards": {},
        # BERT's second phase: the last 10% of the time on 512-token instances, packed so that every one reaches past 128
        "shards_long": {"max_seq_len": 512, "instances": "packed"},
        "pretrain": {"model_size": "tiny", "override": ["num_hidden_layers=4"], "max_steps": 0, "max_minutes": 30, "batch_size": 64, "lr": 1e-3,
                     "eval_every": 500, "eval_instances": 2000, "long_phase": 0.1, "long_lr": 5e-4},
        "nsmc": {"epochs": 1, "lr": 1e-4, "batch_size": 64},
        # 128-token windows after the long phase: the best KorQuAD F1 of the settings tried (docs/results.md)
        "korquad": {"epochs": 2, "lr": 2e-4, "batch_size": 16, "max_len": 128, "stride": 32, "max_query_len": 40},
        # (the KLUE tasks whose files the data folder holds; chosen on a held-out part of the dev-split's training groups, docs/results.md)
        "klue": {"epochs": 10, "lr": 3e-4, "batch_size": 32},
        "baseline": {},
    },
    "gpu-small": {
        **_data,
        "corpus": [*_data["corpus"], "corpus/kowiki.jsonl.gz"],
        "about": "the data folder's reviews + petitions + kowiki (KorQuAD's domain); BERT-small for 1 hour on one H100 (bf16, torch.compile); "
                 "lr 5e-4 after a 500-step warmup (chosen among three: docs/results.md)",
        "vocab": {"vocab_size": 32000},
        "shards": {},
        "shards_long": {"max_seq_len": 512, "instances": "packed"},  # the cpu preset's long phase (measured there; on a GPU: issue 62)
        "pretrain": {"model_size": "small", "max_steps": 0, "max_minutes": 60, "tokens_per_batch": 65536, "pack": True, "lr": 5e-4, "warmup": 500,
                     "compile": True, "eval_every": 1000, "long_phase": 0.1, "long_lr": 2.5e-4},
        "nsmc": {"epochs": 2, "lr": 1e-4, "batch_size": 64},
        "korquad": {"epochs": 3, "lr": 1e-4, "batch_size": 32},
        "klue": {"epochs": 3, "lr": 1e-4, "batch_size": 32},
        "baseline": {},
    },
    "gpu-base": {
        **_data,
        "corpus": [*_data["corpus"], "corpus/kowiki.jsonl.gz"],
        "about": "the data folder's reviews + petitions + kowiki; BERT-base for 4 hours on one H100 (bf16, torch.compile); multi-GPU with torchrun (not yet run)",
        "vocab": {"vocab_size": 32000},
        "shards": {},
        "shards_long": {"max_seq_len": 512, "instances": "packed"},
        "pretrain": {"model_size": "base", "max_steps": 0, "max_minutes": 240, "tokens_per_batch": 131072, "pack": True, "lr": 4e-4, "warmup": 0.02,
                     "compile": True, "eval_every": 2000, "long_phase": 0.1, "long_lr": 2e-4},
        "nsmc": {"epochs": 2, "lr": 5e-5, "batch_size": 64},
        "korquad": {"epochs": 2, "lr": 5e-5, "batch_size": 32},
        "klue": {"epochs": 3, "lr": 5e-5, "batch_size": 32},
        "baseline": {},
    },
}


@dataclass
class RecipeConfig:
    """One command from raw corpus to a scored Korean BERT (see the module doc for the layout)."""

    preset: str = C.field("demo", "what to run: demo (the embedded sample, minutes), cpu (the data folder, hours), gpu-small, gpu-base", choices=list(PRESETS))
    out: str = C.field("", "run folder (default: runs/<preset>)")
    data: str = C.field(
        "", "the data folder the cpu and gpu presets read (default: $KORBERT_DATA, else ~/.cache/korbert/data);"
        " `korbert data get all --out DIR` fills one. With korquad/KorQuAD_v1.0_train.json in it, "
        "KorQuAD runs the official protocol",
    )
    corpus: list[str] = C.field([], "pretraining text: files, folders or globs (.txt/.jsonl[.gz]; default: the preset's)")
    nsmc_train: str = C.field("", "NSMC-format training file (default: the preset's)")
    nsmc_test: str = C.field("", "NSMC-format test file")
    korquad_dev: str = C.field("", "KorQuAD 1.0 dev JSON (split by article unless --korquad-train is given)")
    korquad_train: str = C.field("", "KorQuAD 1.0 train JSON: train on it, score all of dev (the official protocol when both are "
                                 "KorQuAD's own files, else a custom train file)")
    compare: list[str] = C.field(
        [], "other model folders (a korbert final/ or any local transformers BERT/ELECTRA/RoBERTa folder with its "
        "tokenizer) fine-tuned with the same settings and seed, each a row of the results table",
    )
    init_from: str = C.field(
        "", "continue pretraining this model folder (a korbert final/, or a BERT folder with a fast tokenizer and BERT's "
        "[PAD] [UNK] [CLS] [SEP] [MASK]) on --corpus instead of starting from scratch: its tokenizer is used (no vocabulary "
        "stage), its shape too, and the comparison row is that model fine-tuned the same way",
    )
    control: str = C.field(
        "", "the comparison row: random (the same architecture, randomly initialized; the default) or start (the --init-from "
        "model as it was; the default with --init-from)", choices=["", "random", "start"],
    )
    set: list[str] = C.field([], "stage settings, as stage.field=value (e.g. pretrain.max_steps=100 nsmc.epochs=2)")
    force: bool = C.field(False, "redo every stage")
    workers: int = C.field(0, "build the shards on a local Dask cluster of this many worker processes (korbert shards --workers; 0: one process)")
    preprocess_only: bool = C.field(False, "build the vocabulary and the shards, then stop: run this first, then launch the training with torchrun")
    strict: bool = C.field(False, "refuse a corpus holding evaluation text (NSMC test reviews, text copied from a KorQuAD context) instead of leaving those documents out")
    klue: list[str] = C.field(["auto"], KLUE_HELP)
    keep_eval_text: bool = C.field(False, "pretrain on the corpus documents that hold evaluation text (counted; the report says so) instead of leaving them out of the vocabulary and the shards")


def data_paths(cfg: RecipeConfig) -> tuple[Path | None, dict]:
    """The preset's inputs as paths: in the data folder for the presets that read one (None for demo)."""
    p = PRESETS[cfg.preset]
    names = ("corpus", "nsmc_train", "nsmc_test", "korquad_dev", "korquad_train")
    if not p.get("data_folder"):
        return None, {k: p[k] for k in names if k in p}
    from korbert.data_get import default_folder

    data = Path(cfg.data) if cfg.data else default_folder()
    return data, {k: [str(data / x) for x in p[k]] if isinstance(p[k], list) else str(data / p[k]) for k in names if k in p}


def refuse_eval_files_in_corpus(corpus: list[str], eval_files: list[str]) -> None:
    """A corpus input that is, or (a folder or glob) holds, an evaluation file: refused, naming both.
    By content (sha256), so a copy under another name is caught too; only same-size files are hashed."""
    from corpus_tools.artifacts import sha256_file
    from corpus_tools.text import expand_inputs

    evals = {}
    for e in eval_files:
        if Path(e).is_file():
            evals.setdefault(Path(e).stat().st_size, {})[sha256_file(e)] = e
    for spec in corpus:
        for f in expand_inputs([spec]):
            f = Path(str(f))
            digests = evals.get(f.stat().st_size) if f.is_file() else None
            if digests and (hit := digests.get(sha256_file(f))):
                held = "is" if Path(re.sub(r"@\d+$", "", spec)).resolve() == f.resolve() else f"holds {f}, which is"
                raise InputError(f"--corpus {spec} {held} the evaluation file {hit}: pretraining on evaluation text inflates its scores")


def _coerce(cls, name: str, value: str):
    import typing

    hints = typing.get_type_hints(cls)
    if name not in hints:
        raise InputError(f"--set: {cls.__name__} has no field {name!r} (see that stage's --help)")
    kind = hints[name]
    if kind is bool:
        return value.lower() in ("1", "true", "yes")
    if typing.get_origin(kind) is list:
        return value.split(",")
    return kind(value)


def stage_configs(cfg: RecipeConfig) -> dict:
    from corpus_tools.shards_config import ShardsConfig
    from corpus_tools.vocab import VocabConfig
    from evals.baseline import BaselineConfig
    from evals.korquad import KorquadConfig
    from evals.nsmc import NsmcConfig
    from korbert.pretrain_config import PretrainConfig

    p = PRESETS[cfg.preset]
    out = Path(cfg.out or f"runs/{cfg.preset}")
    data, from_data = data_paths(cfg)
    corpus = cfg.corpus or from_data["corpus"]
    nsmc_train, nsmc_test = cfg.nsmc_train or from_data["nsmc_train"], cfg.nsmc_test or from_data["nsmc_test"]
    korquad_dev = cfg.korquad_dev or from_data["korquad_dev"]
    korquad_train = cfg.korquad_train
    if not korquad_train and not cfg.korquad_dev and from_data.get("korquad_train") and Path(from_data["korquad_train"]).is_file():
        korquad_train = from_data["korquad_train"]  # the official protocol: train on train, score all of dev
    given = {*cfg.corpus, cfg.nsmc_train, cfg.nsmc_test, cfg.korquad_dev, cfg.korquad_train}
    lacking = []  # the data folder's missing files: named together, with the one command that brings them
    for path in [*corpus, nsmc_train, nsmc_test, korquad_dev, *([korquad_train] if korquad_train else [])]:
        spec = path
        path = re.sub(r"@\d+$", "", path) if not Path(path).exists() else path  # PATH@N: the first N documents
        if not any(ch in path for ch in "*?[") and not Path(path).exists():
            if spec not in given and data is not None:
                lacking.append(Path(path).relative_to(data).as_posix())
                continue
            raise InputError(f"{path}: no such file (preset {cfg.preset!r}; pass your own paths with --corpus/--nsmc-train/...)")
    if lacking:
        from korbert.data_get import provider

        names = list(dict.fromkeys(provider(rel) or "all" for rel in lacking))
        raise InputError(
            f"{data / lacking[0]}: no such file{f' (nor {len(lacking) - 1} more)' if len(lacking) > 1 else ''}: preset {cfg.preset!r} reads "
            f"the data folder {data}, and `korbert data get {' '.join(names)} --out {data}` fills it; or pass --data DIR, "
            "or your own paths with --corpus/--nsmc-train/..."
        )
    refuse_eval_files_in_corpus(corpus, [nsmc_train, nsmc_test, korquad_dev, *([korquad_train] if korquad_train else [])])
    from korbert.folders import open_folder

    compared = [open_folder(folder, label=f"--compare {folder}") for folder in cfg.compare]  # checked before hours of pretraining
    control = cfg.control or ("start" if cfg.init_from else "random")
    if control == "start" and not cfg.init_from:
        raise InputError("--control start compares with the model --init-from continues: pass --init-from FOLDER")
    start = None
    if cfg.init_from:
        from korbert.checkpoint import open_init_folder

        start = open_init_folder(cfg.init_from)  # checked now, not after the shards
    classes = {"vocab": VocabConfig, "shards": ShardsConfig, "shards_long": ShardsConfig, "pretrain": PretrainConfig, "nsmc": NsmcConfig, "korquad": KorquadConfig, "baseline": BaselineConfig}
    final = str(out / "pretrain" / "final")
    # the corpus documents that hold the scored evaluation text: left out of the vocabulary and the shards, and counted
    # (--keep-eval-text: kept and counted; --strict: refused)
    from evals.klue_data import dev_files

    klue_data = data if data is not None else Path(cfg.data) if cfg.data else None  # (the demo's KLUE: from --data, if given)
    klue_dev = {} if klue_data is None else dev_files(klue_data)  # KLUE took text from NSMC's crawl and from Wikipedia
    guard = dict(eval_nsmc_test=nsmc_test, eval_korquad=korquad_dev, eval_klue=[str(p) for p in klue_dev.values()],
                 eval_strict=cfg.strict, keep_eval_text=cfg.keep_eval_text)
    base = {
        "vocab": dict(inputs=corpus, out=str(out / "vocab"), show=0, **guard),
        "shards": dict(tokenizer=str(out / "vocab"), inputs=corpus, out=str(out / "shards"), show=0, replace=True, workers=cfg.workers, **guard),
        "shards_long": dict(tokenizer=str(out / "vocab"), inputs=corpus, out=str(out / "shards-long"), show=0, replace=True, workers=cfg.workers, **guard),
        "pretrain": dict(shards=str(out / "shards"), out=str(out / "pretrain"), replace=True),
        "nsmc": dict(model=final, train=nsmc_train, test=nsmc_test, out=str(out / "nsmc" / "model")),
        "korquad": dict(model=final, dev_file=korquad_dev, train_file=korquad_train, out=str(out / "korquad" / "model")),
        "baseline": dict(train=nsmc_train, test=nsmc_test, out=str(out / "nsmc" / "baseline")),
    }
    from evals.klue import KlueConfig

    classes["klue"] = KlueConfig  # (the settings of every KLUE task: --set klue.epochs=5)
    overrides: dict[str, dict] = {s: {} for s in classes}
    for item in cfg.set:
        key, _, value = item.partition("=")
        stage, _, name = key.partition(".")
        if stage not in classes or not name or not _:
            raise InputError(f"--set {item!r}: expected stage.field=value with stage one of {', '.join(classes)}")
        if stage == "klue" and name in KLUE_PER_ROW:
            raise InputError(f"--set {item!r}: the recipe sets klue.{name} for each row (the model, its control, --compare); "
                             "set it with `korbert eval klue-TASK`, or --klue and --data for the tasks and files")
        overrides[stage][name] = _coerce(classes[stage], name, value)
    cfgs = {}
    if cfg.init_from and {"model_size", "override"} & set(overrides["pretrain"]):
        raise InputError(f"--init-from {cfg.init_from}: the model's shape comes from its config.json; drop --set pretrain.model_size / pretrain.override")
    if cfg.init_from:  # the folder's tokenizer and shape: no vocabulary stage, and the preset's model size does not apply
        for st in ("shards", "shards_long"):
            base[st]["tokenizer"] = cfg.init_from
        base["pretrain"]["init_from"] = cfg.init_from
        shape = {"model_size": PretrainConfig.model_size, "override": []}
        p = {**p, "pretrain": {**p["pretrain"], **{k: v for k, v in shape.items() if k not in overrides["pretrain"]}}}
    for s in STAGES:
        known = {f.name for f in fields(classes[s])}
        if s == "shards_long":  # the long shards: the shards' settings (the preset's and --set shards.*), then their own
            shared = {k: v for k, v in overrides["shards"].items() if k != "out"}
            values = {**base[s], **p["shards"], **p.get("shards_long", {}), **shared, **overrides[s]}
        else:
            values = {**base[s], **p[s], **overrides[s]}
        values = {k: v for k, v in values.items() if k in known}
        cfgs[s] = classes[s](**values)
    if cfgs["pretrain"].objective == "electra":  # refused now, not after the vocabulary and the shards
        from korbert.electra import check_settings

        check_settings(cfgs["pretrain"], False)
    if cfgs["vocab"].kind == "plain" and "analyzer" not in overrides["baseline"] and not cfg.init_from:
        cfgs["baseline"] = replace(cfgs["baseline"], analyzer="char")  # the plain kind's run needs no Kiwi anywhere
    # BERT's second phase when the long shards are longer (the GPU presets: 512): the pretraining's last share reads them
    if cfgs["shards_long"].max_seq_len > cfgs["shards"].max_seq_len:
        if not cfgs["pretrain"].long_shards:
            cfgs["pretrain"] = replace(cfgs["pretrain"], long_shards=cfgs["shards_long"].out)
    else:
        del cfgs["shards_long"]
    if cfg.init_from and cfgs["pretrain"].long_shards and start.trained_positions > cfgs["shards"].max_seq_len:  # rows it trained
        if "long_init" in overrides["pretrain"] and cfgs["pretrain"].long_init == "copy":
            raise InputError(f"--set pretrain.long_init=copy: --init-from {cfg.init_from} trained positions up to {start.trained_positions}, "
                             "which copies would overwrite at the switch; leave long_init to the recipe (keep)")
        cfgs["pretrain"] = replace(cfgs["pretrain"], long_init="keep")
    # windows past the positions pretraining will train are refused by the fine-tuning: say so now, not after hours
    trained = cfgs["shards_long"].max_seq_len if "shards_long" in cfgs else cfgs["shards"].max_seq_len
    if cfg.init_from:  # and those the starting model had trained already
        trained = max(trained, start.trained_positions)
    if cfgs["korquad"].max_len > trained and not cfgs["korquad"].allow_untrained_positions:
        raise InputError(
            f"korquad.max_len {cfgs['korquad'].max_len} is longer than the {trained} tokens pretraining trains: set "
            f"shards_long.max_seq_len=512 (BERT's second phase) or korquad.max_len={trained} (with a stride and max_query_len that fit)"
        )
    if control == "start":  # the starting model, fine-tuned the same way: did continued pretraining help?
        cfgs["nsmc_control"] = replace(cfgs["nsmc"], model=cfg.init_from, out=str(out / "nsmc" / "start"))
        cfgs["korquad_control"] = replace(cfgs["korquad"], model=cfg.init_from, out=str(out / "korquad" / "start"))
    else:
        cfgs["nsmc_control"] = replace(cfgs["nsmc"], control=True, out=str(out / "nsmc" / "control"))
        cfgs["korquad_control"] = replace(cfgs["korquad"], control=True, out=str(out / "korquad" / "control"))
    if cfg.init_from:
        del cfgs["vocab"]
    from korbert.folders import check_trained_positions

    from korbert import recipe_klue

    klue_settings = {**p.get("klue", {}), **overrides["klue"]}  # (every KLUE task's: the preset's, then --set klue.*)
    klue_tasks, klue_cfg = recipe_klue.chosen(cfg.klue, klue_data), KlueConfig(**klue_settings)
    if klue_tasks and klue_cfg.max_len > trained and not klue_cfg.allow_untrained_positions:
        raise InputError(f"klue.max_len {klue_cfg.max_len} is longer than the {trained} tokens pretraining trains: "
                         f"set klue.max_len={trained}, or shards_long.max_seq_len={klue_cfg.max_len}")
    # every folder fine-tuned as it is (--compare, and the starting model of --control start): checked before pretraining
    for mf in compared + ([start] if control == "start" else []):
        for task, c in (("nsmc", cfgs["nsmc"]), ("korquad", cfgs["korquad"]), *([("klue", klue_cfg)] if klue_tasks else [])):
            check_trained_positions(mf, c.max_len, c.allow_untrained_positions, False, f"--set {task}.max_len=...")
    compare, slugs = [], []
    for folder in cfg.compare:
        slug = "compare-" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in Path(folder.rstrip("/")).name)
        slug += "-" + hashlib.sha256(str(Path(folder).resolve()).encode()).hexdigest()[:6]
        slugs.append((folder, slug))
        compare.append({
            "folder": folder,
            "nsmc": replace(cfgs["nsmc"], model=folder, out=str(out / "nsmc" / slug)),
            "korquad": replace(cfgs["korquad"], model=folder, out=str(out / "korquad" / slug)),
        })
    klue = recipe_klue.plan(klue_tasks, klue_settings, final, out, control,
                            cfg.init_from, slugs)
    return {"out": out, "cfgs": cfgs, "compare": compare, "control": control, "klue": klue}


def _folder_key(folder: str, weights: bool = True) -> str:
    """What fine-tuning a model folder reads: its config, its tokenizer files and (unless `weights` is
    False: a random-init control) its weights. The evals are keyed on it, so a model trained further
    into the same folder is scored again."""
    from corpus_tools.artifacts import sha256_file
    from korbert.folders import tokenizer_files_sha256, weights_sha256

    path = Path(folder)
    return _key(sha256_file(path / "config.json"), tokenizer_files_sha256(path), weights_sha256(path) if weights else "")


def klue_upstream(folder_key: str) -> str:
    """What a KLUE eval's key holds beyond its config: the model folder's key and the KLUE readers' version."""
    from evals.klue_data import READER_VERSION

    return _key(folder_key, "klue reader", READER_VERSION)


def _inputs_key(c) -> list:
    """The sha256 of every input file a stage's config names (the NSMC/KorQuAD files): an eval's
    results depend on their content, not on their path, so a file edited in place is a new input."""
    from corpus_tools.artifacts import sha256_file

    named = [(k, v) for k, v in sorted(C.to_dict(c).items()) if k not in ("out", "model", "features") and isinstance(v, str) and v]
    return [(k, sha256_file(v)) for k, v in named if Path(v).is_file()]


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


KLUE_PER_ROW = ("model", "out", "dev_file", "train_file", "control")  # what recipe_klue.plan sets for each task and row
EVAL_SETTINGS_ADDED_LATER = {"epoch_window": ""}  # (KorQuAD's): at these defaults an eval's key is as before them


def eval_key(c, upstream: str) -> str:
    """The key an eval's results are cached under: its config, what it reads (`upstream`: the model
    folder's key) and its input files' content. A setting added later counts only away from its
    default, so results cached before it are still found."""
    config = C.to_dict(c)
    for k, default in EVAL_SETTINGS_ADDED_LATER.items():
        if k in config and config[k] == default:
            del config[k]
    return _key(config, upstream, _inputs_key(c))


def cached_result(folder: Path, key: str) -> dict | None:
    """The results folder/recipe-stage.json holds if they were made with this key, else None."""
    marker = Path(folder) / "recipe-stage.json"
    if not marker.is_file():
        return None
    done = json.loads(marker.read_text(encoding="utf-8"))
    return done["result"] if done.get("key") == key else None


def _cached(folder: Path, key: str, fn, force: bool) -> tuple[dict, bool]:
    """Run fn() unless folder/recipe-stage.json says it already ran with this key."""
    done = None if force else cached_result(folder, key)
    if done is not None:
        return done, True
    result = fn()
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "recipe-stage.json", {"key": key, "result": result})
    return result, False


def main(cfg: RecipeConfig) -> dict:
    from corpus_tools import shards as shards_stage
    from corpus_tools import vocab as vocab_stage
    from evals import baseline as baseline_stage
    from evals import korquad as korquad_stage
    from evals import nsmc as nsmc_stage
    from korbert import pretrain as pretrain_stage

    t_start = time.time()
    plan = stage_configs(cfg)
    out, cfgs = plan["out"], plan["cfgs"]
    rank0 = int(os.environ.get("RANK", "0")) == 0
    if cfg.force:
        for s in ("vocab", "shards", "shards_long", "pretrain"):
            if s in cfgs:
                cfgs[s] = replace(cfgs[s], force=True)
    out.mkdir(parents=True, exist_ok=True)
    if rank0:
        atomic_write_json(out / "recipe-config.json", {"recipe": C.to_dict(cfg), **{k: C.to_dict(v) for k, v in cfgs.items()}})
    times: dict[str, float] = {}
    skipped: list[str] = []

    def stage(name: str, fn):
        if rank0:
            print(f"\n== {name} ==", flush=True)
        t = time.time()
        r = fn()
        times[name] = round(time.time() - t, 1)
        return r

    # -- corpus -> tokenizer -> shards -> model (pretraining runs on every rank; the rest on rank 0)
    def preprocess(ready_only: bool = False):
        if "vocab" in cfgs:  # (--init-from: the model's own tokenizer)
            stage("vocab", lambda: vocab_stage.main(cfgs["vocab"], ready_only=ready_only))
        stage("shards", lambda: shards_stage.main(cfgs["shards"], ready_only=ready_only))
        if "shards_long" in cfgs:
            stage("shards (long phase)", lambda: shards_stage.main(cfgs["shards_long"], ready_only=ready_only))

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun: preprocessing comes first, in its own command
        def ready():
            try:
                preprocess(ready_only=True)
            except InputError as e:
                raise InputError(
                    f"{e}\n  Under torchrun the recipe only trains: preprocess first with the same options plus "
                    f"--preprocess-only (e.g. korbert run --preset {cfg.preset} --out {out} --preprocess-only --workers N), "
                    "then launch torchrun again"
                ) from None

        rank0_first(ready)  # rank 0 checks the vocabulary and shards (read-only) while the others wait
    else:
        preprocess()
    if cfg.preprocess_only:
        print(f"\npreprocessed into {out}: train with the same command without --preprocess-only, "
              "or under torchrun (torchrun --nproc_per_node N -m korbert.recipe ...)")
        return {"preprocessed": str(out), "times": times}
    vm = read_manifest(cfgs["vocab"].out, "vocab") if "vocab" in cfgs else None
    sm = read_manifest(cfgs["shards"].out, "shards")
    pm = stage("pretrain", lambda: pretrain_stage.main(cfgs["pretrain"]))
    if not rank0:
        return {}
    final = Path(cfgs["pretrain"].out) / "final"
    model_key = _folder_key(str(final))  # what the evals read: a longer budget re-exports final/ and re-scores it

    # -- evaluations: skipped when they already ran on this model with these settings
    def ev(name: str, module, c, upstream: str) -> dict:
        def fn():
            return stage(name, lambda: module.main(c))

        r, was_skipped = _cached(Path(c.out), eval_key(c, upstream), fn, cfg.force)
        if was_skipped:
            print(f"\n== {name} == up to date ({c.out})")
            skipped.append(name)
        return r

    # the comparison row: a random init of this model (keyed by it), or the starting model (keyed by its files)
    label, control_key = ("start", _folder_key(cfg.init_from)) if plan["control"] == "start" else ("control", _folder_key(str(final), weights=False))
    results = {
        "nsmc": ev("nsmc", nsmc_stage, cfgs["nsmc"], model_key),
        "nsmc_control": ev(f"nsmc ({label})", nsmc_stage, cfgs["nsmc_control"], control_key),
        "korquad": ev("korquad", korquad_stage, cfgs["korquad"], model_key),
        "korquad_control": ev(f"korquad ({label})", korquad_stage, cfgs["korquad_control"], control_key),
        "baseline": ev("baseline", baseline_stage, cfgs["baseline"], ""),
    }
    compared = []
    for c in plan["compare"]:
        upstream = _folder_key(c["folder"])
        name = Path(c["folder"].rstrip("/")).name
        compared.append({
            "folder": c["folder"],
            "nsmc": ev(f"nsmc ({name})", nsmc_stage, c["nsmc"], upstream),
            "korquad": ev(f"korquad ({name})", korquad_stage, c["korquad"], upstream),
        })
    from functools import partial
    from types import SimpleNamespace

    from evals.klue import main as klue_main
    from korbert import recipe_klue

    keys = {"model": model_key, "control": control_key, "start": control_key}  # (and what the KLUE readers take from the files)
    klue = [{**k, "result": ev(f"{recipe_klue.TASKS[k['task']]} ({Path(k['folder'].rstrip('/')).name if k['folder'] else k['row']})",
                               SimpleNamespace(main=partial(klue_main, recipe_klue.TASKS[k["task"]])), k["cfg"],
                               klue_upstream(_folder_key(k["folder"]) if k["folder"] else keys[k["row"]]))}
            for k in plan["klue"]]
    from korbert.report import write_report

    report = write_report(out, cfg, PRESETS[cfg.preset], cfgs, vm, sm, pm, results, times, time.time() - t_start, compared, plan["control"], klue)
    from korbert.card import write_card  # the model card again, now with the results

    nsmc, korquad = results["nsmc"], results["korquad"]
    kq = report["finetuning"]["korquad"]["protocol"]["name"]  # "official" only for KorQuAD's own two files
    protocol = {"dev-split": "dev split by article", "official": "official protocol, all of dev"}.get(kq, f"{kq}, all of dev")
    datasets = {
        "nsmc": f"{report['finetuning']['nsmc']['protocol']} ({Path(nsmc['data']['test']['path']).name}: {nsmc['n']['test']:,} test reviews)",
        "korquad": f"KorQuAD 1.0 ({protocol}: {korquad['n']['scored_questions']:,} scored questions)",
    }
    notes = [f"Fine-tuned and scored by `korbert run --preset {cfg.preset}` (its report: {out / 'report.md'})."]
    notes += [n for n in [recipe_klue.card_note(report["klue"], report["table"][0]["system"])] if n]
    card = write_card(final, report["table"], notes, datasets=datasets, finetuning={"nsmc": nsmc, "korquad": korquad})
    print(f"model card: {card}")
    print(f"\n{(out / 'report.md').read_text(encoding='utf-8')}")
    return report


def rank0_first(fn) -> None:
    """Rank 0 runs fn while the other ranks of a launch wait, then every rank goes on; one process
    just runs fn. The wait is on a key in a TCP store that lives as long as the launch: torchrun's
    own (MASTER_ADDR:MASTER_PORT), or, under launchers without one (srun, mpirun), one that rank 0
    serves at MASTER_PORT + 1 until every rank has passed. No process group (pretraining opens its
    own, NCCL on GPUs), and no marker file a rerun could find stale. If rank 0 fails, the launcher
    stops the others. The recipe uses it for a read-only check that preprocessing is done (hashing
    the inputs can take a minute on tens of GB), never to preprocess while GPUs wait."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        fn()
        return
    from datetime import timedelta

    import torch.distributed as dist

    rank, host, port = int(os.environ["RANK"]), os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(host, port if agent else port + 1, world_size=world, is_master=not agent and rank == 0, timeout=timedelta(hours=24))
    key = f"korbert/preprocessed/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"  # an elastic restart waits anew
    if rank == 0:
        fn()
        store.set(key, "done")
        while store.add(f"{key}/passed", 0) < world - 1:  # the store must outlive every rank's wait
            time.sleep(0.2)
    else:
        store.wait([key])
        store.add(f"{key}/passed", 1)


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(RecipeConfig, argv, prog="korbert run"))


if __name__ == "__main__":  # torchrun -m korbert.recipe --preset gpu-base
    sys.exit(C.run_command("run", cli, sys.argv[1:]))
