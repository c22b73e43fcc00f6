"""NaN-aware summary of a per-center metric (NaN marks a center where the metric is undefined)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["MetricSummary", "summarize"]


@dataclass(frozen=True)
class MetricSummary:
    """Mean and spread of a metric over the centers where it is defined.

    Attributes:
        mean: Mean over defined centers (NaN if none).
        std: Population standard deviation (ddof=0) over defined centers (NaN if none).
        n_defined: Number of centers with a non-NaN value.
        n_undefined: Number of centers with NaN.
    """

    mean: float
    std: float
    n_defined: int
    n_undefined: int


def summarize(per_center: Tensor) -> MetricSummary:
    """Summarize a ``[C]`` per-center metric, ignoring NaN entries.

    With ``D`` the defined (non-NaN) values, ``mean = sum(D) / |D|`` and
    ``std = sqrt(sum((D - mean)^2) / |D|)`` (population std, ddof=0, as ``numpy.nanstd`` by
    default), computed in float64. ``+-inf`` counts as defined. All-NaN or empty input gives
    ``mean = std = nan``.

    Args:
        per_center: 1-D floating tensor of per-center values.

    Returns:
        A :class:`MetricSummary`.
    """
    if per_center.ndim != 1:
        raise ValueError(f"`per_center` must have shape [C], got {tuple(per_center.shape)}")
    if not per_center.is_floating_point():
        raise ValueError(f"`per_center` must be a floating tensor, got {per_center.dtype}")
    values = per_center.detach().to(torch.float64)
    defined = values[~torch.isnan(values)]
    n_defined = int(defined.numel())
    n_undefined = int(values.numel()) - n_defined
    if n_defined == 0:
        return MetricSummary(math.nan, math.nan, 0, n_undefined)
    mean = defined.mean()
    std = ((defined - mean) ** 2).mean().sqrt()
    return MetricSummary(float(mean), float(std), n_defined, n_undefined)
