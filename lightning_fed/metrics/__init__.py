"""Per-center and pooled evaluation metrics: exact batched AUROC, balanced accuracy, NaN-aware summaries."""

from lightning_fed.metrics.auroc import CenterAUROC, batched_auroc, pooled_auroc
from lightning_fed.metrics.balanced_accuracy import BalancedAccuracy, balanced_accuracy
from lightning_fed.metrics.batched import (
    batched_accuracy,
    batched_balanced_accuracy,
    batched_macro_auroc,
    predicted_class,
)
from lightning_fed.metrics.summary import MetricSummary, summarize

__all__ = [
    "BalancedAccuracy",
    "CenterAUROC",
    "MetricSummary",
    "balanced_accuracy",
    "batched_accuracy",
    "batched_auroc",
    "batched_balanced_accuracy",
    "batched_macro_auroc",
    "pooled_auroc",
    "predicted_class",
    "summarize",
]
