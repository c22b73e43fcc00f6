"""Partitioners: how a pooled collection (a table's rows or an image collection) becomes centers.

One protocol for every source: a partitioner maps a :class:`Pool` (the labels, the natural sites
when there are any, the class count and the number of centers the source asks for) and a run seed to
``(center name, sorted row indices)`` groups, in center-id order. Table sources hand it their
:class:`~lightning_fed.data.center.PooledTable` (a pool with sites and no center count of its own);
image sources a :class:`LabelPool` with their ``num_clients``. :func:`~lightning_fed.data.center.federate`
turns the groups into centers.

* :class:`Natural` keeps the cohort's own centers (one per distinct site).
* :class:`IID` deals a random permutation of the rows into near-equal parts.
* :class:`Dirichlet` is the label-skew split of Hsu et al. (2019), "Measuring the Effects of
  Non-Identical Data Distribution for Federated Visual Classification": for every class ``c`` the
  class's rows are dealt to the ``C`` centers with proportions ``p_c ~ Dir(alpha * 1_C)``; small
  ``alpha`` gives centers dominated by one label, large ``alpha`` approaches an IID split.
  :class:`DirichletLabels` is the same split with EdgeDRM's defaults (Sec. 5.1, "Dir-0.3").
* :class:`Shards` is McMahan et al.'s (2017) shards per center (EdgeDRM's "5-SPC").
* :class:`BalancedSizes` gives class-balanced centers of given sizes (EdgeDRM App. D.1, hospital tiers).

Every random draw comes from ``numpy_rng(seed, "partition", stream, ...)`` with one stream per
partitioner (1 Dirichlet, 2 IID, 3 Shards, 4 DirichletLabels, 5 BalancedSizes), so a partition is a
pure function of the pool and the seed. ``report_key()`` names the partition in reports and in
``summary.json``'s ``setting`` (:func:`lightning_fed.setting.run_setting`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from lightning_fed.seeding import numpy_rng
from lightning_fed.validation import check_int, check_number

__all__ = [
    "IID",
    "BalancedSizes",
    "Dirichlet",
    "DirichletLabels",
    "LabelPool",
    "Natural",
    "Partitioner",
    "Pool",
    "Shards",
    "label_shards",
]

# Stream keys under the "partition" purpose, so different partitioners never share draws.
_DIRICHLET_STREAM = 1
_IID_STREAM = 2
_SHARD_STREAM = 3
_DIRICHLET_LABELS_STREAM = 4
_BALANCED_STREAM = 5


class Pool(Protocol):
    """What a partitioner reads of a pooled collection.

    Attributes:
        y: Integer class per row ``[N]``.
        site: Natural center label per row ``[N]``, or None (an image collection has none).
        num_classes: Number of classes ``K`` (labels lie in ``0..K-1``).
        num_centers: Centers the source asks for (an image source's ``num_clients``), or None when
            the partitioner decides (a table source: :class:`Natural` or the partitioner's own count).
    """

    @property
    def y(self) -> np.ndarray: ...

    @property
    def site(self) -> np.ndarray | None: ...

    @property
    def num_classes(self) -> int: ...

    @property
    def num_centers(self) -> int | None: ...


@dataclass(frozen=True, eq=False)
class LabelPool:
    """A pooled labelled collection without sites (image sources), as a :class:`Pool`."""

    y: np.ndarray
    num_classes: int
    num_centers: int | None = None
    site: np.ndarray | None = None


@runtime_checkable
class Partitioner(Protocol):
    """Maps a pool to center groups (``report_key()`` is optional: reports fall back to the class name)."""

    def assign(self, table: Pool, seed: int) -> list[tuple[str, np.ndarray]]:
        """Group the pool's rows into centers.

        Args:
            table: The pooled rows (a :class:`~lightning_fed.data.center.PooledTable`, a :class:`LabelPool`).
            seed: Run seed for any random draw.

        Returns:
            ``(center name, sorted row indices)`` per center, in center-id order; no row belongs to
            two groups.
        """
        ...


def _center_count(own: int | None, pool: Pool, who: str, key: str) -> int:
    """The number of centers: the partitioner's own (``key``) or the source's; both must agree."""
    asked = pool.num_centers
    if own is None and asked is None:
        raise ValueError(f"{who}: set {key} (the number of centers to deal the rows to)")
    if own is not None and asked is not None and own != asked:
        raise ValueError(
            f"{who}: {key}={own} but the data source asks for {asked} centers (data.num_clients): "
            "give one of them"
        )
    return int(own if own is not None else asked)


def _names(prefix: str, groups: list[np.ndarray]) -> list[tuple[str, np.ndarray]]:
    return [(f"{prefix}-{k:03d}", rows) for k, rows in enumerate(groups)]


class Natural:
    """One center per distinct ``table.site``, ordered by sorted site label (no randomness)."""

    def assign(self, table: Pool, seed: int) -> list[tuple[str, np.ndarray]]:
        """Group rows by site label.

        Args:
            table: The pooled rows; ``table.site`` names each row's center.
            seed: Ignored (the natural partition is fixed).

        Returns:
            ``(site label, sorted row indices)`` per site, sites in sorted order.

        Raises:
            ValueError: If the pool has no sites (an image collection).
        """
        if table.site is None:
            raise ValueError(
                "Natural: this data source has no natural centers: choose IID, Dirichlet or Shards"
            )
        labels, inverse = np.unique(np.asarray(table.site).astype(str), return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.cumsum(np.bincount(inverse, minlength=len(labels)))[:-1]
        return [(str(label), rows) for label, rows in zip(labels, np.split(order, bounds), strict=True)]

    def report_key(self) -> str:
        """``Natural``."""
        return "Natural"

    def __repr__(self) -> str:
        return "Natural()"


class IID:
    """Uniformly random split into ``num_centers`` parts whose sizes differ by at most one.

    Args:
        num_centers: Number of centers (>= 1); None: the source's (an image source's ``num_clients``).

    Raises:
        ValueError: If ``num_centers`` is out of range.
    """

    def __init__(self, num_centers: int | None = None):
        self.num_centers = None if num_centers is None else check_int("num_centers", num_centers, 1)

    def assign(self, table: Pool, seed: int) -> list[tuple[str, np.ndarray]]:
        """Deal a seeded permutation of the rows into near-equal parts.

        Args:
            table: The pooled rows.
            seed: Run seed; the permutation draws from ``numpy_rng(seed, "partition", 2)``.

        Returns:
            ``("iid-000", rows), ...`` with sorted row indices.

        Raises:
            ValueError: If the pool has fewer rows than centers.
        """
        c = _center_count(self.num_centers, table, "IID", "num_centers")
        n = len(table.y)
        if n < c:
            raise ValueError(f"IID: {n} rows cannot fill num_centers={c} centers")
        perm = numpy_rng(seed, "partition", _IID_STREAM).permutation(n)
        return _names("iid", [np.sort(part) for part in np.array_split(perm, c)])

    def report_key(self) -> str:
        """``IID``."""
        return "IID"

    def __repr__(self) -> str:
        return f"IID(num_centers={self.num_centers})"


class Dirichlet:
    """Label-skewed split with per-class proportions drawn from a symmetric Dirichlet.

    For each class ``c`` (in ascending label order) the class's rows are shuffled and cut by
    proportions ``p_c ~ Dir(alpha * 1_C)``. As in the NIID-Bench reference implementation
    (Li et al. 2022), a center already holding at least ``N / C`` rows gets no further rows
    in that draw, which keeps sizes from collapsing. The whole draw is repeated (a fresh seeded
    stream per attempt) until every center has at least ``min_size`` rows.

    Args:
        num_centers: Number of centers ``C`` (>= 1); None: the source's (an image source's ``num_clients``).
        alpha: Dirichlet concentration (> 0); small = strong label skew.
        min_size: Fewest rows any center may get (>= 1).
        max_attempts: Draws tried before giving up (>= 1).

    Raises:
        ValueError: On an argument out of range.
    """

    #: Stream under the "partition" purpose; attempt ``a`` draws from ``(seed, "partition", stream, a)``.
    stream: int = _DIRICHLET_STREAM
    #: Prefix of the center names (``dirichlet-000``, ...).
    prefix: str = "dirichlet"
    #: The config key errors name (a table source's ``partitioner``).
    config_key: str = "data.partitioner"

    def __init__(
        self, num_centers: int | None = None, alpha: float = 0.5, min_size: int = 20, max_attempts: int = 1000
    ):
        key = self.config_key
        self.num_centers = None if num_centers is None else check_int(f"{key}.num_centers", num_centers, 1)
        self.alpha = check_number(f"{key}.alpha", alpha, 0.0, strict=True)
        self.min_size = check_int(f"{key}.min_size", min_size, 1)
        self.max_attempts = check_int(f"{key}.max_attempts", max_attempts, 1)

    def assign(self, table: Pool, seed: int) -> list[tuple[str, np.ndarray]]:
        """Deal rows to the centers with Dirichlet label skew.

        Args:
            table: The pooled rows (only ``table.y`` is used).
            seed: Run seed; attempt ``a`` draws from ``numpy_rng(seed, "partition", stream, a)``.

        Returns:
            ``("dirichlet-000", rows), ...`` with sorted row indices.

        Raises:
            ValueError: If the pool has fewer than ``num_centers * min_size`` rows, or no draw
                within ``max_attempts`` gives every center ``min_size`` rows.
        """
        who = type(self).__name__
        c = _center_count(self.num_centers, table, who, "num_centers")
        y = np.asarray(table.y)
        n = len(y)
        if n < c * self.min_size:
            raise ValueError(
                f"{who}: {n} rows cannot give num_centers={c} centers min_size={self.min_size} rows each: "
                f"lower the number of centers or {self.config_key}.min_size"
            )
        classes = np.unique(y)
        for attempt in range(self.max_attempts):
            rng = numpy_rng(seed, "partition", self.stream, attempt)
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
                return _names(self.prefix, [np.sort(np.concatenate(p)) for p in parts])
        raise ValueError(
            f"{who}: no draw in max_attempts={self.max_attempts} gave all num_centers={c} centers "
            f"min_size={self.min_size} rows (alpha={self.alpha}, {n} rows): raise {self.config_key}.alpha or "
            f"lower {self.config_key}.min_size"
        )

    def report_key(self) -> str:
        """``Dir-<alpha>`` (the paper's ``Dir-0.3``)."""
        return f"Dir-{self.alpha}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_centers={self.num_centers}, alpha={self.alpha}, "
            f"min_size={self.min_size})"
        )


class DirichletLabels(Dirichlet):
    """:class:`Dirichlet` with EdgeDRM's defaults (Sec. 5.1, "Dir-0.3"), for image sources.

    The same loop with ``alpha = 0.3``, ``min_size = 10`` and its own stream (4), so the EdgeDRM
    partitions of earlier releases are reproduced image for image.

    Args:
        alpha: Concentration (> 0; paper: 0.3).
        min_size: Fewest images any center may get (>= 1).
        max_attempts: Draws tried before giving up.
        num_centers: Number of centers; None (the usual): the source's ``num_clients``.
    """

    stream = _DIRICHLET_LABELS_STREAM
    config_key = "data.partition"

    def __init__(
        self, alpha: float = 0.3, min_size: int = 10, max_attempts: int = 1000, num_centers: int | None = None
    ) -> None:
        super().__init__(num_centers, alpha, min_size, max_attempts)

    def __repr__(self) -> str:
        return f"DirichletLabels(alpha={self.alpha}, min_size={self.min_size})"


def label_shards(labels: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """Cut the rows into ``num_shards`` label-homogeneous shards of near-equal size.

    Shards are allotted to classes in proportion to the class sizes (largest remainder; ties to the
    smaller label) and each class's rows, in index order, are cut into its shards with
    ``np.array_split``. When every class has ``N / num_shards`` times an integer rows this is exactly
    McMahan et al.'s "sort by label, cut into equal shards". Classes allotted no shard are left out.

    Args:
        labels: Integer labels ``[N]``.
        num_shards: Number of shards (<= N).

    Returns:
        The shards, ordered by label then position.
    """
    classes, counts = np.unique(labels, return_counts=True)
    quota = counts * num_shards / counts.sum()
    alloc = np.floor(quota).astype(np.int64)
    order = np.lexsort((classes, -(quota - alloc)))
    alloc[order[: num_shards - int(alloc.sum())]] += 1
    shards: list[np.ndarray] = []
    for label, k in zip(classes, alloc, strict=True):
        if k:
            shards.extend(np.array_split(np.flatnonzero(labels == label), int(k)))
    return shards


class Shards:
    """Shards-per-center partition (McMahan et al. 2017; EdgeDRM Sec. 5.1, "SPC").

    ``S = C * per_client`` equal-sized, label-homogeneous shards (:func:`label_shards`), dealt
    uniformly at random (``numpy_rng(seed, "partition", 3)``), ``per_client`` to each center, so every
    center holds at most ``per_client`` classes.

    Args:
        per_client: Shards per center; None gives 5 for up to 10 classes and 25 otherwise (the paper's
            5-SPC for CIFAR-10 and 25-SPC for CIFAR-20/100).
        num_centers: Number of centers ``C``; None (the usual): the source's ``num_clients``.
    """

    def __init__(self, per_client: int | None = None, num_centers: int | None = None) -> None:
        self.per_client = (
            None if per_client is None else check_int("data.partition.per_client", per_client, 1)
        )
        self.num_centers = None if num_centers is None else check_int("num_centers", num_centers, 1)

    def shards_per_client(self, num_classes: int) -> int:
        """``per_client``, or its default for ``num_classes`` classes."""
        if self.per_client is not None:
            return self.per_client
        return 5 if num_classes <= 10 else 25

    def assign(self, table: Pool, seed: int) -> list[tuple[str, np.ndarray]]:
        """Deal a seeded permutation of the :func:`label_shards` shards, ``per_client`` to each center.

        Returns:
            ``("shards-000", rows), ...`` with sorted row indices.

        Raises:
            ValueError: If there are fewer rows than shards, or fewer shards than classes present.
        """
        c = _center_count(self.num_centers, table, "Shards", "num_centers")
        labels = np.asarray(table.y)
        per = self.shards_per_client(table.num_classes)
        total = c * per
        if total > len(labels):
            raise ValueError(
                f"Shards: {len(labels)} images cannot make num_clients * per_client = {total} shards: "
                "lower data.partition.per_client or data.num_clients"
            )
        present = len(np.unique(labels))
        if total < present:
            raise ValueError(
                f"Shards: num_clients * per_client = {total} shards cannot hold {present} classes in "
                "label-homogeneous shards without dropping classes: raise data.partition.per_client"
            )
        shards = label_shards(labels, total)
        perm = numpy_rng(seed, "partition", _SHARD_STREAM).permutation(total)
        return _names(
            "shards",
            [np.sort(np.concatenate([shards[s] for s in perm[k * per : (k + 1) * per]])) for k in range(c)],
        )

    def report_key(self) -> str:
        """``<per_client>-SPC`` (``default-SPC`` when left to the class count, as reports always read it)."""
        return f"{self.per_client or 'default'}-SPC"

    def __repr__(self) -> str:
        return f"Shards(per_client={self.per_client})"


class BalancedSizes:
    """Disjoint, class-balanced centers of given sizes (EdgeDRM App. D.1, hospital tiers).

    Center ``k`` gets ``sizes[k]`` rows, ``sizes[k] / K`` of every class (the remainder goes to the
    smaller labels), drawn without replacement from ``numpy_rng(seed, "partition", 5)``. The paper's
    tier experiment gives 16 small / 8 medium / 8 large hospitals 250 / 1,000 / 4,000 *training*
    images: with the 70 % train split that is ``train / 0.7`` images per center here.

    Args:
        sizes: Rows per center, in center order (its length is the number of centers and must equal
            an image source's ``data.num_clients``).
    """

    def __init__(self, sizes: list[int]) -> None:
        if not sizes:
            raise ValueError("data.partition.sizes must list one size per client")
        self.sizes = [check_int("data.partition.sizes[]", n, 3) for n in sizes]

    def assign(self, table: Pool, seed: int) -> list[tuple[str, np.ndarray]]:
        """Draw each center's per-class quota from seeded per-class pools, in center order.

        Returns:
            ``("balanced-000", rows), ...`` with sorted row indices.

        Raises:
            ValueError: If ``sizes`` does not match the source's center count, or a class runs out.
        """
        if table.num_centers is not None and len(self.sizes) != table.num_centers:
            raise ValueError(
                f"data.partition.sizes has {len(self.sizes)} entries but "
                f"data.num_clients={table.num_centers}: give one size per client"
            )
        labels = np.asarray(table.y)
        classes = np.unique(labels)
        rng = numpy_rng(seed, "partition", _BALANCED_STREAM)
        pools = {int(c): list(rng.permutation(np.flatnonzero(labels == c))) for c in classes}
        out = []
        for k, n in enumerate(self.sizes):
            per = np.full(len(classes), n // len(classes))
            per[: n % len(classes)] += 1
            rows = []
            for c, m in zip(classes, per, strict=True):
                pool = pools[int(c)]
                if len(pool) < m:
                    raise ValueError(
                        f"data.partition.sizes: client {k} needs {m} images of class {int(c)} but only "
                        f"{len(pool)} are left: lower the sizes"
                    )
                rows.extend(pool[:m])
                del pool[:m]
            out.append(np.sort(np.asarray(rows, dtype=np.int64)))
        return _names("balanced", out)

    def report_key(self) -> str:
        """``balanced``."""
        return "balanced"

    def __repr__(self) -> str:
        return f"BalancedSizes(sizes={self.sizes})"
