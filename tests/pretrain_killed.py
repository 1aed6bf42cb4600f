"""`korbert pretrain` that SIGKILLs itself once optimizer step N is done (and logged, evaluated and
checkpointed as due), as a crash would: the tests' kill-and-resume runs. Also under torchrun.

    python tests/pretrain_killed.py N [korbert pretrain options...]
"""

import os
import sys

from corpus_tools.config import run_command
from korbert.pretrain import Trainer, cli


def main() -> int:
    kill_at = int(sys.argv[1])
    step, interval = Trainer.step, Trainer.interval

    def die_at(self) -> None:
        if self.step_no == kill_at:
            os.kill(os.getpid(), 9)

    def step_then_die(self, micro):  # a step with no log line after it
        step(self, micro)
        if self.step_no % self.cfg.log_every and not self.progress() >= 1:
            die_at(self)

    def interval_then_die(self, done):
        interval(self, done)
        die_at(self)

    Trainer.step, Trainer.interval = step_then_die, interval_then_die
    return run_command("pretrain", cli, sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
