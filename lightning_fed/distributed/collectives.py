"""Gathering per-rank shards of stacked rows over Fabric's collectives, timed.

``fabric.all_gather`` needs the same shape on every rank; shards differ by up to a few rows when the
centers do not divide evenly, so every rank pads its shard to the largest one, gathers
``[W, m_max, ...]`` and cuts each rank's padding off again. Every rank knows every shard's size
(:func:`~lightning_fed.distributed.shards.shard_bounds` is computed identically everywhere), so no
size exchange is needed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from lightning.fabric import Fabric
from torch import Tensor

__all__ = ["CollectiveTimer", "gather_rows"]


class CollectiveTimer:
    """Wall time spent inside collectives (``total`` seconds, growing; read it before and after)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.calls = 0

    def add(self, seconds: float) -> None:
        """Book ``seconds`` of one collective."""
        self.total += seconds
        self.calls += 1


def gather_rows(
    fabric: Fabric, local: Tensor, counts: Sequence[int], timer: CollectiveTimer | None = None
) -> Tensor:
    """All ranks' rows in rank order: ``[sum_r counts[r], ...]`` from each rank's ``[counts[rank], ...]``.

    Args:
        fabric: A launched Fabric (its ``all_gather`` is the collective).
        local: This rank's rows; the trailing shape and dtype must match on every rank.
        counts: Rows of every rank (``counts[fabric.global_rank] == local.shape[0]``).
        timer: Books the collective's wall time (CUDA work is synchronized around it).

    Returns:
        The concatenation of every rank's rows, on ``local``'s device.
    """
    rank = fabric.global_rank
    if local.shape[0] != counts[rank]:
        raise ValueError(f"rank {rank} holds {local.shape[0]} rows but its shard has {counts[rank]}")
    if fabric.world_size == 1:
        return local
    width = max(counts)
    padded = local
    if local.shape[0] < width:
        padded = torch.cat([local, local.new_zeros(width - local.shape[0], *local.shape[1:])])
    cuda = local.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(local.device)
    start = time.perf_counter()
    gathered = fabric.all_gather(padded.contiguous())
    if cuda:
        torch.cuda.synchronize(local.device)
    if timer is not None:
        timer.add(time.perf_counter() - start)
    return torch.cat([gathered[r, : counts[r]] for r in range(len(counts))])
