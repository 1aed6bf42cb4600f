#!/usr/bin/env bash
# Where BERT-base's step time goes on a GPU, what changes buy, and what the long phase costs there.
#   1. When the carry has long.tar.xz (the same text sharded at 128 and 512 tokens): BERT-small compiled on the
#      512-token rows against 128 (benchmarks/long_phase_cost.py), within LONG_SECONDS; then BERT-base, within
#      LONG_BASE_SECONDS (0: skipped). LONG_ROUNDS rounds each (default 1).
#   2. benchmarks/pretrain_gpu.py on BERT-base: korbert compiled with 5 steps under torch.profiler (--profile),
#      then each of VARIANTS against it (the last may be cut off: its JSON is written after every configuration).
#      Shards: the carry's shards.tar.xz, else long.tar.xz's 128-token shards.
#
#   bash benchmarks/gpu_mfu_probe.sh CARRY OUT MAX_SECONDS
# OUT gets at most 8 files: device-probe.txt, pretrain-gpu-mfu-probe.{json,log} (the JSON written after every
# configuration), its profile table, pretrain-gpu-long-phase-cost{,-base}.{json,log}.
# Smoke test on a CPU: DEV=cpu SMALL=tiny BASE=tiny STEPS=21 LONG_STEPS=4 LONG_BASE_SECONDS=300 VARIANTS=bf16-stream bash ...
set -uo pipefail
C=$1; O=$2; TSEC=$3
G=${G:-/tmp/gpu-session}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$G" "$O"
S=$G/shards
if [ -f "$C/long.tar.xz" ]; then
  mkdir -p "$G/long"; [ -f "$G/long/long512/manifest.json" ] || tar xJf "$C/long.tar.xz" -C "$G/long" || { echo "cannot unpack $C/long.tar.xz"; exit 1; }
fi
if [ -f "$C/shards.tar.xz" ]; then
  mkdir -p "$S"; [ -f "$S/manifest.json" ] || tar xJf "$C/shards.tar.xz" -C "$S" || { echo "cannot unpack $C/shards.tar.xz"; exit 1; }
else
  S=$G/long/long128
fi
[ -f "$S/manifest.json" ] || { echo "no shards: the carry $C has neither shards.tar.xz nor long.tar.xz"; exit 1; }
{ nvidia-smi -L; nproc; python3 -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"; } 2>&1 | tee "$O/device-probe.txt"
long_cost() {  # SIZE SECONDS SUFFIX
  [ -f "$G/long/long512/manifest.json" ] && [ "$2" -gt 0 ] || return 0
  timeout "$2" python3 benchmarks/long_phase_cost.py --shards "$G/long/long128" --long-shards "$G/long/long512" --device "${DEV:-cuda}" \
    --compile --model-size "$1" --tokens-per-batch 65536 --steps "${LONG_STEPS:-40}" --rounds "${LONG_ROUNDS:-1}" --out "$O/pretrain-gpu-long-phase-cost$3.json" 2>&1 \
    | grep --line-buffered -v "it/s\]$" > "$O/pretrain-gpu-long-phase-cost$3.log"
  grep "round\|ratio" "$O/pretrain-gpu-long-phase-cost$3.log"
}
long_cost "${SMALL:-small}" "${LONG_SECONDS:-120}" ""
long_cost "${BASE:-base}" "${LONG_BASE_SECONDS:-0}" "-base"
python3 benchmarks/pretrain_gpu.py --shards "$S" --sizes "${BASE:-base}" --modes compiled --hf-modes --worker-sweep --steps "${STEPS:-45}" --device "${DEV:-cuda}" \
  --profile --variants ${VARIANTS:-bf16-stream bf16-stream-no-dropout bf16-stream-no-dropout-max-autotune} --max-seconds "$TSEC" \
  --out "$O/pretrain-gpu-mfu-probe.json" 2>&1 | grep --line-buffered -v "it/s\]$" > "$O/pretrain-gpu-mfu-probe.log"
grep "^BERT-\|^loader\|profile:\|failed" "$O/pretrain-gpu-mfu-probe.log"
