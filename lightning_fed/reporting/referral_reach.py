"""Alias of :mod:`lightning_fed.reporting.tables.reach` (the reach table).

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from lightning_fed.reporting.families import REACH_ROUTERS
from lightning_fed.reporting.tables.reach import reach_markdown, reach_rows, reach_table

__all__ = ["REACH_ROUTERS", "reach_markdown", "reach_rows", "reach_table"]
