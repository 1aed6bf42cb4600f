"""Pretraining: MLM + NSP on the shards, one loop for 1 CPU, 1 GPU or N GPUs (torchrun), resumable.

    korbert pretrain --shards runs/shards --out runs/pretrain --model-size mini --max-steps 2000
    torchrun --nproc_per_node 8 -m korbert.pretrain --shards ... --model-size base --compile

The out folder holds (written atomically):
    ckpt.pt        model, optimizer, step, tokens seen, seconds, RNG states: `--resume` (the
                   default) continues exactly where it stopped; the data position is the step
    log.jsonl      one line per --log-every steps (loss, lr, tokens/s, MFU on GPU) + held-out evals
    config.json    the resolved run config
    final/         config.json + model.safetensors + tokenizer files + manifest.json: a folder
                   plain transformers loads (BertForPreTraining, AutoModelForMaskedLM, fill-mask)

Every global batch (batch_size x grad_accum x world_size instances) is one optimizer step; the
losses are normalized by the global number of masked tokens / pairs, so 1 process with batch 2b
and 2 processes with batch b make the same update.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, atomic_write_json, read_manifest, write_manifest
from corpus_tools.text import InputError

FORMAT_VERSION = 1
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "4090": 165e12}


@dataclass
class PretrainConfig:
    """Pretrain a BERT (MLM + NSP) from shards and export it for transformers."""

    shards: str = C.field("runs/shards", "shards folder (the output of `korbert shards`)")
    out: str = C.field("runs/pretrain", "run folder: ckpt.pt, log.jsonl, final/")
    model_size: str = C.field("mini", "size preset (layers/hidden/heads)", choices=["tiny", "mini", "small", "medium", "base", "large"])
    override: list[str] = C.field([], "BertConfig fields to override, as key=value (e.g. num_hidden_layers=6 hidden_dropout_prob=0)")
    batch_size: int = C.field(32, "instances per device per micro-batch")
    grad_accum: int = C.field(1, "micro-batches per optimizer step (global batch = batch_size x grad_accum x GPUs)")
    lr: float = C.field(5e-4, "peak learning rate (AdamW, betas 0.9/0.98, eps 1e-6)")
    schedule: str = C.field("linear", "decay after warmup", choices=["linear", "cosine"])
    warmup: float = C.field(0.06, "warmup: a fraction of the budget (< 1) or a number of steps (>= 1)")
    weight_decay: float = C.field(0.01, "AdamW weight decay (not on biases and LayerNorm weights)")
    clip_grad: float = C.field(1.0, "clip the global gradient norm to this (0: off)")
    max_steps: int = C.field(1000, "stop after this many optimizer steps (0: no step budget)")
    max_tokens: int = C.field(0, "stop after this many (non-padding) training tokens (0: none)")
    max_minutes: float = C.field(0.0, "stop after this many minutes of training (0: none; the schedule follows the budget)")
    eval_every: int = C.field(200, "held-out MLM loss/accuracy and NSP accuracy every N steps (0: only at the end)")
    eval_instances: int = C.field(2000, "held-out instances per evaluation (from the shards' valid split)")
    log_every: int = C.field(20, "one log line every N steps")
    save_every: int = C.field(500, "checkpoint every N steps (rounded to a multiple of --log-every)")
    seed: int = C.field(0, "seed for initialization, data order, masking and dropout")
    device: str = C.field("auto", "auto (cuda if available), cpu or cuda", choices=["auto", "cpu", "cuda"])
    compile: bool = C.field(False, "torch.compile the model (GPU: faster after a warm-up of a minute or so)")
    num_workers: int = C.field(-1, "DataLoader worker processes (-1: 4 per GPU, 1 on CPU)")
    resume: bool = C.field(True, "continue from out/ckpt.pt when it holds this same run")
    force: bool = C.field(False, "discard what `out` holds and start over")
    replace: bool = C.field(False, "when `out` holds a run with other settings, start over instead of refusing (same settings: resumed)")


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def _overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"--override {item!r}: expected key=value")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def lr_at(progress: float, cfg: PretrainConfig, total_steps_hint: int) -> float:
    """Peak lr x warmup/decay factor at `progress` in [0, 1] of the budget."""
    w = cfg.warmup if cfg.warmup < 1 else cfg.warmup / max(total_steps_hint, 1)
    if progress < w:
        return cfg.lr * progress / w
    p = min(1.0, (progress - w) / max(1e-9, 1 - w))
    return cfg.lr * ((1 - p) if cfg.schedule == "linear" else 0.5 * (1 + math.cos(math.pi * p)))


def _peak_flops(device) -> float | None:
    import torch

    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


class _Dist:
    """torchrun's environment, or one process."""

    def __init__(self, device_kind: str):
        import torch
        import torch.distributed as dist

        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available() if device_kind == "auto" else device_kind == "cuda"
        if cuda and not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is visible")
        self.device = torch.device(f"cuda:{self.local_rank}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if cuda else "gloo")
        self.main = self.rank == 0

    def all_sum(self, t):
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(t)
        return t

    def barrier(self):
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()


def _run_key(cfg: PretrainConfig, shards_key: str, tokenizer_hash: str, world: int) -> str:
    ident = {k: v for k, v in C.to_dict(cfg).items() if k not in ("out", "device", "compile", "num_workers", "resume", "force", "replace", "log_every", "save_every")}
    return hashlib.sha256(json.dumps([ident, shards_key, tokenizer_hash, world], sort_keys=True).encode()).hexdigest()


def _save_checkpoint(path: Path, model, opt, state: dict) -> None:
    import io

    import torch

    buf = io.BytesIO()
    rng = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "state": state, "rng": rng}, buf)
    atomic_write_bytes(path, buf.getvalue())


def _truncate_log(path: Path, step: int) -> None:
    """After a resume from `step`: drop log lines a killed run wrote past its last checkpoint."""
    if not path.exists():
        return
    keep = [line for line in path.read_text(encoding="utf-8").splitlines() if line and json.loads(line).get("step", 0) <= step]
    atomic_write_bytes(path, "".join(line + "\n" for line in keep).encode("utf-8"))


@contextlib.contextmanager
def _oom_guard(cfg: PretrainConfig):
    import torch

    try:
        yield
    except torch.OutOfMemoryError:
        raise InputError(
            f"out of GPU memory with --batch-size {cfg.batch_size} and --model-size {cfg.model_size}: lower --batch-size "
            f"(and raise --grad-accum to keep the global batch), pick a smaller --model-size, or build shards with a "
            f"smaller --max-seq-len"
        ) from None


def evaluate(model, batches: list[dict], device, autocast) -> dict:
    """Held-out MLM loss (per masked token), MLM accuracy and NSP accuracy over fixed batches."""
    import torch

    if not batches:
        return {}
    was_training = model.training
    model.eval()
    tot = torch.zeros(6, dtype=torch.float64)
    with torch.no_grad(), autocast():
        for b in batches:
            b = {k: v.to(device, non_blocking=True) for k, v in b.items()}
            o = model(**b, sparse=True)
            tot += torch.stack([o.mlm_loss_sum, o.mlm_correct, o.mlm_count, o.nsp_loss_sum, o.nsp_correct, o.nsp_count]).double().cpu()
    model.train(was_training)
    ml, mc, mn, nl, nc, nn_ = tot.tolist()
    return {"mlm_loss": ml / max(mn, 1), "mlm_acc": mc / max(mn, 1), "nsp_loss": nl / max(nn_, 1), "nsp_acc": nc / max(nn_, 1), "instances": int(nn_)}


def export(model, tok, folder: Path, manifest_fields: dict) -> None:
    """final/: a plain BertForPreTraining (config.json + model.safetensors) + tokenizer + manifest.
    Written into a temporary folder, then swapped in."""
    from transformers import BertForPreTraining

    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    plain = BertForPreTraining(model.config)
    plain.load_state_dict(model.state_dict())
    plain.config.architectures = ["BertForPreTraining"]
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    files = sorted(p.name for p in tmp.iterdir() if p.is_file())
    write_manifest(tmp, "model", FORMAT_VERSION, files=files, tokenizer_hash=tok.fingerprint, **manifest_fields)
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# the stage
# ---------------------------------------------------------------------------------------------


def main(cfg: PretrainConfig) -> dict:
    import torch
    from tqdm import tqdm

    from corpus_tools.shards import _tokenizer_dir, open_shards
    from korbert.data import BatchPlan, PretrainingDataset, StepSampler, eval_batches, instance_lengths
    from korbert.model import KorBertForPreTraining, bert_config, count_parameters, flops_per_token
    from korbert.tokenizer import KorBertTokenizer

    if cfg.max_steps <= 0 and cfg.max_tokens <= 0 and cfg.max_minutes <= 0:
        raise InputError("no budget: set --max-steps, --max-tokens or --max-minutes")
    if cfg.batch_size < 1 or cfg.grad_accum < 1:
        raise InputError("--batch-size and --grad-accum must be >= 1")
    dist = _Dist(cfg.device)
    dev = dist.device
    out = Path(cfg.out)
    final = out / "final"
    ckpt_path, log_path = out / "ckpt.pt", out / "log.jsonl"

    # -- the shards and their tokenizer
    try:
        sm = read_manifest(cfg.shards, "shards")
    except (FileNotFoundError, ValueError) as e:
        raise InputError(f"--shards {cfg.shards}: {e}") from None
    tok = KorBertTokenizer.from_pretrained(_tokenizer_dir(Path(cfg.shards)))
    if tok.fingerprint != sm["tokenizer_hash"]:
        raise InputError(f"--shards {cfg.shards}: its tokenizer copy has hash {tok.fingerprint[:12]}, the manifest says {sm['tokenizer_hash'][:12]}")
    key = _run_key(cfg, sm["key"], sm["tokenizer_hash"], dist.world)
    if final.exists() and not cfg.force:
        try:
            fm = read_manifest(final, "model")
            if fm.get("run_key") == key:
                if dist.main:
                    print(f"{final}: up to date (step {fm['step']}, {fm['tokens']} tokens); --force retrains")
                return fm
        except (FileNotFoundError, ValueError):
            pass
    train = open_shards(cfg.shards, sm["tokenizer_hash"], "train", verify=dist.main)
    valid = open_shards(cfg.shards, sm["tokenizer_hash"], "valid", verify=False)

    # -- resume or start
    state = None
    force = cfg.force
    if ckpt_path.exists() and not force:
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        foreign = state["state"]["run_key"] != key
        if foreign and cfg.replace:
            if dist.main:
                print(f"{ckpt_path}: a run with other settings; starting over")
            state, force = None, True
        elif not cfg.resume:
            raise InputError(f"{ckpt_path} exists: pass --resume to continue it or --force to start over")
        elif foreign:
            raise InputError(f"{ckpt_path} belongs to another run (other shards or settings); pass --force to start over")
    if force and dist.main:
        for p in (ckpt_path, log_path, out / "config.json"):
            p.unlink(missing_ok=True)
        shutil.rmtree(final, ignore_errors=True)
    dist.barrier()

    if state is None:
        mcfg = bert_config(cfg.model_size, len(tok), sm["config"]["max_seq_len"], _overrides(cfg.override))
    else:
        from transformers import BertConfig

        mcfg = BertConfig.from_dict(state["state"]["model_config"])
        mcfg._attn_implementation = "sdpa"
    if mcfg.vocab_size != len(tok):
        raise InputError(f"model vocab_size {mcfg.vocab_size} != tokenizer size {len(tok)}")
    torch.manual_seed(cfg.seed)
    model = KorBertForPreTraining(mcfg)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "LayerNorm" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "LayerNorm" not in n)]
    cuda = dev.type == "cuda"
    model.to(dev)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6, fused=cuda or None,
    )
    step, tokens, seconds = 0, 0, 0.0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, tokens, seconds = state["state"]["step"], state["state"]["tokens"], state["state"]["seconds"]
        torch.set_rng_state(state["rng"]["torch"])
        if cuda and "cuda" in state["rng"]:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        if dist.main:
            _truncate_log(log_path, step)
            print(f"resuming {ckpt_path} at step {step} ({tokens} tokens)")
    else:
        if dist.main:  # a fresh start: lines a killed run wrote before its first checkpoint are not ours
            log_path.unlink(missing_ok=True)
        torch.manual_seed(cfg.seed + 1 + dist.rank)  # dropout stream (per rank)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    wrapped = model
    if dist.world > 1:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    if cfg.compile:
        wrapped = torch.compile(wrapped)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()

    # -- data
    global_batch = cfg.batch_size * cfg.grad_accum * dist.world
    try:
        plan = BatchPlan(instance_lengths(train), global_batch, cfg.seed)
    except ValueError as e:
        raise InputError(f"--shards {cfg.shards}: {e}") from None
    stop_hint = cfg.max_steps if cfg.max_steps > 0 else (10 ** 9)
    workers = cfg.num_workers if cfg.num_workers >= 0 else (4 if cuda else 1)
    dataset = PretrainingDataset(train, cfg.seed, pad_multiple=8 if cuda else 1)
    loader = torch.utils.data.DataLoader(
        dataset, sampler=StepSampler(plan, step, stop_hint, dist.world, dist.rank, cfg.grad_accum), batch_size=None,
        num_workers=workers, pin_memory=cuda, persistent_workers=False, prefetch_factor=4 if workers else None,
        generator=torch.Generator(),  # keeps the loader from drawing on the global RNG (exact resume)
    )
    held_out = eval_batches(valid, cfg.eval_instances, max(cfg.batch_size, 64), cfg.seed) if dist.main else []

    n_params = count_parameters(model)
    n_nonemb = count_parameters(model, embeddings=False)
    peak = _peak_flops(dev)
    total_steps_hint = cfg.max_steps if cfg.max_steps > 0 else max(1, cfg.max_tokens // max(1, global_batch * int(plan.lengths.mean())))
    save_every = max(cfg.log_every, cfg.save_every // cfg.log_every * cfg.log_every)
    run_cfg = {**C.to_dict(cfg), "world_size": dist.world, "global_batch": global_batch, "device": str(dev)}
    if dist.main:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "config.json", {"run": run_cfg, "model": mcfg.to_dict()})
        print(
            f"pretrain: BERT-{cfg.model_size} ({n_params / 1e6:.1f}M parameters, L{mcfg.num_hidden_layers}/H{mcfg.hidden_size}/"
            f"A{mcfg.num_attention_heads}, vocab {mcfg.vocab_size}) on {dev}{f' x {dist.world}' if dist.world > 1 else ''}; "
            f"{len(train)} training instances, global batch {global_batch}, {plan.per_epoch} steps per epoch"
        )
    tb = None
    if dist.main:
        try:
            from torch.utils.tensorboard import SummaryWriter

            tb = SummaryWriter(str(out / "tb"))
        except Exception:  # tensorboard not installed: log.jsonl and stdout only
            tb = None

    def progress() -> float:
        fr = []
        if cfg.max_steps > 0:
            fr.append(step / cfg.max_steps)
        if cfg.max_tokens > 0:
            fr.append(tokens / cfg.max_tokens)
        if cfg.max_minutes > 0:
            fr.append(seconds / 60 / cfg.max_minutes)
        return max(fr)

    def log(rec: dict) -> None:
        if not dist.main:
            return
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        if tb is not None:
            for k, v in rec.items():
                if isinstance(v, (int, float)) and k not in ("step",):
                    tb.add_scalar(k, v, rec["step"])

    kill_at = int(os.environ.get("KORBERT_TEST_KILL_AT_STEP", "0"))  # tests: SIGKILL ourselves after this step
    interval = torch.zeros(7, dtype=torch.float64, device=dev)  # mlm sum/correct/count, nsp sum/correct/count, tokens
    t_interval, steps_interval, padded_interval = time.time(), 0, 0
    last = {}
    bar = tqdm(total=cfg.max_steps or None, initial=step, desc="pretrain", unit="step", disable=None if dist.main else True, file=sys.stderr)
    it = iter(loader)
    model.train()
    t_last = time.time()
    with _oom_guard(cfg):
        while progress() < 1:
            micro = [next(it) for _ in range(cfg.grad_accum)]
            local = torch.tensor(
                [sum(int((m["labels"] != -100).sum()) for m in micro), sum(len(m["next_sentence_label"]) for m in micro),
                 sum(int(m["attention_mask"].sum()) for m in micro)], dtype=torch.float64, device=dev,
            )
            glob = dist.all_sum(local.clone())
            mlm_norm, nsp_norm = float(glob[0]) / dist.world, float(glob[1]) / dist.world
            lr = lr_at(progress(), cfg, total_steps_hint)
            for g in opt.param_groups:
                g["lr"] = lr
            for i, mb in enumerate(micro):
                mb = {k: v.to(dev, non_blocking=True) for k, v in mb.items()}
                padded_interval += mb["input_ids"].numel()
                sync = contextlib.nullcontext() if dist.world == 1 or i == len(micro) - 1 else wrapped.no_sync()
                with sync:
                    with autocast():
                        o = wrapped(**mb, sparse=True, mlm_norm=max(mlm_norm, 1e-9), nsp_norm=nsp_norm)
                    o.loss.backward()
                interval[:6] += torch.stack([o.mlm_loss_sum, o.mlm_correct, o.mlm_count, o.nsp_loss_sum, o.nsp_correct, o.nsp_count]).double()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad) if cfg.clip_grad > 0 else None
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            steps_interval += 1
            tokens += int(glob[2])
            interval[6] += glob[2]
            now = time.time()
            seconds += now - t_last
            t_last = now
            bar.update(1)
            done = progress() >= 1
            if step % cfg.log_every == 0 or done:
                tot = dist.all_sum(interval[:6].clone()).tolist()
                dt = max(time.time() - t_interval, 1e-9)
                tps = float(interval[6]) / dt
                mlm = tot[0] / max(tot[2], 1)
                nsp = tot[3] / max(tot[5], 1)
                loss = mlm + nsp
                if not math.isfinite(loss):
                    raise InputError(
                        f"non-finite loss ({loss}) at step {step}, lr {lr:.2e}; the last good checkpoint is kept at "
                        f"{ckpt_path if ckpt_path.exists() else '(none yet)'}. Lower --lr, raise --warmup or --clip-grad, or check the shards"
                    )
                rec = {
                    "step": step, "tokens": tokens, "loss": round(loss, 5), "mlm_loss": round(mlm, 5), "nsp_loss": round(nsp, 5),
                    "mlm_acc": round(tot[1] / max(tot[2], 1), 5), "nsp_acc": round(tot[4] / max(tot[5], 1), 5),
                    "lr": lr, "tokens_per_s": round(tps, 1), "seconds": round(seconds, 2),
                }
                if gnorm is not None:
                    rec["grad_norm"] = round(float(gnorm), 4)
                if peak:
                    seq = padded_interval / max(1, steps_interval * global_batch / dist.world)
                    rec["mfu"] = round(flops_per_token(mcfg, seq, n_nonemb) * tps / (peak * dist.world), 4)
                if dist.main and (step % (cfg.log_every * 5) == 0 or done or step == cfg.log_every):
                    mfu = f", mfu {rec['mfu'] * 100:.1f}%" if "mfu" in rec else ""
                    bar.write(
                        f"step {step}: loss {loss:.4f} (mlm {mlm:.4f}, nsp {nsp:.4f}), mlm acc {rec['mlm_acc']:.3f}, "
                        f"lr {lr:.2e}, {tps:,.0f} tok/s{mfu}"
                    )
                if cfg.eval_every > 0 and (step % cfg.eval_every == 0) or done:
                    last = evaluate(model, held_out, dev, autocast) if dist.main else {}
                    if last:
                        rec.update({f"eval_{k}": round(v, 5) if isinstance(v, float) else v for k, v in last.items()})
                        bar.write(f"step {step}: held-out mlm loss {last['mlm_loss']:.4f}, mlm acc {last['mlm_acc']:.4f}, nsp acc {last['nsp_acc']:.4f}")
                log(rec)
                interval.zero_()
                t_interval, steps_interval, padded_interval = time.time(), 0, 0
                if (step % save_every == 0 or done) and dist.main:
                    _save_checkpoint(ckpt_path, model, opt, {
                        "step": step, "tokens": tokens, "seconds": seconds, "run_key": key, "model_config": mcfg.to_dict(),
                    })
                dist.barrier()
                t_last = time.time()  # checkpoint/eval time is not training time
            if kill_at and step == kill_at:
                os.kill(os.getpid(), 9)
    bar.close()
    if tb is not None:
        tb.close()

    result = {
        "run_key": key, "step": step, "tokens": tokens, "seconds": round(seconds, 1), "parameters": n_params,
        "eval": last, "model_size": cfg.model_size, "config": run_cfg, "shards_key": sm["key"],
        "shards_path": str(cfg.shards), "model_config": mcfg.to_dict(),
    }
    if dist.main:
        export(model, tok, final, result)
        print(
            f"pretrain: {step} steps, {tokens:,} tokens in {seconds / 60:.1f} min ({tokens / max(seconds, 1e-9):,.0f} tok/s); "
            f"held-out mlm acc {last.get('mlm_acc', float('nan')):.4f}, nsp acc {last.get('nsp_acc', float('nan')):.4f} -> {final}"
        )
    dist.barrier()
    if dist.world > 1:
        import torch.distributed as tdist

        tdist.destroy_process_group()
    return result


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(PretrainConfig, argv, prog="korbert pretrain"))


if __name__ == "__main__":  # torchrun -m korbert.pretrain ...
    from korbert.cli import main as _main

    sys.exit(_main(["pretrain", *(sys.argv[1:] if len(sys.argv) > 1 else [])]))
