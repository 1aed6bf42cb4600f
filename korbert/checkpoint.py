"""A pretraining run's state in its out folder, outside the loop: where its weights start
(`--init-from`), the run key (is ckpt.pt / final/ this run?) and budget, each rank's RNG states for
an exact resume, the log trimmed back to the checkpoint, and the export of final/ that plain
transformers loads."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, plain_modes, write_manifest
from corpus_tools.masking import MASKING_VERSION
from corpus_tools.text import InputError

if TYPE_CHECKING:  # annotations only: no import at run time
    from korbert.pretrain_config import PretrainConfig

FORMAT_VERSION = 1


BUDGET = ("max_steps", "max_tokens", "max_minutes")
SWITCH = "switch.pt"  # the checkpoint at the switch to the long phase (--fork-from starts there: korbert/fork.py)


# what does not change the weights trained so far: speed, bookkeeping, evaluation, and the budget
# (a longer budget continues the run: the schedule is recomputed over the new budget from the step it reached)
NOT_WEIGHTS = ("out", "device", "compile", "compile_mode", "fixed_shapes", "num_workers", "resume", "force", "replace", "log_every",
               "save_every", "eval_every", "eval_instances", "license", "profile", "long_other_inputs", "attention", "fork_from", *BUDGET)


def run_budget(cfg: PretrainConfig) -> dict:
    """The run's budget, recorded in final/'s manifest: final/ is up to date only for the budget it was made with."""
    return {k: getattr(cfg, k) for k in BUDGET}


def run_key(
    cfg: PretrainConfig, shards_key: str, tokenizer_hash: str, world: int, precision: str, cuda: bool, long_key: str = "", dynamic: bool = True,
    init_key: str = "",
) -> str:
    ident = {k: v for k, v in C.to_dict(cfg).items() if k not in NOT_WEIGHTS}
    for f in dataclasses.fields(cfg):  # --warmup 500 on the command line is 500.0, 500 in a config file or a call: one run
        if f.type == "float" and f.name in ident:
            ident[f.name] = float(ident[f.name])
    ident["precision"] = precision  # what runs, not what was asked ("auto")
    if dynamic:  # masks drawn another way: not the same run (never resumed across); static shards hold theirs
        ident["masking"] = MASKING_VERSION
    if cfg.compile and cfg.tokens_per_batch and not cfg.pack:
        ident["bucketed"] = True  # --compile rounds rows and lengths to buckets: a token budget then cuts other batches
    if cfg.long_shards:
        ident["long_shards"] = long_key  # by content, as the shards
        if not cfg.tokens_per_batch:
            ident["long_rows"] = "real-tokens"  # the long phase's rows keep the real tokens per step (before: rows x 128 / 512)
        # added later: at shared and keep (the only behaviour before) a run keeps its key; the warmup and lr count only with own
        if ident["long_schedule"] == "shared":
            del ident["long_schedule"], ident["long_warmup"], ident["long_lr"]
        if ident["long_init"] == "keep":
            del ident["long_init"]
        if ident["long_nsp"]:
            del ident["long_nsp"]
    else:
        for k in ("long_shards", "long_phase", "long_schedule", "long_warmup", "long_lr", "long_init", "long_nsp"):
            del ident[k]
    if cfg.init_from:
        ident["init_from"] = init_key  # the starting weights by content, not by path
    else:
        ident.pop("init_from", None)  # (runs from scratch keep the key they had before the option existed)
    if cfg.objective != "electra":
        del ident["generator_size"], ident["disc_weight"]
    for k, default in (("objective", "mlm+nsp"), ("mask_prob", 0.0), ("precision", "bf16" if cuda else "fp32")):
        if ident[k] == default:  # options added later: at their defaults (CUDA's bf16, CPU's fp32 before) the key is as before
            del ident[k]
    return hashlib.sha256(json.dumps([ident, shards_key, tokenizer_hash, world], sort_keys=True).encode()).hexdigest()


def load_checkpoint(cfg: PretrainConfig, out: Path, key: str, key_other_compile, dist, key_before_58) -> dict | None:
    """out/ckpt.pt when it holds this run (`key`), to resume; None to start fresh (none there, --force, or
    --replace of another run's, whose files are then removed). Refused with one line: --no-resume, another
    number of processes (each rank's streams continue), another run, one cut with the other --compile
    (`key_other_compile()`: this run's key with --compile flipped), or one of the long phase's defaults before
    issue 58 (`key_before_58()`: this run's key with --long-schedule shared --long-init keep)."""
    import torch

    ckpt_path, log_path, final = out / "ckpt.pt", out / "log.jsonl", out / "final"
    state, force = None, cfg.force
    if ckpt_path.exists() and not force:
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        written_by = state["state"].get("world", 1)
        foreign = state["state"]["run_key"] != key
        if foreign and cfg.replace:
            if dist.main:
                print(f"{ckpt_path}: a run with other settings; starting over")
            state, force = None, True
        elif not cfg.resume:
            raise InputError(f"{ckpt_path} exists: pass --resume to continue it or --force to start over")
        elif written_by != dist.world:
            raise InputError(
                f"{ckpt_path} was written by {written_by} process(es) and this run has {dist.world}: resume it with "
                f"the same number (torchrun --nproc_per_node {written_by}), since each rank's data and dropout stream "
                f"continue from where they stopped; or pass --force to start over"
            )
        elif foreign and state["state"]["run_key"] == key_other_compile():
            why = "--compile cuts the batches of a --tokens-per-batch run without --pack otherwise (lengths rounded to buckets)"
            if "bucketed" not in state["state"]:  # written before the key held it: either way is possible
                raise InputError(f"{ckpt_path} does not say whether it was trained with --compile ({why}): pass --force to start over")
            was = "with" if state["state"]["bucketed"] else "without"
            raise InputError(f"{ckpt_path} was trained {was} --compile ({why}): resume it {was} --compile, or pass --force to start over")
        elif foreign and state["state"]["run_key"] == key_before_58():  # (without long shards: this run's own key, never foreign)
            raise InputError(f"{ckpt_path} was trained with --long-schedule shared --long-init keep, the long phase's defaults before "
                             "issue 58: pass both to resume it, or --force to start over")
        elif foreign:
            raise InputError(f"{ckpt_path} belongs to another run (other shards or settings); pass --force to start over")
    if force and dist.main:
        for p in (ckpt_path, log_path, out / "config.json", out / SWITCH):
            p.unlink(missing_ok=True)
        shutil.rmtree(final, ignore_errors=True)
    dist.barrier()
    if state is not None and isinstance(state["rng"], dict):  # written before per-rank RNG states
        state["rng"] = [state["rng"]]
    return state


def rng_state(device) -> dict:
    """This process's random states (each rank has its own: dropout streams differ per rank)."""
    import torch

    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def truncate_log(path: Path, step: int, source: Path | None = None) -> None:
    """After a resume from `step`: drop log lines a killed run wrote past its last checkpoint. `source`: another
    run's log, whose lines up to `step` become this one's (--fork-from: korbert/fork.py)."""
    source = source or path
    if not path.exists() and not source.exists():
        return
    lines = source.read_text(encoding="utf-8").splitlines() if source.exists() else []  # (no source log: this one starts empty)
    keep = [line for line in lines if line and json.loads(line).get("step", 0) <= step]
    atomic_write_bytes(path, "".join(line + "\n" for line in keep).encode("utf-8"))


def export(model, tok, folder: Path, manifest_fields: dict, tokenizer_from: Path | None = None) -> None:
    """final/: a plain BertForPreTraining (ELECTRA: ElectraForPreTraining, and its generator in generator/ with the
    tokenizer files) (config.json + model.safetensors) + tokenizer + manifest +
    the model card (README.md). Written into a temporary folder, then swapped in; every file with
    the mode the user's umask gives. The model_max_length of a korbert tokenizer (either kind) is the
    positions pretraining trained (`trained_seq_len`), else max_position_embeddings; another model's
    tokenizer files are copied unchanged."""
    from transformers import BertForPreTraining

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    generator = None
    if hasattr(model, "discriminator"):  # ELECTRA (korbert/electra.py): the discriminator here, the generator in generator/
        plain, generator = model.exported()
    else:
        plain = BertForPreTraining(copy.deepcopy(model.config))
        plain.load_state_dict(model.state_dict())
        plain.config.architectures = ["BertForPreTraining"]
    if not hasattr(tok, "fingerprint"):  # another model's tokenizer: rows back in its own id order (korbert/foreign.py)
        from korbert.foreign import id_map, reorder_vocab

        own = id_map(tok, plain.config.vocab_size)
        if own is not None:
            reorder_vocab(plain, own)
            plain.config.pad_token_id = tok.pad_token_id
    plain.save_pretrained(tmp)
    # the length its tokenizer cuts at (`truncation=True`): the positions pretraining trained
    length = manifest_fields.get("trained_seq_len") or plain.config.max_position_embeddings
    if hasattr(tok, "fingerprint"):  # korbert's tokenizer, with its source and auto_map (AutoTokenizer)
        from korbert.hub import add_auto_files

        tok.save_pretrained(tmp)
        add_auto_files(tmp, model_max_length=length)
        tokenizer_hash = tok.fingerprint
    else:  # the plain kind, or a continued model's own tokenizer: its files, unchanged, so it loads as the original did
        from korbert.folders import TOKENIZER_FILES, tokenizer_files_sha256
        from korbert.plain import KIND_KEY

        for name in TOKENIZER_FILES:
            if tokenizer_from is not None and (tokenizer_from / name).is_file():
                shutil.copyfile(tokenizer_from / name, tmp / name)
        cfg_path = tmp / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        if cfg.get(KIND_KEY) == "plain":  # korbert's own kind: its length too (not part of its identity)
            atomic_write_bytes(cfg_path, (json.dumps({**cfg, "model_max_length": int(length)}, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        tokenizer_hash = tokenizer_files_sha256(tmp)
    if generator is not None:  # its own folder, with the same tokenizer files: the fill-mask pipeline loads it as it is
        generator.save_pretrained(tmp / "generator")
        for name in sorted(p.name for p in tmp.iterdir() if p.is_file() and p.name not in ("config.json", "model.safetensors")):
            shutil.copyfile(tmp / name, tmp / "generator" / name)
    files = sorted(p.relative_to(tmp).as_posix() for p in [*tmp.iterdir(), *(tmp / "generator").glob("*")] if p.is_file())
    from korbert.model import count_parameters

    shape = {"parameters": count_parameters(model)}  # (the card's; a run passes them too)
    fields = {**shape, **manifest_fields, "model_config": plain.config.to_dict()}  # the config as written (its own [PAD] id)
    write_manifest(tmp, "model", FORMAT_VERSION, files=files, tokenizer_hash=tokenizer_hash, **fields)
    from korbert.card import write_card  # README.md, the model card, from that manifest (not in its file list)

    write_card(tmp)
    for where in (tmp, tmp / "generator"):  # (safetensors writes model.safetensors 0600)
        if where.is_dir():
            plain_modes(where)
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def open_init_folder(folder: str):
    """An --init-from folder, opened (korbert.folders.open_folder) and checked to be a BERT."""
    from korbert.folders import open_folder

    mf = open_folder(folder, label=f"--init-from {folder}")
    kind = getattr(mf.config, "model_type", "?")
    if kind != "bert":
        raise InputError(
            f"--init-from {folder}: a {kind} model; korbert continues BERT checkpoints only (BertForPreTraining, BertForMaskedLM "
            f"or BertModel weights). RoBERTa and ELECTRA differ in their heads and objective: pretrain them with their own code"
        )
    return mf


def init_source(cfg: PretrainConfig, tok, shards_tokenizer_hash: str) -> dict:
    """--init-from FOLDER, checked: a BERT model folder whose tokenizer is the one the shards were
    made with. -> {"folder", "weights_sha256" (its weight files), "config"}; an InputError otherwise."""
    where = f"--init-from {cfg.init_from}"
    if cfg.model_size != "mini" or cfg.override:
        raise InputError(f"{where}: the model's shape comes from its config.json; drop --model-size / --override")
    mf = open_init_folder(cfg.init_from)
    theirs = mf.tokenizer_fingerprint()  # korbert: the tokenizer's fingerprint; another folder: its files' sha256
    if theirs != shards_tokenizer_hash:
        name = "korbert tokenizer" if mf.kind == "korbert" else f"{mf.tokenizer_class or '?'} (files sha256)"
        raise InputError(
            f"{where}: its tokenizer ({name} {theirs[:12]}) is not the one the shards were made with ({shards_tokenizer_hash[:12]}): "
            f"build them with the model's own tokenizer: korbert shards --tokenizer {cfg.init_from} ..."
        )
    if mf.config.vocab_size < len(tok):
        raise InputError(f"{where}: config.json vocab_size {mf.config.vocab_size} < its tokenizer's {len(tok)} tokens")
    from korbert.folders import weights_sha256

    config = copy.deepcopy(mf.config)
    config._attn_implementation = "sdpa"
    return {"folder": str(mf.path.resolve()), "weights_sha256": weights_sha256(mf.path), "config": config,
            "trained_seq_len": mf.trained_positions}


def load_init_weights(model, folder: str) -> list[str]:
    """Copy every weight `folder` holds into `model` (a KorBertForPreTraining of the folder's config);
    -> the names it lacked, which keep a fresh, seeded initialization (a BertModel folder: the MLM
    transform and the NSP head; a BertForMaskedLM folder: the NSP head and the pooler)."""
    from transformers import BertForPreTraining

    src, info = BertForPreTraining.from_pretrained(folder, local_files_only=True, output_loading_info=True)
    model.load_state_dict(src.state_dict())
    return sorted(set(info["missing_keys"]))


def model_config(cfg: PretrainConfig, state: dict | None, init: dict | None, mapped_ids: bool, vocab: int, max_seq_len: int):
    """The BertConfig a run trains: its checkpoint's (a resume), the --init-from folder's (`init`, from
    `init_source`; `mapped_ids`: its tokenizer's ids are mapped, so [PAD] is 0 in the shards and the
    export puts the tokenizer's own back), or --model-size with --override; checked against the
    tokenizer's size and the longest rows."""
    from korbert.model import bert_config, parse_overrides

    if state is None and init is not None:
        mcfg = init["config"]
        if mapped_ids:
            mcfg.pad_token_id = 0
        if mcfg.max_position_embeddings < max_seq_len:
            raise InputError(f"--init-from {cfg.init_from}: {mcfg.max_position_embeddings} positions, shorter than the shards' {max_seq_len} tokens")
    elif state is None:
        try:
            mcfg = bert_config(cfg.model_size, vocab, max_seq_len, parse_overrides(cfg.override))
        except ValueError as e:
            raise InputError(str(e)) from None
        if cfg.objective == "electra":  # the discriminator's shape (the generator's follows from it: korbert/electra.py)
            from korbert.electra import discriminator_config

            mcfg = discriminator_config(mcfg)
    else:
        from transformers import BertConfig, ElectraConfig

        mcfg = (ElectraConfig if cfg.objective == "electra" else BertConfig).from_dict(state["state"]["model_config"])
        mcfg._attn_implementation = "sdpa"
    if mcfg.vocab_size != vocab and not (init is not None and mcfg.vocab_size > vocab):  # (a released model may pad its vocabulary)
        raise InputError(f"model vocab_size {mcfg.vocab_size} != tokenizer size {vocab}")
    return mcfg
