"""From a pooled table to per-center data: splits, per-center standardization, metadata.

:func:`federate` is the one builder of a federation: every source (tables, image collections,
ISIC2019) hands it its groups (a partitioner's, :mod:`lightning_fed.data.partition`, or its natural
centers) and how one group becomes a :class:`CenterData`. The splits the sources use live here too
(:func:`stratified_split`; the image sources' :func:`client_split` and :func:`subsample`).

Every table source (synthetic, MIMIC-IV, eICU, any CSV) produces a :class:`PooledTable` in raw
units; a partitioner turns it into index groups; :func:`build_federation` turns each group into a
:class:`CenterData` with a stratified split (``data.split``, :class:`~lightning_fed.data.split.Split`;
default 80/10/10), continuous features standardized on that
center's own train split only (ABPS Sec. 6.1), and the metadata descriptor
``v_i = [positive rate, log n_train, mean year / 2030, 12 Charlson prevalences]`` of its train
split (ABPS Sec. 4.1 and 6.3). Nothing here lets one center's rows reach another.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_fed.allocator import return_free_memory
from lightning_fed.data.augment import Augment
from lightning_fed.data.split import DEFAULT_SPLIT, Split
from lightning_fed.data.train_rows import pack_train_rows
from lightning_fed.seeding import numpy_rng

__all__ = [
    "METADATA_BASE_DIM",
    "MISSING_SUFFIX",
    "TABLE_METADATA_NAMES",
    "CenterData",
    "FederatedData",
    "PooledTable",
    "build_federation",
    "client_split",
    "federate",
    "stratified_split",
    "subsample",
]

#: Length of the base descriptor ``[positive rate, log n_train, mean year / 2030]``.
METADATA_BASE_DIM = 3
#: Names of the base descriptor entries of a table-backed federation.
TABLE_METADATA_NAMES = ("positive_rate", "log_n_train", "mean_year_2030")
#: Suffix of the missingness-indicator column added for every feature with a NaN.
MISSING_SUFFIX = "_missing"

_log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class PooledTable:
    """Rows of one cohort in raw units, before any partition.

    Attributes:
        x: Features, shape ``[N, F]``, float; NaN marks a missing value, infinities are refused.
        y: Binary labels, shape ``[N]``, values in {0, 1}.
        feature_names: ``F`` column names.
        continuous: Boolean mask ``[F]``; these columns are standardized per center.
        year: Admission year per row ``[N]`` (for the metadata descriptor).
        site: Natural center label per row ``[N]`` (e.g. ``"MICU 2130-2131"``).
        charlson_columns: Names of the binary comorbidity columns whose train-split
            prevalences extend the descriptor (12 for the paper's schema; may be empty).
        attributes: Per-site attributes (e.g. ``{"MICU 2130-2131": {"care_unit": "MICU"}}``).
    """

    x: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    continuous: np.ndarray
    year: np.ndarray
    site: np.ndarray
    charlson_columns: tuple[str, ...] = ()
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n, f = self.x.shape
        if len(self.feature_names) != f or self.continuous.shape != (f,):
            raise ValueError(f"PooledTable: {f} feature columns but {len(self.feature_names)} names")
        for name, arr in (("y", self.y), ("year", self.year), ("site", self.site)):
            if arr.shape[0] != n:
                raise ValueError(f"PooledTable.{name} has {arr.shape[0]} rows, x has {n}")
        if not np.isin(self.y, (0, 1)).all():
            raise ValueError("PooledTable.y must be binary (0/1)")
        if n == 0:
            raise ValueError("PooledTable has no rows")
        if f == 0:
            raise ValueError("PooledTable has no feature columns")
        infinite = np.isinf(self.x).any(axis=0)
        if infinite.any():
            names = [self.feature_names[j] for j in np.flatnonzero(infinite)[:5]]
            raise ValueError(f"PooledTable.x has infinite values in {names} (NaN marks a missing value)")
        if not np.isfinite(self.year).all():
            raise ValueError("PooledTable.year must be finite")
        missing = set(self.charlson_columns) - set(self.feature_names)
        if missing:
            raise ValueError(f"PooledTable.charlson_columns not among features: {sorted(missing)}")

    @property
    def num_classes(self) -> int:
        """2: a table's label is binary (the :class:`~lightning_fed.data.partition.Pool` protocol)."""
        return 2

    @property
    def num_centers(self) -> int | None:
        """None: a table leaves the number of centers to its partitioner (its sites, or the
        partitioner's ``num_centers``)."""
        return None


@dataclass(frozen=True, eq=False)
class CenterData:
    """One center's private data (never read by another center's code path).

    Attributes:
        name: Center label.
        x_train, y_train, x_val, y_val, x_test, y_test: float32 tensors, features standardized
            with this center's train statistics; labels are 0./1.
        metadata: Descriptor ``v_i`` (float64): base 3 dims, then the Charlson prevalences.
        attributes: Free-form facts about the center (care unit, window, ...).
        feature_mean: The center's own train means used to standardize (float64 ``[F]``; 0 for
            columns left as they are), or None when unknown.
        feature_std: The matching standard deviations (1 for columns left as they are).
        row_ids: Per split (``"train"``, ``"val"``, ``"test"``), the rows' positions in the source's
            pooled table, in the order of that split's tensors (``predictions.parquet``'s
            ``source_row``); empty when the source does not say.
    """

    name: str
    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
    x_test: Tensor
    y_test: Tensor
    metadata: Tensor
    attributes: Mapping[str, Any] = field(default_factory=dict)
    feature_mean: Tensor | None = None
    feature_std: Tensor | None = None
    row_ids: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        """Number of training rows."""
        return int(self.y_train.shape[0])


@dataclass(frozen=True, eq=False)
class FederatedData:
    """All centers of a federation, in a fixed order (center id = position).

    Attributes:
        centers: The centers.
        feature_names: Column names of every center's ``x`` (missingness indicators included).
        dropped_centers: Names of the groups left out for having fewer than ``min_center_size`` rows.
        num_classes: Number of label classes ``K`` (2 for binary tables; labels are ``0., ..., K-1``).
        metadata_names: What each entry of the descriptors ``v_i`` is (empty: unnamed, shown as
            ``v0, v1, ...``), e.g. ``positive_rate, log_n_train, mean_year_2030, <Charlson flags>``
            for tables and ``share_class_0, ...`` for image federations.
        train_augment: A random transform every engine applies to each training batch
            (:mod:`lightning_fed.data.augment`, e.g. the image sources' ``augment``), drawn per model
            from ``(seed, "augment", round, model)``; None (the default): batches as stored.
    """

    centers: tuple[CenterData, ...]
    feature_names: tuple[str, ...]
    dropped_centers: tuple[str, ...] = ()
    num_classes: int = 2
    metadata_names: tuple[str, ...] = ()
    train_augment: Augment | None = None

    def __post_init__(self) -> None:
        if not self.centers:
            raise ValueError("a federation needs at least one center")

    @property
    def num_centers(self) -> int:
        return len(self.centers)

    @property
    def num_features(self) -> int:
        return len(self.feature_names)

    @property
    def n_train(self) -> Tensor:
        """Training sizes ``[C]`` (int64)."""
        return torch.tensor([c.n_train for c in self.centers], dtype=torch.int64)

    def metadata(self, dim: int | None = None) -> Tensor:
        """Stacked descriptors ``[C, d]``; ``dim`` keeps the first ``dim`` entries (3 = base)."""
        meta = torch.stack([c.metadata for c in self.centers])
        return meta if dim is None else meta[:, :dim]


def stratified_split(y: np.ndarray, fractions: Sequence[float], rng: np.random.Generator) -> list[np.ndarray]:
    """Split row indices into parts with the given fractions, stratified by label.

    Each class is shuffled and cut at the cumulative fractions (rounded), so every part keeps
    the class ratio up to one row per class; the parts are returned sorted. (Table centers are split
    by :meth:`lightning_fed.data.split.Split.indices`, the same cut for three parts, plus the
    ``min_per_class`` guarantee.)
    """
    cuts = np.cumsum(np.asarray(fractions, dtype=float))
    if not np.isclose(cuts[-1], 1.0):
        raise ValueError(f"split fractions must sum to 1, got {list(fractions)}")
    parts: list[list[np.ndarray]] = [[] for _ in fractions]
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        bounds = np.concatenate([[0], np.round(cuts * len(idx)).astype(int)])
        for k in range(len(fractions)):
            parts[k].append(idx[bounds[k] : bounds[k + 1]])
    return [np.sort(np.concatenate(p)) for p in parts]


def subsample(rows: np.ndarray, max_rows: int | None, seed: int, center: int) -> np.ndarray:
    """At most ``max_rows`` of ``rows`` (sorted), drawn without replacement.

    The draw comes from ``numpy_rng(seed, "subsample", center)``; ``rows`` itself is returned when it
    has no more than ``max_rows`` entries (or ``max_rows`` is None).
    """
    if max_rows is None or len(rows) <= max_rows:
        return rows
    return np.sort(numpy_rng(seed, "subsample", center).choice(rows, size=max_rows, replace=False))


def client_split(
    labels: np.ndarray, seed: int, center: int, train: float = 0.7, val_share: float = 0.2
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions of one image center's train / validation / test images (EdgeDRM App. D.1).

    Stratified by label (:func:`stratified_split`): ``train`` of each class to training, the rest
    held out; the held-out images of each class are then split ``val_share`` to validation and the
    remainder to test. Per class of ``n`` images: ``round(0.7 n)`` train, ``round(0.2 h)`` validation
    of the ``h = n - round(0.7 n)`` held out, and the rest test. Draws from
    ``numpy_rng(seed, "split", center)``.

    Returns:
        Sorted positions into ``labels`` (disjoint, covering all of them).
    """
    rng = numpy_rng(seed, "split", center)
    tr, held = stratified_split(labels, (train, 1.0 - train), rng)
    va, te = stratified_split(labels[held], (val_share, 1.0 - val_share), rng)
    return tr, held[va], held[te]


def federate(
    groups: Iterable[tuple[int, str, np.ndarray]],
    center: Callable[[int, str, np.ndarray], CenterData],
    *,
    feature_names: Sequence[str],
    num_classes: int = 2,
    metadata_names: Sequence[str] = (),
    train_augment: Augment | None = None,
    dropped: Sequence[str] = (),
) -> FederatedData:
    """The one builder of a federation, shared by every source (tables, image collections, ISIC).

    A source turns its pool into groups (a partitioner's, or its natural centers) and says how one
    group becomes a center (its split, scaling and descriptor); this builds the centers in order and
    the :class:`FederatedData` around them.

    Args:
        groups: ``(k, name, row indices)`` per center, in center-id order; ``k`` is the group's index
            among all groups (dropped ones included), the key its split and subsample draw from.
        center: Builds center ``k`` from its name and rows.
        feature_names, num_classes, metadata_names, train_augment: As :class:`FederatedData`.
        dropped: Names of the groups left out (``FederatedData.dropped_centers``).

    Returns:
        The federation.
    """
    centers = pack_train_rows([center(k, name, rows) for k, name, rows in groups])
    return_free_memory()  # the centers' own copies of their rows, freed by the packing (allocator.py)
    return FederatedData(
        centers=centers,
        feature_names=tuple(feature_names),
        dropped_centers=tuple(dropped),
        num_classes=num_classes,
        metadata_names=tuple(metadata_names),
        train_augment=train_augment,
    )


def build_federation(
    table: PooledTable,
    groups: Sequence[tuple[str, np.ndarray]],
    seed: int,
    split: Split | Sequence[float] = DEFAULT_SPLIT,
    min_train: int = 2,
    min_center_size: int = 0,
) -> FederatedData:
    """Turn index groups of a pooled table into centers.

    Missing values (NaN in ``table.x``) are handled per center, never with another center's rows
    (ABPS Sec. 6.1, federated isolation): every feature column holding a NaN anywhere in the table
    gets a missingness indicator ``<name>_missing`` (1 where the raw value is NaN, appended after
    the original columns in table order, never standardized), and its NaNs are filled with the
    median of the center's own train split. When that train column is all NaN the fill is the
    standardized value 0 (the column gets mean 0, std 1 and every row of it, in all three splits,
    becomes 0: the center has nothing to scale its values by). Continuous
    columns are then standardized with the mean/std of the imputed train split.

    Args:
        table: The pooled rows in raw units (NaN = missing).
        groups: ``(name, row indices)`` per center, in center-id order.
        seed: Run seed; center ``k``'s split draws from ``(seed, "split", k)`` (``k`` counts the
            groups as given, dropped ones included, so dropping a group leaves the others' splits).
        split: Train/val/test fractions and the ``min_per_class`` guarantee (:class:`Split`; a
            ``(train, val, test)`` sequence is read as ``Split(train, val, test)``).
        min_train: Fewest training rows a center may have.
        min_center_size: Groups with fewer rows are dropped (logged as a warning and listed in
            ``FederatedData.dropped_centers``); 0 keeps all.

    Returns:
        The federation.

    Raises:
        ValueError: If the kept rows hold a single label class, every group is dropped, or a kept
            group is too small to split.
    """
    if not isinstance(split, Split):
        split = Split(*split)
    if isinstance(min_center_size, bool) or not isinstance(min_center_size, (int, np.integer)):
        raise ValueError(f"min_center_size must be an integer >= 0, got {min_center_size!r}")
    if min_center_size < 0:
        raise ValueError(f"min_center_size must be >= 0, got {min_center_size}")
    kept = [(k, str(name), np.asarray(rows)) for k, (name, rows) in enumerate(groups)]
    dropped = tuple(name for _, name, rows in kept if len(rows) < min_center_size)
    kept = [g for g in kept if len(g[2]) >= min_center_size]
    if dropped:
        _log.warning(
            "build_federation: dropped %d of %d centers with fewer than min_center_size=%d rows",
            len(dropped),
            len(dropped) + len(kept),
            min_center_size,
        )
    if not kept:
        raise ValueError(
            f"build_federation: all {len(dropped)} centers have fewer than min_center_size={min_center_size} "
            "rows: lower min_center_size"
        )
    all_rows = np.concatenate([rows for _, _, rows in kept])
    if len(np.unique(table.y[all_rows])) < 2:
        raise ValueError(
            f"build_federation: the label has a single class ({np.unique(table.y[all_rows]).tolist()}) over "
            f"{len(all_rows)} rows: mortality prediction needs both deaths and survivors"
        )

    x_all = np.asarray(table.x, dtype=np.float64)
    nan_mask = np.isnan(x_all)
    nan_cols = np.flatnonzero(nan_mask.any(axis=0))
    feature_names = table.feature_names + tuple(f"{table.feature_names[j]}{MISSING_SUFFIX}" for j in nan_cols)
    charlson_idx = [table.feature_names.index(c) for c in table.charlson_columns]
    cont = np.asarray(table.continuous, dtype=bool)
    n_extra = len(nan_cols)
    short: list[str] = []

    def center(k: int, name: str, rows: np.ndarray) -> CenterData:
        if split.folds is not None and len(rows) < split.folds:
            raise ValueError(
                f"center {name!r} has {len(rows)} rows, fewer than data.split.folds={split.folds}: lower "
                "data.split.folds or drop small centers with data.min_center_size"
            )
        tr, va, te = (rows[p] for p in split.indices(table.y[rows], numpy_rng(seed, "split", k)))
        if split.min_per_class and min(_smallest(table.y[va]), _smallest(table.y[te])) < split.min_per_class:
            short.append(name)
        if len(tr) < min_train:
            raise ValueError(
                f"center {name!r} has {len(rows)} rows, too few for a {list(split.fractions)} split "
                f"(needs >= {min_train} training rows): merge it or lower the number of centers"
                + (f" or data.split.min_per_class={split.min_per_class}" if split.min_per_class else "")
            )
        raw_tr = x_all[tr]
        fill = np.zeros(x_all.shape[1])
        empty = np.zeros(x_all.shape[1], dtype=bool)
        for j in nan_cols:
            observed = raw_tr[:, j][~np.isnan(raw_tr[:, j])]
            if observed.size:
                fill[j] = np.median(observed)
            else:
                empty[j] = True

        def imputed(r: np.ndarray, fill: np.ndarray = fill, empty: np.ndarray = empty) -> np.ndarray:
            x = x_all[r]
            return np.where(np.isnan(x) | empty, fill, x)

        x_tr = imputed(tr)
        mean = np.where(cont & ~empty, x_tr.mean(axis=0), 0.0)
        std = np.where(cont & ~empty, x_tr.std(axis=0), 1.0)
        std = np.where(std > 1e-12, std, 1.0)
        bad = ~(np.isfinite(mean) & np.isfinite(std))
        if bad.any():
            names = [table.feature_names[j] for j in np.flatnonzero(bad)[:5]]
            raise ValueError(
                f"center {name!r}: features {names} overflow when standardized (values too large for "
                "float64 statistics): rescale them"
            )
        if n_extra:
            mean = np.concatenate([mean, np.zeros(n_extra)])
            std = np.concatenate([std, np.ones(n_extra)])

        def scaled(r: np.ndarray, mean: np.ndarray = mean, std: np.ndarray = std) -> Tensor:
            x = imputed(r)
            if n_extra:
                x = np.concatenate([x, nan_mask[r][:, nan_cols].astype(np.float64)], axis=1)
            return torch.from_numpy(((x - mean) / std).astype(np.float32))

        y_tr = table.y[tr]
        base = [float(y_tr.mean()), float(np.log(len(tr))), float(table.year[tr].mean() / 2030.0)]
        prevalence = x_tr[:, charlson_idx].mean(axis=0) if charlson_idx else np.zeros(0)
        return CenterData(
            name=name,
            x_train=scaled(tr),
            y_train=torch.from_numpy(y_tr.astype(np.float32)),
            x_val=scaled(va),
            y_val=torch.from_numpy(table.y[va].astype(np.float32)),
            x_test=scaled(te),
            y_test=torch.from_numpy(table.y[te].astype(np.float32)),
            metadata=torch.tensor(np.concatenate([base, prevalence]), dtype=torch.float64),
            attributes=dict(table.attributes.get(name, {})),
            feature_mean=torch.from_numpy(mean),
            feature_std=torch.from_numpy(std),
            row_ids={"train": tr, "val": va, "test": te},
        )

    federation = federate(
        kept,
        center,
        feature_names=feature_names,
        dropped=dropped,
        metadata_names=(*TABLE_METADATA_NAMES, *(f"prevalence_{c}" for c in table.charlson_columns)),
    )
    if short:
        _log.warning(
            "build_federation: %d of %d centers have fewer than 2 x data.split.min_per_class=%d rows of "
            "some class, so their validation or test split holds fewer (e.g. %s)",
            len(short),
            len(kept),
            split.min_per_class,
            short[:3],
        )
    return federation


def _smallest(y: np.ndarray) -> int:
    """Rows of the rarer class of a binary split (0 when a class is absent)."""
    positives = int(np.asarray(y).sum())
    return min(positives, len(y) - positives)


def pooled_standardization(data: FederatedData) -> FederatedData:
    """The same centers with features standardized by the *pooled* train statistics.

    What the data would look like if it could be pooled (the Centralized reference): each center's
    rows are mapped back to raw units with its own train mean/std, values the center imputed (its
    ``*_missing`` indicator is 1) are imputed again with the pooled train median, and every column
    that was standardized is standardized with the mean/std of all centers' train rows together.
    Centers without recorded statistics (``feature_mean is None``) are returned unchanged.
    """
    if any(c.feature_mean is None or c.feature_std is None for c in data.centers):
        return data

    names = data.feature_names
    gaps = [(j, names.index(n + MISSING_SUFFIX)) for j, n in enumerate(names) if n + MISSING_SUFFIX in names]

    def raw(c: CenterData, x: Tensor) -> Tensor:
        """Raw units; values the center imputed are NaN again (re-imputed from pooled rows below)."""
        out = x.double() * c.feature_std + c.feature_mean
        for j, indicator in gaps:
            out[:, j] = torch.where(x[:, indicator] > 0.5, torch.nan, out[:, j])
        return out

    train = torch.cat([raw(c, c.x_train) for c in data.centers])
    fill = torch.nan_to_num(train.nanmedian(0).values, nan=0.0)  # pooled imputation, as a pooled cohort would
    train = torch.where(torch.isnan(train), fill, train)
    scaled = torch.stack([c.feature_std != 1.0 for c in data.centers]).any(0) | torch.stack(
        [c.feature_mean != 0.0 for c in data.centers]
    ).any(0)
    mean = torch.where(scaled, train.mean(0), torch.zeros_like(train[0]))
    std = torch.where(scaled, train.std(0, unbiased=False), torch.ones_like(train[0]))
    std = torch.where(std > 1e-12, std, torch.ones_like(std))

    def pooled(c: CenterData, x: Tensor) -> Tensor:
        values = raw(c, x)
        return ((torch.where(torch.isnan(values), fill, values) - mean) / std).to(x.dtype)

    centers = tuple(
        CenterData(
            name=c.name,
            x_train=pooled(c, c.x_train),
            y_train=c.y_train,
            x_val=pooled(c, c.x_val),
            y_val=c.y_val,
            x_test=pooled(c, c.x_test),
            y_test=c.y_test,
            metadata=c.metadata,
            attributes=c.attributes,
            feature_mean=mean,
            feature_std=std,
            row_ids=c.row_ids,
        )
        for c in data.centers
    )
    return FederatedData(
        centers=centers,
        feature_names=data.feature_names,
        dropped_centers=data.dropped_centers,
        num_classes=data.num_classes,
        metadata_names=data.metadata_names,
        train_augment=data.train_augment,
    )
