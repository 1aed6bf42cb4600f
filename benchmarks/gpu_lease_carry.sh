#!/usr/bin/env bash
# Builds the two carries of benchmarks/gpu_lease.sh on a CPU machine (Kiwi needed here, not there): the committed
# 6.3-minute gpu-small run's recipe (benchmarks/results/recipe-gpu-small-h200-6min/results.json), then
#   .gpu/c1: shards.tar.xz (all reviews + kowiki@22000 at 128 tokens, xz -9e: ~45 MB) and before/ (git archive of BEFORE)
#   .gpu/c2: long.tar.xz (petitions + kowiki@8000 at 512 tokens), features.tar.xz (NSMC-R and KorQuAD caches), data.tar.xz
# About 1 hour on 2 cores (vocabulary ~25 min, shards ~20 min, long shards ~8 min, features and xz ~10 min).
#
#   bash benchmarks/gpu_lease_carry.sh DATA WORK BEFORE    e.g. ../shared/data runs/gpu4 3c23c58
# Add .gpu/ to .git/info/exclude first (the carries must not be tracked: `echo /.gpu/ >> .git/info/exclude`).
set -euo pipefail
D=$1; R=$2; BEFORE=$3
mkdir -p "$R" .gpu/c1 .gpu/c2
C="$D/corpus"
[ -d "$R/qvocab" ] || korbert vocab --inputs "$C/reviews.jsonl.gz" "$C/petitions.jsonl.gz" "$C/kowiki.jsonl.gz@8000" --vocab-size 32000 --out "$R/qvocab" --show 0
korbert shards --tokenizer "$R/qvocab" --inputs "$C/reviews.jsonl.gz" "$C/kowiki.jsonl.gz@22000" --out "$R/qshards" --workers 2 --show 0
korbert shards --tokenizer "$R/qvocab" --inputs "$C/petitions.jsonl.gz" "$C/kowiki.jsonl.gz@8000" --max-seq-len 512 --out "$R/qshards512" --workers 2 --show 0
# the feature caches need a model folder with this tokenizer: one step of BERT-small on the embedded sample
korbert shards --tokenizer "$R/qvocab" --inputs corpus_tools/sample_data/reviews.jsonl.gz --out "$R/tinyshards" --show 0
korbert pretrain --shards "$R/tinyshards" --out "$R/arch" --model-size small --max-steps 1 --device cpu --eval-every 0 --tokens-per-batch 4096 --pack --force
korbert eval nsmc --model "$R/arch/final" --train "$D/nsmc/ratings_train.txt" --test "$D/nsmc/ratings_test.txt" --features "$R/features" --out "$R/feat-nsmc" --max-steps 1 --max-eval-examples 100 --device cpu
for len in 384 128; do
  w="--max-len 384 --allow-untrained-positions"; [ $len = 128 ] && w="--max-len 128 --stride 32 --max-query-len 40"
  korbert eval korquad --model "$R/arch/final" --dev-file "$D/korquad/KorQuAD_v1.0_dev.json" --features "$R/features" --out "$R/feat-kq$len" $w --max-steps 1 --max-eval-examples 100 --device cpu
done
rm -rf .gpu/c1/before; mkdir -p .gpu/c1/before; git archive "$BEFORE" korbert corpus_tools | tar x -C .gpu/c1/before
pack() { tar cf - -C "$1" . | xz -T2 ${3:--6} > "$2.part" && mv "$2.part" "$2"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$D/nsmc/ratings_train.txt" "$D/nsmc/ratings_test.txt" "$D/korquad/KorQuAD_v1.0_dev.json" "$tmp/"
pack "$tmp" .gpu/c2/data.tar.xz; pack "$R/features" .gpu/c2/features.tar.xz; pack "$R/qshards512" .gpu/c2/long.tar.xz
pack "$R/qshards" .gpu/c1/shards.tar.xz -9e
du -b .gpu/c1/*.tar.xz .gpu/c2/*; du -sh .gpu/c1 .gpu/c2
