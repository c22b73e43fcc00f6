"""Isolation read off the byte ledger: a center is isolated in a round when it sent and received no
bytes (nothing on any edge touching it, the server's edges included).

This definition holds for every method: a FedAvg center that uploads to the server is not isolated,
one that is unavailable that round is; a gossip center with a neighbour is not; a Local-only center
always is. With client sampling (``trainer.centers_per_round``) only the centers that took part in
a round count (``among``): a center not sampled neither sent nor received by design and is left out
of the round's numerator and denominator. An algorithm may report its own ``isolation_rate``
(ABPS: the share of centers that rested, i.e. had no partner in the matching); it then overrides
the ledger's ``isolation_rate``, while ``ledger_isolation_rate`` always follows the definition
above. The two can disagree: an ABPS center that rests in round 0 but publishes its metadata
descriptor to the directory (:data:`~lightning_fed.comm.ledger.SERVER`) has sent bytes, so it rested
without being isolated on the ledger; a payload its receiver rejects still counts as sent.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["round_isolation", "run_isolation"]


def round_isolation(bytes_per_center: Tensor, among: Tensor | None = None) -> dict[str, float]:
    """One round's isolation from the bytes on edges touching each center that round.

    Args:
        bytes_per_center: ``[C]`` bytes per center (``Ledger.per_center(C, r)``).
        among: Bool ``[C]``: the centers that took part (sampled); None: all of them.

    Returns:
        ``isolated_centers`` (count), ``ledger_isolation_rate`` and ``isolation_rate`` (both the
        share of isolated centers; an algorithm's own ``isolation_rate`` may replace the latter).
    """
    if bytes_per_center.ndim != 1 or not bytes_per_center.numel():
        raise ValueError(
            f"`bytes_per_center` must have shape [C] with C >= 1, got {tuple(bytes_per_center.shape)}"
        )
    part = torch.ones_like(bytes_per_center, dtype=torch.bool) if among is None else among.cpu()
    isolated = int(((bytes_per_center == 0) & part).sum())
    rate = isolated / max(1, int(part.sum()))
    return {"isolated_centers": isolated, "ledger_isolation_rate": rate, "isolation_rate": rate}


def run_isolation(bytes_by_round: Tensor, among: Tensor | None = None) -> dict[str, float]:
    """Isolation over a run from the bytes per round and center.

    Args:
        bytes_by_round: ``[R, C]`` bytes on edges touching center ``c`` in round ``r``
            (``Ledger.per_center_by_round(C, R)``).
        among: Bool ``[R, C]``: which centers took part in each round; None: all.

    Returns:
        ``isolated_center_rounds`` (count), ``ledger_isolation_rate`` and ``isolation_rate`` (the mean
        over rounds of the per-round share, i.e. isolated center-rounds / the center-rounds taken
        part in, ``R C`` without sampling); empty for ``R = 0``.
    """
    if bytes_by_round.ndim != 2:
        raise ValueError(f"`bytes_by_round` must have shape [R, C], got {tuple(bytes_by_round.shape)}")
    if not bytes_by_round.numel():
        return {}
    part = torch.ones_like(bytes_by_round, dtype=torch.bool) if among is None else among.cpu()
    isolated = int(((bytes_by_round == 0) & part).sum())
    rate = isolated / max(1, int(part.sum()))
    return {"isolated_center_rounds": isolated, "ledger_isolation_rate": rate, "isolation_rate": rate}
