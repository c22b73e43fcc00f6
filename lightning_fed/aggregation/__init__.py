"""Aggregation rules expressed as mixing matrices over stacked parameters."""

from lightning_fed.aggregation.mixing import mix, sample_weights, weighted_average

__all__ = ["mix", "sample_weights", "weighted_average"]
