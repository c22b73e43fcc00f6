"""A report table as data: :class:`TableSpec` says which runs give rows, and how rows become markdown.

A new report table is one module under :mod:`lightning_fed.reporting.tables` that builds one
``TableSpec`` and is listed in :func:`lightning_fed.reporting.tables.specs`:

- ``rows``: the filter and the values, one row per (run, ...) from the :class:`RunRecord` s (an empty
  frame when no run qualifies: then nothing is written);
- ``render``: group keys, order and layout, rows -> markdown (through :mod:`lightning_fed.render`;
  ``""`` writes nothing);
- ``file``: the name under the report folder, ``caption``: what it shows (its one-line summary);
- ``gate``: the tables a spec belongs to (``"edgedrm"``: written only when the EdgeDRM rows exist,
  ``"tiers"``: only when a referral table has hospital tiers, ``None``: always considered);
- ``csv``: optionally the frame written beside the markdown as ``<stem>.csv`` (Table 1, diagnostics);
- ``figure``: optionally ``(file name, draw)``, a PNG drawn from the same rows whenever the table
  is written (``lambda_table.png``).

:func:`lightning_fed.reporting.report` runs every spec over the records of one walk of the root.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from lightning_fed.io import write_text
from lightning_fed.render import write_pair
from lightning_fed.reporting.runs import RunRecord

__all__ = ["TableSpec"]


@dataclass(frozen=True)
class TableSpec:
    """One markdown table of the report (module docstring).

    Attributes:
        file: File name under the report folder, e.g. ``"referral_reach.md"``.
        rows: Records -> one row per contributing run (and method, router...); empty: no table.
        render: Rows -> markdown; ``""``: no table.
        caption: One line saying what the table shows.
        gate: ``None``, ``"edgedrm"`` or ``"tiers"`` (module docstring).
        csv: Rows -> the frame of ``<stem>.csv`` beside the markdown, or None (markdown only).
        figure: ``(file name, draw(rows, path))`` of a figure written beside the table, or None.
    """

    file: str
    rows: Callable[[Sequence[RunRecord]], pl.DataFrame]
    render: Callable[[pl.DataFrame], str]
    caption: str
    gate: str | None = None
    csv: Callable[[pl.DataFrame], pl.DataFrame] | None = None
    figure: tuple[str, Callable[[pl.DataFrame, Path], object]] | None = None

    def text(self, records: Sequence[RunRecord]) -> str:
        """The table's markdown over ``records`` (``""`` when no run gives a row)."""
        rows = self.rows(records)
        return self.render(rows) if rows.height else ""

    def write(self, records: Sequence[RunRecord], out: Path) -> dict[str, Path]:
        """Write the table to ``out / file`` when it has content, and its figure beside it.

        Returns:
            The written files by name (``{}`` when the table has no content).
        """
        rows = self.rows(records)
        text = self.render(rows) if rows.height else ""
        if not text:
            return {}
        if self.csv is None:
            written = {self.file: write_text(Path(out) / self.file, text)}
        else:
            stem = Path(out) / Path(self.file).stem
            md, csv = write_pair(text, self.csv(rows), stem)
            written = {md.name: md, csv.name: csv}
        if self.figure is not None:
            name, draw = self.figure
            draw(rows, Path(out) / name)
            written[name] = Path(out) / name
        return written
