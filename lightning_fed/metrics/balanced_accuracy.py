"""Balanced accuracy from an accumulated confusion matrix.

With confusion matrix ``M`` (rows = true class, columns = predicted class) and ``T`` the set of
classes present in the targets (``sum_j M[k, j] > 0``),

    balanced accuracy = (1 / |T|) * sum_{k in T} M[k, k] / sum_j M[k, j],

the mean recall over the classes present in the targets; this equals
``sklearn.metrics.balanced_accuracy_score``.

It differs from torchmetrics' ``MulticlassAccuracy(average="macro")`` when a class is predicted
but absent from the targets: torchmetrics keeps such a class in the macro mean with recall 0
(it only drops classes absent from both predictions and targets), which drags the score down;
here (and in sklearn) a class without true rows has no recall and is left out.
"""

from __future__ import annotations

import torch
import torchmetrics
from torch import Tensor

__all__ = ["BalancedAccuracy", "balanced_accuracy"]


def _to_class_indices(
    preds: Tensor, target: Tensor, num_classes: int, threshold: float, from_logits: bool
) -> tuple[Tensor, Tensor]:
    """Validate inputs and return ``(predicted class, true class)`` as long ``[n]`` tensors."""
    if target.ndim != 1:
        raise ValueError(f"`target` must have shape [n], got {tuple(target.shape)}")
    if target.is_floating_point() or target.is_complex():
        raise ValueError(f"`target` must hold integer class indices, got {target.dtype}")
    n = target.shape[0]
    target = target.long()
    if n and (int(target.min()) < 0 or int(target.max()) >= num_classes):
        raise ValueError(f"`target` values must lie in [0, {num_classes})")

    if preds.ndim == 2:
        if preds.shape != (n, num_classes):
            raise ValueError(
                f"`preds` scores must have shape [n, K] = [{n}, {num_classes}], got {tuple(preds.shape)}"
            )
        return preds.argmax(dim=1), target
    if preds.ndim != 1 or preds.shape[0] != n:
        raise ValueError(f"`preds` must have shape [n] or [n, K] with n = {n}, got {tuple(preds.shape)}")
    if preds.is_floating_point():
        if num_classes != 2:
            raise ValueError(
                "floating `preds` of shape [n] are binary probabilities/logits and need num_classes=2; "
                f"got num_classes={num_classes}: pass integer class indices or [n, K] scores"
            )
        if from_logits:
            preds = torch.sigmoid(preds)
        elif n and (float(preds.min()) < 0.0 or float(preds.max()) > 1.0):
            raise ValueError(
                "binary `preds` must be probabilities in [0, 1]; pass from_logits=True for logits"
            )
        return (preds > threshold).long(), target
    preds = preds.long()
    if n and (int(preds.min()) < 0 or int(preds.max()) >= num_classes):
        raise ValueError(f"`preds` class indices must lie in [0, {num_classes})")
    return preds, target


def _confusion_matrix(preds: Tensor, target: Tensor, num_classes: int) -> Tensor:
    flat = target * num_classes + preds
    return torch.bincount(flat, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def _balanced_from_confmat(confmat: Tensor) -> Tensor:
    support = confmat.sum(dim=1).to(torch.float64)
    present = support > 0
    if not bool(present.any()):
        return torch.tensor(float("nan"), dtype=torch.float64, device=confmat.device)
    recall = confmat.diagonal().to(torch.float64)[present] / support[present]
    return recall.mean()


def _check_args(num_classes: int, threshold: float) -> None:
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"`num_classes` must be an int >= 2, got {num_classes!r}")
    if not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(f"`threshold` must lie in [0, 1], got {threshold!r}")


class BalancedAccuracy(torchmetrics.Metric):
    """Balanced accuracy (mean recall over classes present in the targets) from a ``[K, K]`` confusion matrix.

    Accepted predictions in :meth:`update`:

    * integer class indices ``[n]``;
    * scores, probabilities or logits ``[n, K]`` (the argmax is the prediction);
    * for ``num_classes=2`` only, floating ``[n]`` positive-class probabilities, predicted positive
      when ``p > threshold`` (strict, as torchmetrics and ``predict`` in sklearn). With
      ``from_logits=True`` they are logits and go through a sigmoid first (threshold 0.5 then means
      logit > 0). Without it, values outside ``[0, 1]`` raise instead of being guessed to be logits.

    See the module docstring for the formula and how it differs from torchmetrics' macro accuracy.

    Args:
        num_classes: Number of classes ``K`` (>= 2).
        threshold: Probability threshold for binary ``[n]`` predictions, default 0.5.
        from_logits: Whether binary ``[n]`` predictions are logits rather than probabilities.
        **kwargs: Passed to :class:`torchmetrics.Metric`.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_classes: int, threshold: float = 0.5, from_logits: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        _check_args(num_classes, threshold)
        self.num_classes = num_classes
        self.threshold = float(threshold)
        self.from_logits = from_logits
        self.add_state(
            "confmat", default=torch.zeros(num_classes, num_classes, dtype=torch.long), dist_reduce_fx="sum"
        )

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add rows: ``preds`` as in the class docstring, ``target`` integer ``[n]`` in ``[0, K)``."""
        p, t = _to_class_indices(
            preds.detach(), target.detach(), self.num_classes, self.threshold, self.from_logits
        )
        self.confmat += _confusion_matrix(p, t, self.num_classes)

    def compute(self) -> Tensor:
        """Balanced accuracy as a float64 scalar tensor; NaN if no rows were seen."""
        return _balanced_from_confmat(self.confmat)


def balanced_accuracy(
    preds: Tensor, target: Tensor, num_classes: int, threshold: float = 0.5, from_logits: bool = False
) -> Tensor:
    """Functional :class:`BalancedAccuracy`: float64 scalar tensor, NaN for empty input."""
    _check_args(num_classes, threshold)
    p, t = _to_class_indices(preds.detach(), target.detach(), num_classes, float(threshold), from_logits)
    return _balanced_from_confmat(_confusion_matrix(p, t, num_classes))
