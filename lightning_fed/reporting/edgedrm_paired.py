"""Alias of :mod:`lightning_fed.reporting.tables.edgedrm_paired` (the EdgeDRM paired table).

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from lightning_fed.reporting.tables.edgedrm_paired import OURS, edgedrm_paired, edgedrm_paired_markdown

__all__ = ["OURS", "edgedrm_paired", "edgedrm_paired_markdown"]
