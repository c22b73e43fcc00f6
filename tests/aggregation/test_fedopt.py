"""FedAdam, FedYogi and FedAdagrad (Reddi et al. 2021, Alg. 2) by hand on 2 centers over 2 rounds.

The setting: FedAvg, n = (30, 10) so the weights are (.75, .25); every parameter starts at the
common init 0 (x_0 = 0), eta = 0.1, beta1 = 0.5, beta2 = 0.5, tau = 0.5 (v_{-1} = tau^2 = 0.25).

Round 0, uploads (1, 5): theta_bar = .75 + 1.25 = 2, Delta = 2 - 0 = 2, Delta^2 = 4;
    m_0 = .5 * 0 + .5 * 2 = 1.
    Adagrad: v_0 = .25 + 4 = 4.25.      Yogi: v_0 = .25 - .5*4*sign(.25 - 4) = 2.25.
    Adam:    v_0 = .5*.25 + .5*4 = 2.125.
    x_1 = 0 + .1 * 1 / (sqrt(v_0) + .5).
Round 1, uploads (x_1 + 1, x_1 + 1) -> theta_bar = x_1 + 1, Delta = 1, Delta^2 = 1;
    m_1 = .5 * 1 + .5 * 1 = 1.
    Adagrad: v_1 = 5.25.   Yogi: v_1 = 2.25 - .5*1*sign(2.25 - 1) = 1.75.   Adam: v_1 = 1.0625 + .5 = 1.5625.
    x_2 = x_1 + .1 * 1 / (sqrt(v_1) + .5).
"""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.aggregation import FedAdagrad, FedAdam, FedYogi
from lightning_fed.algorithms import FedAvg
from lightning_fed.comm import Wire
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import RoundContext, TrainerConfig
from tests.conftest import make_federation

V = {FedAdagrad: (4.25, 5.25), FedYogi: (2.25, 1.75), FedAdam: (2.125, 1.5625)}


def _ctx(r: int) -> RoundContext:
    return RoundContext(round=r, seed=0, val_utility=lambda params, centers: centers.double())


def _uploads(module: MortalityMLP, values: list[float]) -> dict[str, torch.Tensor]:
    return {n: torch.stack([torch.full_like(p, v) for v in values]) for n, p in module.named_parameters()}


@pytest.mark.parametrize("rule", [FedAdagrad, FedYogi, FedAdam])
def test_two_centers_two_rounds_by_hand(rule: type) -> None:
    data = make_federation([30, 10])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
    algo = FedAvg(server_optimizer=rule(eta=0.1, beta1=0.5, beta2=0.5, tau=0.5))
    algo.setup(data, module)
    v0, v1 = V[rule]
    x1 = 0.1 * 1.0 / (math.sqrt(v0) + 0.5)
    x2 = x1 + 0.1 * 1.0 / (math.sqrt(v1) + 0.5)
    out = algo.aggregate(_ctx(0), _uploads(module, [1.0, 5.0]), Wire())
    assert all(torch.allclose(t, torch.full_like(t, x1), atol=1e-7) for t in out.values())
    out = algo.aggregate(_ctx(1), _uploads(module, [x1 + 1.0, x1 + 1.0]), Wire())
    assert all(torch.allclose(t, torch.full_like(t, x2), atol=1e-7) for t in out.values())


def test_fedadam_federation_resume_equals_straight_run() -> None:
    """The server model and both moments are in the checkpoint: 2 + 2 rounds equal 4 rounds."""
    data = make_federation([30, 10, 20])

    def build(rounds: int) -> Federation:
        return Federation(
            data,
            MortalityMLP(hidden=(4, 3), dropout=0.0),
            FedAvg(server_optimizer=FedAdam(eta=0.05)),
            TrainerConfig(rounds=rounds, batch_size=16),
            seed=3,
        )

    straight = build(4)
    straight.fit()
    first = build(2)
    first.fit()
    resumed = build(4)
    resumed.load_state_dict(first.state_dict())
    resumed.fit()
    a, b = straight.engine.get_params(), resumed.engine.get_params()
    assert all(torch.equal(a[n], b[n]) for n in a)


@pytest.mark.parametrize(("arg", "value"), [("eta", 0.0), ("tau", -1.0), ("beta1", 1.0), ("beta2", -0.1)])
def test_bad_settings_name_the_key(arg: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"server_optimizer\.init_args\.{arg}"):
        FedAdam(**{arg: value})
