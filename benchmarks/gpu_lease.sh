#!/usr/bin/env bash
# One GPU lease in two commands on one warm machine (issue 42: attention without a dense mask, one QKV
# matmul, the lean residual stream), from folders built on a CPU machine (no Kiwi there) by
# benchmarks/gpu_lease_carry.sh. The two calls must follow each other within the machine's 30 s warm time
# (the second reads the shards the first unpacked):
#
#   bash benchmarks/gpu_lease.sh throughput CARRY1 OUT [START_SECONDS KILL_SECONDS]
#     CARRY1: shards.tar.xz (the gpu-small corpus at 128 tokens) and before/ (the commit before: git archive
#     of korbert/ and corpus_tools/). Unpacks the shards to $G/shards (kept for the second command), then
#       0. benchmarks/gpu_ceilings.py: the card's copy bandwidth and bf16 matmul rate, and BERT-base's GELU and
#          add+LayerNorm kernels alone at one step's sizes (what the profile's fused kernels are read against)
#       1. benchmarks/gpu_attention_check.py: each attention path against SDPA in fp32 (eager and compiled)
#          (CHECK=0 skips it)
#       2. benchmarks/gpu_step_ab.py: BERT-base at 65,536 tokens per step, configurations compiled in parallel
#          (PARALLEL, default one per 32 GiB of GPU memory: two on an H100, four on an H200) and timed one at a
#          time (the commit before, this one, each change, transformers); none starts after START_SECONDS
#          (default 110), all are killed at KILL_SECONDS (170, counted from the driver's start: an outer timeout
#          must leave room for steps 0 and 1 too); the configurations in PROFILE (default "before,lean")
#          profiled for 5 steps. With two at a time the default list may not all start in 110 s.
#     On the same warm machine, REUSE=1 keeps the unpacked shards and skips steps 0 and 1 (for a second set of
#     configurations: PARALLEL=1 for those that autotune on the GPU while compiling; NAME names the JSON, default
#     pretrain-gpu-ab). A timeout that ends this script still leaves the JSON (partial) and OUT/NAME-work.tgz.
#   bash benchmarks/gpu_lease.sh loop CARRY1 OUT [MINUTES]   (default 1; after throughput, on the same warm machine)
#     `korbert pretrain` itself: BERT-small with the lean stream and the quality recipe's flags for MINUTES, so that its
#     logged tokens/s and data_wait (the share of each interval spent waiting for the loader) read beside the
#     step-only small-lean of the throughput command.
#   bash benchmarks/gpu_lease.sh quality CARRY2 OUT MINUTES [ATTENTION]   (default sdpa)
#     CARRY2: long.tar.xz (shards at 512 tokens), features.tar.xz, data.tar.xz (benchmarks/gpu_carry.sh's).
#     benchmarks/gpu_recipe.sh with the lean stream: BERT-small for MINUTES of training, bf16-stream,
#     no dropout (STREAM_ONLY=1: dropout 0.1 kept), ATTENTION, the last 10% at 512 tokens (LONG=0: none, and no long.tar.xz needed: the
#     committed run's schedule, so that the stream and dropout are the only changes); then NSMC-R (seeds 42
#     and 43) and KorQuAD in 384- and 128-token windows. No controls (the committed run's stand).
# OUT gets every JSON and log as it goes (the quality run also as OUT/recipe.tgz), so a cut-off keeps what was measured.
set -uo pipefail
MODE=$1; C=$2; O=$3
G=${G:-/tmp/gpu-lease}
DEVICE=${DEVICE:-cuda}  # a smoke test on a CPU: DEVICE=cpu CEIL_ARGS=--small CHECK_ARGS='--size tiny --tokens 2048' AB_ARGS='--size tiny --steps 2 --warmup 1 --batches 2 --tokens-per-batch 2048'
                        # (quality: DEV=cpu EXTRA_PRETRAIN_ARGS=--no-compile FT_ARGS='--max-steps 2 --max-eval-examples 50', gpu_recipe.sh's)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$O" "$G"
t0=$SECONDS
{ nvidia-smi -L; nproc; python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"
  uptime; ps -eo pid,pcpu,etime,args --sort=-pcpu | head -6 | cut -c1-160; } 2>&1 | tee "$O/device-$MODE${NAME:+-$NAME}.txt"  # what else runs (a killed compile's workers?)
unpack() { mkdir -p "$G/$2"; tar xJf "$C/$1.tar.xz" -C "$G/$2" || { echo "cannot unpack $C/$1.tar.xz"; exit 1; }; }

if [ "$MODE" = throughput ]; then
  reused=0
  if [ "${REUSE:-0}" = 1 ] && [ -d "$G/shards" ]; then echo "reusing $G/shards"; reused=1; else
    rm -rf "$G"/*; unpack shards shards; echo "unpacked in $((SECONDS - t0)) s"
    echo "== 0: the card's ceilings and BERT-base's elementwise kernels alone"
    timeout 60 python3 benchmarks/gpu_ceilings.py --device "$DEVICE" ${CEIL_ARGS:-} --out "$O/gpu-ceilings.json" 2>&1 | grep -v Warning | tee "$O/gpu-ceilings.log"
  fi
  [ "${CHECK:-1}" = 0 ] || [ $reused = 1 ] || { echo "== 1: attention paths against SDPA (fp32)"; timeout 90 python3 benchmarks/gpu_attention_check.py --shards "$G/shards" --device "$DEVICE" ${CHECK_ARGS:-} --out "$O/attention-check.json" 2>&1 \
    | grep -v Warning | tee "$O/attention-check.log"; }
  echo "== 2: step throughput ($((SECONDS - t0)) s so far)"
  N=${NAME:-pretrain-gpu-ab}; rm -rf "$G/ab"
  # the per-configuration logs, results and profiles, as one file, also when a timeout cuts this script off
  # (the driver, sent TERM, stops its configurations and writes the JSON of what it measured)
  ab=; teepid=
  trap 'tar czf "$O/$N-work.tgz" -C "$G" ab' EXIT
  cut_off() { [ -n "$ab" ] && { kill -TERM "$ab" 2>/dev/null; wait "$ab"; }; [ -n "$teepid" ] && { exec {log}>&-; wait "$teepid"; }; exit "$1"; }
  trap 'cut_off 143' TERM; trap 'cut_off 130' INT
  exec {log}> >(trap '' TERM INT; exec tee "$O/$N.log"); teepid=$!  # tee outlives a timeout's signal to the group
  python3 benchmarks/gpu_step_ab.py --shards "$G/shards" --before "$C/before" --out "$O/$N.json" --work "$G/ab" --profile ${PROFILE:-before,lean} \
    --parallel "${PARALLEL:-0}" --compile-threads "${COMPILE_THREADS:-4}" \
    --max-seconds "${4:-110}" --kill-seconds "${5:-170}" --device-line "$(nvidia-smi -L 2>/dev/null | head -1)" --device "$DEVICE" ${AB_ARGS:-} \
    --configs ${CONFIGS:-before lean small-before small-lean lean-cdt hf-eager before-again hf-compiled} \
    >&$log 2>&1 &
  ab=$!; wait "$ab"; rc=$?
  exec {log}>&-; wait "$teepid"  # the log's last lines are written before anything reads it
  echo "throughput done at $((SECONDS - t0)) s (the step driver's exit status: $rc)"
elif [ "$MODE" = loop ]; then
  [ -d "$G/shards" ] || { echo "no $G/shards: the throughput command unpacks them (a fresh machine lost them)"; exit 1; }
  rm -rf "$G/loop"
  python3 -m korbert.cli pretrain --shards "$G/shards" --out "$G/loop" --model-size small --tokens-per-batch 65536 --pack --lr 5e-4 \
    --warmup 500 --device "$DEVICE" --compile --max-steps 0 --max-minutes "${4:-1}" --eval-every 500 --eval-instances 3000 --log-every 100 \
    --precision bf16-stream --override hidden_dropout_prob=0 attention_probs_dropout_prob=0 ${LOOP_ARGS:-} > "$O/loop.log" 2>&1
  echo "pretrain rc=$? in $((SECONDS - t0)) s"; cp "$G/loop/log.jsonl" "$O/loop-log.jsonl"
  python3 benchmarks/loop_rows.py "$G/loop/log.jsonl" --json "$O/loop-summary.json" | tee "$O/loop-summary.txt"
elif [ "$MODE" = quality ]; then
  MIN=$4; ATT=${5:-sdpa}; LONG=${LONG:-1}
  # (the long phase as the lean runs had it, before issue 58's defaults: shared schedule, positions as initialized)
  # STREAM_ONLY=1: the bf16 stream with BERT's dropout kept (the defaults-stream configuration), so that the
  # stream is tried apart from the no-dropout change (the lean stream's two changes together cost KorQuAD points)
  if [ "${STREAM_ONLY:-0}" = 1 ]; then DROP=""; else DROP="--override hidden_dropout_prob=0 attention_probs_dropout_prob=0"; fi
  echo "attention: $ATT; long phase: $LONG; dropout: $([ -n "$DROP" ] && echo none || echo "BERT's 0.1")"
  [ -d "$G/shards" ] || { echo "no $G/shards: the throughput command unpacks them (a fresh machine lost them)"; exit 1; }
  rm -rf "$G/long" "$G/features" "$G/data" "$G/recipe" "$G/recipe-work"
  [ "$LONG" = 0 ] || unpack long long; unpack features features; unpack data data; echo "unpacked in $((SECONDS - t0)) s"
  PRETRAIN_ARGS="--precision bf16-stream $DROP --attention $ATT $([ "$LONG" = 0 ] || echo --long-shards $G/long --long-other-inputs --long-schedule shared --long-init keep) ${EXTRA_PRETRAIN_ARGS:-}" \
    SEEDS="42 43" CONTROLS=0 NSMC_BATCH=128 BUNDLE="$O/recipe.tgz" W="$G/recipe-work" \
    bash benchmarks/gpu_recipe.sh "$G/shards" "$G/data" "$G/features" "$G/recipe" "$MIN" 0
  echo "quality done at $((SECONDS - t0)) s"
else
  echo "mode: throughput, loop or quality"; exit 2
fi
