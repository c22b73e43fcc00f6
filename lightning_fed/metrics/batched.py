"""Per-center accuracy and balanced accuracy for many centers at once (padded ``[C, n]`` layout).

Predictions come from logits: ``[C, n]`` binary logits (class 1 when the logit is > 0, i.e. the
probability is > 0.5) or ``[C, n, K]`` class logits (argmax). Balanced accuracy is the mean recall
over the classes present in a center's split (sklearn's ``balanced_accuracy_score``), computed for
every center at once by :func:`~lightning_fed.metrics.balanced_accuracy.balanced_accuracy_rows`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.metrics.auroc import batched_auroc
from lightning_fed.metrics.balanced_accuracy import balanced_accuracy_rows

__all__ = ["batched_accuracy", "batched_balanced_accuracy", "batched_macro_auroc", "predicted_class"]


def predicted_class(logits: Tensor) -> Tensor:
    """Class ids ``[C, n]``: ``logit > 0`` for binary ``[C, n]`` logits, argmax for ``[C, n, K]``."""
    return (logits > 0).long() if logits.dim() == 2 else logits.argmax(-1)


def batched_accuracy(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Accuracy per center ``[C]`` (float64; NaN for a center without rows)."""
    hit = ((predicted_class(logits) == y.long()) & mask).sum(1).double()
    n = mask.sum(1).double()
    return torch.where(n > 0, hit / n.clamp_min(1), torch.full_like(n, float("nan")))


def batched_balanced_accuracy(logits: Tensor, y: Tensor, mask: Tensor, num_classes: int) -> Tensor:
    """Mean per-class recall over the classes present, per center ``[C]`` (NaN without rows).

    The predicted classes of :func:`predicted_class` through
    :func:`~lightning_fed.metrics.balanced_accuracy.balanced_accuracy_rows`, the one implementation
    (the referral tables use it too).
    """
    return balanced_accuracy_rows(predicted_class(logits), y, mask, num_classes)


def batched_macro_auroc(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """One-vs-rest AUROC per class, averaged over the classes with both labels present ``[C]``.

    ``logits [C, n, K]``; class ``k``'s score is its softmax log-probability (the ranking sklearn's
    ``roc_auc_score(multi_class="ovr", average="macro")`` uses), which makes this equal to sklearn on
    splits where every class occurs. NaN when no class has both labels in the split.
    """
    C, n, K = logits.shape
    scores = logits.log_softmax(-1).permute(0, 2, 1).reshape(C * K, n)
    targets = (y.long().unsqueeze(1) == torch.arange(K).view(1, K, 1)).reshape(C * K, n).to(logits.dtype)
    per_class = batched_auroc(scores, targets, mask.repeat_interleave(K, 0)).view(C, K)
    return per_class.nanmean(1)
