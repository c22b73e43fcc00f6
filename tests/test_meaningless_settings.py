"""Settings that make no sense are refused in one line before any work (issue 32 item 5): on main
``wire.max_norm_ratio=1e-9`` gave a silent local-only run (every upload rejected) and ``tau_acc=2``
one where nobody accepts once the exploration bonus is spent, both with exit 0."""

from __future__ import annotations

import math

import pytest

from lightning_fed.comm.wire import Wire
from lightning_fed.selection.abps import BayesianSelector


@pytest.mark.parametrize("ratio", [1e-9, 0.5, math.nan])
def test_a_norm_ratio_below_one_is_refused(ratio: float) -> None:
    with pytest.raises(ValueError, match=r"wire\.max_norm_ratio must be >= 1") as err:
        Wire(max_norm_ratio=ratio)
    assert "\n" not in str(err.value)
    assert Wire(max_norm_ratio=1.0).max_norm_ratio == 1.0 and Wire(max_norm_ratio=math.inf)


@pytest.mark.parametrize("tau", [2.0, -0.1, math.nan])
def test_tau_acc_outside_the_credit_scale_is_refused(tau: float) -> None:
    with pytest.raises(ValueError, match=r"tau_acc must be in \[0, 1\]") as err:
        BayesianSelector(tau_acc=tau)
    assert "\n" not in str(err.value)
    assert BayesianSelector(tau_acc=1.0).tau_acc == 1.0


@pytest.mark.parametrize(
    "plan",
    [
        {"unavailable": {5: [0]}},
        {"corrupt": {7: {1: "nan"}}},
        {"dropout": {2: 5}},
        {"attacks": [{"kind": {"scale": 3.0}, "centers": 0.5, "from_round": 9}]},
    ],
)
def test_a_fault_plan_past_the_last_round_is_refused(plan: dict) -> None:
    """Every round the plan names is >= trainer.rounds = 5 (rounds 0-4): on main the run trained as a
    clean one under a faulty run's config, exit 0. The refusal comes before the federation trains."""
    from lightning.fabric import Fabric

    from lightning_fed.algorithms import FedAvg
    from lightning_fed.comm import FaultInjection
    from lightning_fed.federation import Federation
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig
    from tests.conftest import make_federation

    def build(rounds: int) -> Federation:
        return Federation(
            make_federation([30, 20, 25]),
            MortalityMLP(hidden=(4,)),
            FedAvg(),
            TrainerConfig(rounds=rounds, local_epochs=1, batch_size=16),
            fabric=Fabric(accelerator="cpu", devices=1),
            wire=Wire(faults=FaultInjection(**plan)),
        )

    with pytest.raises(
        ValueError,
        match=r"wire\.faults: the plan first acts in round \d+ but the run has "
        r"trainer\.rounds=5",
    ) as err:
        build(5)
    assert "\n" not in str(err.value)
    assert build(10).round == 0  # a plan reaching into the run is legal


def test_every_center_diverging_is_warned_once_and_counted(capsys: pytest.CaptureFixture[str]) -> None:
    """lr=1e30: Adam's first step moves every weight by ~1e30, every center's loss is Inf/NaN every
    round and is rolled back, so the model never trains. On main the run ended with exit 0 and
    nothing but diverged_center_rounds = 3 x 3 in its summary; now one warning line (once, not per
    round) and all_diverged_rounds = 3. A sane rate gives neither."""
    from lightning.fabric import Fabric

    from lightning_fed.algorithms import FedAvg
    from lightning_fed.federation import Federation
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig
    from tests.conftest import make_federation

    def fit(lr: float) -> dict:
        return Federation(
            make_federation([30, 20, 25]),
            MortalityMLP(hidden=(4,), lr=lr),
            FedAvg(),
            TrainerConfig(rounds=3, local_epochs=1, batch_size=16),
            fabric=Fabric(accelerator="cpu", devices=1),
        ).fit()

    summary = fit(1e30)
    assert summary["all_diverged_rounds"] == 3 and summary["diverged_center_rounds"] == 9
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "lightning-fed: warning: round 0: every center's local training diverged"
    )
    assert fit(1e-3)["all_diverged_rounds"] == 0 and capsys.readouterr().err == ""
