"""Early stopping on mean validation AUROC, with the best parameters restored."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from lightning_fed.algorithms import FedAvg
from lightning_fed.callbacks import Callback, EarlyStopping
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig


def _result(r: int, val: list[float]) -> SimpleNamespace:
    return SimpleNamespace(round=r, val_auroc=torch.tensor(val, dtype=torch.float64))


class _Engine:
    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def test_stops_after_patience_and_restores_the_best_round() -> None:
    """Mean val AUROC per round: .6, .7, (.65, nan) -> .65, .69, .7 -> best is round 1; patience 3
    stops after round 4 (rounds 2, 3, 4 do not beat .7; NaN centers are left out of the mean)."""
    fed = SimpleNamespace(engine=_Engine(), should_stop=False, summary_extras={})
    stop = EarlyStopping(patience=3)
    for r, val in enumerate([[0.6], [0.7], [0.65, math.nan], [0.69], [0.7]]):
        fed.engine.value = r
        stop.on_round_end(fed, _result(r, val))
        assert fed.should_stop == (r == 4)
    stop.on_train_end(fed)
    assert fed.engine.value == 1
    assert fed.summary_extras == {"best_round": 1, "best_val_auroc": 0.7}


def test_early_stopping_in_a_federation(small_federation) -> None:
    from lightning.fabric import Fabric

    class Snapshots(Callback):
        def __init__(self) -> None:
            self.params: list[dict] = []

        def on_round_end(self, federation, result) -> None:
            self.params.append(federation.engine.get_params())

    snaps, stop = Snapshots(), EarlyStopping(patience=2)
    fabric = Fabric(accelerator="cpu", devices=1, callbacks=[snaps, stop])
    fed = Federation(
        small_federation,
        MortalityMLP(hidden=(8, 4)),
        FedAvg(),
        trainer=TrainerConfig(rounds=30, batch_size=16),
        fabric=fabric,
    )
    summary = fed.fit()
    assert summary["rounds"] <= 30 and summary["best_round"] == stop.best_round
    best = snaps.params[stop.best_round]
    now = fed.engine.get_params()
    assert all(torch.equal(best[k], now[k]) for k in best)
