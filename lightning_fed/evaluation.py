"""Per-center evaluation of stacked models on each center's own split.

Every center's split is laid into one padded tensor ``[C, n_max, ...]`` with a row mask, once; each
evaluation is then one packed forward and one batched rank AUROC for all centers. Binary models
(logits ``[C, n]``) report AUROC; multi-class models (logits ``[C, n, K]``, the image federations)
report the macro one-vs-rest AUROC in the same field. Both also report accuracy and balanced
accuracy (the EdgeDRM paper's metrics), binary models a DeLong (1988) 95 % interval for each center's
AUROC (:mod:`lightning_fed.metrics.delong`), and the ``metrics:`` of the config, torchmetrics classes run
on each center's rows (:mod:`lightning_fed.metrics.torchmetrics_per_center`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from lightning_fed.engine.base import Engine
from lightning_fed.metrics import (
    batched_accuracy,
    batched_auroc,
    batched_balanced_accuracy,
    batched_macro_auroc,
    fragile_auroc,
    pooled_auroc,
)
from lightning_fed.metrics.delong import delong_interval
from lightning_fed.metrics.support import split_support
from lightning_fed.metrics.torchmetrics_per_center import PerCenterMetrics

__all__ = ["EvalSet", "Evaluation", "evaluate", "score", "support_columns"]


@dataclass(frozen=True, eq=False)
class EvalSet:
    """Padded per-center split: ``x [C, n, F]``, ``y [C, n]``, ``mask [C, n]`` (True = real row)."""

    x: Tensor
    y: Tensor
    mask: Tensor

    @classmethod
    def from_splits(
        cls, splits: Sequence[tuple[Tensor, Tensor]], dtype: torch.dtype = torch.float32
    ) -> EvalSet:
        """Pad ``(x, y)`` per center to the longest split."""
        n_max = max(1, max(len(y) for _, y in splits))
        x = torch.zeros(len(splits), n_max, *splits[0][0].shape[1:], dtype=dtype)
        y = torch.zeros(len(splits), n_max)
        mask = torch.zeros(len(splits), n_max, dtype=torch.bool)
        for c, (xc, yc) in enumerate(splits):
            x[c, : len(yc)], y[c, : len(yc)], mask[c, : len(yc)] = xc, yc, True
        return cls(x, y, mask)


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Per-center metrics of one split.

    Attributes:
        auroc: AUROC ``[C]`` (macro one-vs-rest for multi-class; NaN when undefined).
        pooled_auroc: AUROC over all centers' rows together (NaN for multi-class).
        accuracy: Accuracy ``[C]``.
        balanced_accuracy: Mean recall over the classes present ``[C]``.
        metrics: The configured torchmetrics metrics, ``{name: [C]}`` (float64; NaN where a
            center's split does not define them); empty without ``metrics:``.
        auroc_low, auroc_high: DeLong (1988) 95 % interval of ``auroc`` ``[C]`` (binary; NaN where a
            class has fewer than two rows, and for multi-class models); None when not computed.
        logged: What the model's own ``validation_step`` / ``test_step`` logged, ``{name: [C]}``
            (float64 epoch means per center, :mod:`lightning_fed.engine.eval_step`); empty when the
            model defines no such step.
        logit: Each row's logits, padded like the split (float32; ``predictions.parquet``): binary
            models the logit of class 1 ``[C, n]`` (the probability being ``sigmoid(logit)``),
            multi-class models the class logits ``[C, n, K]`` (the probabilities ``softmax``); None
            when not kept.
    """

    auroc: Tensor
    pooled_auroc: float
    accuracy: Tensor
    balanced_accuracy: Tensor
    metrics: dict[str, Tensor] = field(default_factory=dict)
    auroc_low: Tensor | None = None
    auroc_high: Tensor | None = None
    logged: dict[str, Tensor] = field(default_factory=dict)
    logit: Tensor | None = None


def evaluate(
    engine: Engine,
    center_params: dict[str, Tensor] | None,
    split: EvalSet,
    metrics: PerCenterMetrics | None = None,
) -> Evaluation:
    """Evaluate center ``c``'s model on center ``c``'s split, for every center at once (and the
    configured torchmetrics ``metrics``, center by center): :func:`score` of the models' logits.
    ``center_params`` None: the engine's current models, one per center
    (:meth:`Engine.predict_current <lightning_fed.engine.base.Engine.predict_current>`)."""
    if center_params is None:
        logits = engine.predict_current(split.x).float().cpu()
    else:
        logits = engine.predict(center_params, split.x).float().cpu()
    return score(logits, split.y, split.mask, metrics)


def score(logits: Tensor, y: Tensor, mask: Tensor, metrics: PerCenterMetrics | None = None) -> Evaluation:
    """Per-center metrics of logits against labels (a split's, or pooled out-of-fold rows').

    Binary (``logits [C, n]``): the exact AUROC per center with its DeLong (1988) interval, the pooled
    AUROC over every center's rows, accuracy of ``logit > 0`` and balanced accuracy over 2 classes.
    Multi-class (``[C, n, K]``): per center the macro one-vs-rest AUROC

        A_c = (1 / |K_c|) sum_{k in K_c} AUROC(log softmax(z)_k, 1[y = k]),

    ``K_c`` the classes with both labels among the center's rows (sklearn's
    ``roc_auc_score(multi_class="ovr", average="macro")`` where every class occurs), accuracy of the
    arg-max class and balanced accuracy over ``K`` classes; no interval and a NaN pooled AUROC.

    Args:
        logits: ``[C, n]`` or ``[C, n, K]``, padded like ``y``.
        y: Labels ``[C, n]``.
        mask: Real rows ``[C, n]``.
        metrics: The configured torchmetrics metrics, evaluated center by center; None: none.
    """
    if logits.dim() == 3:
        auroc, pooled, num_classes = batched_macro_auroc(logits, y, mask), float("nan"), logits.shape[2]
        low = high = torch.full_like(auroc, float("nan"))
    else:
        auroc = batched_auroc(logits, y, mask)
        _, low, high = delong_interval(logits, y, mask)
        pooled, num_classes = pooled_auroc(logits[mask], y[mask]), 2
    return Evaluation(
        auroc=auroc,
        pooled_auroc=pooled,
        accuracy=batched_accuracy(logits, y, mask),
        balanced_accuracy=batched_balanced_accuracy(logits, y, mask, num_classes),
        metrics=metrics.evaluate(logits, y, mask) if metrics else {},
        auroc_low=low,
        auroc_high=high,
        logit=logits,
    )


def support_columns(
    split: str, evaluation: Evaluation, padded: EvalSet, num_classes: int, robust_min_per_class: int
) -> dict[str, list]:
    """One split's per-center columns of ``centers.parquet`` (and ``holdout.parquet``).

    ``<split>_n``, ``_positives``, ``_negatives``, ``_auroc`` with its DeLong (1988) 95 % interval
    ``_auroc_low`` / ``_auroc_high`` (NaN where a class has fewer than two rows), ``_auroc_fragile``
    (defined but resting on one case of a class), ``_robust`` (at least ``robust_min_per_class`` of
    every class), ``_accuracy`` and ``_balanced_accuracy``, one entry per center.

    Args:
        split: The column prefix (``"val"``, ``"test"``).
        evaluation: The split's :class:`Evaluation`.
        padded: The split the evaluation ran on.
        num_classes: ``K`` of the labels.
        robust_min_per_class: ``m`` of the ``_robust`` column.
    """
    support = split_support(padded.y, padded.mask, num_classes)
    nan = torch.full_like(evaluation.auroc, float("nan"))
    low = nan if evaluation.auroc_low is None else evaluation.auroc_low
    high = nan if evaluation.auroc_high is None else evaluation.auroc_high
    return {
        f"{split}_n": support.n.tolist(),
        f"{split}_positives": support.positives.tolist(),
        f"{split}_negatives": support.negatives.tolist(),
        f"{split}_auroc": evaluation.auroc.double().tolist(),
        f"{split}_auroc_low": low.double().tolist(),
        f"{split}_auroc_high": high.double().tolist(),
        f"{split}_auroc_fragile": fragile_auroc(evaluation.auroc, padded.y, padded.mask).tolist(),
        f"{split}_robust": support.robust(robust_min_per_class).tolist(),
        f"{split}_accuracy": evaluation.accuracy.double().tolist(),
        f"{split}_balanced_accuracy": evaluation.balanced_accuracy.double().tolist(),
    }
