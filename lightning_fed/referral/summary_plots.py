"""Alias module kept for one release: the referral figures live in :mod:`lightning_fed.plots.referral`."""

from lightning_fed.plots.referral import DEFAULT_ROUTERS, gain_plot, tier_share_plot

__all__ = ["DEFAULT_ROUTERS", "gain_plot", "tier_share_plot"]
