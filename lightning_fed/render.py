"""The one markdown / CSV renderer of the package: every ``.md`` table and its ``.csv`` pass through here.

A table is a header and rows of already formatted cells; :func:`markdown_table` lays them out as a
GitHub markdown table (``| a | b |``, a ``|---|`` rule), with an optional legend paragraph after it.
The cell helpers format the numbers the report tables print: :func:`number` (``-`` where undefined),
:func:`percent`, :func:`mean_sd` (``mean ± SD`` over seeds) and :func:`interval` (a paired
difference with its confidence interval). :func:`frame_markdown` renders every column of a polars
frame (``referral.md``). :func:`write_pair` writes a table's markdown and CSV side by side, atomically.

A leaf module (polars and :mod:`lightning_fed.io` only), so the inference code that writes a run's
own ``referral.md`` (:mod:`lightning_fed.referral.refer`) and the report over many runs
(:mod:`lightning_fed.reporting`) share it without importing each other (docs/architecture.md, the layers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl

from lightning_fed.io import write_text

__all__ = [
    "frame_markdown",
    "interval",
    "markdown_table",
    "mean_sd",
    "number",
    "percent",
    "write_pair",
]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], legend: str | None = None) -> str:
    """A markdown table of formatted cells, newline-terminated, then ``legend`` after a blank line.

    Args:
        header: Column titles (``|`` inside a title must already be escaped, e.g. ``E\\|P_i\\|``).
        rows: One sequence of cell strings per row, as long as ``header``.
        legend: A paragraph explaining the cells, or None.

    Returns:
        The text (``""`` is never returned: an empty ``rows`` still gives the header and the rule).
    """
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    return text if legend is None else text + "\n" + legend + "\n"


def number(value: float | None, spec: str, suffix: str = "") -> str:
    """``value`` formatted with ``spec`` and ``suffix``; ``-`` for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:{spec}}{suffix}"


def percent(value: float | None) -> str:
    """A share in ``[0, 1]`` as ``12.5 %`` (one decimal); ``-`` for None or NaN."""
    return number(None if value is None else 100 * value, ".1f", " %")


def mean_sd(row: Mapping[str, object], column: str, spec: str = ".2f") -> str:
    """``mean ± SD`` of ``column`` in a row holding ``<column>_mean`` and ``<column>_sd``; the mean
    alone when the SD is None (one seed), ``-`` without a mean."""
    mean, sd = row[f"{column}_mean"], row[f"{column}_sd"]
    if mean is None:
        return "-"
    return f"{mean:{spec}}" if sd is None else f"{mean:{spec}} ± {sd:{spec}}"


def interval(mean: float | None, low: float | None, high: float | None) -> str:
    """``"+d [+low, +high]"`` (2 decimals, signed); ``"+d"`` without an interval; ``"-"`` without a mean."""
    if mean is None:
        return "-"
    if low is None or high is None:
        return f"{mean:+.2f}"
    return f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]"


def frame_markdown(table: pl.DataFrame) -> str:
    """Every column of ``table`` as a markdown table (floats with 4 significant digits, ``.4g``)."""
    rows = ([f"{v:.4g}" if isinstance(v, float) else str(v) for v in r] for r in table.iter_rows())
    return markdown_table(table.columns, rows)


def write_pair(text: str, frame: pl.DataFrame, path_stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.md`` (``text``) and ``<stem>.csv`` (``frame``, every column), each atomically.

    Returns:
        The markdown and CSV paths.
    """
    stem = Path(path_stem)
    md, csv = stem.with_name(stem.name + ".md"), stem.with_name(stem.name + ".csv")
    write_text(md, text)
    write_text(csv, frame.write_csv())
    return md, csv
