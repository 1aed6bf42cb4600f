#!/bin/bash
set -e
cd /work/main; . .venv/bin/activate
export KORBERT_DATA=../shared/data
for K in ${KINDS:-morpheme-attached plain}; do
  echo "[$(date -u +%FT%TZ)] $K start, load $(cut -d' ' -f1-3 /proc/loadavg)"
  python runs/kinds_pretrain.py --preset cpu --data ../shared/data --out runs/kind-$K --workers 2 \
     --set vocab.kind=$K pretrain.max_minutes=0 pretrain.max_steps=10000
  echo "[$(date -u +%FT%TZ)] $K pretrained, load $(cut -d' ' -f1-3 /proc/loadavg)"
  python benchmarks/klue_cpu.py --model runs/kind-$K/pretrain/final --kind $K --seeds 42 43 --data ../shared/data --tasks ner
  echo "[$(date -u +%FT%TZ)] $K NER done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
