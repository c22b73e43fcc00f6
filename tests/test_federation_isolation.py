"""Ledger-based isolation for every method, and the fragile-AUROC count of the summary."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.algorithms import ABPS, Centralized, DFedAvgM, FedAvg, LocalOnly
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import CenterData, FederatedData
from lightning_fed.federation import Federation
from lightning_fed.graphs import Cycle
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation


class Stats:
    """Records every round's statistics."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, float]] = []

    def on_round_end(self, federation, result) -> None:
        self.rounds.append(dict(result.stats))


def _run(algorithm, rounds: int = 3, wire: Wire | None = None, data: FederatedData | None = None):
    from lightning.fabric import Fabric

    stats = Stats()
    fed = Federation(
        data if data is not None else make_federation([40, 30, 50, 20]),
        MortalityMLP(hidden=(8,), dropout=0.0),
        algorithm,
        TrainerConfig(rounds=rounds, local_epochs=1, batch_size=32),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[stats]),
        wire=wire,
    )
    return fed.fit(), stats.rounds


def test_fedavg_center_unavailable_in_a_round_is_isolated_that_round() -> None:
    """4 centers, center 2 offline in round 1: it neither uploads nor downloads, so 1/4 that round and
    (0 + 1 + 0) / (3 * 4) = 1/12 over the run; the others talk to the server and are not isolated."""
    summary, rounds = _run(FedAvg(), wire=Wire(faults=FaultInjection(unavailable={1: [2]})))
    assert [r["isolated_centers"] for r in rounds] == [0, 1, 0]
    assert [r["isolation_rate"] for r in rounds] == [0.0, 0.25, 0.0]
    assert [r["ledger_isolation_rate"] for r in rounds] == [0.0, 0.25, 0.0]
    assert summary["isolation_rate"] == pytest.approx(1 / 12)
    assert summary["ledger_isolation_rate"] == pytest.approx(1 / 12)
    assert summary["isolated_center_rounds"] == 1


def test_gossip_method_on_a_graph_reports_no_isolation() -> None:
    summary, rounds = _run(DFedAvgM(topology=Cycle()), rounds=2)
    assert [r["isolation_rate"] for r in rounds] == [0.0, 0.0]
    assert summary["isolation_rate"] == 0.0 and summary["isolated_center_rounds"] == 0


def test_local_only_is_always_isolated() -> None:
    summary, rounds = _run(LocalOnly(), rounds=2)
    assert [r["isolation_rate"] for r in rounds] == [1.0, 1.0]
    assert [r["isolated_centers"] for r in rounds] == [4, 4]
    assert summary["isolation_rate"] == 1.0 and summary["isolated_center_rounds"] == 8


def test_centralized_has_no_isolation() -> None:
    """One pooled model: nobody is isolated and nothing is exchanged, so the keys are absent."""
    summary, rounds = _run(Centralized(), rounds=1)
    assert "isolation_rate" not in summary and "isolation_rate" not in rounds[0]
    assert "ledger_isolation_rate" not in summary


def test_abps_keeps_its_own_isolation_rate_beside_the_ledger_one() -> None:
    algo = ABPS()
    summary, rounds = _run(algo, rounds=2)
    assert rounds[-1]["isolation_rate"] == algo.round_stats()["isolation_rate"]
    assert summary["isolation_rate"] == algo.summary_stats()["isolation_rate"]
    assert summary["rested_center_rounds"] == algo.summary_stats()["rested_center_rounds"]
    assert "ledger_isolation_rate" in summary and "isolated_centers" in rounds[-1]


def _center(name: str, y_val: list[float], y_test: list[float], n_train: int = 12) -> CenterData:
    gen = torch.Generator().manual_seed(len(name) + n_train)
    y_train = torch.tensor([0.0, 1.0] * (n_train // 2))
    return CenterData(
        name,
        torch.randn(n_train, 3, generator=gen),
        y_train,
        torch.randn(len(y_val), 3, generator=gen),
        torch.tensor(y_val),
        torch.randn(len(y_test), 3, generator=gen),
        torch.tensor(y_test),
        torch.zeros(3, dtype=torch.float64),
    )


def test_summary_counts_fragile_auroc_beside_undefined() -> None:
    """Test splits: one positive (fragile), two of each (sound), one negative among positives
    (fragile), no positive (undefined, not fragile). Validation: only the last center is fragile."""
    data = FederatedData(
        (
            _center("a", [0, 0, 1, 1], [0, 0, 0, 1]),
            _center("b", [0, 0, 1, 1], [0, 1, 0, 1]),
            _center("c", [0, 0, 1, 1], [1, 1, 0, 1, 1]),
            _center("d", [0, 1, 1, 1], [0, 0, 0]),
        ),
        ("f0", "f1", "f2"),
    )
    summary, _ = _run(LocalOnly(), rounds=1, data=data)
    assert summary["test_auroc_undefined"] == 1
    assert summary["test_auroc_fragile"] == 2
    assert summary["val_auroc_undefined"] == 0
    assert summary["val_auroc_fragile"] == 1
    assert not math.isnan(summary["test_auroc_mean"])
