"""An exported korbert model in plain transformers, on the GPU: BertForPreTraining.from_pretrained(final/)
predicts the masked tokens of held-out shard instances; its accuracy is printed beside the
training loop's own last held-out evaluation (the two should agree within sampling noise).

    python benchmarks/gpu_export_check.py RUN/final SHARDS [N]
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import BertForPreTraining

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from corpus_tools.masking import masked_instance  # noqa: E402
from corpus_tools.shard_format import open_shards  # noqa: E402

final, shards = Path(sys.argv[1]), sys.argv[2]
n_max = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
dev = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForPreTraining.from_pretrained(final).to(dev).eval()
reader = open_shards(shards, split="valid", verify=False)
own = None  # shards of a tokenizer with its specials elsewhere hold mapped ids (korbert/foreign.py): map them back
if "id_map" in reader.manifest:
    from korbert import foreign
    from corpus_tools.shard_format import tokenizer_dir

    own = foreign.own_ids(foreign.load(tokenizer_dir(Path(shards)), shards))
hit = total = 0
n = min(n_max, len(reader))


def row(x, ids: bool = False) -> torch.Tensor:  # one instance as a batch of one; shards store uint16, embeddings take int64
    x = np.asarray(x, dtype=np.int64)
    return torch.from_numpy(own[x] if ids and own is not None else x)[None].to(dev)


for i in range(n):
    it = masked_instance(reader, i, seed=1234)
    with torch.no_grad():
        out = model(input_ids=row(it["input_ids"], ids=True), token_type_ids=row(it["token_type_ids"]))
    labels = np.asarray(it["labels"], dtype=np.int64)
    labels = torch.tensor(labels if own is None else np.where(labels >= 0, own[np.maximum(labels, 0)], labels), device=dev)
    keep = labels != -100
    hit += int((out.prediction_logits[0].argmax(-1)[keep] == labels[keep]).sum())
    total += int(keep.sum())
print(f"transformers {type(model).__name__} ({sum(p.numel() for p in model.parameters()):,} parameters) on {n} held-out "
      f"instances: MLM accuracy {hit / max(total, 1):.4f} over {total} masked tokens")
evals = [json.loads(line) for line in (final.parent / "log.jsonl").read_text().splitlines() if '"eval_mlm_acc"' in line]
if evals:
    print(f"the loop's last held-out eval (step {evals[-1].get('step')}): MLM accuracy {evals[-1]['eval_mlm_acc']}")
