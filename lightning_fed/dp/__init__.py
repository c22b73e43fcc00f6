"""Differential privacy of training (issue 34, item 5): DP-SGD's clipped per-sample gradients and
the accountant of the privacy spent. The metadata descriptors' mechanism is :mod:`lightning_fed.privacy`."""

from lightning_fed.dp.accountant import dp_sgd_epsilon, require_dp_accounting
from lightning_fed.dp.per_sample import clip_rows, noisy_clipped_sum, per_sample_grads

__all__ = ["clip_rows", "dp_sgd_epsilon", "noisy_clipped_sum", "per_sample_grads", "require_dp_accounting"]
