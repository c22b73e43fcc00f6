"""Alias of :mod:`lightning_fed.reporting.tables.tiers` (Table 4) and the combined referral table.

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from lightning_fed.reporting import collect_referrals
from lightning_fed.reporting.families import TIER_CONDITIONS
from lightning_fed.reporting.tables.tiers import tier_markdown, tier_rows, tier_table

__all__ = ["TIER_CONDITIONS", "collect_referrals", "tier_markdown", "tier_rows", "tier_table"]
