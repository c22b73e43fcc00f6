"""Aggregation rules expressed as mixing matrices over stacked parameters."""

from lightning_fed.aggregation.mixing import mix, mix_received, renormalize, sample_weights, weighted_average

__all__ = ["mix", "mix_received", "renormalize", "sample_weights", "weighted_average"]
