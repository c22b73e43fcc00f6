"""Per-center and pooled evaluation metrics: exact batched AUROC, balanced accuracy, NaN-aware summaries.

Metrics are plain functions over a padded ``[C, n]`` batch (one row per center), not torchmetrics
``Metric`` classes: evaluation scores every center in one call, and ABPS's Shapley credit scores
thousands of coalition models a round through :func:`batched_auroc`, which a per-center
``update``/``compute`` cannot match. Each metric has exactly one implementation (balanced accuracy:
:func:`balanced_accuracy_rows`, which the referral tables reach through :func:`balanced_accuracy`),
tested against sklearn and torchmetrics. Isolation is read off the byte ledger
(:mod:`lightning_fed.metrics.isolation`). Any torchmetrics class can be added per center with the
``metrics:`` config key (:mod:`lightning_fed.metrics.torchmetrics_per_center`).
"""

from lightning_fed.metrics.auroc import batched_auroc, fragile_auroc, pooled_auroc
from lightning_fed.metrics.balanced_accuracy import balanced_accuracy, balanced_accuracy_rows
from lightning_fed.metrics.batched import (
    batched_accuracy,
    batched_balanced_accuracy,
    batched_macro_auroc,
    predicted_class,
)
from lightning_fed.metrics.isolation import round_isolation, run_isolation
from lightning_fed.metrics.likelihood import batched_brier, batched_likelihood
from lightning_fed.metrics.summary import MetricSummary, summarize

__all__ = [
    "MetricSummary",
    "balanced_accuracy",
    "balanced_accuracy_rows",
    "batched_accuracy",
    "batched_auroc",
    "batched_balanced_accuracy",
    "batched_brier",
    "batched_likelihood",
    "batched_macro_auroc",
    "fragile_auroc",
    "pooled_auroc",
    "predicted_class",
    "round_isolation",
    "run_isolation",
    "summarize",
]
