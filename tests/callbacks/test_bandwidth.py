"""The per-center bytes table: one row per (round, center), equal to the ledger, to every table logger."""

from __future__ import annotations

from typing import Any

from lightning.fabric import Fabric
from lightning.fabric.loggers import Logger

from lightning_fed.algorithms import FedAvg
from lightning_fed.callbacks import BandwidthTable
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.comm.wire import Wire
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation


class TableLogger(Logger):
    """A logger that keeps what it is given (W&B's ``WandbLogger.log_table`` signature)."""

    def __init__(self) -> None:
        self.tables: list[dict[str, Any]] = []

    @property
    def name(self) -> str:
        return "tables"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        pass

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_table(self, key: str, columns: list[str] | None = None, data: Any = None, **kwargs: Any) -> None:
        self.tables.append({"key": key, "columns": columns, "data": data})


def test_bandwidth_table_is_logged_once_at_the_end_with_every_round_and_center() -> None:
    """3 centers, 2 rounds, center 1 offline in round 1: 6 rows, its bytes 0 there, rows = the ledger."""
    logger = TableLogger()
    fed = Federation(
        make_federation([30, 20, 40]),
        MortalityMLP(hidden=(8,), dropout=0.0),
        FedAvg(),
        TrainerConfig(rounds=2, local_epochs=1, batch_size=32),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[BandwidthTable()], loggers=[logger]),
        wire=Wire(faults=FaultInjection(unavailable={1: [1]})),
    )
    fed.fit()
    assert len(logger.tables) == 1
    table = logger.tables[0]
    assert table["key"] == "bandwidth/bytes_per_center"
    assert table["columns"] == ["round", "center", "name", "bytes"]
    rows = table["data"]
    assert [(r[0], r[1], r[2]) for r in rows] == [(r, c, f"c{c}") for r in range(2) for c in range(3)]
    for r in range(2):
        assert [row[3] for row in rows if row[0] == r] == fed.wire.ledger.per_center(3, r).tolist()
    assert rows[4][3] == 0 and all(row[3] > 0 for row in rows if row[1] != 1 or row[0] == 0)
