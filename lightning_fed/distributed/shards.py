"""Which process trains which centers: contiguous shards balanced by training steps.

Every rank computes the same split from the same inputs (the training-set sizes, which every rank
knows because every rank builds the same seeded federation), so no rank has to be told its shard.
Shards are contiguous so that gathering them in rank order gives the centers back in center order.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["chunk_spans", "prefix_lengths", "shard_bounds"]


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


def chunk_spans(bounds: Sequence[tuple[int, int]], models: int, chunk: int) -> list[tuple[int, int]]:
    """The models each process predicts when chunks of ``chunk`` models stay the one-process chunks.

    Chunk ``k`` holds models ``[k chunk, min((k + 1) chunk, M))``; the process whose shard holds its
    first model computes it. Process ``r`` (shard ``[lo_r, hi_r)``) thus predicts
    ``[a_r, b_r)`` with ``a_r = ceil(lo_r / chunk) chunk`` and ``b_r = min(M, ceil(hi_r / chunk)
    chunk)`` (empty, ``b_r = a_r``, when no chunk starts in its shard). The spans are contiguous
    in rank order and cover ``[0, M)``.

    Args:
        bounds: Every process's shard ``(lo_r, hi_r)`` (:func:`shard_bounds`).
        models: ``M``.
        chunk: Models per chunk (>= 1).
    """
    spans = []
    for lo, hi in bounds:
        a = min(models, -(-lo // chunk) * chunk)
        b = min(models, -(-hi // chunk) * chunk) if a < hi else a
        spans.append((a, b))
    return spans


def prefix_lengths(bounds: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> list[int]:
    """Rows at the start of each shard that earlier processes' spans (:func:`chunk_spans`) reach into:
    ``p_q = max(0, min(hi_q, max_{r < q} b_r) - lo_q)`` (fewer than ``chunk`` per boundary)."""
    out, reach = [], 0
    for (lo, hi), (_, b) in zip(bounds, spans, strict=True):
        out.append(max(0, min(hi, reach) - lo))
        reach = max(reach, b)
    return out
