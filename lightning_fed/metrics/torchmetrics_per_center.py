"""Any torchmetrics metric, per center: the ``metrics:`` config key.

``metrics:`` lists torchmetrics classes by ``class_path`` / ``init_args`` (or a bare class path)::

    metrics:
      - torchmetrics.classification.BinaryAveragePrecision
      - class_path: torchmetrics.classification.BinaryCalibrationError
        init_args: {n_bins: 10}

Each is evaluated on every center's own validation and test split, beside the built-in AUROC,
accuracy and balanced accuracy (which stay hand-written and batched: :mod:`lightning_fed.metrics`).

What a metric receives, per center: ``preds`` are probabilities (binary models: the sigmoid of the
logit, ``[n]``; ``K``-class models: the softmax, ``[n, K]``), ``target`` the labels as int64 ``[n]``.
So binary federations take ``Binary*`` metrics and ``K``-class ones ``Multiclass*`` metrics with
``num_classes=K`` (or any metric that takes these shapes, e.g. ``MeanSquaredError`` of binary
probabilities, the Brier score).

Names: a metric's name is its class name in snake case (``BinaryAveragePrecision`` ->
``binary_average_precision``); a name already taken, by a built-in (``auroc``, ``accuracy``,
``balanced_accuracy``) or an earlier entry, gets ``_2``, ``_3``, ... in list order.

The NaN rule (where a center's split cannot define a metric), the same for every metric: a center's
value is NaN when its split has no rows, when the metric warns while updating or computing on it
(torchmetrics warns whenever it substitutes a value for an undefined one: ``BinaryAUROC`` and
``BinaryAveragePrecision`` on a single-class split, where they return 0; ``MulticlassAUROC`` or
``MulticlassAveragePrecision`` with a class absent), or when the value is not finite. Metrics that
define a value by convention without warning keep torchmetrics' value (``BinaryF1Score``'s
``zero_division``, ``BinaryCalibrationError`` on one class). The warnings are recorded, not shown.

Bad entries fail before any training with one line naming ``metrics[i]``: not importable, not a
``torchmetrics.Metric``, bad ``init_args`` (:func:`resolve_metrics`), the wrong task for the
federation's model or a non-scalar result (:meth:`PerCenterMetrics.check`).

Under DDP every process evaluates every center (:mod:`lightning_fed.federation`), so the metrics'
own cross-process sync is turned off.
"""

from __future__ import annotations

import importlib
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = ["BUILT_IN", "PerCenterMetrics", "metric_name", "resolve_metrics"]

#: Per-center metric names the federation computes itself.
BUILT_IN = ("auroc", "accuracy", "balanced_accuracy")

#: How to write an entry, for the error messages.
_HOW = (
    "write each entry as {class_path: torchmetrics.classification.BinaryAveragePrecision, init_args: {...}}"
)


def metric_name(metric: Any) -> str:
    """Snake case of the metric's class name (``BinaryAveragePrecision`` -> ``binary_average_precision``)."""
    name = type(metric).__name__
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _entry(i: int, spec: Any) -> Any:
    """Instantiate entry ``i`` of ``metrics:`` (a Metric, a class path or ``{class_path, init_args}``)."""
    from torchmetrics import Metric

    if isinstance(spec, Metric):
        return spec
    if isinstance(spec, str):
        spec = {"class_path": spec}
    if not isinstance(spec, Mapping) or not isinstance(spec.get("class_path"), str):
        raise ValueError(f"metrics[{i}]: {spec!r} is not a torchmetrics class; {_HOW}")
    unknown = set(spec) - {"class_path", "init_args"}
    if unknown:
        raise ValueError(f"metrics[{i}]: unknown key(s) {sorted(unknown)}; {_HOW}")
    path = spec["class_path"]
    module, _, attr = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr) if module else None
    except (ImportError, AttributeError):
        cls = None
    if cls is None:
        raise ValueError(
            f"metrics[{i}]: cannot import {path!r}; give a torchmetrics class's full path, e.g. "
            "torchmetrics.classification.BinaryAveragePrecision"
        )
    if not (isinstance(cls, type) and issubclass(cls, Metric)):
        raise ValueError(
            f"metrics[{i}]: {path} is not a torchmetrics.Metric; name a torchmetrics class, e.g. "
            "torchmetrics.classification.BinaryAveragePrecision"
        )
    init_args = dict(spec.get("init_args") or {})
    try:
        metric = cls(**init_args)
    except (TypeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"metrics[{i}] ({path}): bad init_args {init_args}: {first}") from None
    if not isinstance(metric, Metric):  # a task wrapper's __new__ may return anything
        raise ValueError(f"metrics[{i}]: {path}(...) is not a torchmetrics.Metric; name a torchmetrics class")
    return metric


def resolve_metrics(specs: Sequence[Any] | None) -> PerCenterMetrics:
    """The metrics of a ``metrics:`` list (entries: Metric instances, class paths or
    ``{class_path, init_args}``).

    Raises:
        ValueError: One line naming ``metrics[i]`` and the fix, for an entry that is not a
            torchmetrics ``Metric`` or cannot be built.
    """
    if specs is not None and (isinstance(specs, str | Mapping) or not isinstance(specs, Sequence)):
        raise ValueError(f"metrics must be a list of torchmetrics classes, got {specs!r}; {_HOW}")
    return PerCenterMetrics([_entry(i, spec) for i, spec in enumerate(specs or [])])


class PerCenterMetrics:
    """torchmetrics metrics evaluated on each center's split (module docstring).

    Args:
        metrics: torchmetrics ``Metric`` instances (each is reset and reused per center).
    """

    def __init__(self, metrics: Sequence[Any] = ()) -> None:
        self.metrics = list(metrics)
        taken, self.names = set(BUILT_IN), []
        for metric in self.metrics:
            base = name = metric_name(metric)
            k = 1
            while name in taken:
                k += 1
                name = f"{base}_{k}"
            taken.add(name)
            self.names.append(name)
            # Every process evaluates every center itself: no cross-process sync of the states.
            metric.sync_on_compute = False
            metric._to_sync = False

    def __len__(self) -> int:
        return len(self.metrics)

    def __bool__(self) -> bool:
        return bool(self.metrics)

    def check(self, num_classes: int) -> None:
        """Refuse, before any training, a metric that does not fit the federation's model.

        Runs every metric once on made-up rows of the model's layout (every class present).

        Args:
            num_classes: 2 for binary models (one logit a row), else ``K`` (``K`` logits a row).

        Raises:
            ValueError: One line naming ``metrics[i]``: the wrong task (``Multiclass*`` on a binary
                model, ``Binary*`` on a ``K``-class one, ``num_classes`` other than ``K``, any
                ``Multilabel*``), an error on the made-up rows, or a result that is not one number.
        """
        binary = num_classes == 2
        target = torch.arange(num_classes).repeat(2)
        if binary:
            preds = torch.linspace(0.2, 0.8, target.numel())
            layout = (
                "this federation's model is binary (preds: probabilities [n], targets 0/1): use a "
                "torchmetrics.classification.Binary* metric"
            )
        else:
            preds = torch.softmax(2.0 * torch.nn.functional.one_hot(target, num_classes).float(), -1)
            layout = (
                f"this federation's model has {num_classes} classes (preds: softmax probabilities "
                f"[n, {num_classes}], targets 0..{num_classes - 1}): use a "
                f"torchmetrics.classification.Multiclass* metric with num_classes={num_classes}"
            )
        for i, (metric, name) in enumerate(zip(self.metrics, self.names, strict=True)):
            cls = type(metric).__name__
            where = f"metrics[{i}] ({type(metric).__module__}.{cls})"
            wrong = (
                cls.startswith("Multilabel")
                or (binary and cls.startswith("Multiclass"))
                or (not binary and cls.startswith("Binary"))
                or (not binary and getattr(metric, "num_classes", num_classes) not in (num_classes, None))
            )
            if wrong:
                raise ValueError(f"{where}: wrong task; {layout}")
            try:
                value = self._value(metric, preds, target)[0]
            except Exception as err:  # torchmetrics raises ValueError / RuntimeError on bad shapes
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise ValueError(f"{where}: {first}; {layout}") from None
            if value is None:
                raise ValueError(
                    f"{where}: returns more than one number; choose a scalar setting (e.g. "
                    f"average='macro') so '{name}' is one value per center"
                )

    @staticmethod
    def _value(metric: Any, preds: Tensor, target: Tensor) -> tuple[float | None, bool]:
        """``(value, warned)`` of ``metric`` on one split (value None: not a single number)."""
        metric.reset()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            metric.update(preds, target)
            out = metric.compute()
        metric.reset()
        if not isinstance(out, Tensor) or out.numel() != 1:
            return None, False
        return float(out), any(issubclass(w.category, UserWarning) for w in caught)

    def evaluate(self, logits: Tensor, y: Tensor, mask: Tensor) -> dict[str, Tensor]:
        """Every metric per center ``{name: [C]}`` (float64; NaN by the module's rule).

        Args:
            logits: ``[C, n]`` binary or ``[C, n, K]`` class logits of each center's model on its split.
            y: Labels ``[C, n]``.
            mask: Real rows ``[C, n]``.
        """
        if not self.metrics:
            return {}
        probs = torch.sigmoid(logits) if logits.dim() == 2 else torch.softmax(logits, -1)
        target = y.long()
        out = {name: torch.full((logits.shape[0],), math.nan, dtype=torch.float64) for name in self.names}
        for c in range(logits.shape[0]):
            rows = mask[c]
            if not bool(rows.any()):
                continue
            p, t = probs[c][rows], target[c][rows]
            for metric, name in zip(self.metrics, self.names, strict=True):
                value, warned = self._value(metric, p, t)
                if value is not None and not warned and math.isfinite(value):
                    out[name][c] = value
        return out
