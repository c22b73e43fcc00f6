"""Per-center and pooled evaluation metrics: exact batched AUROC, balanced accuracy, NaN-aware summaries."""

from lightning_fed.metrics.auroc import CenterAUROC, batched_auroc, pooled_auroc
from lightning_fed.metrics.balanced_accuracy import BalancedAccuracy, balanced_accuracy
from lightning_fed.metrics.summary import MetricSummary, summarize

__all__ = [
    "BalancedAccuracy",
    "CenterAUROC",
    "MetricSummary",
    "balanced_accuracy",
    "batched_auroc",
    "pooled_auroc",
    "summarize",
]
