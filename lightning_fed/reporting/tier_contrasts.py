"""Alias of :mod:`lightning_fed.reporting.tables.tiers` (the tier contrasts).

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from lightning_fed.reporting.tables.tiers import QUANTITIES, tier_contrasts, tier_contrasts_markdown

__all__ = ["QUANTITIES", "tier_contrasts", "tier_contrasts_markdown"]
