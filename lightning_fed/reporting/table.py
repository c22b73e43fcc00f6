"""Alias of :mod:`lightning_fed.reporting.tables.table1` (Table 1).

The import path notebooks, tests and scripts used before the table specs; new code imports the home.
"""

from __future__ import annotations

from lightning_fed.reporting.runs import method_label, read_summary
from lightning_fed.reporting.tables.diagnostics import (
    SELECTION_DIAGNOSTICS,
    diagnostics_markdown,
    has_selection_diagnostics,
    write_diagnostics,
)
from lightning_fed.reporting.tables.table1 import (
    DEFAULT_REFERENCE,
    DIAGNOSTICS,
    collect_runs,
    runs_frame,
    table1,
    to_markdown,
    write_runs,
    write_table,
)

__all__ = [
    "DEFAULT_REFERENCE",
    "DIAGNOSTICS",
    "SELECTION_DIAGNOSTICS",
    "collect_runs",
    "diagnostics_markdown",
    "has_selection_diagnostics",
    "method_label",
    "read_summary",
    "runs_frame",
    "table1",
    "to_markdown",
    "write_diagnostics",
    "write_runs",
    "write_table",
]
