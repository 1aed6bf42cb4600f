#!/usr/bin/env bash
# Packs what benchmarks/gpu_session.sh needs into one folder to carry to a GPU machine (64 MiB in all,
# with the working tree): the shards, the fine-tuning feature caches and the NSMC-R / KorQuAD files the
# caches were built from, each an xz tarball of the folder's contents (shards compress ~3x: uint16 ids,
# int8 unit flags).
#
#   bash benchmarks/gpu_carry.sh SHARDS FEATURES DATA_DIR CARRY [LONG128 LONG512]
#     DATA_DIR: holds nsmc/ratings_{train,test}.txt and korquad/KorQuAD_v1.0_dev.json (../shared/data)
#     LONG128 LONG512: the same text sharded at 128 and 512 tokens (long.tar.xz: the long phase's cost on the GPU,
#     benchmarks/gpu_mfu_probe.sh)
set -euo pipefail
S=$1; F=$2; D=$3; C=$4; L128=${5:-}; L512=${6:-}
mkdir -p "$C"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cp "$D/nsmc/ratings_train.txt" "$D/nsmc/ratings_test.txt" "$D/korquad/KorQuAD_v1.0_dev.json" "$tmp/"
pack() { tar cf - -C "$1" . | xz -T2 ${XZ:--6} > "$C/$2.tar.xz.part" && mv "$C/$2.tar.xz.part" "$C/$2.tar.xz"; }  # XZ=-9e: ~5% smaller
pack "$S" shards; pack "$F" features; pack "$tmp" data
if [ -n "$L512" ]; then mkdir -p "$tmp/long"; cp -r "$L128" "$tmp/long/long128"; cp -r "$L512" "$tmp/long/long512"; pack "$tmp/long" long; fi
du -b "$C"/*.tar.xz; du -sh "$C"
