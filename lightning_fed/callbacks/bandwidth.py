"""Per-center bytes per round as one table for the loggers that take tables (W&B).

``rounds.parquet`` already holds the same numbers (its ``bytes`` column); this callback hands them
to the Fabric loggers once, at the end of the fit, as a table of ``(round, center, name, bytes)``:
W&B shows it as ``bandwidth/bytes_per_center``. The rows are read off the ledger, so a resumed run
logs every round, the ones before the checkpoint included. Bytes booked after the last round (EdgeDRM's
stage II, at round index ``rounds``) form one more round of rows.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lightning_fed.callbacks.base import Callback

__all__ = ["BandwidthTable"]


class BandwidthTable(Callback):
    """Log the ledger's bytes per (round, center) as one table at the end of the fit.

    Loggers without a ``log_table(key, columns, data)`` method (Lightning's ``WandbLogger`` has one)
    are skipped; only rank 0 logs.

    Args:
        key: The table's name in the logger.
    """

    columns: ClassVar[tuple[str, ...]] = ("round", "center", "name", "bytes")

    def __init__(self, key: str = "bandwidth/bytes_per_center") -> None:
        self.key = key

    def rows(self, federation: Any) -> list[list[Any]]:
        """``[round, center, name, bytes]`` for every round the ledger holds and every center."""
        ledger = federation.wire.ledger
        booked = ledger.table()["round"]
        rounds = max(int(federation.round), int(booked.max()) + 1 if booked.numel() else 0)
        names = [center.name for center in federation.data.centers]
        by_round = ledger.per_center_by_round(len(names), rounds).tolist()
        return [[r, c, names[c], int(b)] for r, row in enumerate(by_round) for c, b in enumerate(row)]

    def on_fit_end(self, federation: Any, summary: dict[str, Any]) -> None:
        if not federation.fabric.is_global_zero:
            return
        loggers = [lg for lg in federation.fabric.loggers if callable(getattr(lg, "log_table", None))]
        if not loggers:
            return
        rows = self.rows(federation)
        for logger in loggers:
            logger.log_table(key=self.key, columns=list(self.columns), data=rows)
