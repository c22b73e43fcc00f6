"""Which process trains which centers: contiguous shards balanced by training steps.

Every rank computes the same split from the same inputs (the training-set sizes, which every rank
knows because every rank builds the same seeded federation), so no rank has to be told its shard.
Shards are contiguous so that gathering them in rank order gives the centers back in center order.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["shard_bounds"]


def shard_bounds(costs: Sequence[float], world_size: int) -> list[tuple[int, int]]:
    """Split models ``0..M-1`` into ``world_size`` contiguous, non-empty ranges of similar total cost.

    Boundary ``b_r`` (``r = 1..W-1``) is the index where the running cost ``sum_{i < b} cost_i`` comes
    closest to ``r / W`` of the total, kept at least one model after ``b_{r-1}`` and leaving at least
    one model for each later rank. With equal costs this is an even split (sizes differ by at most
    one).

    Args:
        costs: Cost of each model (e.g. its optimizer steps per round); non-negative.
        world_size: Number of processes ``W``.

    Returns:
        ``[(lo_r, hi_r)]`` per rank: rank ``r`` trains models ``lo_r <= m < hi_r``.

    Raises:
        ValueError: Fewer models than processes (a rank would train no center).
    """
    m, w = len(costs), int(world_size)
    if w < 1:
        raise ValueError(f"world size must be >= 1, got {w}")
    if m < w:
        raise ValueError(
            f"fabric: {w} processes (fabric.devices x fabric.num_nodes) but the federation trains only "
            f"{m} model{'s' if m != 1 else ''}, so a process would train no center: use at most {m} "
            "processes (or a method that trains one model per center)"
        )
    if any(c < 0 for c in costs):
        raise ValueError("shard costs must be non-negative")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))
    total = prefix[-1]
    bounds = [0]
    for r in range(1, w):
        lo, hi = bounds[-1] + 1, m - (w - r)
        target = total * r / w if total > 0 else None
        if target is None:
            best = max(lo, min(hi, round(m * r / w)))
        else:
            best = min(range(lo, hi + 1), key=lambda b: (abs(prefix[b] - target), b))
        bounds.append(best)
    bounds.append(m)
    return [(bounds[r], bounds[r + 1]) for r in range(w)]
