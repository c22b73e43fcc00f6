"""How each center's rows are split into train / validation / test (the ``data.split`` setting).

Every table source (TeacherICU, FedProxSynthetic, MIMIC-IV, eICU, any CSV) splits each center with
:class:`Split` through :func:`~lightning_fed.data.center.build_federation`, the one place table
splits are made. The split is stratified by label within the center: each class is shuffled with the
center's own generator ``(seed, "split", k)`` and cut at the cumulative fractions (rounded). The
default ``Split()`` (80/10/10, ``min_per_class=0``) reproduces the splits of every earlier version
row for row.

Small clinical centers are where this matters: with 14 validation rows and one death, rounding
alone can leave a split with a single class, whose AUROC is undefined. ``min_per_class = m`` moves
rows of a class from train into validation and test until each holds at least ``m`` of that class,
wherever the center has at least ``2 m`` rows of it; a class with fewer keeps the rounded cut (test
is filled first, then validation) and the center is counted in a warning.

Repeated evaluation (``folds: k``, ``fold: i``; :meth:`Split.fold_indices`): each class of the
center, shuffled by the same generator, is dealt round-robin into ``k`` folds, and fold ``i`` is the
test split, so a center's ``k`` test splits are disjoint and cover its rows. Each of the ``k`` runs
is a full fit; the report pools their test predictions per center (out-of-fold AUROC).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_SPLIT", "Split", "class_counts"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Split:
    """Train / validation / test fractions of every center, stratified by label.

    Args:
        train: Fraction of each class that trains (default 0.8).
        val: Fraction of each class for validation (default 0.1).
        test: Fraction of each class for test (default 0.1).
        min_per_class: At least this many rows of each class in validation and in test, taken from
            train, wherever the center has at least ``2 * min_per_class`` rows of that class; default
            0 (the rounded cut only, the splits of earlier versions).
        folds: ``k >= 2`` folds per center, fold :attr:`fold` being the test split
            (:meth:`fold_indices`; ``test`` is then unused); None (default): the single split above.
        fold: Which fold is the test split, ``0 <= fold < folds`` (0 without ``folds``).

    Raises:
        ValueError: One line naming the ``data.split`` key, on a fraction outside [0, 1], fractions
            that do not sum to 1, a negative or non-integer ``min_per_class``, ``min_per_class > 0``
            with an empty validation or test fraction, ``folds`` below 2 or not an integer, or
            ``fold`` outside ``0 .. folds - 1`` (or set without ``folds``).
    """

    train: float = 0.8
    val: float = 0.1
    test: float = 0.1
    min_per_class: int = 0
    folds: int | None = None
    fold: int = 0

    def __post_init__(self) -> None:
        for key in ("train", "val", "test"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise ValueError(f"data.split.{key} must be a fraction in [0, 1], got {value!r}")
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"data.split.{key} must be a fraction in [0, 1], got {value!r}")
        total = float(self.train) + float(self.val) + float(self.test)
        if not np.isclose(total, 1.0):
            raise ValueError(
                f"data.split fractions must sum to 1, got train={self.train} + val={self.val} + "
                f"test={self.test} = {total:g}: adjust data.split.train"
            )
        m = self.min_per_class
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 0:
            raise ValueError(f"data.split.min_per_class must be an integer >= 0, got {m!r}")
        if m > 0 and (self.val == 0 or self.test == 0):
            raise ValueError(
                f"data.split.min_per_class={m} needs val and test fractions above 0, got val={self.val}, "
                f"test={self.test}: set data.split.min_per_class=0 or give both a fraction"
            )
        self._check_folds()

    def _check_folds(self) -> None:
        """Refuse, in one line, ``folds`` that is not an integer >= 2 and ``fold`` outside its range."""
        k, i = self.folds, self.fold
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise ValueError(f"data.split.fold must be an integer, got {i!r}")
        if k is None:
            if i != 0:
                raise ValueError(f"data.split.fold={i} needs data.split.folds: set data.split.folds > {i}")
            return
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
            raise ValueError(f"data.split.folds must be an integer >= 2 or null, got {k!r}")
        if not 0 <= i < k:
            raise ValueError(f"data.split.fold must be in 0..{k - 1} for data.split.folds={k}, got {i}")

    @property
    def fractions(self) -> tuple[float, float, float]:
        """``(train, val, test)`` as floats."""
        return float(self.train), float(self.val), float(self.test)

    def indices(self, y: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted positions into ``y`` of the train, validation and test rows.

        Per class (in ascending label order, each shuffled by ``rng``): ``round(cumsum(fractions) n)``
        cuts, then :meth:`guarantee` moves rows from train to the evaluation splits. With
        :attr:`folds` set: :meth:`fold_indices` instead.

        Args:
            y: The center's labels ``[n]``.
            rng: The center's split generator.

        Returns:
            ``(train, val, test)`` positions, disjoint and covering ``range(len(y))``.
        """
        if self.folds is not None:
            return self.fold_indices(y, rng)
        cuts = np.cumsum(self.fractions)
        parts: list[list[np.ndarray]] = [[], [], []]
        for label in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == label))
            bounds = np.round(cuts * len(idx)).astype(int)
            counts = self.guarantee(int(bounds[0]), int(bounds[1] - bounds[0]), len(idx))
            ends = np.cumsum(counts)
            parts[0].append(idx[: ends[0]])
            parts[1].append(idx[ends[0] : ends[1]])
            parts[2].append(idx[ends[1] :])
        tr, va, te = (np.sort(np.concatenate(p)) for p in parts)
        return tr, va, te

    def fold_indices(
        self, y: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sorted ``(train, val, test)`` positions into ``y`` for fold :attr:`fold` of :attr:`folds`.

        Per class in ascending label order, the class's rows are shuffled by ``rng`` (one
        permutation per class, drawn in that order, as :meth:`indices` draws them) and dealt
        round-robin: the ``j``-th shuffled row goes to fold ``(s + j) mod k``, where ``s`` is the number
        of rows of the classes dealt before it (so fold sizes differ by at most one row overall, and
        each class's count per fold by at most one). Fold :attr:`fold` is the test split; the class's
        other ``r`` rows, in their shuffled order, give the first ``round(r * val / (train + val))`` to
        validation (the fractions' ratio: 1/9 of the rest for 80/10/10) and the rest to train. With
        ``m = min_per_class`` and at least ``2 m`` rows of the class, validation is raised to
        ``min(m, r)`` rows of it, taken from train; test keeps its dealt rows (``floor(n / k)`` or
        ``ceil(n / k)`` of the class), since moving rows into it would break the partition. The
        ``k`` test splits of a center (same seed, so the same permutations) are disjoint and cover
        its rows.

        Args:
            y: The center's labels ``[n]``.
            rng: The center's split generator.

        Returns:
            ``(train, val, test)`` positions, disjoint and covering ``range(len(y))``.
        """
        k, m = int(self.folds), self.min_per_class  # type: ignore[arg-type]
        share = float(self.val) / (float(self.train) + float(self.val)) if self.train + self.val > 0 else 0.0
        parts: list[list[np.ndarray]] = [[], [], []]
        dealt = 0
        for label in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == label))
            in_test = (dealt + np.arange(len(idx))) % k == self.fold
            dealt += len(idx)
            rest = idx[~in_test]
            n_val = int(np.round(len(rest) * share))
            if m and len(idx) >= 2 * m:
                n_val = max(n_val, min(m, len(rest)))
            parts[0].append(rest[n_val:])
            parts[1].append(rest[:n_val])
            parts[2].append(idx[in_test])
        tr, va, te = (np.sort(np.concatenate(p)) for p in parts)
        return tr, va, te

    def guarantee(self, n_train: int, n_val: int, n: int) -> tuple[int, int, int]:
        """One class's ``(train, val, test)`` counts after the ``min_per_class`` guarantee.

        With ``m = min_per_class`` and ``n >= 2 m`` rows of the class: validation and test get at
        least ``m`` each (rows taken from train; if train runs out, from the larger evaluation split
        down to ``m``). With ``n < 2 m``: test is raised towards ``m`` first, then validation, from
        train only. ``m = 0`` returns the rounded cut unchanged.
        """
        m = self.min_per_class
        n_test = n - n_train - n_val
        if m == 0:
            return n_train, n_val, n_test
        if n >= 2 * m:
            n_val, n_test = max(n_val, m), max(n_test, m)
            excess = n_val + n_test - n
            if excess > 0:  # train is empty: shrink the larger evaluation split towards m
                if n_val >= n_test:
                    n_val -= excess
                else:
                    n_test -= excess
            return n - n_val - n_test, n_val, n_test
        for _ in range(2):  # too few for both: test first, then validation, from train only
            if n_test < m and n_train > 0:
                take = min(m - n_test, n_train)
                n_test, n_train = n_test + take, n_train - take
            if n_val < m and n_train > 0:
                take = min(m - n_val, n_train)
                n_val, n_train = n_val + take, n_train - take
        return n_train, n_val, n_test


#: The split every table source used before ``data.split`` existed (80/10/10, no guarantee).
DEFAULT_SPLIT = Split()


def class_counts(y: np.ndarray) -> dict[int, int]:
    """``{label: rows}`` of one split (for logging and tests)."""
    labels, counts = np.unique(np.asarray(y).astype(int), return_counts=True)
    return dict(zip(labels.tolist(), counts.tolist(), strict=True))
