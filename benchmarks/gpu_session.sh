#!/usr/bin/env bash
# One GPU lease, one command: what the machine is for, in the order it matters, from a folder built on a
# CPU machine by benchmarks/gpu_carry.sh (the GPU machine has no Kiwi and no registry):
#   1. throughput: benchmarks/pretrain_gpu.py, BERT-base then BERT-small, korbert compiled / eager against
#      transformers' BertForPreTraining, then a loader-worker sweep, until THROUGHPUT_SECONDS have passed
#   2. quality: benchmarks/gpu_recipe.sh, BERT-small pretrained beside its random-init controls' fine-tuning
#      until RESERVE seconds before DEADLINE (seconds from the start), then NSMC-R (every training review)
#      and KorQuAD (dev-split protocol) in the reserve
#   3. the export in plain transformers (benchmarks/gpu_export_check.py)
#
#   bash benchmarks/gpu_session.sh CARRY OUT THROUGHPUT_SECONDS DEADLINE [RESERVE]
# THROUGHPUT_SECONDS (whole seconds) 0 skips step 1; gpu_recipe.sh's variables pass through (SEEDS, CONTROLS, PRETRAIN_ARGS, ...).
# OUT gets each step's JSON and log as it goes (the quality run as OUT/recipe.tgz), so a cut-off keeps what was measured.
set -uo pipefail
C=$1; O=$2; TSEC=$3; DEADLINE=$4; RESERVE=${5:-150}
G=${G:-/tmp/gpu-session}  # emptied first: a rerun on a warm machine starts fresh, not from the last run's checkpoints
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
rm -rf "$G"; mkdir -p "$G" "$O"
t0=$SECONDS
for f in shards features data; do mkdir -p "$G/$f"; tar xJf "$C/$f.tar.xz" -C "$G/$f" || { echo "cannot unpack $C/$f.tar.xz"; exit 1; }; done
echo "unpacked in $((SECONDS - t0)) s"
{ nvidia-smi -L; nproc; python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"; } 2>&1 | tee "$O/device.txt"

if [ "$TSEC" -gt 0 ]; then
echo "== 1: throughput ($TSEC s)"
python3 benchmarks/pretrain_gpu.py --shards "$G/shards" --sizes base small --modes compiled eager --hf-modes eager --worker-sweep 1 4 \
  --max-seconds "$TSEC" --out "$O/pretrain-gpu-throughput.json" 2>&1 | grep --line-buffered -v "it/s\]$" > "$O/pretrain-gpu-throughput.log"
grep "^BERT-\|^loader\|MFU\|failed" "$O/pretrain-gpu-throughput.log"; echo "throughput done at $((SECONDS - t0)) s"
fi

MIN=$(python3 -c "print(round(max(1.0, ($DEADLINE - $((SECONDS - t0)) - $RESERVE) / 60), 2))")
echo "== 2: quality ($MIN min of pretraining)"
BUNDLE="$O/recipe.tgz" W="$G/recipe-work" NSMC_BATCH=${NSMC_BATCH:-128} bash benchmarks/gpu_recipe.sh "$G/shards" "$G/data" "$G/features" "$G/recipe" "$MIN" 0
echo "quality done at $((SECONDS - t0)) s"

echo "== 3: the export in plain transformers"
python3 benchmarks/gpu_export_check.py "$G/recipe-work/pretrain/final" "$G/shards" 2>&1 | tee "$O/export-check.log"
echo "session done at $((SECONDS - t0)) s"
