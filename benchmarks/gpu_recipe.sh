#!/usr/bin/env bash
# The `gpu-small` recipe's GPU stages on a machine without Kiwi, from artifacts built elsewhere
# (shards by `korbert shards`, fine-tuning features by `korbert eval ... --features DIR`):
#   pretraining BERT-small for MINUTES (bf16, torch.compile, packed rows of 65,536 tokens), while the
#   random-init controls are fine-tuned beside it on the same GPU; then NSMC-R and KorQuAD for the
#   pretrained model, the two side by side.
#
#   bash benchmarks/gpu_recipe.sh SHARDS DATA FEATURES OUT MINUTES [NSMC_TRAIN_EXAMPLES]
#     DATA: ratings_train.txt, ratings_test.txt, KorQuAD_v1.0_dev.json (the files FEATURES were built from)
# Pretraining takes the preset's settings (lr 5e-4 after a 500-step warmup; PRETRAIN_ARGS adds or overrides
# flags: the first H100 run used the former '--lr 1e-3 --warmup 0.06'); fine-tuning is shorter than the
# preset's (1 NSMC epoch, NSMC_TRAIN_EXAMPLES reviews) so that the whole script fits one 10-minute command.
# Every step ends by packing OUT into $BUNDLE (default OUT.tgz): one file to fetch, current even if the run is cut short.
set -uo pipefail
S=$1; D=$2; F=$3; O=$4; MIN=$5; NTRAIN=${6:-0}
W=${W:-runs/gpu-small}  # work folder; PRETRAIN_ARGS: extra `korbert pretrain` flags; CONTROLS=0 skips the controls, =nsmc runs NSMC's only
SEEDS=$(echo ${SEEDS:-42})  # (spaces trimmed) NSMC fine-tuning seeds (split, order, head): each for the model and its control; the first is named plain
SIZE=${SIZE:-small} NSMC_BATCH=${NSMC_BATCH:-64}  # the model size; NSMC's fine-tuning batch (both the model and its control)
DEV=${DEV:-cuda} FT_ARGS=${FT_ARGS:-}  # a smoke test on a CPU: DEV=cpu PRETRAIN_ARGS=--no-compile FT_ARGS='--max-steps 2 --max-eval-examples 50'
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$O" "$W"
B=${BUNDLE:-$O.tgz}
pack() {  # jobs beside each other each write a whole bundle (tar's 1: a log grew while it was read, fine)
  tar czf "$B.$BASHPID" -C "$O" .; [ $? -le 1 ] && mv "$B.$BASHPID" "$B" || rm -f "$B.$BASHPID"; }
nvidia-smi -L

nsmc() {  # nsmc NAME MODEL [--control]: one run per seed in SEEDS, side by side (NAME, NAME-s43, ...)
  local seed name first=${SEEDS%% *}
  for seed in $SEEDS; do
    name=$1; [ "$seed" = "$first" ] || name=$1-s$seed
    (python3 -m korbert.cli eval nsmc --model "$2" ${3:-} --train "$D/ratings_train.txt" --test "$D/ratings_test.txt" --features "$F" \
      --out "$W/nsmc/$name" --epochs 1 --max-train-examples "$NTRAIN" --lr 1e-4 --batch-size "$NSMC_BATCH" --seed "$seed" --device "$DEV" $FT_ARGS \
      > "$O/nsmc-$name.log" 2>&1
    echo "nsmc $name rc=$?: $(grep 'test accuracy' "$O/nsmc-$name.log")"; cp "$W/nsmc/$name/results.json" "$O/nsmc-$name-results.json"; pack) &
  done
  wait
}
# KorQuAD in 384-token windows (positions 128..383 untrained: pretraining is at 128) and in 128-token windows
K384="--max-len 384 --allow-untrained-positions"; K128="--max-len 128 --stride 32 --max-query-len 40"
korquad() {  # korquad NAME MODEL [--control] [eval flags]
  local name=$1 model=$2; shift 2
  python3 -m korbert.cli eval korquad --model "$model" "$@" --dev-file "$D/KorQuAD_v1.0_dev.json" --features "$F" \
    --out "$W/korquad/$name" --epochs 3 --lr 1e-4 --batch-size 32 --device "$DEV" $FT_ARGS > "$O/korquad-$name.log" 2>&1
  echo "korquad $name rc=$?: $(grep '^korquad \[' "$O/korquad-$name.log" | tail -1)"; cp "$W/korquad/$name/results.json" "$O/korquad-$name-results.json"; pack
}

t=$SECONDS
python3 -m korbert.cli pretrain --shards "$S" --out "$W/pretrain" --model-size "$SIZE" --tokens-per-batch 65536 --pack --lr 5e-4 --warmup 500 \
  --device "$DEV" --compile --max-steps 0 --max-minutes "$MIN" --eval-every 500 --eval-instances 3000 --log-every 100 ${PRETRAIN_ARGS:-} \
  > "$O/pretrain.log" 2>&1 &
pre=$!
if [ "${CONTROLS:-1}" != 0 ]; then  # the controls need only the architecture: a 1-step export of the same config
  python3 -m korbert.cli pretrain --shards "$S" --out "$W/arch" --model-size "$SIZE" --max-steps 1 --device "$DEV" --eval-every 0 > "$O/arch.log" 2>&1
  if [ "${CONTROLS:-1}" = nsmc ]; then (nsmc control "$W/arch/final" --control) &
  else (nsmc control "$W/arch/final" --control; korquad control384 "$W/arch/final" --control $K384; korquad control128 "$W/arch/final" --control $K128) &
  fi
fi
wait $pre; echo "pretrain rc=$? in $((SECONDS - t)) s"; tail -3 "$O/pretrain.log"
cp "$W/pretrain/log.jsonl" "$O/pretrain-log.jsonl"; cp "$W/pretrain/final/manifest.json" "$O/pretrain-manifest.json"; pack
nsmc model "$W/pretrain/final" & korquad model384 "$W/pretrain/final" $K384 & korquad model128 "$W/pretrain/final" $K128 &
wait; echo "all done in $((SECONDS - t)) s"; pack
