"""Sparse-mask helpers of DisPFL (Dai et al., ICML 2022): layer densities, prune/regrow, schedule, wire form.

A mask is a bool tensor per parameter name, stacked over clients: ``{name: [C, *shape]}``, True where
the client's sparse sub-network has a weight. Every client keeps the same number of active weights
``n_l`` in layer ``l`` at all times (pruning and regrowth exchange equal counts), which is what
lets the wire carry the active values as a dense ``[E, n_l]`` block per layer.

* Layer densities (sparse initialization): :class:`ERK` (Erdős–Rényi-Kernel, the DisPFL
  default, Evci et al. 2020) or :class:`Uniform`. ERK gives layer ``l`` the density
  ``d_l = min(1, eps * (sum_i s_i / prod_i s_i) ** power)`` for its shape ``s``, with ``eps`` solved
  so that ``sum_l d_l N_l = d sum_l N_l``: layers whose density would exceed 1 are made dense and
  ``eps`` is solved again over the others. Small tensors (biases, norm scales: ``sum/prod = 1``)
  therefore end up dense and large kernels sparser. Counts are ``n_l = max(1, floor(d_l N_l))``.
* Drop fraction (cosine annealing):
  ``alpha_t = anneal_factor / 2 * (1 + cos(pi * min(t, T) / T))``, from ``anneal_factor`` at
  round 0 down to 0 at round ``T`` (and 0 after it).
* Mask update: each client prunes ``k_l = ceil(alpha_t n_l)`` of its active weights of
  smallest magnitude ``|w|`` and regrows ``k_l`` inactive coordinates (including the ones just
  pruned) of largest gradient magnitude ``|g|``. Ties go to the lower flat index (stable sorts).
* Wire form: a mask travels as bytes holding 8 coordinates each (bit ``b`` of byte ``j`` is
  coordinate ``8 j + b``), stored as ``bfloat16`` integers ``0..255``: exact in bfloat16 (8
  significant bits), untouched by the bf16 hook, and a NaN/Inf from a faulty sender is detected
  instead of crashing an integer cast. That costs 2 bits per coordinate on the ledger.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = [
    "ERK",
    "LayerDensity",
    "Uniform",
    "active_counts",
    "drop_fraction",
    "gradient_regrow",
    "magnitude_prune",
    "pack_mask",
    "prune_count",
    "random_masks",
    "unpack_mask",
]

#: Tolerance for float error in ``floor(d N)`` and ``ceil(alpha n)`` (0.3 * 10 = 3.0000000000000004).
_EPS = 1e-9


class LayerDensity(ABC):
    """How an overall density ``d`` is spread over the layers (configured by ``class_path``)."""

    @abstractmethod
    def densities(self, shapes: Mapping[str, Sequence[int]], density: float) -> dict[str, float]:
        """Density ``d_l`` in ``(0, 1]`` of every tensor of ``shapes`` for the overall density ``density``."""


class Uniform(LayerDensity):
    """Every layer gets the same density: ``d_l = d``."""

    def densities(self, shapes: Mapping[str, Sequence[int]], density: float) -> dict[str, float]:
        return {n: float(density) for n in shapes}

    def __repr__(self) -> str:
        return "Uniform()"


class ERK(LayerDensity):
    """Erdős–Rényi-Kernel densities ``d_l = min(1, eps * (sum(s_l) / prod(s_l)) ** power)`` (module doc).

    Args:
        power: Exponent on the ERK ratio (DisPFL's ``erk_power_scale``, 1 by default; 0 is uniform).
    """

    def __init__(self, power: float = 1.0) -> None:
        if not (math.isfinite(power) and power >= 0):
            raise ValueError(f"algorithm.layer_density.power must be a finite number >= 0, got {power}")
        self.power = float(power)

    def __repr__(self) -> str:
        return f"ERK(power={self.power})"

    def densities(self, shapes: Mapping[str, Sequence[int]], density: float) -> dict[str, float]:
        numel = {n: math.prod(s) for n, s in shapes.items()}
        raw = {n: (sum(s) / numel[n]) ** self.power for n, s in shapes.items()}
        total = sum(numel.values())
        dense: set[str] = set()
        while True:
            sparse = [n for n in shapes if n not in dense]
            # eps * sum_{sparse} raw_l N_l + sum_{dense} N_l = d * sum_l N_l
            budget = density * total - sum(numel[n] for n in dense)
            eps = budget / sum(raw[n] * numel[n] for n in sparse)
            top = max(raw[n] for n in sparse)
            if eps * top <= 1.0 or len(sparse) == 1:
                break
            dense.update(n for n in sparse if raw[n] == top)
        return {n: 1.0 if n in dense else min(1.0, eps * raw[n]) for n in shapes}


def active_counts(shapes: Mapping[str, Sequence[int]], densities: Mapping[str, float]) -> dict[str, int]:
    """Active weights per layer ``n_l = max(1, floor(d_l N_l))`` (at most ``N_l``)."""
    out = {}
    for n, s in shapes.items():
        size = math.prod(s)
        out[n] = min(size, max(1, math.floor(densities[n] * size + _EPS)))
    return out


def random_masks(
    shapes: Mapping[str, Sequence[int]], counts: Mapping[str, int], num_clients: int, seed: int
) -> dict[str, Tensor]:
    """Independent random masks with exactly ``counts[name]`` active coordinates per client.

    Client ``c`` draws from its own generator ``(seed, "dispfl-mask", c)``, layer by layer in the
    order of ``shapes``, a uniformly random subset of each layer's coordinates.

    Returns:
        ``{name: bool [num_clients, *shape]}``.
    """
    out = {n: torch.zeros(num_clients, math.prod(s), dtype=torch.bool) for n, s in shapes.items()}
    for c in range(num_clients):
        gen = torch_generator(seed, "dispfl-mask", c)
        for n, flat in out.items():
            flat[c, torch.randperm(flat.shape[1], generator=gen)[: counts[n]]] = True
    return {n: out[n].view(num_clients, *s) for n, s in shapes.items()}


def drop_fraction(round_idx: int, anneal_rounds: int, anneal_factor: float) -> float:
    """Cosine-annealed drop fraction ``alpha_t = anneal_factor / 2 * (1 + cos(pi min(t, T) / T))``."""
    t = min(int(round_idx), int(anneal_rounds))
    return float(anneal_factor) / 2.0 * (1.0 + math.cos(math.pi * t / int(anneal_rounds)))


def prune_count(active: int, fraction: float) -> int:
    """Weights pruned (and regrown) in a layer with ``active`` weights: ``ceil(fraction * active)``."""
    return min(int(active), max(0, math.ceil(fraction * active - _EPS)))


def magnitude_prune(mask: Tensor, weight: Tensor, k: int) -> Tensor:
    """Drop, per row, the ``k`` active coordinates of smallest ``|weight|`` (ties: lower index first).

    Args:
        mask: bool ``[C, N]`` (every row has at least ``k`` active coordinates).
        weight: ``[C, N]``.
        k: Coordinates to drop per row.

    Returns:
        The new bool mask ``[C, N]`` (a copy).
    """
    score = torch.where(mask, weight.detach().abs().to(torch.float64), torch.inf)
    return _set_first(mask, score, k, False)


def gradient_regrow(mask: Tensor, grad: Tensor, k: int) -> Tensor:
    """Activate, per row, the ``k`` inactive coordinates of largest ``|grad|`` (ties: lower index first).

    The mirror of :func:`magnitude_prune` (same shapes; a copy): ``grad`` ``[C, N]`` scores the
    inactive coordinates of ``mask``, of which every row has at least ``k``.
    """
    score = torch.where(mask, -torch.inf, grad.detach().abs().to(torch.float64))
    return _set_first(mask, score, k, True)


def _set_first(mask: Tensor, score: Tensor, k: int, value: bool) -> Tensor:
    """A copy of ``mask`` with the ``k`` first coordinates of every row by ``score`` set to ``value``.

    "First" is ascending score when dropping (``value`` False: smallest first) and descending when
    growing (True: largest first), ties to the lower index (stable sorts).
    """
    out = mask.clone()
    if k <= 0:
        return out
    first = torch.argsort(score, dim=1, descending=value, stable=True)[:, :k]
    return out.scatter_(1, first, value)


_BIT_VALUES = 2 ** torch.arange(8)


def pack_mask(mask: Tensor) -> Tensor:
    """Wire form of bool masks ``[E, N]``: bfloat16 ``[E, ceil(N / 8)]`` of byte values (module doc)."""
    rows, n = mask.shape
    padded = torch.zeros(rows, 8 * math.ceil(n / 8), dtype=torch.int64, device=mask.device)
    padded[:, :n] = mask
    packed = (padded.view(rows, -1, 8) * _BIT_VALUES.to(mask.device)).sum(-1)
    return packed.to(torch.bfloat16)


def unpack_mask(packed: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """Bool masks ``[E, n]`` from :func:`pack_mask`'s form, and which rows were well formed ``[E]``.

    A row is malformed when a byte is not an integer in ``0..255`` (e.g. a NaN from a faulty
    sender); its mask comes back all False.
    """
    values = packed.to(torch.float32)
    ok = (torch.isfinite(values) & (values >= 0) & (values <= 255) & (values == values.round())).all(1)
    byte = torch.where(ok.unsqueeze(1), values, 0.0).to(torch.int64)
    bits = (byte.unsqueeze(-1) // _BIT_VALUES.to(byte.device)) % 2
    return bits.reshape(packed.shape[0], -1)[:, :n].bool(), ok
