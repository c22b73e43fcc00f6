"""Shapley credit assignment over a center's active partners (ABPS Sec. 4.2, Eq. 4; Sec. 5.4).

Players are the ``m = |P_i|`` partners of center ``i``; a coalition ``S`` is a bitmask (player ``k``
is bit ``1 << k``, in the order of ``P_i``) and ``U_i(S)`` its utility (normalized validation AUROC of
``i``'s model aggregated with ``S``). Eq. 4:

    ``phi_j = sum_{S subset P \\ {j}} |S|! (m - |S| - 1)! / m! * (U(S + j) - U(S))``.

Exact values need all ``2^m`` coalitions (the paper's ``m <= 5``); beyond that, truncated Monte-Carlo
(TMC) Shapley (Ghorbani & Zou 2019) averages marginal contributions along random permutations.

Both paths are two-phase so the caller can score every coalition in ONE batched forward:

1. masks: :func:`coalitions_exact` (all ``2^m``) or :func:`tmc_masks` of :func:`tmc_permutations`;
2. the caller evaluates ``U`` on those masks, in a batch;
3. values: :func:`exact_shapley_batched` on the ``[B, 2^m]`` table (one matmul), or
   :func:`tmc_shapley` on a table indexed by mask (a dense tensor, a ``{mask: U}`` dict or a
   callable).

:func:`shapley_values` chains the three steps around a batched ``utility_table_fn``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

import torch
from torch import Tensor

__all__ = [
    "coalitions_exact",
    "exact_shapley",
    "exact_shapley_batched",
    "shapley_values",
    "shapley_weights",
    "tmc_masks",
    "tmc_permutations",
    "tmc_shapley",
]

UtilityTable = Tensor | Mapping[int, float] | Callable[[int], float]


def _num_players(table_size: int) -> int:
    m = table_size.bit_length() - 1
    if table_size < 1 or 1 << m != table_size:
        raise ValueError(f"a utility table over all coalitions has 2^m entries, got {table_size}")
    return m


def _coalition_weight(s: int, m: int) -> float:
    """``w(s) = s! (m - s - 1)! / m!``: Eq. 4's weight of a coalition of size ``s`` not holding ``j``."""
    return math.factorial(s) * math.factorial(m - s - 1) / math.factorial(m)


@lru_cache(maxsize=32)
def _weights(m: int) -> Tensor:
    masks = torch.arange(1 << m)
    member = (masks[:, None] >> torch.arange(m)[None, :]) & 1  # [2^m, m]
    size = member.sum(1)
    w = torch.tensor([_coalition_weight(s, m) for s in range(m)] + [0.0], dtype=torch.float64)
    plus = w[(size - 1).clamp(min=0)][:, None].expand(-1, m)  # mask holds j: S = mask - j, |S| = |mask| - 1
    minus = w[size][:, None].expand(-1, m)  # mask lacks j: S = mask
    return torch.where(member.bool(), plus, -minus).contiguous()


def shapley_weights(m: int) -> Tensor:
    """The ``[2^m, m]`` matrix ``W`` with ``phi = U @ W`` (Eq. 4 as one linear map).

    ``W[mask, j] = +w(|mask| - 1)`` if ``j`` is in ``mask`` and ``-w(|mask|)`` otherwise, with
    ``w(s) = s! (m - s - 1)! / m!`` (float64; a fresh copy).
    """
    if m < 0:
        raise ValueError(f"number of players must be >= 0, got {m}")
    return _weights(m).clone()


def exact_shapley(utility: Tensor) -> Tensor:
    """Exact Shapley values by the sum of Eq. 4 (reference loop form).

    Args:
        utility: ``[2^m]``, ``utility[mask] = U(mask)``.

    Returns:
        float64 ``[m]``; efficiency: ``phi.sum() == U(full) - U(empty)``.
    """
    u = utility.detach().reshape(-1).to("cpu", torch.float64).tolist()
    m = _num_players(len(u))
    phi = torch.zeros(m, dtype=torch.float64)
    for j in range(m):
        bit = 1 << j
        total = 0.0
        for mask in range(1 << m):
            if not mask & bit:
                total += _coalition_weight(mask.bit_count(), m) * (u[mask | bit] - u[mask])
        phi[j] = total
    return phi


def exact_shapley_batched(utility: Tensor) -> Tensor:
    """Exact Shapley values of ``B`` games with the same ``m`` at once: ``phi = utility @ W``.

    Args:
        utility: ``[B, 2^m]`` tables indexed by bitmask.

    Returns:
        float64 ``[B, m]`` on ``utility``'s device.
    """
    if utility.dim() != 2:
        raise ValueError(f"batched utility must be [B, 2^m], got {list(utility.shape)}")
    m = _num_players(utility.shape[1])
    return utility.to(torch.float64) @ _weights(m).to(utility.device)


def coalitions_exact(m: int) -> list[int]:
    """Every coalition of ``m`` players as a bitmask, ``[0, 1, ..., 2^m - 1]``."""
    if m < 0:
        raise ValueError(f"number of players must be >= 0, got {m}")
    return list(range(1 << m))


def tmc_permutations(m: int, num_permutations: int, generator: torch.Generator) -> Tensor:
    """``num_permutations`` uniform permutations of ``m`` players, LongTensor ``[B, m]``."""
    if m < 0 or num_permutations < 1:
        raise ValueError(f"need m >= 0 and num_permutations >= 1, got {m}, {num_permutations}")
    return torch.argsort(torch.rand(num_permutations, m, generator=generator), dim=1)


def _prefix_masks(permutations: Tensor) -> Tensor:
    """``[B, m + 1]`` coalitions along each permutation: empty, first player, first two, ..., all."""
    bits = torch.ones_like(permutations) << permutations
    empty = torch.zeros(permutations.shape[0], 1, dtype=permutations.dtype, device=permutations.device)
    return torch.cat([empty, bits.cumsum(1)], dim=1)  # distinct bits: sum == OR


def tmc_masks(permutations: Tensor) -> list[int]:
    """Unique coalitions (ascending bitmasks) whose utility :func:`tmc_shapley` needs.

    These are the prefix coalitions of every permutation (at most ``B (m - 1) + 2`` of them). All
    are needed whatever the truncation tolerance: truncation is decided from the utilities, which
    the caller evaluates in one batch beforehand, so here it changes the estimator, not the cost.
    """
    return torch.unique(_prefix_masks(permutations.long())).tolist()


def _lookup(utility: UtilityTable, masks: Tensor) -> Tensor:
    """Utilities of ``masks`` (any shape) from a dense table, a mapping or a callable."""
    if isinstance(utility, Tensor):
        return utility.detach().reshape(-1).to("cpu", torch.float64)[masks]
    uniq, inverse = torch.unique(masks, return_inverse=True)
    get = utility.__getitem__ if isinstance(utility, Mapping) else utility
    values = torch.tensor([float(get(k)) for k in uniq.tolist()], dtype=torch.float64)
    return values[inverse]


def tmc_shapley(utility: UtilityTable, permutations: Tensor, truncation_tol: float = 0.0) -> Tensor:
    """Truncated Monte-Carlo Shapley values (Ghorbani & Zou 2019).

    Along each permutation the marginal contribution of a player is ``U(prefix + j) - U(prefix)``;
    the estimate is the mean over permutations. Truncation: once a prefix is within
    ``truncation_tol`` of the grand coalition, ``|U(full) - U(prefix)| <= tol``, the remaining
    marginals of that permutation are 0. ``truncation_tol = 0`` disables truncation, so the estimate
    is an unbiased average of exact permutation marginals (and efficient per permutation).

    Args:
        utility: ``U`` by bitmask: a dense ``[2^m]`` tensor, a ``{mask: U}`` mapping covering
            :func:`tmc_masks` (``permutations``), or a callable ``mask -> U``.
        permutations: ``[B, m]`` from :func:`tmc_permutations`.
        truncation_tol: Truncation tolerance, ``>= 0``.

    Returns:
        float64 ``[m]``.
    """
    if truncation_tol < 0:
        raise ValueError(f"truncation_tol must be >= 0, got {truncation_tol}")
    perms = permutations.detach().to("cpu", torch.int64)
    if perms.dim() != 2 or perms.shape[0] < 1:
        raise ValueError(f"permutations must be [B, m] with B >= 1, got {list(perms.shape)}")
    b, m = perms.shape
    values = _lookup(utility, _prefix_masks(perms))  # [B, m + 1]
    marginals = values[:, 1:] - values[:, :-1]  # [B, m], column k belongs to player perms[:, k]
    if truncation_tol > 0:
        full = values[:, -1:]
        close = ((full - values[:, :-1]).abs() <= truncation_tol).to(torch.int8)
        marginals = marginals.masked_fill(close.cummax(1).values.bool(), 0.0)
    phi = torch.zeros(m, dtype=torch.float64).index_add_(0, perms.reshape(-1), marginals.reshape(-1))
    return phi / b


def shapley_values(
    num_players: int,
    utility_table_fn: Callable[[list[int]], Tensor | Sequence[float]],
    exact_max: int = 5,
    num_permutations: int = 8,
    generator: torch.Generator | None = None,
    truncation_tol: float = 0.0,
) -> Tensor:
    """Shapley values of ``num_players`` partners: exact if ``m <= exact_max``, else TMC (Sec. 5.4).

    Args:
        num_players: ``m = |P_i|``.
        utility_table_fn: Batched utility: a list of bitmasks -> their utilities, same order
            (called once).
        exact_max: Largest ``m`` solved exactly (paper: 5).
        num_permutations: TMC permutations ``B`` (paper: 8).
        generator: Draws the TMC permutations; required when ``m > exact_max``.
        truncation_tol: TMC truncation tolerance (0: none).

    Returns:
        float64 ``[m]`` (empty for ``m = 0``).
    """
    if num_players < 0:
        raise ValueError(f"num_players must be >= 0, got {num_players}")
    if num_players == 0:
        return torch.zeros(0, dtype=torch.float64)
    if num_players <= exact_max:
        masks = coalitions_exact(num_players)
        table = torch.as_tensor(utility_table_fn(masks), dtype=torch.float64).reshape(1, -1)
        return exact_shapley_batched(table)[0]
    if generator is None:
        raise ValueError(f"TMC Shapley for {num_players} > exact_max={exact_max} players needs a generator")
    perms = tmc_permutations(num_players, num_permutations, generator)
    masks = tmc_masks(perms)
    values = torch.as_tensor(utility_table_fn(masks), dtype=torch.float64).reshape(-1).tolist()
    return tmc_shapley(dict(zip(masks, values, strict=True)), perms, truncation_tol)
