#!/bin/bash
# defects of 17a3dbc reproduced on CPU (old code in /tmp/old, format-1 sample shards)
. /work/main/.venv/bin/activate
cd /tmp/old
export PYTHONPATH=/tmp/old
S=/tmp/w/shards-v1
TINY="--model-size tiny --override hidden_size=64 num_hidden_layers=2 num_attention_heads=2 intermediate_size=128"
echo "== 1. --max-minutes on 2 ranks"
rm -rf /tmp/before/t1; start=$(date +%s)
timeout 180 python -m torch.distributed.run --nproc_per_node 2 --master_port 29611 -m korbert.pretrain --shards $S --out /tmp/before/t1 $TINY --max-steps 0 --max-minutes 0.08 --batch-size 4 --eval-instances 1000 --log-every 5 --num-workers 0 > /tmp/before/t1.log 2>&1
echo "rc=$? after $(( $(date +%s) - start )) s; final exists: $(test -d /tmp/before/t1/final && echo yes || echo no)"
grep -E "SIGABRT|Signal|Error|error" /tmp/before/t1.log | head -3
echo "== 2. kill + resume on 2 ranks with dropout"
rm -rf /tmp/before/w /tmp/before/b
A="$TINY --batch-size 4 --max-steps 10 --lr 2e-3 --log-every 1 --eval-every 0 --eval-instances 64 --save-every 4 --num-workers 1 --seed 3"
python -m torch.distributed.run --nproc_per_node 2 --master_port 29612 -m korbert.pretrain --shards $S --out /tmp/before/w $A > /tmp/before/t2w.log 2>&1; echo "whole rc=$?"
KORBERT_TEST_KILL_AT_STEP=7 python -m torch.distributed.run --nproc_per_node 2 --master_port 29613 -m korbert.pretrain --shards $S --out /tmp/before/b $A > /tmp/before/t2b.log 2>&1; echo "killed rc=$?"
python -m torch.distributed.run --nproc_per_node 2 --master_port 29614 -m korbert.pretrain --shards $S --out /tmp/before/b $A > /tmp/before/t2r.log 2>&1; echo "resumed rc=$?"
python - <<'PY'
import json
w=[json.loads(l)["loss"] for l in open("/tmp/before/w/log.jsonl")]
b=[json.loads(l)["loss"] for l in open("/tmp/before/b/log.jsonl")]
print("whole  ", w[4:]); print("resumed", b[4:]); print("equal:", w == b)
PY
echo "== 2b. resume with 1 process"
python -m korbert.pretrain --shards $S --out /tmp/before/b $A 2>&1 | tail -n 1
echo "== 7. warmup 10 steps with a time budget"
python -c "
from korbert.pretrain import PretrainConfig, lr_at
c = PretrainConfig(max_steps=0, max_minutes=10, warmup=10, lr=1e-3)
print('old lr_at over the run (progress 0.1 .. 0.9):', [round(lr_at(p / 10, c, 1), 6) for p in range(1, 10)])"
echo "== 5. --compile, 50 steps of varied lengths"
python -c "
import sys
from korbert.pretrain import PretrainConfig, main
from torch._dynamo.utils import counters
main(PretrainConfig(shards='$S', out='/tmp/before/c', model_size='tiny', override=['hidden_size=64','num_hidden_layers=2','num_attention_heads=2','intermediate_size=128','hidden_dropout_prob=0','attention_probs_dropout_prob=0'], batch_size=16, max_steps=50, log_every=10, eval_every=0, eval_instances=64, num_workers=0, compile=True, force=True))
print('old code: compiled graphs', dict(counters['stats']), 'recompiles', dict(counters['recompiles']) if 'recompiles' in counters else '')
" 2>&1 | grep -E "graphs|step 50|tok/s" | tail -3
