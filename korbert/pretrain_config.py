"""The settings of `korbert pretrain` (its command line): what to train, on what, for how long, how.
Read by the loop (korbert/pretrain.py) and by its helpers (run key, schedule, runtime), which sit below it."""

from __future__ import annotations

from dataclasses import dataclass

from corpus_tools import config as C


@dataclass
class PretrainConfig:
    """Pretrain a BERT (MLM + NSP, MLM alone) or an ELECTRA from shards and export it for transformers."""

    shards: str = C.field("runs/shards", "shards folder (the output of `korbert shards`)")
    out: str = C.field("runs/pretrain", "run folder: ckpt.pt, log.jsonl, final/")
    model_size: str = C.field("mini", "size preset (layers/hidden/heads)", choices=["tiny", "mini", "small", "medium", "base", "large"])
    override: list[str] = C.field([], "BertConfig fields to override, as key=value (e.g. num_hidden_layers=6 hidden_dropout_prob=0)")
    init_from: str = C.field(
        "", "continue pretraining this BERT folder (BertForPreTraining, BertForMaskedLM or BertModel weights; heads it lacks "
        "start fresh): its config gives the shape (no --model-size/--override), its tokenizer must be the shards'"
    )
    batch_size: int = C.field(32, "rows per device per micro-batch (global batch = batch_size x grad_accum x GPUs); unused with --tokens-per-batch")
    tokens_per_batch: int = C.field(
        0, "instead of --batch-size: a budget of (padded) tokens per optimizer step over all GPUs and micro-batches; "
        "rows of similar length are taken up to it (0: use --batch-size)",
    )
    pack: bool = C.field(False, "pack several instances into each row of max_seq_len tokens (block-diagonal attention, positions restart per instance)")
    long_shards: str = C.field(
        "", "BERT's second phase: shards of the same tokenizer at a longer --max-seq-len (e.g. `korbert shards --max-seq-len 512`); "
        "the last --long-phase of the budget trains on them, with the same tokens per step, so that the positions fine-tuning "
        "uses (KorQuAD: 384) are trained",
    )
    long_phase: float = C.field(0.1, "with --long-shards: the share of the budget (steps, tokens or minutes) trained on them, at its end")
    long_other_inputs: bool = C.field(False, "accept --long-shards built from other input files than --shards (refused by default)")
    long_schedule: str = C.field(
        "own", "with --long-shards: own: the short phase decays to 0 at the switch and the long phase has its own warmup "
        "(--long-warmup) and decay to 0 from --long-lr (NVIDIA's BERT phase 2); shared: one warmup and decay over the whole "
        "budget, the long phase at its tail (the default before issue 58: its new positions stay barely trained)", choices=["own", "shared"],
    )
    long_warmup: float = C.field(0.1, "with --long-schedule own: the share of the long phase spent warming up to --long-lr")
    long_lr: float = C.field(0.0, "with --long-schedule own: the long phase's peak learning rate (0: --lr; the presets re-warm to half their --lr)")
    long_init: str = C.field(
        "copy", "with --long-shards: copy: at the switch positions past the short shards' length become copies of the trained "
        "ones, tiled (Longformer), once; keep: they start the long phase as initialized (an --init-from model that trained them "
        "needs keep)", choices=["copy", "keep"],
    )
    long_nsp: bool = C.field(
        True, "with --long-shards and --objective mlm+nsp: the long phase trains NSP too; --no-long-nsp: MLM alone there, its "
        "NSP labels ignored (no NSP gradient; AdamW's momentum and weight decay still move the pooler and NSP head)",
    )
    fork_from: str = C.field(
        "", "start from the switch.pt a run with --long-shards wrote at its switch (or its out folder), when this run differs from it "
        "only in settings the long phase alone reads (--long-shards, --long-init, --long-warmup, --long-lr, --long-nsp): the short phase is not "
        "trained again; its log lines are copied, and the run key is checked",
    )
    objective: str = C.field(
        "mlm+nsp", "mlm+nsp: BERT's two losses; mlm: masked LM only (RoBERTa, Cramming), the pooler and NSP head are "
        "exported untrained (shards made with --no-nsp need it, or electra); electra: replaced-token detection (ELECTRA): a small "
        "generator fills the masked positions by sampling, the model (the discriminator) tells every replaced token from the "
        "original ones; final/ is an ElectraForPreTraining, final/generator/ the ElectraForMaskedLM", choices=["mlm+nsp", "mlm", "electra"],
    )
    generator_size: float = C.field(0.25, "--objective electra: the generator's hidden size, heads and FFN as a share of the model's (ELECTRA: 1/4 to 1/3)")
    disc_weight: float = C.field(50.0, "--objective electra: the weight of the discriminator's loss against the generator's MLM loss (ELECTRA: 50)")
    mask_prob: float = C.field(0.0, "dynamic shards: predict this share of the tokens instead of the shards' mask_prob (0: the shards')")
    grad_accum: int = C.field(1, "micro-batches per optimizer step")
    lr: float = C.field(5e-4, "peak learning rate (AdamW, betas 0.9/0.98, eps 1e-6)")
    schedule: str = C.field("linear", "decay after warmup", choices=["linear", "cosine"])
    warmup: float = C.field(0.06, "warmup: a fraction of the budget (< 1) or a number of steps (>= 1)")
    weight_decay: float = C.field(0.01, "AdamW weight decay (not on biases and LayerNorm weights)")
    clip_grad: float = C.field(1.0, "clip the global gradient norm to this (0: off)")
    max_steps: int = C.field(1000, "stop after this many optimizer steps (0: no step budget)")
    max_tokens: int = C.field(0, "stop after this many (non-padding) training tokens (0: none)")
    max_minutes: float = C.field(0.0, "stop after this many minutes of training (0: none; the schedule follows the budget)")
    eval_every: int = C.field(200, "held-out MLM loss/accuracy and NSP accuracy every N steps (0: only at the end)")
    eval_instances: int = C.field(2000, "held-out instances per evaluation: a seeded sample of the shards' valid split (and of --long-shards')")
    log_every: int = C.field(20, "one log line every N steps")
    save_every: int = C.field(500, "checkpoint every N steps (rounded to a multiple of --log-every)")
    seed: int = C.field(0, "seed for initialization, data order, masking and dropout")
    device: str = C.field("auto", "auto (cuda if available), cpu or cuda", choices=["auto", "cpu", "cuda"])
    precision: str = C.field(
        "auto", "bf16: matmuls in bfloat16 under autocast (weights, optimizer and losses stay fp32); auto: bf16 on CUDA "
        "and on CPUs with bf16 instructions (AVX512-BF16, AMX), fp32 "
        "elsewhere, where bf16 is emulated and slower; bf16-stream: bf16 with the residual stream (LayerNorm outputs) in bf16 too, "
        "as Megatron-style bf16 training keeps it", choices=["auto", "bf16", "bf16-stream", "fp32"],
    )
    attention: str = C.field(
        "sdpa", "how each token attends to its own instance only: sdpa (scaled_dot_product_attention with a dense mask; "
        "on CUDA, cuDNN's fused kernel; the only one with attention dropout), varlen (FlashAttention over the instances' "
        "lengths, CUDA + bf16, torch >= 2.10), flex (FlexAttention with a block mask); docs/pretraining.md has what each costs",
        choices=["sdpa", "varlen", "flex"],
    )
    compile: bool = C.field(False, "torch.compile the model; batch shapes are rounded to a few buckets so it compiles a handful of graphs")
    fixed_shapes: str = C.field(
        "auto", "on: every micro-batch has one shape (packed rows of max_seq_len, the predicted-token and [CLS] lists padded "
        "to counts from the batch plan), so --compile makes one graph (fullgraph, static shapes) and CUDA graphs become "
        "possible (--compile-mode reduce-overhead); needs --pack; auto: on with --compile --pack",
        choices=["auto", "on", "off"],
    )
    compile_mode: str = C.field("default", "torch.compile mode; reduce-overhead: CUDA graphs (needs fixed shapes)", choices=["default", "reduce-overhead", "max-autotune"])
    profile: int = C.field(
        0, "profile the 5 steps after this step (after compile: e.g. 30) with torch.profiler: out/profile.json (device time by "
        "kind of kernel: matmul, attention, fused, optimizer; the top kernels; the device's busy share) and out/profile.txt (0: off)",
    )
    num_workers: int = C.field(-1, "DataLoader worker processes per process (-1: on GPUs the CPU cores / processes on this machine, minus 1; on a CPU 1)")
    resume: bool = C.field(True, "continue from out/ckpt.pt when it holds this same run")
    force: bool = C.field(False, "discard what `out` holds and start over")
    license: str = C.field("", "the license written into final/README.md, the model card (an SPDX id such as apache-2.0; empty: none stated)")
    replace: bool = C.field(False, "when `out` holds a run with other settings, start over instead of refusing (same settings: resumed)")
