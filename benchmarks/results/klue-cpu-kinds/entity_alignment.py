"""The share of KLUE-NER dev entities whose edges fall on token edges, for the 16,000-piece vocabularies the
KLUE-NER models here were trained with (benchmarks/tokenizer_kinds.py --klue-ner measured the study's 8,000-piece
ones). Run from the repository root:

    python benchmarks/results/klue-cpu-kinds/entity_alignment.py > benchmarks/results/klue-cpu-kinds/entity-alignment.json
"""
import json
import sys
from pathlib import Path

sys.path[:0] = ["benchmarks", "."]
from tokenizer_kinds import ner_entities  # noqa: E402

from corpus_tools.artifacts import machine  # noqa: E402
from evals.tokenizer_metrics import answer_alignment  # noqa: E402
from korbert import foreign  # noqa: E402
from korbert.folders import tokenizer_files_sha256  # noqa: E402

NER = "../shared/data/klue/klue-ner-v1.1_dev.tsv"
VOCABS = {"morpheme": "runs/cpu-klue/vocab", "morpheme-attached": "runs/kind-morpheme-attached/vocab", "plain": "runs/kind-plain/vocab"}

entities = ner_entities(Path(NER))
out = {"what": "KLUE-NER dev entities whose first and last characters fall on token boundaries (issue 60)", "klue_ner": NER,
       "command": "python benchmarks/results/klue-cpu-kinds/entity_alignment.py", "machine": machine(), "kinds": {}}
for kind, vocab in VOCABS.items():
    tok = foreign.load(Path(vocab), kind)
    r = answer_alignment(tok, entities)
    out["kinds"][kind] = {"vocab": vocab, "tokenizer": tokenizer_files_sha256(Path(vocab)), "vocab_size": len(tok),
                          "entities": r["answers"], "aligned": r["aligned"], "aligned_share": r["aligned_share"]}
for kind in ("morpheme", "morpheme-attached"):
    out[f"ratio_{kind}_vs_plain_aligned_share"] = round(out["kinds"][kind]["aligned_share"] / out["kinds"]["plain"]["aligned_share"], 4)
print(json.dumps(out, indent=1))
