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

__all__ = ["CollectiveTimer", "gather_rows", "pick_owned"]


class CollectiveTimer:
    """Wall time spent inside collectives (``total`` seconds, growing; read it before and after), and
    the bytes this process contributed to them, by what they carried and dtype (``sent``, e.g.
    ``{"rows": {"torch.bfloat16": n}, "logits": {"torch.float32": m}}``; docs/scale_out.md)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.calls = 0
        self.sent: dict[str, dict[str, int]] = {}

    def add(self, seconds: float, sent: Tensor | None = None, what: str = "rows") -> None:
        """Book ``seconds`` of one collective to which this process contributed ``sent`` (``what``)."""
        self.total += seconds
        self.calls += 1
        if sent is not None:
            book = self.sent.setdefault(what, {})
            key = str(sent.dtype)
            book[key] = book.get(key, 0) + sent.numel() * sent.element_size()

    def bytes_sent(self, dtype: str | None = None) -> int:
        """Bytes this process contributed so far (of one dtype, e.g. ``"torch.bfloat16"``, or all)."""
        return sum(n for book in self.sent.values() for k, n in book.items() if dtype in (None, k))


def gather_rows(
    fabric: Fabric,
    local: Tensor,
    counts: Sequence[int],
    timer: CollectiveTimer | None = None,
    what: str = "rows",
) -> Tensor:
    """All ranks' rows in rank order: ``[sum_r counts[r], ...]`` from each rank's ``[counts[rank], ...]``.

    Args:
        fabric: A launched Fabric (its ``all_gather`` is the collective).
        local: This rank's rows; the trailing shape and dtype must match on every rank.
        counts: Rows of every rank (``counts[fabric.global_rank] == local.shape[0]``).
        timer: Books the collective's wall time (CUDA work is synchronized around it) and bytes.
        what: What the rows are, for the timer's byte book.

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
        timer.add(time.perf_counter() - start, padded, what)
    return torch.cat([gathered[r, : counts[r]] for r in range(len(counts))])


def pick_owned(
    fabric: Fabric, values: Tensor, owners: Tensor, timer: CollectiveTimer | None = None
) -> Tensor:
    """Every process's ``values [K]`` replaced, entry by entry, by those of the process that owns it.

    All processes compute ``values`` for the same ``K`` entries (a replicated replay), but only the
    owner of entry ``k`` (process ``owners[k]``) computed it from exact inputs; one ``all_gather``
    of ``[K]`` lets every process take entry ``k`` from its owner. Entries with ``owners[k] < 0``
    were computed alike everywhere and keep this process's value.

    Args:
        fabric: A launched Fabric.
        values: ``[K]`` on every process (same shape and dtype everywhere).
        owners: int64 ``[K]``: the process owning each entry, or -1.
        timer: Books the collective.

    Returns:
        ``[K]``, the same on every process.
    """
    if fabric.world_size == 1 or not len(values):
        return values
    start = time.perf_counter()
    # on the collective's device (NCCL gathers CUDA tensors only; the norms live on the CPU)
    local = values.contiguous().to(getattr(fabric, "device", values.device))
    gathered = fabric.all_gather(local)  # [W, K]
    if timer is not None:
        timer.add(time.perf_counter() - start, local, "owner values")
    owners = owners.to(gathered.device)
    out = local.clone()
    owned = torch.nonzero(owners >= 0).reshape(-1)
    out[owned] = gathered[owners[owned], owned]
    return out.to(values.device)
