"""Issue 61: what an ELECTRA discriminator has learnt to tell, by where the replaced tokens come from.

    python benchmarks/electra_replacements.py --electra runs/electra-vs-mlm/electra/final --mlm runs/electra-vs-mlm/mlm/final

Reads --reviews held-out NSMC-R test reviews (removed from the data folder's pretraining corpus), picks a
seeded 15% of their tokens (never a special, [UNK] included, nor padding) and replaces them three ways:
samples of ELECTRA's own generator reading [MASK] at every picked place (training's masking leaves a tenth
unchanged and a tenth random), draws from the texts' own token frequencies, and uniform draws over the
normal pieces (those training's random replacements draw from: no specials, [unusedN] or byte pieces). A
draw equal to the original counts as original, as in training. For each, the ROC AUC of replaced against
original tokens (korbert.electra.auc):
- of the discriminator's logits;
- with --mlm, of a masked LM reading the same corrupted text unmasked, each token scored by minus its log
  probability there: the detector an MLM of the same budget gives for free, the baseline.
A discriminator that learnt the task beats the baseline on the generator's samples; one that learnt only
which tokens the generator over-draws scores uniform draws (mostly rare tokens) below 0.5.

Writes benchmarks/results/electra-replacements-cpu.json (`ratio_auc_discriminator_vs_mlm` per source).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--electra", required=True, help="an ELECTRA final/ folder (its generator in final/generator/)")
    ap.add_argument("--mlm", default="", help="a BERT folder with an MLM head, scored the same way (the baseline)")
    ap.add_argument("--test", default="", help="NSMC-format file of held-out reviews (default: DATA/nsmc/ratings_test.txt)")
    ap.add_argument("--data", default="", help="the data folder (default: $KORBERT_DATA)")
    ap.add_argument("--reviews", type=int, default=2000, help="reviews read (those of 30 characters or more, in file order)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "electra-replacements-cpu.json"))
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer, ElectraForMaskedLM, ElectraForPreTraining

    from corpus_tools.artifacts import atomic_write_json, machine
    from corpus_tools.shard_format import first_normal_id
    from evals.data import read_nsmc
    from korbert.electra import auc

    test = Path(a.test or Path(a.data or os.environ.get("KORBERT_DATA", "")) / "nsmc" / "ratings_test.txt")
    texts = [r.text for r in read_nsmc(test) if len(r.text) >= 30][: a.reviews]
    tok = AutoTokenizer.from_pretrained(a.electra, trust_remote_code=True)
    disc = ElectraForPreTraining.from_pretrained(a.electra).eval()
    gen = ElectraForMaskedLM.from_pretrained(str(Path(a.electra) / "generator")).eval()
    mlm = AutoModelForMaskedLM.from_pretrained(a.mlm).eval() if a.mlm else None
    if mlm is not None and AutoTokenizer.from_pretrained(a.mlm, trust_remote_code=True).get_vocab() != tok.get_vocab():
        raise SystemExit(f"{a.mlm}: another vocabulary than {a.electra}'s")
    enc = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    ids, att = enc["input_ids"], enc["attention_mask"]
    specials = torch.isin(ids, torch.tensor(tok.all_special_ids)) | (att == 0)
    pick = (torch.rand(ids.shape, generator=torch.Generator().manual_seed(a.seed)) < 0.15) & ~specials
    n = int(pick.sum())
    freq = torch.bincount(ids[~specials], minlength=disc.config.vocab_size).double()

    def rounded(v):  # (auc is None without both classes)
        return None if v is None else round(v, 4)

    def batches(x):  # (the texts in slices of 100, each with its rows: memory, not results)
        return [(slice(i, i + 100), x[i:i + 100], att[i:i + 100]) for i in range(0, len(x), 100)]

    results = {}
    for k, source in enumerate(("generator", "unigram", "uniform")):
        g = torch.Generator().manual_seed(a.seed + 1 + k)  # (each source its own draws: two models get the same frequency and uniform ones)
        x = ids.clone()
        if source == "generator":
            masked = ids.masked_fill(pick, tok.mask_token_id)
            for rows, b, m in batches(masked):  # (a slice's (rows, length, vocabulary) logits at a time)
                with torch.no_grad():
                    probs = gen(input_ids=b, attention_mask=m).logits[pick[rows]].float().softmax(-1)
                x[rows][pick[rows]] = torch.multinomial(probs, 1, generator=g).squeeze(1)
        elif source == "unigram":
            x[pick] = torch.multinomial(freq, n, replacement=True, generator=g)
        else:
            x[pick] = torch.randint(first_normal_id(tok), len(tok), (n,), generator=g)
        labels = torch.where(specials, -1.0, (x != ids).float())
        with torch.no_grad():
            d = torch.cat([disc(input_ids=b, attention_mask=m).logits for _, b, m in batches(x)]).float()
        row = {"replaced_share": round(float((labels == 1).sum() / (labels >= 0).sum()), 4), "auc_discriminator": rounded(auc(d.flatten(), labels.flatten()))}
        if mlm is not None:
            with torch.no_grad():
                surprise = torch.cat([-mlm(input_ids=b, attention_mask=m).logits.float().log_softmax(-1).gather(-1, b.unsqueeze(-1)).squeeze(-1)
                                      for _, b, m in batches(x)])
            row["auc_mlm_surprise"] = rounded(auc(surprise.flatten(), labels.flatten()))
            both = None not in (row["auc_discriminator"], row["auc_mlm_surprise"]) and row["auc_mlm_surprise"]
            row["ratio_auc_discriminator_vs_mlm"] = round(row["auc_discriminator"] / row["auc_mlm_surprise"], 4) if both else None
        results[source] = row
        print(source, row, flush=True)
    atomic_write_json(Path(a.out), {
        "what": "ELECTRA's discriminator: ROC AUC of replaced against original tokens by the replacements' source (issue 61)",
        "command": " ".join(["python", "benchmarks/electra_replacements.py", *sys.argv[1:]]), "machine": machine(),
        "texts": {"file": str(test), "reviews": len(texts), "tokens_scored": int((~specials).sum()), "picked": n, "seed": a.seed},
        "sources": results,
    })
    print(f"-> {a.out}")


if __name__ == "__main__":
    main()
