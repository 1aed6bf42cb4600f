"""Pretraining: MLM + NSP (or MLM alone, or ELECTRA: korbert/electra.py) on the shards, one loop for 1 CPU, 1 GPU
or N GPUs (torchrun), resumable.

    korbert pretrain --shards runs/shards --out runs/pretrain --model-size mini --max-steps 2000
    torchrun --nproc_per_node 8 -m korbert.pretrain --shards ... --model-size base --tokens-per-batch 131072 --pack --compile

The out folder holds (written atomically):
    ckpt.pt        model, optimizer, step, tokens seen, seconds, each rank's RNG states: rerunning
                   the same command (`--resume`, the default) continues exactly where it stopped;
                   the data position is the steps taken in each phase
    switch.pt      with --long-shards: the checkpoint at the switch to the long phase, kept: --fork-from
                   starts another long phase there (korbert/fork.py)
    log.jsonl      one line per --log-every steps (loss, lr, tokens/s, MFU on GPU, data_wait: the share of
                   the interval spent waiting for the loader) + held-out evals
    config.json    the resolved run config
    final/         config.json + model.safetensors + tokenizer files + manifest.json: a folder
                   plain transformers loads (BertForPreTraining, AutoModelForMaskedLM, fill-mask; ELECTRA:
                   ElectraForPreTraining, its generator in final/generator/)

The shape of `Trainer`: setup (__init__: shards, model, optimizer, data, resume) -> `train()`, a
loop of `step()` (one optimizer step) and `interval()` (log, held-out eval, checkpoint) -> `export()`.
Its helpers live beside it: korbert/pretrain_config.py (the settings), korbert/phases.py (the shards
it reads: the phases, BERT's long second phase, its copied positions), korbert/schedule.py (lr, the
long phase's own schedule, when it runs), korbert/runtime.py (precision, peak FLOP/s, DDP and compile,
OOM message), korbert/checkpoint.py (run key, resume checks, RNG states, log trim, final/ export),
korbert/pretrain_model.py (the model and optimizer), korbert/heldout.py (held-out eval).

Every global batch (see korbert/data.py) is one optimizer step; the losses are normalized by the
global number of predicted tokens / pairs, so 1 process with batch 2b and 2 processes with batch b
make the same update. The step does not wait on the GPU: shapes and counts come from the CPU-side
collate, the normalizers stay on the device, and ranks agree on one clock (rank 0's training time,
carried by the step's all-reduce and read one step later: `AgreedClock`), so progress, learning
rate and the stop are the same everywhere. With several ranks a step waits only for the previous
step's all-reduce, which has arrived unless the host runs more than a step ahead of the GPU. Only
log steps read values back from the device.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import dataclasses
import time
from pathlib import Path

from corpus_tools import config as C
from corpus_tools.artifacts import atomic_write_bytes, atomic_write_json, machine, read_manifest
from corpus_tools.text import InputError
from korbert.checkpoint import (
    SWITCH, export, init_source, load_checkpoint, model_config, rng_state, run_budget, run_key, set_rng_state, truncate_log,
)
from korbert.distributed import AgreedClock, Dist, default_workers
from korbert.fork import fork_state, short_key, switch_file
from korbert.heldout import MODEL_INPUTS, evaluate
from korbert.runtime import PROFILE_STEPS, compiled_graphs, oom_guard, peak_flops, resolve_precision, start_profile, write_profile
from korbert.phases import Phase, build_phases, corpus_record, long_phase_record, long_shards_manifest, open_readers, tile_positions
from korbert.plain import tokenizer_kind
from korbert.pretrain_model import UNTRAINED_WITHOUT_NSP, build_model
from korbert.pretrain_config import PretrainConfig
from korbert.schedule import long_phase_due, lr_for, progress as budget_progress



# ---------------------------------------------------------------------------------------------
# the stage
# ---------------------------------------------------------------------------------------------


class Trainer:
    """One pretraining run: setup here, then `train()` (`step()` + `interval()`), then `export()`."""

    def __init__(self, cfg: PretrainConfig):
        import torch

        from corpus_tools.shard_format import tokenizer_dir
        from korbert.model import count_parameters
        from korbert import foreign

        if cfg.max_steps <= 0 and cfg.max_tokens <= 0 and cfg.max_minutes <= 0:
            raise InputError("no budget: set --max-steps, --max-tokens or --max-minutes")
        if cfg.profile < 0:
            raise InputError(f"--profile {cfg.profile}: a step number (>= 1; 0: off)")
        if cfg.batch_size < 1 or cfg.grad_accum < 1 or cfg.tokens_per_batch < 0:
            raise InputError("--batch-size and --grad-accum must be >= 1, --tokens-per-batch >= 0")
        self.cfg = cfg
        self.dist = dist = Dist(cfg.device)
        self.dev = dev = dist.device
        self.cuda = dev.type == "cuda"
        self.out = out = Path(cfg.out)
        self.final, self.ckpt_path, self.log_path, self.switch_path = out / "final", out / "ckpt.pt", out / "log.jsonl", out / SWITCH
        self.done_before: dict | None = None  # the final/ manifest when this run is already finished

        # -- the shards and their tokenizer
        try:
            sm = read_manifest(cfg.shards, "shards")
        except (FileNotFoundError, ValueError) as e:
            raise InputError(f"--shards {cfg.shards}: {e}") from None
        self.shards_manifest = sm
        self.tok_dir = tokenizer_dir(Path(cfg.shards))
        self.tok = tok = foreign.load(self.tok_dir, f"--shards {cfg.shards}")  # KorBertTokenizer, or a continued model's own
        self.id_map = foreign.id_map(tok)  # the tokenizer's own ids -> the shards' (None: the same)
        fingerprint = foreign.fingerprint(tok, self.tok_dir)
        if fingerprint != sm["tokenizer_hash"]:
            raise InputError(f"--shards {cfg.shards}: its tokenizer copy has hash {fingerprint[:12]}, the manifest says {sm['tokenizer_hash'][:12]}")
        if cfg.objective == "mlm+nsp" and not sm["config"].get("nsp", True):
            raise InputError(f"--shards {cfg.shards} were made without NSP labels (--no-nsp): pretrain them with --objective mlm or electra")
        if cfg.objective == "electra":
            from korbert.electra import check_settings

            check_settings(cfg, self.id_map is not None)
        if cfg.mask_prob and (not 0 < cfg.mask_prob < 1 or sm["config"]["masking"] != "dynamic"):
            raise InputError("--mask-prob must be in (0, 1) and needs dynamic shards (static shards hold their masks)")
        self.init = init_source(cfg, tok, sm["tokenizer_hash"]) if cfg.init_from else None
        self.long_manifest = long_shards_manifest(cfg, sm) if cfg.long_shards else None
        if cfg.long_shards and cfg.long_init == "copy" and self.init and (self.init["trained_seq_len"] or 0) > sm["config"]["max_seq_len"]:
            raise InputError(f"--long-init copy: --init-from {cfg.init_from} already trained positions up to "
                             f"{self.init['trained_seq_len']}; copying rows over them (--long-init copy, the default) would discard them: pass --long-init keep")
        self.second = {"mlm+nsp": "nsp", "electra": "disc"}.get(cfg.objective)  # the second loss: NSP, ELECTRA's discriminator, none
        self.nsp = self.second == "nsp"  # (the batches carry NSP labels)
        self.long_nsp = self.nsp and cfg.long_nsp  # (the long phase's do: --no-long-nsp)
        self.fixed = cfg.fixed_shapes == "on" or (cfg.fixed_shapes == "auto" and cfg.compile and cfg.pack)
        if self.fixed and not cfg.pack:
            raise InputError("--fixed-shapes on needs --pack (every row is max_seq_len tokens)")
        if cfg.compile_mode == "reduce-overhead" and not (cfg.compile and self.fixed):
            raise InputError("--compile-mode reduce-overhead (CUDA graphs) needs --compile and fixed shapes (--pack)")
        self.precision = resolve_precision(cfg.precision, self.cuda)
        self.key = key = self._key_with()
        if self.final.exists() and not cfg.force:
            try:
                fm = read_manifest(self.final, "model")
                if fm.get("run_key") == key and fm.get("budget") == run_budget(cfg):
                    self.done_before = fm
                    return
            except (FileNotFoundError, ValueError):
                pass
        train, valid, long_train, long_valid = open_readers(cfg, sm, self.long_manifest, dist)

        # -- resume or start
        state = load_checkpoint(cfg, out, key, lambda: self._key_with(compile=not cfg.compile), dist,
                                lambda: self._key_with(long_schedule="shared", long_init="keep"))
        self.forked = state is None and bool(cfg.fork_from)  # --fork-from: another run's state before its long phase
        if self.forked:
            state = fork_state(cfg, self._key_of, self.precision, dist.world, self.long_manifest["config"]["max_seq_len"] if self.long_manifest else 0)
        self.max_len = sm["config"]["max_seq_len"]
        self.long_len = self.long_manifest["config"]["max_seq_len"] if self.long_manifest else 0
        self.mcfg = mcfg = model_config(cfg, state, self.init, self.id_map is not None, len(tok), max(self.max_len, self.long_len))
        self.model, self.wrapped, self.opt = build_model(
            cfg, self.mcfg, state, self.init, self.tok, self.id_map, self.precision, self.fixed, dist, dev)
        from korbert.model import attention_path

        # checked now (a path this machine cannot run, or attention dropout without sdpa: one line, before training)
        self.attention = attention_path(
            cfg.attention, dev, torch.bfloat16 if self.precision.startswith("bf16") else torch.float32, mcfg.attention_probs_dropout_prob, training=True,
        )

        # -- data
        where = state["state"] if state else {"step": 0, "tokens": 0, "seconds": 0.0}
        # seconds: the agreed training time (rank 0's), which --max-minutes counts
        self.step_no, self.tokens, self.seconds = where["step"], where["tokens"], where["seconds"]
        self.warm_end = where.get("warm_end")  # the share of the budget where a step-counted warmup ended
        # steps taken from each phase's plan (short, long): a longer budget after a finished run goes back
        # to the short phase where its plan stopped, and the long phase's plan continues where it stopped
        long_from = where.get("long_from")
        self.pos = list(where.get("phase_pos") or ([self.step_no, 0] if long_from is None else [long_from, self.step_no - long_from]))
        self._build_data(train, valid, long_train, long_valid)
        self.in_long = self._long_phase_due()
        self.long_from = (self.step_no if long_from is None else long_from) if self.in_long else None  # where this stretch of it began
        self.long_start = where.get("long_start") if self.in_long and long_from is not None else None  # its share of the budget
        self.positions_copied = where.get("positions_copied", False)  # --long-init copy: done once per run
        # the budgets this run trained under, in order (a checkpoint from before they were recorded: an unknown first)
        self.budgets = list(where.get("budgets", [None] if state else []))
        self.budgets += [run_budget(cfg)] * (not self.budgets or self.budgets[-1] != run_budget(cfg))
        self.short_key = short_key(cfg, self._key_of, self.long_len) if self.long_manifest else None  # (korbert/fork.py)
        if self.in_long and self.long_start is None:  # resumed at the switch: the long phase begins here
            if dist.main and not self.forked and self.pos[1] == 0:  # (killed between that checkpoint and the switch's copy)
                atomic_write_bytes(self.switch_path, self.ckpt_path.read_bytes())
            self._enter_long()
        if state is not None:
            if self.init is not None:
                self.init["fresh"] = state["state"].get("init_fresh", [])
            set_rng_state(state["rng"][dist.rank], dev)
            if dist.main:  # a fork's log: the source's lines up to the switch (its steps are this run's)
                source = switch_file(cfg.fork_from).parent / "log.jsonl" if self.forked else None
                truncate_log(self.log_path, self.step_no, source)
                if source and not source.exists():
                    print(f"--fork-from: no {source}: this run's log starts after step {self.step_no}")
                print(f"{f'forking {cfg.fork_from}' if self.forked else f'resuming {self.ckpt_path}'} at step {self.step_no} ({self.tokens} tokens)")
        else:
            if dist.main:  # a fresh start: lines a killed run wrote before its first checkpoint are not ours
                self.log_path.unlink(missing_ok=True)
            torch.manual_seed(cfg.seed + 1 + dist.rank)  # dropout stream (per rank)
        self.steps_hint = cfg.max_steps if cfg.max_steps > 0 else (
            max(1, cfg.max_tokens // max(1, self.phases[0].plan.token_stats(0)[0])) if cfg.max_tokens > 0 else None
        )
        self.save_every = max(cfg.log_every, cfg.save_every // cfg.log_every * cfg.log_every)
        self.run_cfg = {**C.to_dict(cfg), "world_size": dist.world, "global_batch": self.global_batch, "device": str(dev), "precision_used": self.precision,
                        "attention_used": self.attention}
        self.n_params = count = count_parameters(self.model)
        self.peak = peak_flops(torch.cuda.get_device_name(dev)) if self.cuda else None
        self.hardware = f"{dist.world} x {torch.cuda.get_device_name(dev)}" if self.cuda else f"{machine()['cpu']} ({torch.get_num_threads()} threads)"
        arch = "ELECTRA" if self.second == "disc" else "BERT"
        if dist.main:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(out / "config.json", {"run": self.run_cfg, "model": mcfg.to_dict()})
            print(
                f"pretrain: {f'{cfg.init_from} (continued)' if self.init else f'{arch}-{cfg.model_size}'} ({count / 1e6:.1f}M parameters, L{mcfg.num_hidden_layers}/H{mcfg.hidden_size}/"
                f"A{mcfg.num_attention_heads}, vocab {mcfg.vocab_size}) on {dev}{f' x {dist.world}' if dist.world > 1 else ''}; "
                f"{len(train)} training instances, global batch {self.global_batch}{' (packed rows)' if cfg.pack else ''}"
                f"{', compiled' if cfg.compile else ''}{f', fixed shapes {self.phases[0].fixed}' if self.fixed else ''}, "
                f"{self.workers} loader worker(s), {self.precision}, {self.attention} attention"
            )
        self.tb = None
        if dist.main:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(out / "tb"))
            except Exception:  # tensorboard not installed: log.jsonl and stdout only
                self.tb = None

    # -- setup pieces
    def _key_with(self, **changes) -> str:
        """This run's key (korbert.checkpoint.run_key), or the key it would have with `changes` to its config."""
        return self._key_of(dataclasses.replace(self.cfg, **changes))

    def _key_of(self, cfg: PretrainConfig, long_key: str | None = None) -> str:
        """The key of `cfg` run on this run's shards, starting weights and machine (`long_key`: its long shards' key; None: this run's)."""
        sm = self.shards_manifest
        return run_key(
            cfg, sm["key"], sm["tokenizer_hash"], self.dist.world, self.precision, self.cuda,
            (self.long_manifest["key"] if self.long_manifest else "") if long_key is None else long_key, sm["config"]["masking"] == "dynamic",
            self.init["weights_sha256"] if self.init else "",
        )

    def _build_data(self, train, valid, long_train, long_valid) -> None:
        """The phases (korbert.phases), the loader workers and the held-out sets."""
        from korbert.data import eval_batches

        cfg, dist = self.cfg, self.dist
        parts = dist.world * cfg.grad_accum
        readers = [(train, self.max_len, cfg.shards)] + ([(long_train, self.long_len, cfg.long_shards)] if long_train is not None else [])
        self.phases = build_phases(cfg, readers, parts, self.fixed)
        self.global_batch = f"{cfg.tokens_per_batch} tokens" if cfg.tokens_per_batch else f"{cfg.batch_size * parts} rows"
        if len(self.phases) > 1 and not cfg.tokens_per_batch:  # as many real tokens; their padded batches can be larger
            largest = [p.plan.largest_padded() for p in self.phases]
            self.global_batch += f" ({self.phases[1].plan.rows_fixed} in the long phase; largest batches {largest[0]:,} and {largest[1]:,} tokens padded)"
        self.workers = cfg.num_workers if cfg.num_workers >= 0 else default_workers(self.cuda)
        self.held_out = eval_batches(valid, cfg.eval_instances, max(cfg.batch_size, 64), cfg.seed, nsp=self.nsp) if dist.main else []
        self.held_out_long = (  # the long phase's own held-out figure, on its shards' valid split
            eval_batches(long_valid, cfg.eval_instances, max(cfg.batch_size, 64) * self.max_len // self.long_len, cfg.seed, nsp=self.long_nsp)
            if dist.main and long_valid is not None else []
        )

    @property
    def phase(self) -> Phase:
        return self.phases[1] if self.in_long else self.phases[0]

    @property
    def phase_step(self) -> int:
        """This step's global batch within its phase's plan (each phase's plan starts at 0)."""
        return self.pos[1 if self.in_long else 0]

    def _loader(self):
        """The DataLoader of the current phase, from the current step."""
        import torch

        from korbert.data import PretrainingDataset, StepSampler

        cfg, dist, ph = self.cfg, self.dist, self.phase
        return torch.utils.data.DataLoader(
            PretrainingDataset(ph.reader, cfg.seed, cfg.pack, nsp=self.long_nsp if self.in_long else self.nsp, fixed=ph.fixed),
            sampler=StepSampler(ph.plan, self.phase_step, 10**12, dist.world, dist.rank, cfg.grad_accum), batch_size=None,
            num_workers=self.workers, pin_memory=self.cuda, persistent_workers=False, prefetch_factor=4 if self.workers else None,
            generator=torch.Generator(),  # keeps the loader from drawing on the global RNG (exact resume)
        )

    def _enter_long(self) -> None:
        """The long phase begins (or a resume lands on its first step): an own schedule counts from this share
        of the budget; --long-init copy tiles the trained positions into the new ones, once per run."""
        self.long_start = self.progress()
        if self.cfg.long_init == "copy" and not self.positions_copied:
            tile_positions(self.model, self.max_len, self.long_len)
            self.positions_copied = True

    def _long_phase_due(self) -> bool:
        """Whether this step is in the long phase (korbert.schedule.long_phase_due; the same on every
        rank: steps, tokens and the agreed clock)."""
        return len(self.phases) > 1 and long_phase_due(self.step_no, self.tokens, self.seconds, self.cfg)

    # -- the loop
    def progress(self) -> float:
        return budget_progress(self.cfg, self.step_no, self.tokens, self.seconds)

    def autocast(self):
        import torch

        return torch.autocast(self.dev.type, dtype=torch.bfloat16) if self.precision.startswith("bf16") else contextlib.nullcontext()

    def step(self, micro: list[dict]) -> None:
        """One optimizer step over this rank's micro-batches, without waiting on the device."""
        import torch

        dist, dev = self.dist, self.dev
        predicted, pairs = (sum(mb["counts"][j] for mb in micro) for j in (0, 1))  # Python ints from make_batch
        if self.second == "disc":  # ELECTRA's second normalizer: the tokens its discriminator scores
            pairs = sum(mb["counts"][3] for mb in micro)
        # one all-reduce carries the global counts (the loss normalizers) and rank 0's clock
        mine = torch.tensor([predicted, pairs, self.clock if dist.main else 0.0], dtype=torch.float64)
        glob = dist.all_sum(mine.to(dev, non_blocking=True))
        agreed = event = None
        if dist.world > 1:  # rank 0's clock, copied back without waiting; read at the next step
            agreed = glob[2].to("cpu", non_blocking=True)
            if self.cuda:
                event = torch.cuda.Event()
                event.record()
        mlm_norm = (glob[0] / dist.world).clamp(min=1e-9).float()
        nsp_norm = (glob[1] / dist.world).clamp(min=1e-9).float()
        for i, mb in enumerate(micro):
            inputs = {**{k: mb[k].to(dev, non_blocking=True) for k in MODEL_INPUTS}, "packed": mb["packed"]}
            if self.cfg.compile and not self.fixed:  # the number of predicted tokens and of pairs varies: one graph for all
                for k in ("mlm_positions", "mlm_labels", "nsp_positions", "nsp_labels", "cu_seqlens"):
                    torch._dynamo.maybe_mark_dynamic(inputs[k], 0)  # (a size of 0 or 1 may specialize: no error)
            self.shapes.add(tuple(inputs["input_ids"].shape))
            if self.cfg.compile_mode in ("reduce-overhead", "max-autotune"):  # both modes replay CUDA graphs
                torch.compiler.cudagraph_mark_step_begin()  # a new replay: the last one's outputs were read (stats) already
            sync = contextlib.nullcontext() if dist.world == 1 or i == len(micro) - 1 else self.wrapped.no_sync()
            with sync:
                with self.autocast():
                    o = self.wrapped(**inputs, sparse=True, mlm_norm=mlm_norm, nsp_norm=nsp_norm)
                o.loss.backward()
            self.stats += o.totals()
            self.padded += inputs["input_ids"].numel()
        graphs = compiled_graphs()
        if self.step_no == self.first_step or graphs != self.graphs_seen:
            # start-up (DataLoader workers, first CUDA calls) and torch.compile are not training time: a
            # --max-minutes budget counted them, and a minute of compiling could end a fractional warmup
            # before the first optimizer step (BERT-small on an H100 then stuck at the unigram loss)
            self.excluded += time.time() - self.t_step
            self.graphs_seen = graphs
        self.seconds = self.clock if dist.world == 1 else self.agreed.push(agreed, event)
        progress = self.progress()
        if self.cfg.warmup >= 1 and not self.steps_hint and self.warm_end is None and self.step_no >= self.cfg.warmup:
            self.warm_end = progress  # warmup ends here: the decay runs from this share of the budget
        self.lr = lr_for(self.step_no, progress, self.cfg, self.steps_hint, self.warm_end, self.long_start if self.in_long else None)
        for g in self.opt.param_groups:
            g["lr"] = self.lr
        self.gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_grad) if self.cfg.clip_grad > 0 else None
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        tokens, attended = self.phase.plan.token_stats(self.phase_step)
        self.pos[1 if self.in_long else 0] += 1
        self.tokens += tokens
        self.interval_tokens += tokens
        self.interval_attended += attended
        self.step_no += 1

    def interval(self, done: bool) -> None:
        """At a log step: one log line, the held-out eval when due, the checkpoint when due."""
        cfg, dist, step = self.cfg, self.dist, self.step_no
        tot = dist.all_sum(self.stats.clone()).tolist()
        dt = max(time.time() - self.t_interval, 1e-9)
        tps = self.interval_tokens / dt
        mlm, nsp = tot[0] / max(tot[2], 1), tot[3] / max(tot[5], 1)
        loss, sec = mlm + (cfg.disc_weight if self.second == "disc" else 1) * nsp, self.second
        shown = sec if tot[5] or sec != "nsp" else None  # (an interval of --no-long-nsp steps alone counted no NSP label)
        if not math.isfinite(loss):
            raise InputError(
                f"non-finite loss ({loss}) at step {step}, lr {self.lr:.2e}; the last good checkpoint is kept at "
                f"{self.ckpt_path if self.ckpt_path.exists() else '(none yet)'}. Lower --lr, raise --warmup or --clip-grad, or check the shards"
            )
        rec = {
            "step": step, "tokens": self.tokens, "loss": round(loss, 5), "mlm_loss": round(mlm, 5),
            **({f"{shown}_loss": round(nsp, 5)} if shown else {}),
            "mlm_acc": round(tot[1] / max(tot[2], 1), 5), **({f"{shown}_acc": round(tot[4] / max(tot[5], 1), 5)} if shown else {}),
            "lr": self.lr, "tokens_per_s": round(tps, 1), "seconds": round(self.seconds, 2),
            "padding": round(1 - self.interval_tokens / max(1, self.padded * dist.world), 4), "seq_len": self.phase.max_len,
            # the share of the interval spent waiting for the next batch, the largest over the ranks (a slow loader
            # on one rank shows on the others as time in the all-reduce): near 0 while the loaders keep up
            "data_wait": round(min(max(dist.gather(self.interval_wait)) / dt, 1.0), 4),
        }
        if self.gnorm is not None:
            rec["grad_norm"] = round(float(self.gnorm), 4)
        flops = self.model.step_flops(self.mcfg, self.interval_tokens, self.interval_attended, tot[2], tot[5])
        rec["tflops"] = round(flops / dt / 1e12, 4)
        if self.peak:
            rec["mfu"] = round(flops / dt / (self.peak * dist.world), 4)
        if cfg.compile:
            rec["compiled_graphs"], rec["batch_shapes"] = compiled_graphs() - self.graphs_before, len(self.shapes)
        if dist.main and (step % (cfg.log_every * 5) == 0 or done or step == cfg.log_every):
            mfu = f", mfu {rec['mfu'] * 100:.1f}%" if "mfu" in rec else ""
            if rec["data_wait"] >= 0.05:
                mfu += f", waiting for data {rec['data_wait']:.0%}"
            self.bar.write(
                f"step {step}: loss {loss:.4f}{f' (mlm {mlm:.4f}, {shown} {nsp:.4f})' if shown else ''}, mlm acc {rec['mlm_acc']:.3f}, "
                f"lr {self.lr:.2e}, {tps:,.0f} tok/s{mfu}"
            )
        if (cfg.eval_every > 0 and step % cfg.eval_every == 0) or done:
            self.last_eval = self._evaluate(self.held_out) if dist.main else {}
            if self.held_out_long and (self.in_long or done):  # the long phase's shards, from its start on
                self.last_eval.update({f"long_{k}": v for k, v in self._evaluate(self.held_out_long).items()})
            if self.last_eval:
                e = self.last_eval
                rec.update({f"eval_{k}": round(v, 5) if isinstance(v, float) else v for k, v in e.items()})
                said = [f"mlm loss {e['mlm_loss']:.4f}, mlm acc {e['mlm_acc']:.4f}" + (f", {sec} acc {e[f'{sec}_acc']:.4f}" if sec else "")
                        + (f", disc auc {e['disc_auc']:.4f}" if e.get("disc_auc") is not None else "")] if "mlm_loss" in e else []
                if "long_mlm_loss" in e:
                    said.append(f"at {self.long_len}: mlm loss {e['long_mlm_loss']:.4f}, mlm acc {e['long_mlm_acc']:.4f}")
                self.bar.write(f"step {step}: held-out {'; '.join(said)}")
        self._log(rec)
        if step % self.save_every == 0 or done:
            self._save_checkpoint()
        dist.barrier()
        self._reset_interval()

    def _evaluate(self, batches: list) -> dict:
        """korbert.heldout.evaluate on fixed batches, with the random streams set aside: ELECTRA's generator samples
        in it, and an evaluation must neither draw on the training's streams nor differ from one call to the next."""
        import torch

        with torch.random.fork_rng(devices=[self.dev] if self.cuda else []):
            torch.manual_seed(self.cfg.seed)
            return evaluate(self.model, batches, self.dev, self.autocast, self.second)

    def _log(self, rec: dict) -> None:
        if not self.dist.main:
            return
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        if self.tb is not None:
            for k, v in rec.items():
                if isinstance(v, (int, float)) and k != "step":
                    self.tb.add_scalar(k, v, rec["step"])

    def _save_checkpoint(self, path: Path | None = None) -> None:
        import torch

        rng = self.dist.gather(rng_state(self.dev))  # every rank's own states, in rank order
        if not self.dist.main:
            return
        state = {
            "step": self.step_no, "tokens": self.tokens, "seconds": self.seconds, "run_key": self.key, "warm_end": self.warm_end,
            "long_from": self.long_from, "phase_pos": self.pos, "bucketed": self.phases[0].plan.buckets,
            "long_start": self.long_start, "positions_copied": self.positions_copied, "budgets": self.budgets, "short_key": self.short_key,
            "model_config": self.mcfg.to_dict(), "world": self.dist.world,
            **({"init_fresh": self.init["fresh"]} if self.init else {}),
        }
        buf = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "state": state, "rng": rng}, buf)
        atomic_write_bytes(path or self.ckpt_path, buf.getvalue())

    def _reset_interval(self) -> None:
        self.stats.zero_()
        self.interval_tokens = self.interval_attended = self.padded = 0
        self.interval_wait = 0.0  # seconds the loop waited for the loader's next batch
        self.t_interval = time.time()

    @property
    def clock(self) -> float:
        """This process's training time: the checkpointed seconds + time spent in steps since."""
        return self.seconds_at_start + (time.time() - self.t_start) - self.excluded

    def train(self) -> None:
        import torch
        from tqdm import tqdm

        cfg, dist = self.cfg, self.dist
        self.stats = torch.zeros(6, dtype=torch.float64, device=self.dev)  # mlm sum/correct/count, nsp sum/correct/count
        self.shapes: set = set()  # (rows, length) of the micro-batches seen
        self.graphs_before = compiled_graphs()
        self.last_eval, self.gnorm, self.lr = {}, None, 0.0
        self._reset_interval()
        self.bar = tqdm(total=cfg.max_steps or None, initial=self.step_no, desc="pretrain", unit="step", disable=None if dist.main else True, file=sys.stderr)
        it = iter(self._loader())
        prof = None  # --profile: the running profiler
        if cfg.profile and self.step_no > cfg.profile and dist.main:
            self.bar.write(f"--profile {cfg.profile}: this run resumes at step {self.step_no}, past it: nothing is profiled")
        self.model.train()
        self.seconds_at_start, self.t_start, self.excluded = self.seconds, time.time(), 0.0
        self.agreed = AgreedClock(self.seconds)
        self.first_step, self.graphs_seen = self.step_no, self.graphs_before
        try:
            with oom_guard(cfg):
                done = self.progress() >= 1
                while not done:
                    self.t_step = time.time()
                    if cfg.profile and self.step_no == cfg.profile and dist.main:
                        prof, t_prof = start_profile(self.cuda), time.time()
                    if not self.in_long and self._long_phase_due():
                        if self.pos[1] == 0:  # the first switch: the state --fork-from starts other long phases from
                            t0 = time.time()
                            self._save_checkpoint(self.switch_path)
                            saved = time.time() - t0  # not training time, as the interval's checkpoints
                            self.excluded, self.t_step, self.t_interval = self.excluded + saved, self.t_step + saved, self.t_interval + saved
                        self.in_long, self.long_from = True, self.step_no
                        self._enter_long()
                        del it  # the short phase's workers stop
                        it = iter(self._loader())
                        if dist.main:
                            self.bar.write(f"step {self.step_no}: long phase, rows of {self.long_len} tokens from {cfg.long_shards}")
                    t_wait = time.perf_counter()
                    batches = [next(it) for _ in range(cfg.grad_accum)]
                    self.interval_wait += time.perf_counter() - t_wait
                    self.step(batches)
                    self.bar.update(1)
                    if prof is not None and self.step_no == cfg.profile + PROFILE_STEPS:
                        t0 = time.time()
                        p = write_profile(prof, self.out, cfg.profile + 1, self.step_no, t_prof, self.cuda)
                        prof = None
                        self.excluded += time.time() - t0  # reading the profile is not training time
                        kinds = ", ".join(f"{k} {v['share']:.0%}" for k, v in p["by_kind"].items())
                        self.bar.write(f"profile: busy {p['busy_share_of_wall']:.0%} of the wall time; {kinds} -> {self.out / 'profile.json'}")
                    done = self.progress() >= 1  # the same on every rank: steps, tokens and the agreed clock
                    if self.step_no % cfg.log_every == 0 or done:
                        t0 = time.time()
                        self.interval(done)
                        self.excluded += time.time() - t0  # logging, evaluation and checkpoints are not training time
        except BaseException:
            if prof is not None:  # a failed run leaves no profiler running
                prof.stop()
            raise
        if prof is not None:  # the run ended inside the profiled steps: what it profiled
            write_profile(prof, self.out, cfg.profile + 1, self.step_no, t_prof, self.cuda)
        self.bar.close()
        if self.tb is not None:
            self.tb.close()
        if dist.world > 1:
            sys.stderr.write(f"pretrain: rank {dist.rank} stopped at step {self.step_no}\n")  # one write: ranks share the pipe

    def result(self) -> dict:
        cfg, sm = self.cfg, self.shards_manifest
        return {
            "run_key": self.key, "budget": run_budget(cfg),
            "step": self.step_no, "tokens": self.tokens, "seconds": round(self.seconds, 1),
            "parameters": self.model.parameters_of("discriminator") if self.second == "disc" else self.n_params,
            **({"generator_parameters": self.model.parameters_of("generator")} if self.second == "disc" else {}),
            "eval": self.last_eval, "model_size": cfg.model_size, "config": self.run_cfg, "shards_key": sm["key"],
            "shards_path": str(cfg.shards), "objective": cfg.objective,
            "model_config": {**self.mcfg.to_dict(), **({"pad_token_id": self.tok.pad_token_id} if self.id_map is not None else {})},
            # the longest sequence pretraining trained (positions past it are as initialized): fine-tuning checks it
            "trained_seq_len": max(self.long_len if self.pos[1] else self.max_len, self.init["trained_seq_len"] if self.init else 0),
            **({"long_shards_key": self.long_manifest["key"], "long_from_step": self.long_from, "long_steps": self.pos[1],
                "long_phase": long_phase_record(cfg, self.max_len, None if self.long_start is None else lr_for(
                    self.long_from, self.long_start, cfg, self.steps_hint, self.warm_end, None))} if self.long_manifest else {}),
            **({"untrained": [f"{p}*" for p in UNTRAINED_WITHOUT_NSP]} if cfg.objective == "mlm" else {}),
            **({"electra": {"generator_size": cfg.generator_size, "disc_weight": cfg.disc_weight,
                            "generator_config": self.model.generator.config.to_dict()}} if self.second == "disc" else {}),
            **({"init_from": {k: self.init[k] for k in ("folder", "weights_sha256", "fresh")}} if self.init else {}),
            "corpus": corpus_record(sm),  # what the model card says it was trained on
            **({"long_corpus": corpus_record(self.long_manifest), "long_shards_path": str(cfg.long_shards)} if self.long_manifest else {}),
            "hardware": self.hardware, "tokenizer_class": type(self.tok).__name__, "tokenizer_kind": tokenizer_kind(self.tok),
            **({"license": cfg.license} if cfg.license else {}),
        }

    def export(self) -> dict:
        result = self.result()
        if self.dist.main:
            export(self.model, self.tok, self.final, result, self.tok_dir)
            s = max(self.seconds, 1e-9)
            e = self.last_eval
            nsp = {"nsp": f", nsp acc {e.get('nsp_acc', float('nan')):.4f}", None: " (MLM only: pooler and NSP head untrained)",
                   "disc": f" (the generator's), discriminator acc {e.get('disc_acc', float('nan')):.4f}"}[self.second]
            print(
                f"pretrain: {self.step_no} steps, {self.tokens:,} tokens in {s / 60:.1f} min ({self.tokens / s:,.0f} tok/s); "
                f"held-out mlm acc {e.get('mlm_acc', float('nan')):.4f}{nsp} -> {self.final}"
            )
        self.dist.barrier()
        return result


def main(cfg: PretrainConfig) -> dict:
    trainer = Trainer(cfg)
    if trainer.done_before is not None:
        fm = trainer.done_before
        if trainer.dist.main:
            print(f"{trainer.final}: up to date (step {fm['step']}, {fm['tokens']} tokens); --force retrains")
        trainer.dist.close()
        return fm
    trainer.train()
    result = trainer.export()
    trainer.dist.close()
    return result


def cli(argv: list[str] | None = None) -> dict:
    return main(C.parse(PretrainConfig, argv, prog="korbert pretrain"))


if __name__ == "__main__":  # torchrun -m korbert.pretrain ...
    sys.exit(C.run_command("pretrain", cli, sys.argv[1:]))
