"""Alias of :mod:`lightning_fed.reporting.tables.checkpoints` (the EdgeDRM checkpoint table).

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from lightning_fed.reporting.tables.checkpoints import (
    SHARED_PREFIXES,
    checkpoint_markdown,
    checkpoint_rows,
    checkpoint_stats,
    checkpoint_table,
)

__all__ = [
    "SHARED_PREFIXES",
    "checkpoint_markdown",
    "checkpoint_rows",
    "checkpoint_stats",
    "checkpoint_table",
]
