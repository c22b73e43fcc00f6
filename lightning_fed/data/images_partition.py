"""Label-skew partitions of a pooled image collection, and each client's train/val/test split.

EdgeDRM App. D.1 pools the official train and test images, deals them to clients with one of two
label-skew constructions, and splits each client's images 70 % train / 30 % held out, the held-out
part 20 % validation / 80 % test.

* :class:`Shards` (shards per client, McMahan et al. 2017): ``S = num_clients * per_client``
  equal-sized, label-homogeneous shards, dealt uniformly at random, ``per_client`` to each client.
  Every client then holds at most ``per_client`` classes.
* :class:`DirichletLabels` (Hsu et al. 2019): for every class ``c`` the class's images are dealt to
  the clients with proportions ``p_c ~ Dir(alpha 1_K)`` (NIID-Bench's cap: a client already holding
  ``N / K`` images gets no more in that draw), redrawn until every client has ``min_size`` images.

Draws: shards from ``numpy_rng(seed, "partition", 3)``, Dirichlet attempt ``a`` from
``numpy_rng(seed, "partition", 4, a)``, client ``k``'s subsample from ``numpy_rng(seed, "subsample", k)``
and its split from ``numpy_rng(seed, "split", k)``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from lightning_fed.data.center import stratified_split
from lightning_fed.seeding import numpy_rng
from lightning_fed.validation import check_int, check_number

__all__ = [
    "BalancedSizes",
    "DirichletLabels",
    "LabelPartition",
    "Shards",
    "client_split",
    "label_shards",
    "subsample",
]

_SHARD_STREAM = 3
_DIRICHLET_STREAM = 4
_BALANCED_STREAM = 5


@runtime_checkable
class LabelPartition(Protocol):
    """Deals the pooled images to clients by label."""

    def assign(self, labels: np.ndarray, num_clients: int, num_classes: int, seed: int) -> list[np.ndarray]:
        """Sorted image indices per client (disjoint), in client order."""
        ...


def label_shards(labels: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """Cut the images into ``num_shards`` label-homogeneous shards of near-equal size.

    Shards are allotted to classes in proportion to the class sizes (largest remainder; ties to the
    smaller label) and each class's images, in index order, are cut into its shards with
    ``np.array_split``. When every class has ``N / num_shards`` times an integer images this is exactly
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
    """Shards-per-client partition (EdgeDRM Sec. 5.1, "SPC").

    Args:
        per_client: Shards per client; None gives 5 for up to 10 classes and 25 otherwise (the paper's
            5-SPC for CIFAR-10 and 25-SPC for CIFAR-20/100).
    """

    def __init__(self, per_client: int | None = None) -> None:
        self.per_client = (
            None if per_client is None else check_int("data.partition.per_client", per_client, 1)
        )

    def shards_per_client(self, num_classes: int) -> int:
        """``per_client``, or its default for ``num_classes`` classes."""
        if self.per_client is not None:
            return self.per_client
        return 5 if num_classes <= 10 else 25

    def assign(self, labels: np.ndarray, num_clients: int, num_classes: int, seed: int) -> list[np.ndarray]:
        """Deal a seeded permutation of the :func:`label_shards` shards, ``per_client`` to each client.

        Raises:
            ValueError: If there are fewer images than shards, or fewer shards than classes present.
        """
        per = self.shards_per_client(num_classes)
        total = num_clients * per
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
        shards = label_shards(np.asarray(labels), total)
        perm = numpy_rng(seed, "partition", _SHARD_STREAM).permutation(total)
        return [
            np.sort(np.concatenate([shards[s] for s in perm[k * per : (k + 1) * per]]))
            for k in range(num_clients)
        ]

    def __repr__(self) -> str:
        return f"Shards(per_client={self.per_client})"


class DirichletLabels:
    """Dirichlet label skew (EdgeDRM Sec. 5.1, "Dir-0.3").

    Args:
        alpha: Concentration (> 0; paper: 0.3).
        min_size: Fewest images any client may get (>= 1).
        max_attempts: Draws tried before giving up.
    """

    def __init__(self, alpha: float = 0.3, min_size: int = 10, max_attempts: int = 1000) -> None:
        self.alpha = check_number("data.partition.alpha", alpha, 0.0, strict=True)
        self.min_size = check_int("data.partition.min_size", min_size, 1)
        self.max_attempts = check_int("data.partition.max_attempts", max_attempts, 1)

    def assign(self, labels: np.ndarray, num_clients: int, num_classes: int, seed: int) -> list[np.ndarray]:
        """Per class (ascending), shuffle its images and cut them by ``p_c ~ Dir(alpha 1_K)``.

        Raises:
            ValueError: If no draw in ``max_attempts`` gives every client ``min_size`` images.
        """
        y = np.asarray(labels)
        n, k = len(y), num_clients
        if n < k * self.min_size:
            raise ValueError(
                f"DirichletLabels: {n} images cannot give num_clients={k} clients "
                f"min_size={self.min_size} each: lower data.num_clients or data.partition.min_size"
            )
        for attempt in range(self.max_attempts):
            rng = numpy_rng(seed, "partition", _DIRICHLET_STREAM, attempt)
            parts: list[list[np.ndarray]] = [[] for _ in range(k)]
            sizes = np.zeros(k, dtype=np.int64)
            for label in np.unique(y):
                idx = rng.permutation(np.flatnonzero(y == label))
                p = rng.dirichlet(np.full(k, self.alpha))
                p = np.where(sizes < n / k, p, 0.0)
                p = p / p.sum()
                cuts = (np.cumsum(p) * len(idx)).astype(np.int64)[:-1]
                for c, chunk in enumerate(np.split(idx, cuts)):
                    parts[c].append(chunk)
                    sizes[c] += len(chunk)
            if sizes.min() >= self.min_size:
                return [np.sort(np.concatenate(p)) for p in parts]
        raise ValueError(
            f"DirichletLabels: no draw in max_attempts={self.max_attempts} gave all {k} clients "
            f"min_size={self.min_size} images (alpha={self.alpha}): raise data.partition.alpha or lower "
            "data.partition.min_size"
        )

    def __repr__(self) -> str:
        return f"DirichletLabels(alpha={self.alpha}, min_size={self.min_size})"


def subsample(rows: np.ndarray, max_rows: int | None, seed: int, client: int) -> np.ndarray:
    """At most ``max_rows`` of ``rows`` (sorted), drawn without replacement.

    The draw comes from ``numpy_rng(seed, "subsample", client)``; ``rows`` itself is returned when it
    has no more than ``max_rows`` entries (or ``max_rows`` is None).
    """
    if max_rows is None or len(rows) <= max_rows:
        return rows
    return np.sort(numpy_rng(seed, "subsample", client).choice(rows, size=max_rows, replace=False))


def client_split(
    labels: np.ndarray, seed: int, client: int, train: float = 0.7, val_share: float = 0.2
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of one client's train / validation / test images (App. D.1).

    Stratified by label (:func:`~lightning_fed.data.center.stratified_split`): ``train`` of each class
    to training, the rest held out; the held-out images of each class are then split ``val_share`` to
    validation and the remainder to test. Per class of ``n`` images: ``round(0.7 n)`` train,
    ``round(0.2 h)`` validation of the ``h = n - round(0.7 n)`` held out, and the rest test.

    Returns:
        Sorted positions into ``labels`` (disjoint, covering all of them).
    """
    rng = numpy_rng(seed, "split", client)
    tr, held = stratified_split(labels, (train, 1.0 - train), rng)
    va, te = stratified_split(labels[held], (val_share, 1.0 - val_share), rng)
    return tr, held[va], held[te]


class BalancedSizes:
    """Disjoint, class-balanced client sets of given sizes (EdgeDRM App. D.1, hospital tiers).

    Client ``k`` gets ``sizes[k]`` images, ``sizes[k] / K`` of every class (the remainder goes to the
    smaller labels), drawn without replacement from ``numpy_rng(seed, "partition", 5)``. The paper's
    tier experiment gives 16 small / 8 medium / 8 large hospitals 250 / 1,000 / 4,000 *training*
    images: with the 70 % train split that is ``train / 0.7`` images per client here.

    Args:
        sizes: Images per client, in client order (its length must equal ``data.num_clients``).
    """

    def __init__(self, sizes: list[int]) -> None:
        if not sizes:
            raise ValueError("data.partition.sizes must list one size per client")
        self.sizes = [check_int("data.partition.sizes[]", n, 3) for n in sizes]

    def assign(self, labels: np.ndarray, num_clients: int, num_classes: int, seed: int) -> list[np.ndarray]:
        labels = np.asarray(labels)
        if len(self.sizes) != num_clients:
            raise ValueError(
                f"data.partition.sizes has {len(self.sizes)} entries but data.num_clients={num_clients}: "
                "give one size per client"
            )
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
        return out

    def __repr__(self) -> str:
        return f"BalancedSizes(sizes={self.sizes})"
