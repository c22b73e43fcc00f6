"""Diagnostic workload of referral (EdgeDRM App. D.1, Table 4).

With ``V_q`` the clients visited by query ``q`` (``T_q`` moves, no revisits) and ``H_g`` the clients
of tier ``g``:

    C_i = sum_q 1{i in V_q},   C_g = sum_{i in H_g} C_i,   C_all = sum_i C_i = sum_q (T_q + 1).

Reported: calls per query ``C_all / Q``; per tier the share of calls ``100 C_g / C_all`` (percent) and
the calls per 100 arrivals ``100 C_g / Q``; and the peak share ``100 max_i C_i / C_all``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lightning_fed.referral.routers import Routes

__all__ = ["client_calls", "edge_traffic", "workload"]


def client_calls(routes: Routes, num_clients: int) -> Tensor:
    """``C_i`` for every client ``[C]`` (int64)."""
    v = routes.visited[routes.valid]
    return torch.bincount(v, minlength=num_clients)


def edge_traffic(routes: Routes, num_clients: int) -> Tensor:
    """Moves along each undirected edge ``[C, C]`` (symmetric int64)."""
    src, dst = routes.visited[:, :-1], routes.visited[:, 1:]
    moved = dst >= 0
    u, v = src[moved], dst[moved]
    flat = torch.bincount(u * num_clients + v, minlength=num_clients * num_clients)
    out = flat.reshape(num_clients, num_clients)
    return out + out.T


def workload(routes: Routes, num_clients: int, tiers: Sequence[str] | None = None) -> dict[str, float]:
    """Workload columns (module docstring) for one set of routes.

    Args:
        routes: The walks.
        num_clients: ``C``.
        tiers: Tier name per client (e.g. ``graph.tiers``); None puts every client in tier ``all``.

    Returns:
        ``calls_per_query``, ``incident_per_query``, ``peak_share``, and per tier ``g``
        ``share_<g>`` and ``calls_per_100_<g>``.

    Raises:
        ValueError: If ``tiers`` does not name one tier per client.
    """
    if tiers is not None and len(tiers) != num_clients:
        raise ValueError(f"graph.tiers has {len(tiers)} entries for {num_clients} clients")
    calls = client_calls(routes, num_clients).to(torch.float64)
    q, total = float(routes.visited.shape[0]), float(calls.sum())
    out = {
        "calls_per_query": total / q,
        "incident_per_query": float(routes.incident.to(torch.float64).mean()),
        "peak_share": 100.0 * float(calls.max()) / total,
    }
    names = list(tiers) if tiers is not None else ["all"] * num_clients
    for g in dict.fromkeys(names):
        members = torch.tensor([n == g for n in names])
        c_g = float(calls[members].sum())
        out[f"share_{g}"] = 100.0 * c_g / total
        out[f"calls_per_100_{g}"] = 100.0 * c_g / q
    return out
