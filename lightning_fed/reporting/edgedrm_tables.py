"""Alias of :mod:`lightning_fed.reporting.tables.edgedrm` (EdgeDRM Tables 1 and 2).

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_fed.reporting.families import table_method
from lightning_fed.reporting.settings import (
    PRIMARY_LAMBDA,
    REFERENCE_GROUP,
    graph_order,
    run_lambda,
    setting_of,
)
from lightning_fed.reporting.tables.edgedrm import (
    FEDDRM_KEY,
    REFERENCE_METHODS,
    edgedrm_margins,
    edgedrm_margins_markdown,
    edgedrm_markdown,
    edgedrm_rows,
    edgedrm_settings_markdown,
    edgedrm_table,
)

__all__ = [
    "FEDDRM_KEY",
    "PRIMARY_LAMBDA",
    "REFERENCE_GROUP",
    "REFERENCE_METHODS",
    "edgedrm_margins",
    "edgedrm_margins_markdown",
    "edgedrm_markdown",
    "edgedrm_rows",
    "edgedrm_settings_markdown",
    "edgedrm_table",
    "graph_order",
    "run_lambda",
    "run_setting",
    "table_method",
]


def run_setting(config: Mapping[str, Any]) -> dict[str, Any]:
    """The setting columns a config alone gives (:func:`~lightning_fed.reporting.settings.setting_of`
    without a summary: the parser of older runs)."""
    return setting_of(config, {})
