"""On a GPU: each attention path of `KorBertForPreTraining.encode` against SDPA with the dense mask in fp32.

Real packed batches at fixed shapes (padding rows and the zero-length tail of `cu_seqlens` included) and
one-instance-per-row batches through BERT-small, eager and compiled: the last hidden state at real tokens
and every parameter's gradient, as ||x - ref|| / ||ref||. A bf16 path passes within twice SDPA-in-bf16's
error (or --tolerance, 5x for gradients); NaN or an unwritten output never passes. Prints one line per path and writes JSON;
the exit status is 0 when every path that ran passed, and the last line of stdout names the paths that did.

    python benchmarks/gpu_attention_check.py --shards S --out $OUT/attention-check.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_tools.shard_format import open_shards  # noqa: E402
from korbert.data import BatchPlan, fixed_counts, instance_lengths, make_batch  # noqa: E402
from korbert.model import KorBertForPreTraining, bert_config  # noqa: E402


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.double(), ref.double()
    return float((x - ref).norm() / ref.norm().clamp(min=1e-30))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", required=True)
    ap.add_argument("--size", default="small")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--tolerance", type=float, default=2e-2, help="largest relative error a bf16 path may have")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test (varlen cannot run there, nor flex's backward: recorded as errors)")
    ap.add_argument("--out", default="attention-check.json")
    a = ap.parse_args()
    dev = torch.device(a.device)
    reader = open_shards(a.shards, verify=False)
    max_len, vocab = reader.manifest["config"]["max_seq_len"], reader.manifest["mask_config"]["random_high"]
    plan = BatchPlan(instance_lengths(reader), 0, max_len, tokens_per_step=a.tokens, pack=True)
    fixed = fixed_counts(plan, reader.mask_config.mask_prob, 1)
    rows = plan(2)[1]
    packed = make_batch(reader, [*rows[:-1], np.zeros(0, np.int64)], max_len, seed=0, epoch=0, packed=True, fixed=fixed)
    single = make_batch(reader, [np.array([i]) for i in range(0, 400, 7)], seed=0, epoch=0, packed=False)
    torch.manual_seed(0)
    model = KorBertForPreTraining(bert_config(a.size, vocab, max_len, {"hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0})).to(dev)

    def run(batch, path: str, bf16: bool, compiled: bool):
        model.attention = path
        model.zero_grad(set_to_none=True)
        b = {k: v.to(dev) for k, v in batch.items() if isinstance(v, torch.Tensor)}
        fn = torch.compile(model.encode, fullgraph=True, dynamic=False) if compiled else model.encode
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            out = fn(b["input_ids"], b["token_type_ids"], b["position_ids"], b["segments"], b["cu_seqlens"], batch["packed"])
        real = b["segments"] > 0
        finite = bool(torch.isfinite(out).all())
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(7)).to(dev)  # (a mean of squares after LayerNorm has no gradient)
        (out.float() * w)[real].sum().backward()
        grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
        return out.detach().float()[real], grads, finite

    results, ok_paths = {}, []
    for bname, batch in (("packed-fixed", packed), ("one-per-row", single)):
        ref_out, ref_grads, _ = run(batch, "sdpa", False, False)
        paths = [("sdpa", True, False), ("varlen", True, False)]
        if batch is packed:  # the training batches: the compiled paths too
            paths += [("varlen", True, True), ("flex", True, True)]
        for path, bf16, compiled in paths:
            key = f"{bname}/{path}{'-compiled' if compiled else ''}"
            try:
                out, grads, finite = run(batch, path, bf16, compiled)
            except Exception as e:  # a path this torch cannot run: recorded, not fatal
                results[key] = {"error": f"{type(e).__name__}: {e}"[:800]}
                print(f"{key:32s} failed: {results[key]['error'][:200]}", flush=True)
                continue
            # (the key biases' gradient is zero in exact arithmetic: softmax ignores a term constant over keys)
            g = max(rel(grads[n], ref_grads[n]) for n in ref_grads if not n.endswith("attention.self.key.bias"))
            r = {"output_rel_err": round(rel(out, ref_out), 6), "worst_grad_rel_err": round(g, 6), "finite": finite}
            if (path, compiled) == ("sdpa", False):
                floor = r  # SDPA in bf16: what bf16 alone costs; a path may err up to twice that (or --tolerance)
            r["pass"] = finite and r["output_rel_err"] <= max(a.tolerance, 2 * floor["output_rel_err"]) and g <= max(5 * a.tolerance, 2 * floor["worst_grad_rel_err"])
            results[key] = r
            print(f"{key:32s} out {r['output_rel_err']:.2e}  worst grad {g:.2e}  finite {finite}  {'PASS' if r['pass'] else 'FAIL'}", flush=True)
    for path in ("varlen", "flex"):
        keys = [k for k in results if k.split("/")[1].split("-")[0] == path]
        if keys and all(results[k].get("pass") for k in keys):
            ok_paths.append(path)
    Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "torch": torch.__version__, "results": results, "passed": ok_paths}, indent=1))
    print("PASSED: " + " ".join(ok_paths or ["none"]))
    sys.exit(0 if all(r.get("pass", True) for r in results.values() if "error" not in r) else 1)


if __name__ == "__main__":
    main()
