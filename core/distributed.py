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
