"""Repeated evaluation (``data.split.folds``): the ``k`` fold runs of one label and seed as one record.

With ``data.split.folds = k`` a method and seed is ``k`` full fits, fit ``i`` testing on fold ``i`` of
every center (:meth:`~lightning_fed.data.split.Split.fold_indices`), so a center's ``k`` test splits
partition its rows. :func:`pool_folds` replaces each complete set of ``k`` fold runs by one
:class:`PooledFolds` record, whose per-center test numbers are computed from the runs' pooled
out-of-fold test predictions (``predictions.parquet``): each center's rows over the ``k`` folds form
one test set, scored by the model of the fold that held them out. Multi-class folds (the image
federations, ``predictions.parquet`` with ``K`` class ``logits`` per row) are scored as
:func:`~lightning_fed.evaluation.score` scores a multi-class split: the macro one-vs-rest AUROC
over the classes with both labels present (:func:`~lightning_fed.metrics.batched_macro_auroc`),
accuracy of the arg-max class, balanced accuracy over ``K`` classes, support over ``K`` classes,
no DeLong interval and a NaN pooled AUROC. A pooled record has no rounds,
checkpoint, referral or held-out table of its own (those stay in the fold folders). On it, per center: ``n``,
positives, negatives, the AUROC with its DeLong (1988) 95 % interval, fragile / robust
(:func:`~lightning_fed.evaluation.support_columns`, the columns of ``centers.parquet``); and the
federation figures of ``summary.json`` from those (:func:`oof_summary`): the mean over defined
centers, the robust mean, the size-weighted mean, the pooled AUROC over every center's out-of-fold
rows, the undefined / fragile / robust counts, accuracy and balanced accuracy. Every other number
(bytes, rounds, wall time, diagnostics, validation figures) is the mean over the folds. Table 1, its
center-paired comparison and ``centers.md`` then read the pooled record like a run; ``folds.csv``
keeps each fold's own numbers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl
import torch

from lightning_fed.evaluation import EvalSet, Evaluation, score, support_columns
from lightning_fed.metrics import (
    fragile_auroc,
    summarize,
)
from lightning_fed.metrics.support import auroc_averages, split_support
from lightning_fed.reporting.runs import RunRecord

__all__ = ["PooledFolds", "oof_centers", "oof_summary", "pool_folds"]


@dataclass(frozen=True, eq=False)
class PooledFolds(RunRecord):
    """The ``k`` fold runs of one label and seed, read as one run (module docstring).

    Attributes:
        members: The fold runs, in fold order.
        oof: Per center, the out-of-fold test support and AUROC (:func:`oof_centers`).
    """

    members: tuple[RunRecord, ...] = ()
    oof: pl.DataFrame | None = None

    @property
    def name(self) -> str:
        """``<first fold's folder>+<k - 1> folds`` (the ``run`` column of the tables)."""
        return f"{self.members[0].path.name}+{len(self.members) - 1} folds"

    @cached_property
    def centers(self) -> pl.DataFrame | None:  # type: ignore[override]
        """:attr:`oof`: each center's out-of-fold test support and DeLong interval."""
        return self.oof

    @cached_property
    def rounds(self) -> pl.DataFrame | None:  # type: ignore[override]
        """None: the folds' rounds differ (each fold's are in its own folder)."""
        return None

    def rounds_have(self, column: str) -> bool:
        """False: a pooled record has no rounds of its own (:attr:`rounds`)."""
        return False

    @cached_property
    def referral(self) -> pl.DataFrame | None:  # type: ignore[override]
        """None: referral tables stay per fold run (in its folder)."""
        return None

    @cached_property
    def referral_queries(self) -> pl.DataFrame | None:  # type: ignore[override]
        """None, as :attr:`referral`."""
        return None

    @cached_property
    def holdout(self) -> pl.DataFrame | None:  # type: ignore[override]
        """None: held-out centers are not pooled over folds (each fold's ``holdout.parquet`` stays)."""
        return None

    @property
    def checkpoint(self) -> Path | None:
        """None: each fold has its own checkpoint."""
        return None


def _test_rows(member: RunRecord) -> pl.DataFrame:
    """One fold run's test predictions, refused in one line when it has none."""
    frame = member.predictions
    if frame is None:
        raise ValueError(
            f"{member.path}: no predictions.parquet, needed to pool the {member.folds} folds of "
            f"{member.label!r} seed {member.seed}: refit it with this version, or run `lightning-fed test "
            f"--run-dir {member.path}`, which writes it from the checkpoint"
        )
    return frame.filter(pl.col("split") == "test").with_columns(pl.lit(member.fold).alias("fold"))


def _padded(test: pl.DataFrame) -> tuple[list[int], list[str], torch.Tensor, torch.Tensor, torch.Tensor]:
    """Center ids and names, and the pooled test rows padded per center: logits (``[C, n]`` from a
    binary ``logit`` column, ``[C, n, K]`` from a multi-class ``logits`` list column), labels, mask."""
    test = test.sort("center", "fold", "row")
    names = test.group_by("center", maintain_order=True).agg(pl.col("name").unique())
    clash = names.filter(pl.col("name").list.len() > 1)
    if clash.height:
        raise ValueError(
            f"the folds name center {clash['center'][0]} differently ({clash['name'][0].to_list()}): "
            "their runs do not share one federation (same data, partition and seed); report them apart"
        )
    ids = names["center"].to_list()
    groups = [test.filter(pl.col("center") == c) for c in ids]
    n_max = max(1, max(g.height for g in groups))
    column, classes = ("logits", _num_classes(test)) if "logits" in test.columns else ("logit", None)
    logits = torch.zeros(len(ids), n_max, *([classes] if classes else []), dtype=torch.float64)
    y = torch.zeros(len(ids), n_max)
    mask = torch.zeros(len(ids), n_max, dtype=torch.bool)
    for c, g in enumerate(groups):
        n = g.height
        values = g[column] if classes is None else g[column].list.to_array(classes)
        logits[c, :n] = torch.from_numpy(values.to_numpy().astype("float64"))
        y[c, :n] = torch.tensor(g["label"].to_list(), dtype=torch.float32)
        mask[c, :n] = True
    return ids, [n[0] for n in names["name"].to_list()], logits, y, mask


def _num_classes(test: pl.DataFrame) -> int:
    """``K`` of multi-class predictions: every row's ``logits`` list has the same length, refused in
    one line otherwise."""
    widths = test["logits"].list.len().unique().sort().to_list()
    if len(widths) != 1 or widths[0] < 2:
        raise ValueError(
            f"the folds' predictions.parquet hold class logits of lengths {widths}: their runs do not "
            "share one model head (same number of classes); report them apart"
        )
    return int(widths[0])


def _layouts(frames: Sequence[pl.DataFrame], members: Sequence[RunRecord]) -> None:
    """Refuse, in one line, folds of which some wrote binary and some multi-class predictions."""
    multi = ["logits" in f.columns for f in frames]
    if any(multi) and not all(multi):
        binary = [str(m.path) for m, is_multi in zip(members, multi, strict=True) if not is_multi]
        raise ValueError(
            f"fold runs {', '.join(binary)} of {members[0].label!r} seed {members[0].seed} wrote binary "
            "predictions and the others multi-class ones: their runs do not share one model; report "
            "them apart"
        )


def oof_centers(members: Sequence[RunRecord], robust_min_per_class: int = 2) -> tuple[pl.DataFrame, dict]:
    """Each center's out-of-fold test numbers and the federation figures over them.

    Args:
        members: The ``k`` fold runs of one label and seed.
        robust_min_per_class: ``m`` of the robust flag and mean (the runs' ``robust_min_per_class``).

    Returns:
        ``(frame, summary)``: one row per center (``center``, ``name``, ``n_train``: the mean over
        folds of its training rows, rounded, then ``centers.parquet``'s ``test_*`` columns over the
        pooled out-of-fold rows) and :func:`oof_summary`'s keys.

    Raises:
        ValueError: A fold run without ``predictions.parquet``, folds naming a center differently,
            or folds mixing binary and multi-class predictions (or different numbers of classes).
    """
    frames = [_test_rows(m) for m in members]
    _layouts(frames, members)
    ids, names, logits, y, mask = _padded(pl.concat(frames, how="vertical_relaxed"))
    # Scored as a split is (lightning_fed.evaluation.score): macro one-vs-rest AUROC for class logits.
    evaluation = score(logits, y, mask)
    num_classes = logits.shape[2] if logits.dim() == 3 else 2
    padded = EvalSet(torch.zeros(len(ids), y.shape[1], 0), y, mask)
    n_train = _mean_train_rows(members, ids)
    frame = pl.DataFrame(
        {
            "center": ids,
            "name": names,
            "n_train": n_train,
            **support_columns("test", evaluation, padded, num_classes, robust_min_per_class),
        }
    )
    return frame, oof_summary(evaluation, padded, robust_min_per_class, num_classes)


def _mean_train_rows(members: Sequence[RunRecord], ids: list[int]) -> list[int | None]:
    """Each center's training rows averaged over the folds' ``centers.parquet`` (rounded; None
    where no fold has the file)."""
    frames = [m.centers.select("center", "n_train") for m in members if m.centers is not None]
    if not frames:
        return [None] * len(ids)
    means = pl.concat(frames).group_by("center").agg(pl.col("n_train").mean())
    by_id = dict(zip(means["center"].to_list(), means["n_train"].to_list(), strict=True))
    return [None if by_id.get(c) is None else round(by_id[c]) for c in ids]


def oof_summary(evaluation: Evaluation, padded: EvalSet, m: int, num_classes: int = 2) -> dict[str, Any]:
    """The summary's test figures over out-of-fold predictions, as ``Federation.summary`` defines them:
    ``test_auroc_mean`` / ``_std`` / ``_undefined`` (:func:`~lightning_fed.metrics.summarize` over the
    centers), ``_fragile``, ``_pooled`` (every center's rows as one set; NaN for multi-class),
    ``_robust``, ``_robust_centers`` and ``_weighted`` (:func:`~lightning_fed.metrics.support.auroc_averages`
    over the support of ``num_classes`` classes), ``test_accuracy_mean`` and
    ``test_balanced_accuracy_mean``, ``num_centers``."""
    s = summarize(evaluation.auroc)
    averages = auroc_averages(evaluation.auroc, split_support(padded.y, padded.mask, num_classes), m)
    return {
        "test_auroc_mean": s.mean,
        "test_auroc_std": s.std,
        "test_auroc_undefined": s.n_undefined,
        "test_auroc_fragile": int(fragile_auroc(evaluation.auroc, padded.y, padded.mask).sum()),
        "test_auroc_pooled": evaluation.pooled_auroc,
        "test_auroc_robust": averages["robust"],
        "test_auroc_robust_centers": averages["robust_centers"],
        "test_auroc_weighted": averages["weighted"],
        "test_accuracy_mean": summarize(evaluation.accuracy).mean,
        "test_balanced_accuracy_mean": summarize(evaluation.balanced_accuracy).mean,
        "num_centers": int(padded.y.shape[0]),
    }


def _mean_summary(members: Sequence[RunRecord]) -> dict[str, Any]:
    """The folds' summaries as one: a value every fold shares as is; numbers (not flags) that differ
    as their mean (integers rounded); anything else the first fold's. The ``metrics:`` entries
    (per-fold torchmetrics numbers) are left out; ``fold`` is dropped."""
    first = members[0].summary
    metric_names = first.get("metrics") or []
    metric_keys = {
        f"{split}_{n}_{s}" for n in metric_names for split in ("test", "val") for s in _METRIC_STATS
    }
    out: dict[str, Any] = {}
    for key, value in first.items():
        if key in ("fold", "metrics") or key in metric_keys:
            continue
        values = [m.summary.get(key) for m in members]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if not numeric or all(v == value for v in values):
            out[key] = value
        elif all(isinstance(v, int) for v in values):
            out[key] = round(sum(values) / len(values))
        else:
            out[key] = sum(float(v) for v in values) / len(values)
    return out


_METRIC_STATS = ("mean", "std", "defined")


def _pooled(members: list[RunRecord]) -> PooledFolds:
    """One :class:`PooledFolds` from a complete, consistent set of fold runs (checked by the caller)."""
    m = int(members[0].summary.get("robust_min_per_class", 2))
    frame, figures = oof_centers(members, m)
    summary: Mapping[str, Any] = {**_mean_summary(members), **figures, "folds": len(members)}
    return PooledFolds(members[0].path, summary, members[0].label, members=tuple(members), oof=frame)


def _check_complete(label: str, seed: Any, members: list[RunRecord]) -> None:
    """Refuse, in one line, fold runs that disagree on ``k``, repeat a fold or miss one."""
    ks = sorted({m.folds for m in members}, key=str)
    if len(ks) > 1:
        raise ValueError(
            f"method {label!r} seed {seed} mixes data.split.folds {ks}: report each k separately"
        )
    k = int(ks[0])  # type: ignore[arg-type]
    by_fold: dict[int, list[str]] = defaultdict(list)
    for m in members:
        by_fold[int(m.fold)].append(str(m.path))  # type: ignore[arg-type]
    twice = [paths for paths in by_fold.values() if len(paths) > 1]
    if twice:
        raise ValueError(
            f"runs {', '.join(twice[0])} are the same fold of method {label!r} seed {seed}: remove the "
            "extra runs"
        )
    missing = sorted(set(range(k)) - set(by_fold))
    if missing:
        raise ValueError(
            f"method {label!r} seed {seed} has {len(by_fold)} of its {k} folds (missing {missing}): finish "
            "those runs (lightning-fed sweep resumes them) before reporting"
        )


def pool_folds(records: Sequence[RunRecord]) -> list[RunRecord]:
    """``records`` with each label and seed's fold runs replaced by one :class:`PooledFolds`.

    Records without a fold (single-split runs) are returned as they are, so a tree without fold
    runs gives back the same records in the same order. Pooled records come after them, in order
    of their first fold's path.

    Raises:
        ValueError: One line, when the fold runs of a label and seed disagree on ``k``, repeat a fold,
            miss one, lack ``predictions.parquet`` or name their centers differently.
    """
    plain = [r for r in records if r.fold is None]
    if len(plain) == len(records):
        return list(records)
    groups: dict[tuple[str, Any], list[RunRecord]] = defaultdict(list)
    for r in records:
        if r.fold is not None:
            groups[(r.label, r.seed)].append(r)
    pooled = []
    for (label, seed), members in groups.items():
        _check_complete(label, seed, members)
        pooled.append(_pooled(sorted(members, key=lambda m: int(m.fold))))  # type: ignore[arg-type]
    return [*plain, *sorted(pooled, key=lambda p: str(p.path))]
