"""The progress bar shows what a user watches: round, validation AUROC, MB sent, nonzero counters only."""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import FedAvg
from lightning_fed.callbacks import ProgressBar
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.comm.wire import Wire
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import RoundResult, TrainerConfig
from tests.conftest import make_federation


def _result(stats: dict[str, float], val: list[float] | None = (0.7, 0.9)) -> RoundResult:
    """A round of 4 centers that sent 2.5 MB so far, with the given algorithm/fault statistics."""
    return RoundResult(
        round=0,
        train_loss=torch.zeros(4),
        val_auroc=None if val is None else torch.tensor(val),
        test_auroc=None,
        bytes_per_center=torch.zeros(4),
        bytes_round=2_500_000,
        bytes_cumulative=2_500_000,
        seconds=0.1,
        stats=stats,
        val_accuracy=torch.tensor([0.5, 0.5]),
    )


def _bar(centers: int = 4) -> ProgressBar:
    bar = ProgressBar()
    bar._centers = centers
    return bar


ZEROS = {
    "unavailable_centers": 0,
    "rejected_payloads": 0,
    "diverged_centers": 0,
    "isolation_rate": 0.0,
    "mean_partners": 2.0,
    "isolation_no_candidates": 0.0,
    "seconds_train": 0.3,
}


def test_a_quiet_round_shows_only_auroc_and_mb() -> None:
    assert _bar().postfix(_result(ZEROS)) == {"val_auroc": "0.8000", "MB": "2.5"}


def test_a_rejection_shows_and_other_zero_counters_stay_hidden() -> None:
    fields = _bar().postfix(_result({**ZEROS, "rejected_payloads": 1}))
    assert fields == {"val_auroc": "0.8000", "MB": "2.5", "rej": "1"}


def test_divergences_and_rests_show_as_counts_of_centers() -> None:
    fields = _bar(centers=8).postfix(_result({**ZEROS, "diverged_centers": 2, "isolation_rate": 0.375}))
    assert fields == {"val_auroc": "0.8000", "MB": "2.5", "div": "2", "rest": "3"}


def test_a_round_without_validation_keeps_the_last_auroc() -> None:
    bar = _bar()
    bar.postfix(_result(ZEROS))
    assert bar.postfix(_result(ZEROS, val=None))["val_auroc"] == "0.8000"
    assert "val_auroc" not in _bar().postfix(_result(ZEROS, val=None))


class RecordingBar(ProgressBar):
    """The real bar, keeping each round's fields."""

    def __init__(self) -> None:
        super().__init__()
        self.shown: list[dict[str, str]] = []

    def postfix(self, result: RoundResult) -> dict[str, str]:
        self.shown.append(super().postfix(result))
        return self.shown[-1]


def test_a_fit_with_a_corrupted_upload_shows_the_rejection_on_its_round(
    capsys: pytest.CaptureFixture,
) -> None:
    """A real round loop (3 centers, center 1 sends NaN in round 1): the counters are statistics it
    writes, so a renamed key would fail here rather than silently hide its field."""
    bar = RecordingBar()
    fed = Federation(
        make_federation([30, 20, 40]),
        MortalityMLP(hidden=(8,), dropout=0.0),
        FedAvg(),
        TrainerConfig(rounds=2, local_epochs=1, batch_size=32),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[bar]),
        wire=Wire(faults=FaultInjection(corrupt={1: {1: "nan"}})),
    )
    fed.fit()
    assert bar.shown == [
        {"val_auroc": bar.shown[0]["val_auroc"], "MB": "0.0"},
        {"val_auroc": bar.shown[1]["val_auroc"], "MB": "0.0", "rej": "1"},
    ]
    final = capsys.readouterr().out.replace("\n", "\r").rstrip("\r").split("\r")[-1]
    assert "2/2" in final and final.endswith(", rej=1]") and len(final) < 120, final
