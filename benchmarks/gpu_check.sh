#!/usr/bin/env bash
# The GPU paths of korbert, exercised on a real CUDA machine (no Kiwi needed there):
#   1. `korbert pretrain`: bf16 + torch.compile, packed rows of a token budget, checkpoints every 50 steps
#   2. the run killed with SIGKILL after its first checkpoint, then resumed by the same command
#   3. the export in plain transformers (BertForPreTraining) predicting held-out [MASK]s
#   4. torchrun (DDP, NCCL) with one process
#   5. `korbert eval nsmc` and `korbert eval korquad` on CUDA from feature caches built elsewhere
#   6. benchmarks/pretrain_gpu.py (korbert vs transformers' BertForPreTraining, eager and compiled)
#
#   bash benchmarks/gpu_check.sh SHARDS DATA FEATURES OUT [THROUGHPUT_SECONDS]
#     DATA: nsmc_train_20k.txt, nsmc_test_5k.txt, KorQuAD_v1.0_dev.json (the files FEATURES were built from)
# Every step ends by packing OUT into $BUNDLE (default OUT.tgz): one file to fetch, current even if the run is cut short.
set -uo pipefail
S=$1; D=$2; F=$3; O=$4; TSEC=${5:-300}  # TSEC=0: no throughput step
STEPS=${STEPS:-300} FINETUNE=${FINETUNE:-1}  # steps of the killed-and-resumed run; FINETUNE=0 skips step 5
W=$(mktemp -d)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$O"
pack() { tar czf "${BUNDLE:-$O.tgz}" -C "$O" .; }
nvidia-smi -L; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
# every eager loop measured on the first H100 took ~90-130 ms per step whatever its size (a launch-bound
# signature): the cost of one small kernel, launched back to back, and of one host<->device sync
python3 - <<'PY'
import time, torch
x = torch.zeros(16, device="cuda"); torch.cuda.synchronize()
for what, n, fn in (("small kernel launched", 5000, lambda: x.add_(1)), ("sync (item)", 500, lambda: x.sum().item())):
    fn(); torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); print(f"{what}: {(time.perf_counter() - t) / n * 1e6:.1f} us each")
PY
P="python3 -m korbert.cli pretrain --shards $S --model-size small --tokens-per-batch 65536 --pack --lr 1e-3 --device cuda --compile
   --max-steps $STEPS --save-every 50 --log-every 25 --eval-every 100 --eval-instances 2000"

echo "== 1+2: compiled bf16 run, killed after its first checkpoint, resumed"
$P --out "$W/run" > "$O/pretrain-killed.log" 2>&1 &
pid=$!
# killed once its log.jsonl holds step 75, past its first checkpoint (step 50); the resumed run must log the same losses
for _ in $(seq 1 900); do grep -q '"step": 75,' "$W/run/log.jsonl" 2>/dev/null && break; sleep 0.2; done
kill -9 $pid; wait $pid 2>/dev/null
cp "$W/run/log.jsonl" "$O/pretrain-log-killed.jsonl" 2>/dev/null  # (the resume truncates the log to its checkpoint)
echo "killed: $(tail -c 300 "$O/pretrain-killed.log" | tr '\r' '\n' | tail -1)"
t=$SECONDS; $P --out "$W/run" > "$O/pretrain-resumed.log" 2>&1
echo "resumed run rc=$? in $((SECONDS - t)) s"; tail -4 "$O/pretrain-resumed.log"
python3 - "$O/pretrain-log-killed.jsonl" "$W/run/log.jsonl" <<'PY'
import json, sys
def steps(path):  # (a line cut by the kill is skipped)
    out = {}
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        out[d["step"]] = d
    return out
a, b = map(steps, sys.argv[1:])
both = sorted(s for s in a.keys() & b.keys() if s > 50)  # logged by the killed run after its checkpoint, and again after the resume
same = both and all(a[s]["loss"] == b[s]["loss"] for s in both)
print(("resume exact" if same else "FAILED: resume"), {s: (a[s]["loss"], b[s]["loss"]) for s in both})
PY
cp "$W/run/log.jsonl" "$O/pretrain-log.jsonl"; pack

echo "== 3: the export in plain transformers"
python3 benchmarks/gpu_export_check.py "$W/run/final" "$S" > "$O/export-check.log" 2>&1; cat "$O/export-check.log"; pack

echo "== 4: torchrun, one process (DDP + NCCL)"
t=$SECONDS; torchrun --standalone --nproc_per_node 1 -m korbert.cli pretrain --shards $S --model-size small --tokens-per-batch 65536 --pack \
  --device cuda --compile --max-steps 60 --log-every 20 --eval-every 0 --out "$W/ddp" > "$O/pretrain-torchrun.log" 2>&1
echo "torchrun rc=$? in $((SECONDS - t)) s"; tail -3 "$O/pretrain-torchrun.log"; pack

if [ "$FINETUNE" != 0 ]; then
echo "== 5: fine-tuning on CUDA from cached features"
t=$SECONDS; python3 -m korbert.cli eval nsmc --model "$W/run/final" --train "$D/nsmc_train_20k.txt" --test "$D/nsmc_test_5k.txt" \
  --features "$F" --out "$W/nsmc" --epochs 1 --lr 1e-4 --batch-size 64 --device cuda > "$O/nsmc.log" 2>&1
echo "nsmc rc=$? in $((SECONDS - t)) s"; tail -3 "$O/nsmc.log"; cp "$W/nsmc/results.json" "$O/nsmc-results.json"; pack
t=$SECONDS; python3 -m korbert.cli eval korquad --model "$W/run/final" --dev-file "$D/KorQuAD_v1.0_dev.json" \
  --features "$F" --out "$W/korquad" --epochs 1 --lr 1e-4 --batch-size 32 --device cuda > "$O/korquad.log" 2>&1
echo "korquad rc=$? in $((SECONDS - t)) s"; tail -3 "$O/korquad.log"; cp "$W/korquad/results.json" "$O/korquad-results.json"; pack
fi

[ "$TSEC" = 0 ] && exit 0
echo "== 6: throughput"
python3 benchmarks/pretrain_gpu.py --shards $S --out "$O/pretrain-gpu-throughput.json" --max-seconds "$TSEC" > "$O/pretrain-gpu-throughput.log" 2>&1
cat "$O/pretrain-gpu-throughput.log"; pack
