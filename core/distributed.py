"""Process-rank helpers that are no-ops in a single process (torchrun / accelerate launch set RANK)."""

from __future__ import annotations


import os


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return rank() == 0


def barrier() -> None:
    if world_size() > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            from accelerate import PartialState

            PartialState()
        dist.barrier()


def broadcast(value):
    """Process 0's ``value`` in every process (``value`` itself in a single process)."""
    if world_size() <= 1:
        return value
    import torch.distributed as dist

    if not dist.is_initialized():
        from accelerate import PartialState

        PartialState()
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


_FENCES: list = []  # the StageLock of the stage this process computes (its fence)


def check_fence() -> None:
    """Raise :class:`kinject.errors.LeaseLost` when the stage this process computes was taken over by another
    process (its lease expired while this one stalled). Training loops call it every step (the training library's
    HookCallback), the engine before publishing: a superseded holder stops writing and publishes nothing."""
    from kinject.errors import Interrupted, LeaseLost

    Interrupted.raise_pending()  # a Ctrl-C that struck inside a log write (kinject.errors.Interrupted.install)
    if _FENCES and not _FENCES[-1].holds():
        raise LeaseLost(f"stage {_FENCES[-1].label}: this process's lease expired and another process took it over")
