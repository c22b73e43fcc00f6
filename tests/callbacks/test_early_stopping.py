"""Early stopping on mean validation AUROC, with the best (default) or the last parameters reported."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from lightning.fabric import Fabric

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
    assert fed.summary_extras == {
        "best_round": 1,
        "best_val_auroc": 0.7,
        "stopped_round": 4,
        "stopped_early": True,
        "restored_best": True,
    }


def test_restore_best_false_keeps_the_last_round_and_says_so() -> None:
    """Same scores as above (.6, .7, .65, .69, .7; patience 3): the run still stops after round 4 with
    best round 1, but the engine keeps round 4's state and nothing was copied during training."""
    fed = SimpleNamespace(engine=_Engine(), should_stop=False, summary_extras={})
    stop = EarlyStopping(patience=3, restore_best=False)
    for r, val in enumerate([[0.6], [0.7], [0.65, math.nan], [0.69], [0.7]]):
        fed.engine.value = r
        stop.on_round_end(fed, _result(r, val))
    assert fed.should_stop and stop.state_dict()["best_state"] is None
    stop.on_train_end(fed)
    assert fed.engine.value == 4
    assert fed.summary_extras == {
        "best_round": 1,
        "best_val_auroc": 0.7,
        "stopped_round": 4,
        "stopped_early": True,
        "restored_best": False,
    }


def test_budget_exhausted_is_not_an_early_stop() -> None:
    """Scores .6, .7, .65 with patience 3: no stop; the budget (3 rounds) ends the run after round 2."""
    fed = SimpleNamespace(engine=_Engine(), should_stop=False, summary_extras={})
    stop = EarlyStopping(patience=3)
    for r, val in enumerate([[0.6], [0.7], [0.65]]):
        stop.on_round_end(fed, _result(r, val))
    stop.on_train_end(fed)
    assert not fed.should_stop
    assert fed.summary_extras["stopped_round"] == 2 and fed.summary_extras["stopped_early"] is False


def test_restore_best_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match=r"early_stopping\.restore_best must be true or false"):
        EarlyStopping(restore_best="no")  # type: ignore[arg-type]


class _Snapshots(Callback):
    """Each round's parameters, after aggregation (what that round reports)."""

    def __init__(self) -> None:
        self.params: list[dict] = []

    def on_round_end(self, federation, result) -> None:
        self.params.append(federation.engine.get_params())


def _stopped_run(data, restore_best: bool) -> tuple[Federation, dict, _Snapshots, EarlyStopping]:
    snaps, stop = _Snapshots(), EarlyStopping(patience=2, restore_best=restore_best)
    fed = Federation(
        data,
        MortalityMLP(hidden=(8, 4)),
        FedAvg(),
        trainer=TrainerConfig(rounds=30, batch_size=16),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[snaps, stop]),
    )
    return fed, fed.fit(), snaps, stop


@pytest.mark.parametrize("restore_best", [True, False])
def test_early_stopping_in_a_federation(small_federation, restore_best: bool) -> None:
    """Patience 2 of 30 rounds: the run stops 2 rounds after its best, so best_round < stopped_round
    and the two readings differ. restore_best=True ends with the best round's parameters,
    restore_best=False with the last round's; the summary says which."""
    fed, summary, snaps, stop = _stopped_run(small_federation, restore_best)
    assert summary["stopped_early"] is True and summary["rounds"] < 30
    assert summary["stopped_round"] == summary["rounds"] - 1 == len(snaps.params) - 1
    assert summary["best_round"] == stop.best_round == summary["stopped_round"] - 2
    assert summary["restored_best"] is restore_best
    final = snaps.params[stop.best_round if restore_best else -1]
    now = fed.engine.get_params()
    assert all(torch.equal(final[k], now[k]) for k in final)
    if not restore_best:
        best = snaps.params[stop.best_round]
        assert any(not torch.equal(best[k], now[k]) for k in best)


def test_both_readings_train_identically(small_federation) -> None:
    """restore_best only changes what is reported: same rounds, bytes and per-round parameters."""
    _, a, snaps_a, _ = _stopped_run(small_federation, True)
    _, b, snaps_b, _ = _stopped_run(small_federation, False)
    keys = ("rounds", "total_bytes", "best_round", "stopped_round")
    assert [a[k] for k in keys] == [b[k] for k in keys]
    pairs = zip(snaps_a.params, snaps_b.params, strict=True)
    assert all(torch.equal(p[k], q[k]) for p, q in pairs for k in p)


def test_a_resumed_stopped_run_stays_stopped(small_federation) -> None:
    """Resuming from the state written after patience ran out runs no further round (the budget of
    30 is not reached) and reports the same summary entries."""
    fed, summary, _, stop = _stopped_run(small_federation, False)
    again_stop = EarlyStopping(patience=2, restore_best=False)
    again = Federation(
        small_federation,
        MortalityMLP(hidden=(8, 4)),
        FedAvg(),
        trainer=TrainerConfig(rounds=30, batch_size=16),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[again_stop]),
    )
    again.load_state_dict(fed.state_dict())
    again_stop.load_state_dict(stop.state_dict())
    resumed = again.fit()
    assert resumed["rounds"] == summary["rounds"]
    for key in ("best_round", "stopped_round", "stopped_early", "restored_best", "test_auroc_mean"):
        assert resumed[key] == summary[key]
