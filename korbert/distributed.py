"""The processes of a run: torchrun's environment (or one process), the clock every rank agrees
on, and how many DataLoader workers a process gets."""

from __future__ import annotations

import os

from corpus_tools.text import InputError


class Dist:
    """torchrun's environment, or one process."""

    def __init__(self, device_kind: str):
        import torch
        import torch.distributed as dist

        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available() if device_kind == "auto" else device_kind == "cuda"
        if cuda and not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is visible")
        self.device = torch.device(f"cuda:{self.local_rank}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if cuda else "gloo")
        self.main = self.rank == 0

    def all_sum(self, t):
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(t)
        return t

    def gather(self, obj) -> list:
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self):
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self):
        if self.world > 1:
            import torch.distributed as dist

            dist.destroy_process_group()


def default_workers(cuda: bool = True) -> int:
    """DataLoader workers per process when not given. On GPUs: the CPU cores this process may use,
    shared by the processes of this machine (torchrun's LOCAL_WORLD_SIZE; not when the launcher
    already pinned each process to its own cores), less one for the training process itself. On a
    CPU the training process's own threads use the cores: one worker."""
    if not cuda:
        return 1
    total = os.cpu_count() or 1
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else total
    shared = mine == total  # not pinned: the local processes share the machine's cores
    return max(0, mine // (int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if shared else 1) - 1)


class AgreedClock:
    """Rank 0's training time as every rank sees it, one step late: the clock carried by step s's
    all-reduce is read at step s + 1, when it has long arrived, so no rank waits on the step it just
    queued (a host hiccup on one rank would otherwise stall every GPU). All ranks read the same
    values, so they agree on progress, learning rate and the stop."""

    def __init__(self, seconds: float):
        self.seconds, self.pending = seconds, None

    def push(self, value, event) -> float:
        """value: this step's clock (a CPU tensor, maybe still in flight); event: a CUDA event recorded
        after its copy (None: it is there). -> the previous step's clock."""
        if self.pending is not None:
            before, done = self.pending
            if done is not None:
                done.synchronize()  # the previous step's copy: finished unless the host is a step ahead
            self.seconds = float(before)
        self.pending = (value, event)
        return self.seconds
