"""Data-source interfaces: anything that builds a :class:`FederatedData` from a seed.

Most sources produce one pooled table in raw units that a partitioner splits into centers
(:class:`TableSource`); they share the seed override, the partitioner and the minimum center size
here, and implement only :meth:`TableSource.table`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from lightning_fed.data.center import FederatedData, PooledTable, build_federation
from lightning_fed.data.partition import Natural, Partitioner
from lightning_fed.data.split import DEFAULT_SPLIT, Split
from lightning_fed.validation import check_int

__all__ = ["DataSource", "TableSource", "partitioner_key"]


class DataSource(ABC):
    """A source of a federation (synthetic, MIMIC-IV, eICU, any table), chosen by ``class_path``."""

    @abstractmethod
    def build(self, seed: int) -> FederatedData:
        """Build the federation; every random draw derives from ``seed``."""

    def report_key(self) -> str:
        """The dataset's name in reports and in ``summary.json``'s ``setting`` (default: the class
        name; :func:`lightning_fed.setting.run_setting`)."""
        return type(self).__name__

    def partition_key(self) -> str:
        """The partition's name in reports: the configured partitioner's ``report_key()`` (its class
        name when it has none), ``default`` when none was given (the source's own centers or its
        default partition)."""
        return "default"


def partitioner_key(partitioner: object | None) -> str:
    """``partitioner.report_key()``; its class name for one without; ``default`` for None."""
    if partitioner is None:
        return "default"
    key = getattr(partitioner, "report_key", None)
    return str(key()) if callable(key) else type(partitioner).__name__


class TableSource(DataSource):
    """A source whose rows form one pooled table, split into centers by a partitioner.

    Subclasses call :meth:`_set_common` from ``__init__`` and implement :meth:`table`.
    """

    partitioner: Partitioner | None = None
    seed: int | None = None
    min_center_size: int = 0
    split: Split = DEFAULT_SPLIT

    def _set_common(
        self,
        partitioner: Partitioner | None,
        seed: int | None,
        min_center_size: int = 0,
        split: Split | None = None,
    ) -> None:
        """Validate and store the settings every table source has (``split``: the per-center
        :class:`~lightning_fed.data.split.Split`, None for the default 80/10/10)."""
        if split is not None and not isinstance(split, Split):
            raise ValueError(f"data.split must be a Split (train, val, test, min_per_class), got {split!r}")
        self.split = DEFAULT_SPLIT if split is None else split
        if partitioner is not None and not callable(getattr(partitioner, "assign", None)):
            raise ValueError(f"partitioner must have an assign(table, seed) method, got {partitioner!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"seed must be an integer or None, got {seed!r}")
        self.partitioner = partitioner
        self.seed = None if seed is None else int(seed)
        self.min_center_size = check_int("min_center_size", min_center_size, 0)

    def partition_key(self) -> str:
        """The partitioner's ``report_key()``, ``default`` without one (:class:`Natural`)."""
        return partitioner_key(self.partitioner)

    def effective_seed(self, seed: int) -> int:
        """``self.seed`` when set (fixes the data while training seeds vary), else the run seed."""
        return int(self.seed if self.seed is not None else seed)

    @abstractmethod
    def table(self, seed: int) -> PooledTable:
        """The pooled rows in raw units, with their natural sites."""

    def build(self, seed: int, split: Split | Sequence[float] | None = None) -> FederatedData:
        """Table -> partitioner groups (default: :class:`Natural`, one center per site) -> centers.

        Args:
            seed: Run seed (overridden by ``self.seed`` when set); the data, the partition and the
                splits draw from it.
            split: Train/val/test fractions per center; None (default): the source's ``split``
                (``data.split``).

        Returns:
            The federation; ``dropped_centers`` lists centers below ``min_center_size``.
        """
        seed = self.effective_seed(seed)
        table = self.table(seed)
        partitioner = self.partitioner if self.partitioner is not None else Natural()
        return build_federation(
            table,
            partitioner.assign(table, seed),
            seed,
            split=self.split if split is None else split,
            min_center_size=self.min_center_size,
        )
