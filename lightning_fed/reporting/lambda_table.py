"""Alias of :mod:`lightning_fed.reporting.tables.lambda_sweep` (EdgeDRM Table 5).

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from lightning_fed.plots.lambda_sweep import lambda_plot
from lightning_fed.reporting.tables.lambda_sweep import (
    lambda_markdown,
    lambda_paired,
    lambda_paired_markdown,
    lambda_rows,
    lambda_table,
)

__all__ = [
    "lambda_markdown",
    "lambda_paired",
    "lambda_paired_markdown",
    "lambda_plot",
    "lambda_rows",
    "lambda_table",
]
