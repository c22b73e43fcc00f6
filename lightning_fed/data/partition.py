"""Partitioners: how the rows of a :class:`~lightning_fed.data.center.PooledTable` become centers.

A partitioner maps a pooled table and a run seed to ``(center name, row indices)`` groups, in
center-id order, which :func:`~lightning_fed.data.center.build_federation` turns into centers.

* :class:`Natural` keeps the cohort's own centers (one per distinct ``table.site``).
* :class:`Dirichlet` is the label-skew split of Hsu et al. (2019), "Measuring the Effects of
  Non-Identical Data Distribution for Federated Visual Classification": for every class ``c`` the
  class's rows are dealt to the ``C`` centers with proportions ``p_c ~ Dir(alpha * 1_C)``; small
  ``alpha`` gives centers dominated by one label, large ``alpha`` approaches an IID split.
* :class:`IID` deals a random permutation of the rows into near-equal parts.

Every random draw comes from ``numpy_rng(seed, "partition", ...)``, so a partition is a pure
function of the table and the seed.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from lightning_fed.data.center import PooledTable
from lightning_fed.seeding import numpy_rng
from lightning_fed.validation import check_int

__all__ = ["IID", "Dirichlet", "Natural", "Partitioner"]

# Stream keys under the "partition" purpose, so different partitioners never share draws.
_DIRICHLET_STREAM = 1
_IID_STREAM = 2


@runtime_checkable
class Partitioner(Protocol):
    """Maps a pooled table to center groups."""

    def assign(self, table: PooledTable, seed: int) -> list[tuple[str, np.ndarray]]:
        """Group the table's rows into centers.

        Args:
            table: The pooled rows.
            seed: Run seed for any random draw.

        Returns:
            ``(center name, sorted row indices)`` per center, in center-id order; every row
            belongs to exactly one group.
        """
        ...


class Natural:
    """One center per distinct ``table.site``, ordered by sorted site label (no randomness)."""

    def assign(self, table: PooledTable, seed: int) -> list[tuple[str, np.ndarray]]:
        """Group rows by site label.

        Args:
            table: The pooled rows; ``table.site`` names each row's center.
            seed: Ignored (the natural partition is fixed).

        Returns:
            ``(site label, sorted row indices)`` per site, sites in sorted order.
        """
        labels, inverse = np.unique(np.asarray(table.site).astype(str), return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.cumsum(np.bincount(inverse, minlength=len(labels)))[:-1]
        return [(str(label), rows) for label, rows in zip(labels, np.split(order, bounds), strict=True)]

    def __repr__(self) -> str:
        return "Natural()"


class Dirichlet:
    """Label-skewed split with per-class proportions drawn from a symmetric Dirichlet.

    For each class ``c`` (in ascending label order) the class's rows are shuffled and cut by
    proportions ``p_c ~ Dir(alpha * 1_C)``. As in the NIID-Bench reference implementation
    (Li et al. 2022), a center already holding at least ``N / C`` rows gets no further rows
    in that draw, which keeps sizes from collapsing. The whole draw is repeated (a fresh seeded
    stream per attempt) until every center has at least ``min_size`` rows.

    Args:
        num_centers: Number of centers ``C`` (>= 1).
        alpha: Dirichlet concentration (> 0); small = strong label skew.
        min_size: Fewest rows any center may get (>= 1).
        max_attempts: Draws tried before giving up (>= 1).

    Raises:
        ValueError: On an argument out of range.
    """

    def __init__(self, num_centers: int, alpha: float = 0.5, min_size: int = 20, max_attempts: int = 1000):
        self.num_centers = check_int("num_centers", num_centers, 1)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating, np.integer)):
            raise ValueError(f"alpha must be a float > 0, got {alpha!r}")
        if not np.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be a finite float > 0, got {alpha}")
        self.alpha = float(alpha)
        self.min_size = check_int("min_size", min_size, 1)
        self.max_attempts = check_int("max_attempts", max_attempts, 1)

    def assign(self, table: PooledTable, seed: int) -> list[tuple[str, np.ndarray]]:
        """Deal rows to ``num_centers`` centers with Dirichlet label skew.

        Args:
            table: The pooled rows (only ``table.y`` is used).
            seed: Run seed; attempt ``a`` draws from ``numpy_rng(seed, "partition", 1, a)``.

        Returns:
            ``("dirichlet-000", rows), ...`` with sorted row indices.

        Raises:
            ValueError: If the table has fewer than ``num_centers * min_size`` rows, or no
                draw within ``max_attempts`` gives every center ``min_size`` rows.
        """
        y = np.asarray(table.y)
        n, c = len(y), self.num_centers
        if n < c * self.min_size:
            raise ValueError(
                f"Dirichlet: {n} rows cannot give num_centers={c} centers min_size={self.min_size} rows each"
            )
        classes = np.unique(y)
        for attempt in range(self.max_attempts):
            rng = numpy_rng(seed, "partition", _DIRICHLET_STREAM, attempt)
            parts: list[list[np.ndarray]] = [[] for _ in range(c)]
            sizes = np.zeros(c, dtype=np.int64)
            for label in classes:
                idx = rng.permutation(np.flatnonzero(y == label))
                p = rng.dirichlet(np.full(c, self.alpha))
                p = np.where(sizes < n / c, p, 0.0)
                p = p / p.sum()
                cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
                for k, chunk in enumerate(np.split(idx, cuts)):
                    parts[k].append(chunk)
                    sizes[k] += len(chunk)
            if sizes.min() >= self.min_size:
                return [(f"dirichlet-{k:03d}", np.sort(np.concatenate(parts[k]))) for k in range(c)]
        raise ValueError(
            f"Dirichlet: no draw in max_attempts={self.max_attempts} gave all num_centers={c} centers "
            f"min_size={self.min_size} rows (alpha={self.alpha}, {n} rows); raise alpha or lower min_size"
        )

    def __repr__(self) -> str:
        return f"Dirichlet(num_centers={self.num_centers}, alpha={self.alpha}, min_size={self.min_size})"


class IID:
    """Uniformly random split into ``num_centers`` parts whose sizes differ by at most one.

    Args:
        num_centers: Number of centers (>= 1).

    Raises:
        ValueError: If ``num_centers`` is out of range.
    """

    def __init__(self, num_centers: int):
        self.num_centers = check_int("num_centers", num_centers, 1)

    def assign(self, table: PooledTable, seed: int) -> list[tuple[str, np.ndarray]]:
        """Deal a seeded permutation of the rows into near-equal parts.

        Args:
            table: The pooled rows.
            seed: Run seed; the permutation draws from ``numpy_rng(seed, "partition", 2)``.

        Returns:
            ``("iid-000", rows), ...`` with sorted row indices.

        Raises:
            ValueError: If the table has fewer rows than ``num_centers``.
        """
        n = len(table.y)
        if n < self.num_centers:
            raise ValueError(f"IID: {n} rows cannot fill num_centers={self.num_centers} centers")
        perm = numpy_rng(seed, "partition", _IID_STREAM).permutation(n)
        return [
            (f"iid-{k:03d}", np.sort(part)) for k, part in enumerate(np.array_split(perm, self.num_centers))
        ]

    def __repr__(self) -> str:
        return f"IID(num_centers={self.num_centers})"
