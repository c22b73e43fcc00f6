"""FedProx, FedDyn and MOON: hand-derived updates, and the packed engine against the sequential one."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import MOON, FedAvg, FedDyn, FedProx
from lightning_fed.algorithms.moon import contrastive_loss
from lightning_fed.comm.wire import Wire
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.algorithms.tiny_models import LogReg
from tests.algorithms.tiny_models import round_ctx as _ctx
from tests.conftest import make_federation


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_fedprox_second_step_adds_the_proximal_gradient(engine_cls) -> None:
    """One center, one row per batch, two SGD steps (lr eta) from w0 = 0 with mu:

    step 1 starts at the received model, so the proximal gradient mu (w - w0) is 0:
        w1 = w0 - eta * g(w0),   g(w) = (sigmoid(x.w + b) - y) [x, 1]
    step 2: w2 = w1 - eta * (g(w1) + mu (w1 - w0)).
    """
    x = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    y = torch.tensor([1.0], dtype=torch.float64)
    eta, mu = 0.5, 0.7
    module = LogReg(2, eta).double()
    with torch.no_grad():
        module.linear.weight.zero_()
        module.linear.bias.zero_()
    algo = FedProx(mu=mu)
    algo.shared_names = ("linear.weight", "linear.bias")
    engine = engine_cls()
    engine.setup(
        module, [(x, y)], batch_size=1, epochs=2, seed=0, dtype=torch.float64, local_term=algo.local_term()
    )
    engine.train_round(0)
    got = torch.cat(
        [engine.get_params()["linear.weight"].reshape(-1), engine.get_params()["linear.bias"].reshape(-1)]
    )

    def g(w: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(x[0] @ w[:2] + w[2])
        return (p - y[0]) * torch.cat([x[0], torch.ones(1, dtype=torch.float64)])

    w0 = torch.zeros(3, dtype=torch.float64)
    w1 = w0 - eta * g(w0)
    w2 = w1 - eta * (g(w1) + mu * (w1 - w0))
    torch.testing.assert_close(got, w2)


def test_feddyn_state_and_server_update_by_hand() -> None:
    """Two centers, one scalar shared parameter, alpha = 0.5, theta^{-1} = 0 (the init):

    uploads theta_1 = 1, theta_2 = 3, m = 2, both participate:
        g_1 = -alpha (1 - 0) = -0.5,   g_2 = -alpha (3 - 0) = -1.5
        h = -(alpha / m) ((1 - 0) + (3 - 0)) = -1.0
        theta^0 = mean(1, 3) - h / alpha = 2 + 2 = 4
    """
    data = make_federation([10, 12], num_features=1)
    module = LogReg(1)
    with torch.no_grad():
        module.linear.weight.zero_()
        module.linear.bias.zero_()
    algo = FedDyn(alpha=0.5)
    algo.setup(data, module)
    params = {
        "linear.weight": torch.tensor([[[1.0]], [[3.0]]]),
        "linear.bias": torch.tensor([[1.0], [3.0]]),
    }
    out = algo.aggregate(_ctx(), params, Wire())
    torch.testing.assert_close(algo.grad_state["linear.weight"].reshape(-1), torch.tensor([-0.5, -1.5]))
    torch.testing.assert_close(algo.h["linear.bias"].reshape(-1), torch.tensor([-1.0]))
    torch.testing.assert_close(out["linear.weight"].reshape(-1), torch.tensor([4.0, 4.0]))
    torch.testing.assert_close(out["linear.bias"].reshape(-1), torch.tensor([4.0, 4.0]))


def test_feddyn_term_gradient_is_linear_plus_quadratic() -> None:
    """d/dtheta [-<g, theta> + alpha/2 ||theta - theta_s||^2] = -g + alpha (theta - theta_s)."""
    data = make_federation([10, 12], num_features=1)
    module = LogReg(1)
    algo = FedDyn(alpha=0.3)
    algo.setup(data, module)
    algo.grad_state["linear.weight"] = torch.tensor([[[0.2]], [[-0.4]]])
    theta = {
        n: p.detach().unsqueeze(0).repeat(2, *([1] * p.dim())) + 1.0 for n, p in module.named_parameters()
    }
    theta = {n: t.requires_grad_(True) for n, t in theta.items()}
    from lightning_fed.engine.objective import TermBatch

    batch = TermBatch(theta, theta, torch.tensor([0, 1]), torch.zeros(2, 1, 1), torch.ones(2, 1), None, None)
    algo.local_term().loss(batch).sum().backward()
    expected = -algo.grad_state["linear.weight"] + 0.3 * 1.0
    torch.testing.assert_close(theta["linear.weight"].grad, expected)


def test_moon_contrastive_loss_value() -> None:
    """z = (1, 0), z_glob = (1, 0) (sim 1), z_prev = (0, 1) (sim 0), tau = 0.5:
    l = -log(e^{1/0.5} / (e^{1/0.5} + e^{0/0.5})) = -log(e^2 / (e^2 + 1)) = log(1 + e^{-2}).
    A padded row (mask 0) does not count.
    """
    z = torch.tensor([[[1.0, 0.0], [5.0, 5.0]]])
    zg = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])
    zp = torch.tensor([[[0.0, 1.0], [0.0, 1.0]]])
    got = contrastive_loss(z, zg, zp, torch.tensor([[1.0, 0.0]]), tau=0.5)
    assert float(got) == pytest.approx(math.log(1 + math.exp(-2)), rel=1e-6)
    expected = -math.log(math.exp(2) / (math.exp(2) + 1))
    assert float(got) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    "make",
    [lambda: FedProx(mu=0.5), lambda: FedDyn(alpha=0.1), lambda: MOON(mu=1.0, tau=0.5)],
    ids=["fedprox", "feddyn", "moon"],
)
def test_packed_engine_matches_sequential_with_local_terms(make) -> None:
    data = make_federation([40, 7, 70, 3, 25])
    finals = []
    for engine in (PackedEngine(), SequentialEngine()):
        fed = Federation(
            data,
            MortalityMLP(hidden=(8, 4), dropout=0.0),
            make(),
            TrainerConfig(rounds=2, batch_size=16, engine=engine),
            fabric=Fabric(accelerator="cpu", devices=1, precision="64-true"),
            seed=3,
        )
        fed.fit()
        finals.append(fed.engine.get_params())
    for n in finals[0]:
        torch.testing.assert_close(finals[0][n], finals[1][n], rtol=1e-9, atol=1e-9)


def test_zero_weight_terms_reduce_to_fedavg() -> None:
    data = make_federation([30, 12, 50])
    results = []
    for algo in (FedAvg(), FedProx(mu=0.0), MOON(mu=0.0)):
        fed = Federation(
            data,
            MortalityMLP(hidden=(8, 4), dropout=0.0),
            algo,
            TrainerConfig(rounds=2, batch_size=16),
            fabric=Fabric(accelerator="cpu", devices=1, precision="64-true"),
            seed=1,
        )
        fed.fit()
        results.append(fed.engine.get_params())
    for other in results[1:]:
        for n in results[0]:
            torch.testing.assert_close(other[n], results[0][n], rtol=1e-9, atol=1e-9)


def test_moon_needs_a_representation() -> None:
    data = make_federation([10, 12], num_features=2)
    with pytest.raises(ValueError, match="forward_features"):
        Federation(
            data, LogReg(2), MOON(), TrainerConfig(rounds=1), fabric=Fabric(accelerator="cpu", devices=1)
        )
