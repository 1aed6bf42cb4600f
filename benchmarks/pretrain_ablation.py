"""What makes pretraining learn more per token: variants at an equal token budget, side by side.

Every variant pretrains BERT-mini on the same corpus for the same number of training tokens with
the same tokens per optimizer step, then is fine-tuned the same way on NSMC-R and KorQuAD. The
control (same architecture, random initialization, same fine-tuning) sits in the same table.

    python benchmarks/pretrain_ablation.py                                  # the default plan
    python benchmarks/pretrain_ablation.py --variants bert packed-mlm --seeds 0 1

Variants (`bert-lr1e-3` is the `cpu`/`demo` presets' recipe of before this ablation):
  bert-lr1e-3          document instances (BERT: 28 tokens each on average here), MLM + NSP, peak lr 1e-3
  bert                 the same at --lr (default 3e-4)
  packed-nsp           packed instances (sentences across documents fill 128 tokens), MLM + NSP
  packed-mlm           packed instances, MLM only (RoBERTa / Cramming)
  packed-mlm-nodrop    ... and no dropout while pretraining (Cramming)
  packed-mlm-mask25    ... with 25% of the tokens predicted instead of 15%
  packed-mlm-vocab/4   ... with a vocabulary of a quarter of --vocab-size (fewer embedding rows to train)
  bert-lr1e-3-vocab/2  the presets' recipe of before with half of --vocab-size
  bert-vocab/2         `bert` with half of --vocab-size
  packed-mlm-nodrop-mask25[-vocab/4]   the changes together
  packed-mlm-len64     packed MLM-only instances of at most 64 tokens instead of 128 (shorter rows leave the
                       unigram plateau sooner: benchmarks/results/pretrain-seqlen-probe.json); -lr1e-3 at lr 1e-3

Held-out MLM loss/accuracy are each variant's own held-out instances (packed or not, its own
vocabulary and mask rate), so they compare a variant with itself over time more than with the
others; the fine-tuning scores are the comparison.

Everything lands in --work (vocab, shards, models, fine-tuning runs; each step is skipped when its
output is already there, so a killed run resumes) and the table in --out, rewritten after every
row. `--jobs` variants run side by side (a variant whose shards are missing builds them first, one
build at a time), each pretraining and fine-tuning in one thread (OMP_NUM_THREADS=1): on a small machine shared with other
work, single-threaded processes share the cores gracefully, where a multi-threaded one that loses a
core to another process slows down several-fold. Nothing here is timed against anything else.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import threading
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from korbert.data_get import default_folder  # noqa: E402  (the data folder: $KORBERT_DATA, else ~/.cache/korbert/data)

from corpus_tools.artifacts import atomic_write_json, machine  # noqa: E402

SHARED = default_folder()
CONTROL = "control (random init)"
NODROP = ["hidden_dropout_prob=0", "attention_probs_dropout_prob=0"]
PACKED = {"instances": "packed"}
MLM = {"instances": "packed", "nsp": False}
MLM64 = {**MLM, "max_seq_len": 64}
VARIANTS = {  # pretraining settings over the defaults (--lr, --tokens, ...); "vocab": a share of --vocab-size
    "bert-lr1e-3": {"pretrain": {"lr": 1e-3}},
    "bert": {},
    "packed-nsp": {"shards": PACKED},
    "packed-mlm": {"shards": MLM, "pretrain": {"objective": "mlm"}},
    "packed-mlm-nodrop": {"shards": MLM, "pretrain": {"objective": "mlm", "override": NODROP}},
    "packed-mlm-mask25": {"shards": MLM, "pretrain": {"objective": "mlm", "mask_prob": 0.25}},
    "packed-mlm-nodrop-mask25": {"shards": MLM, "pretrain": {"objective": "mlm", "override": NODROP, "mask_prob": 0.25}},
    "packed-mlm-nodrop-mask25-vocab/4": {"shards": MLM, "vocab": 0.25, "pretrain": {"objective": "mlm", "override": NODROP, "mask_prob": 0.25}},
    "packed-mlm-vocab/4": {"shards": MLM, "vocab": 0.25, "pretrain": {"objective": "mlm"}},
    "bert-lr1e-3-vocab/2": {"vocab": 0.5, "pretrain": {"lr": 1e-3}},
    "bert-vocab/2": {"vocab": 0.5},
    "packed-mlm-len64": {"shards": MLM64, "pretrain": {"objective": "mlm"}},
    "packed-mlm-len64-lr1e-3": {"shards": MLM64, "pretrain": {"objective": "mlm", "lr": 1e-3}},
}
DEFAULT_PLAN = ["bert-lr1e-3", "bert", "packed-nsp", "packed-mlm", "packed-mlm-nodrop", "packed-mlm-mask25", "packed-mlm-vocab/4"]


def flags(d: dict) -> list[str]:
    out = []
    for k, v in d.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            out.append(flag if v else "--no-" + k.replace("_", "-"))
        elif isinstance(v, list):
            out += [flag, *map(str, v)]
        else:
            out += [flag, str(v)]
    return out


def korbert(args: list[str], log: Path, threads: int = 0) -> None:
    """One stage as its own process (its own memory and threads), output to its own log."""
    cmd = [sys.executable, "-m", "korbert.cli", *args]
    env = {**os.environ, "TQDM_DISABLE": "1", **({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)} if threads else {})}
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"pretrain_ablation: `korbert {' '.join(args[:2])}` failed (exit {p.returncode}); see {log}")


def results(folder: Path) -> dict | None:
    f = folder / "results.json"
    return json.loads(f.read_text()) if f.is_file() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--variants", nargs="+", default=DEFAULT_PLAN, choices=list(VARIANTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0], help="pretraining seeds (fine-tuning seed = 42 + seed)")
    ap.add_argument("--control", action=argparse.BooleanOptionalAction, default=True, help="fine-tune the random-init control too (seed 0's)")
    ap.add_argument("--corpus", nargs="+", default=[str(SHARED / "corpus" / "reviews.jsonl.gz"), str(SHARED / "corpus" / "petitions.jsonl.gz")])
    ap.add_argument("--nsmc-train", default=str(SHARED / "nsmc" / "ratings_train.txt"))
    ap.add_argument("--nsmc-test", default=str(SHARED / "nsmc" / "ratings_test.txt"))
    ap.add_argument("--korquad-dev", default=str(SHARED / "korquad" / "KorQuAD_v1.0_dev.json"))
    ap.add_argument("--tokens", type=int, default=1_500_000, help="pretraining budget per variant: training tokens (non-padding)")
    ap.add_argument("--tokens-per-batch", type=int, default=2048, help="tokens per optimizer step, the same for every variant")
    ap.add_argument("--model-size", default="mini")
    ap.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (variants named -lr... set their own)")
    ap.add_argument("--vocab-size", type=int, default=32000, help="the vocabulary of every variant but the vocab/4 ones")
    ap.add_argument("--nsmc-train-examples", type=int, default=20_000)
    ap.add_argument("--nsmc-test-examples", type=int, default=0, help="0: all test reviews")
    ap.add_argument("--nsmc-valid", default="2000", help="reviews held out of train for model selection: a count or a fraction")
    ap.add_argument("--korquad-train-examples", type=int, default=600, help="a seeded sample of the training articles' questions")
    ap.add_argument("--work", default="runs/ablation")
    ap.add_argument("--vocab-from", default="", help="a finished vocab folder of --vocab-size over the same corpus to reuse (e.g. runs/cpu/vocab)")
    ap.add_argument("--shards-from", default="", help="finished document-instance shards of that vocab to reuse (e.g. runs/cpu/shards)")
    ap.add_argument("--precision", default="auto", choices=["auto", "bf16", "bf16-stream", "fp32"],
                    help="korbert pretrain --precision (rows record what ran; rows before this option ran fp32)")
    ap.add_argument("--jobs", type=int, default=2, help="variants run side by side, one thread each")
    ap.add_argument("--out", default="benchmarks/results/pretrain-ablation.json")
    a = ap.parse_args()

    work = (ROOT / a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "ablation.log"
    out = ROOT / a.out
    table: list[dict] = []
    report = {
        "what": "pretraining variants at an equal token budget, fine-tuned alike (benchmarks/pretrain_ablation.py)",
        "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
        "machine": machine(),
        "settings": {k: v for k, v in vars(a).items() if k not in ("out",)},
        "rows": table,
    }

    planned = {(n, s) for s in a.seeds for n in a.variants} | ({(CONTROL, a.seeds[0])} if a.control else set())
    if out.is_file():  # rows of earlier invocations (other variants or seeds) stay in the table, and so do their commands
        before = json.loads(out.read_text())
        table += [r for r in before.get("rows", []) if (r["variant"], r["seed"]) not in planned]
        earlier = before.get("commands") or [before.get("command")]
        report["commands"] = [c for c in earlier if c and c != report["command"]] + [report["command"]]

    def save() -> None:
        report["load_average_at_save"] = os.getloadavg()
        atomic_write_json(out, report)

    build_lock = threading.Lock()  # one vocabulary or shards build at a time (Kiwi uses every core); the others wait for it

    def vocab_dir(size: int) -> Path:
        if size == a.vocab_size and a.vocab_from:
            return (ROOT / a.vocab_from).resolve()
        d = work / f"vocab-{size}"
        with build_lock:
            if not (d / "manifest.json").is_file():
                korbert(["vocab", "--inputs", *a.corpus, "--out", str(d), "--vocab-size", str(size), "--show", "0"], log)
        return d

    def shards_dir(size: int, sh: dict) -> Path:
        if not sh and size == a.vocab_size and a.shards_from:
            return (ROOT / a.shards_from).resolve()
        name = "-".join([f"{size}", sh.get("instances", "document"), "nsp" if sh.get("nsp", True) else "nonsp",
                         *([f"len{sh['max_seq_len']}"] if "max_seq_len" in sh else [])])
        d = work / f"shards-{name}"
        vocab = vocab_dir(size)
        with build_lock:
            korbert(["shards", "--tokenizer", str(vocab), "--inputs", *a.corpus, "--out", str(d), "--show", "0", *flags(sh)], log)
        return d

    feature_locks: dict[tuple, threading.Lock] = {}
    features_started: set[tuple] = set()

    def evaluate(task: str, model: Path, args: list[str], log: Path) -> None:
        """`korbert eval TASK` with the feature cache of the model's vocabulary shared by every variant
        (tokenizing 70k reviews takes minutes per run). Two builders of one cache would collide, so the
        first run of a (vocabulary, task) in this process runs under the lock (the cache is built or
        reused from disk), the others wait for it and then run side by side."""
        vocab = json.loads((model / "config.json").read_text())["vocab_size"]
        cmd = ["eval", task, "--model", str(model), "--features", str(work / f"features-{vocab}"), *args]
        key = (vocab, task)
        with feature_locks.setdefault(key, threading.Lock()):  # (setdefault is atomic under the GIL)
            first = key not in features_started
            if first:
                korbert(cmd, log, 1)
                features_started.add(key)
        if not first:
            korbert(cmd, log, 1)

    def finetune(model: Path, where: Path, seed: int, control: bool = False) -> dict:
        # each variant fine-tunes at the dropout its pretraining used (the nodrop ones at 0), as the committed
        # runs did when fine-tuning inherited it (`korbert eval` now sets its own: --dropout, 0.1 by default)
        said = json.loads((model / "config.json").read_text()).get("hidden_dropout_prob", 0.1)
        ctl = ["--control"] if control else []
        ctl += ["--dropout", str(said)]
        where.mkdir(parents=True, exist_ok=True)
        flog = where / "run.log"
        nsmc_out, kq_out = where / "nsmc", where / "korquad"
        if results(nsmc_out) is None:
            evaluate("nsmc", model, ["--train", a.nsmc_train, "--test", a.nsmc_test, "--out", str(nsmc_out),
                     "--max-train-examples", str(a.nsmc_train_examples), "--max-eval-examples", str(a.nsmc_test_examples),
                     "--valid-size", a.nsmc_valid, "--epochs", "1", "--lr", "1e-4", "--batch-size", "32", "--seed", str(42 + seed), *ctl], flog)
        if results(kq_out) is None:
            evaluate("korquad", model, ["--dev-file", a.korquad_dev, "--out", str(kq_out),
                     "--max-train-examples", str(a.korquad_train_examples), "--epochs", "2", "--lr", "2e-4", "--batch-size", "16",
                     "--seed", str(42 + seed), *ctl], flog)
        n, k = results(nsmc_out), results(kq_out)
        return {
            "nsmc_accuracy": round(100 * n["metrics"]["accuracy"], 2), "nsmc_n": n["n"],
            "korquad_em": round(k["metrics"]["exact_match"], 2), "korquad_f1": round(k["metrics"]["f1"], 2), "korquad_n": k["n"],
            "finetune_seconds": round(n["seconds"]["total"] + k["seconds"]["total"], 1),
        }

    lock = threading.Lock()

    def add(row: dict, what: str) -> None:
        with lock:
            table.append(row)
            table.sort(key=lambda r: (r["seed"], order.index(r["variant"]) if r["variant"] in order else len(order), r["variant"]))
            print(what, flush=True)
            save()

    def variant(name: str, seed: int) -> None:
        v = VARIANTS[name]
        size = round(a.vocab_size * v.get("vocab", 1))
        shards = shards_dir(size, v.get("shards", {}))
        run = work / f"{name.replace('/', '')}-seed{seed}"
        run.mkdir(parents=True, exist_ok=True)
        pre = {
            "model_size": a.model_size, "max_steps": 0, "max_tokens": a.tokens, "tokens_per_batch": a.tokens_per_batch,
            "lr": a.lr, "eval_every": 0, "eval_instances": 2000, "log_every": 50, "save_every": 500, "seed": seed, "precision": a.precision,
            **v.get("pretrain", {}),
        }
        t0 = time.time()
        korbert(["pretrain", "--shards", str(shards), "--out", str(run / "pretrain"), *flags(pre)], run / "run.log", 1)
        pm = json.loads((run / "pretrain" / "final" / "manifest.json").read_text())
        sm = json.loads((shards / "manifest.json").read_text())
        tr = sm["counts"]["train"]
        ran = json.loads((run / "pretrain" / "config.json").read_text())["run"].get("precision_used", "fp32")
        row = {
            "variant": name, "seed": seed, "command": report["command"], "vocab_size": pm["model_config"]["vocab_size"],
            "shards": {"instances": "document", "nsp": True, **v.get("shards", {})},
            "pretrain": {**{k: pre[k] for k in ("objective", "mask_prob", "override") if k in pre}, "precision": ran},
            "tokens_per_instance": tr.get("tokens_per_instance") or round(tr["tokens"] / tr["instances"], 2),
            "steps": pm["step"], "tokens": pm["tokens"], "pretrain_seconds": pm["seconds"],
            "held_out_mlm_loss": round(pm["eval"]["mlm_loss"], 4), "held_out_mlm_acc": round(100 * pm["eval"]["mlm_acc"], 2),
            "held_out_nsp_acc": round(100 * pm["eval"]["nsp_acc"], 2) if "nsp_acc" in pm["eval"] else None,
            **finetune(run / "pretrain" / "final", run, seed),
            "wall_seconds": round(time.time() - t0, 1),
        }
        add(row, f"{name} seed {seed}: NSMC-R {row['nsmc_accuracy']}, KorQuAD EM {row['korquad_em']} F1 {row['korquad_f1']}, "
                 f"held-out MLM acc {row['held_out_mlm_acc']}%")

    def control() -> None:  # the first variant's architecture and vocabulary, randomly initialized
        first, seed = a.variants[0], a.seeds[0]
        model = work / f"{first.replace('/', '')}-seed{seed}" / "pretrain" / "final"
        row = {"variant": CONTROL, "seed": seed, "command": report["command"], **finetune(model, work / f"control-seed{seed}", seed, control=True)}
        add(row, f"control: NSMC-R {row['nsmc_accuracy']}, KorQuAD EM {row['korquad_em']} F1 {row['korquad_f1']}")

    order = [*VARIANTS, CONTROL]
    jobs = [(variant, (n, s)) for s in a.seeds for n in a.variants]
    if a.control:  # in the first variant's job, right after it: the table has its anchor early
        jobs[0] = (lambda *args: (variant(*args), control()), jobs[0][1])
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for f in [pool.submit(fn, *args) for fn, args in jobs]:
            f.result()
    controls = {r["seed"]: r for r in table if r["variant"] == CONTROL}
    for r in table:  # each row against the control fine-tuned with the same seed (else the first control's)
        ctl = controls.get(r["seed"], next(iter(controls.values()), None))
        if ctl is not None and r is not ctl:
            r["nsmc_vs_control"] = round(r["nsmc_accuracy"] - ctl["nsmc_accuracy"], 2)
            r["korquad_f1_vs_control"] = round(r["korquad_f1"] - ctl["korquad_f1"], 2)
    base = next((r for r in table if r["variant"] == a.variants[0] and r["seed"] == a.seeds[0]), None)
    if base is not None:  # pretraining speed against the first variant (the recipe of before), same run
        tag = lambda r: f"{r['variant']}_seed{r['seed']}".replace("-", "_").replace("/", "_")  # noqa: E731
        report.update({
            f"ratio_{tag(r)}_pretrain_tokens_per_s_vs_{tag(base)}": round(
                (r["tokens"] / r["pretrain_seconds"]) / (base["tokens"] / base["pretrain_seconds"]), 3)
            for r in table if "tokens" in r and r is not base and r.get("command") == base.get("command")  # this invocation's rows only
        })
    save()
    print(f"-> {out}")


if __name__ == "__main__":
    main()
