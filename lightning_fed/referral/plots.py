"""Alias module kept for one release: :func:`routing_picture` lives in :mod:`lightning_fed.plots.referral`."""

from lightning_fed.plots.referral import routing_picture

__all__ = ["routing_picture"]
