#!/usr/bin/env bash
# Where BERT-base's step time goes on a GPU, and what one change buys: benchmarks/pretrain_gpu.py on BERT-base,
# korbert compiled with 5 steps under torch.profiler (--profile), then one change at a time (no dropout, 131,072
# tokens per step, max-autotune), each against it. Shards from a gpu_carry.sh folder (unpacked unless G has them).
# Then, when the carry has long.tar.xz, the long phase's cost: BERT-small compiled on 512-token rows against the
# same text at 128 (benchmarks/long_phase_cost.py), within LONG_SECONDS.
#
#   bash benchmarks/gpu_mfu_probe.sh CARRY OUT MAX_SECONDS
# OUT gets pretrain-gpu-mfu-probe.json (written after every configuration), its log and the profile table,
# and pretrain-gpu-long-phase-cost.json.
set -uo pipefail
C=$1; O=$2; TSEC=$3
G=${G:-/tmp/gpu-session}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$G/shards" "$O"
[ -f "$G/shards/manifest.json" ] || tar xJf "$C/shards.tar.xz" -C "$G/shards" || { echo "cannot unpack $C/shards.tar.xz"; exit 1; }
{ nvidia-smi -L; nproc; python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"; } 2>&1 | tee "$O/device-probe.txt"
python3 benchmarks/pretrain_gpu.py --shards "$G/shards" --sizes base --modes compiled --hf-modes --worker-sweep --steps 45 \
  --profile --variants ${VARIANTS:-no-dropout tokens-131072 max-autotune} --max-seconds "$TSEC" --out "$O/pretrain-gpu-mfu-probe.json" 2>&1 \
  | grep --line-buffered -v "it/s\]$" > "$O/pretrain-gpu-mfu-probe.log"
grep "^BERT-\|^loader\|profile:\|failed" "$O/pretrain-gpu-mfu-probe.log"
if [ -f "$C/long.tar.xz" ]; then
  mkdir -p "$G/long"; tar xJf "$C/long.tar.xz" -C "$G/long"
  timeout "${LONG_SECONDS:-120}" python3 benchmarks/long_phase_cost.py --shards "$G/long/long128" --long-shards "$G/long/long512" --device cuda \
    --compile --model-size small --tokens-per-batch 65536 --steps 40 --rounds 2 --out "$O/pretrain-gpu-long-phase-cost.json" 2>&1 \
    | grep --line-buffered -v "it/s\]$" > "$O/pretrain-gpu-long-phase-cost.log"
  grep "round\|ratio" "$O/pretrain-gpu-long-phase-cost.log"
fi
