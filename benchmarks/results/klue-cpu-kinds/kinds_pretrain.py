"""The recipe's pretraining stages only (vocab, shards, long shards, pretrain) for `korbert run` args."""
import sys
import time


def main() -> None:
    from corpus_tools import config as C
    from corpus_tools import shards, vocab
    from korbert import pretrain
    from korbert.recipe import RecipeConfig, stage_configs

    cfg = C.parse(RecipeConfig, sys.argv[1:], prog="korbert run")
    cfgs = stage_configs(cfg)["cfgs"]
    for name, fn in (("vocab", lambda: vocab.main(cfgs["vocab"])), ("shards", lambda: shards.main(cfgs["shards"])),
                     ("shards_long", lambda: shards.main(cfgs["shards_long"])), ("pretrain", lambda: pretrain.main(cfgs["pretrain"]))):
        t = time.time()
        print(f"== {name} ==", flush=True)
        fn()
        print(f"== {name} done in {time.time() - t:.0f} s", flush=True)


if __name__ == "__main__":  # (Dask's workers start by spawn: they import this file)
    main()
