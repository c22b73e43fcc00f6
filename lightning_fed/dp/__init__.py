"""Differential privacy of training (issue 34, item 5): DP-SGD's clipped per-sample gradients and
the accountant of the privacy spent. The metadata descriptors' mechanism is :mod:`lightning_fed.privacy`."""

from lightning_fed.dp.accountant import RdpLedger, dp_sgd_epsilon, require_dp_accounting
from lightning_fed.dp.client import clipped_noisy_mean
from lightning_fed.dp.config import DPConfig
from lightning_fed.dp.per_sample import (
    clip_rows,
    dp_flat_mean,
    noisy_clipped_sum,
    per_sample_grads,
    step_noise,
)

__all__ = [
    "DPConfig",
    "RdpLedger",
    "clip_rows",
    "clipped_noisy_mean",
    "dp_flat_mean",
    "dp_sgd_epsilon",
    "noisy_clipped_sum",
    "per_sample_grads",
    "require_dp_accounting",
    "step_noise",
]
