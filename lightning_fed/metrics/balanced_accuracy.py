"""Balanced accuracy from the confusion matrix, for many rows at once (the one implementation).

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
from torch import Tensor

__all__ = ["balanced_accuracy", "balanced_accuracy_rows"]


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


def balanced_accuracy_rows(pred: Tensor, target: Tensor, mask: Tensor, num_classes: int) -> Tensor:
    """Balanced accuracy of every row of a padded ``[C, n]`` batch of class ids (the one implementation).

    From the confusion matrix's row sums (support ``s_k``) and diagonal (correct ``m_kk``), counted
    for all rows at once by one scatter-add each: ``(1 / |T|) sum_{k in T} m_kk / s_k`` over the
    classes ``T`` present in the row's targets (module docstring).

    Args:
        pred: ``[C, n]`` predicted class ids.
        target: ``[C, n]`` true class ids in ``[0, num_classes)`` (checked on real rows).
        mask: ``[C, n]`` bool, ``True`` for real rows.
        num_classes: Number of classes ``K``.

    Returns:
        float64 ``[C]``; NaN for a row without real entries.
    """
    c = target.shape[0]
    pred, target = pred.long(), target.long()
    real = target[mask]
    if real.numel() and (int(real.min()) < 0 or int(real.max()) >= num_classes):
        raise ValueError(f"`target` values must lie in [0, {num_classes})")
    slot = (torch.arange(c, device=target.device).unsqueeze(1) * num_classes + target)[mask]
    hit = (pred == target)[mask].to(torch.float64)
    support = torch.zeros(c * num_classes, dtype=torch.float64, device=target.device)
    correct = torch.zeros_like(support)
    support.index_add_(0, slot, torch.ones_like(hit))
    correct.index_add_(0, slot, hit)
    support, correct = support.view(c, num_classes), correct.view(c, num_classes)
    present = support > 0
    recall = torch.where(present, correct / support.clamp_min(1), torch.zeros_like(support))
    k = present.sum(1)
    return torch.where(k > 0, recall.sum(1) / k.clamp_min(1), torch.full_like(recall[:, 0], float("nan")))


def _check_args(num_classes: int, threshold: float) -> None:
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"`num_classes` must be an int >= 2, got {num_classes!r}")
    if not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(f"`threshold` must lie in [0, 1], got {threshold!r}")


def balanced_accuracy(
    preds: Tensor, target: Tensor, num_classes: int, threshold: float = 0.5, from_logits: bool = False
) -> Tensor:
    """Balanced accuracy of one set of predictions (the referral tables), via :func:`balanced_accuracy_rows`.

    Accepted predictions: integer class indices ``[n]``; scores, probabilities or logits ``[n, K]``
    (the argmax is the prediction); for ``num_classes=2`` only, floating ``[n]`` positive-class
    probabilities, predicted positive when ``p > threshold`` (strict, as sklearn's ``predict``),
    or logits with ``from_logits=True`` (through a sigmoid first). Without ``from_logits``, values
    outside ``[0, 1]`` raise instead of being guessed to be logits.

    Args:
        preds: Predictions as above.
        target: ``[n]`` integer class ids in ``[0, num_classes)``.
        num_classes: Number of classes ``K`` (>= 2).
        threshold: Probability threshold for binary ``[n]`` predictions.
        from_logits: Whether binary ``[n]`` predictions are logits.

    Returns:
        float64 scalar tensor; NaN for empty input.
    """
    _check_args(num_classes, threshold)
    p, t = _to_class_indices(preds.detach(), target.detach(), num_classes, float(threshold), from_logits)
    mask = torch.ones(1, t.shape[0], dtype=torch.bool, device=t.device)
    return balanced_accuracy_rows(p.unsqueeze(0), t.unsqueeze(0), mask, num_classes)[0]
