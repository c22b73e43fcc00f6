"""SCAFFOLD (option II): a hand computation on 2 centers over 2 rounds, both legs on the ledger
(2x FedAvg's bytes), packed == sequential, and client sampling."""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import SCAFFOLD, FedAvg
from lightning_fed.data.center import CenterData, FederatedData
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.algorithms.test_local_terms import LogReg
from tests.conftest import make_federation

D = torch.float64


def _two_centers() -> FederatedData:
    """Center 0: one row x = (1, -2), y = 1; center 1: x = (0.5, 1.5), y = 0 (val/test: both classes)."""
    rows = [([1.0, -2.0], 1.0), ([0.5, 1.5], 0.0)]
    centers = []
    for c, (x, y) in enumerate(rows):
        xt, yt = torch.tensor([x], dtype=D), torch.tensor([y], dtype=D)
        xe, ye = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D), torch.tensor([0.0, 1.0], dtype=D)
        centers.append(CenterData(f"c{c}", xt, yt, xe, ye, xe, ye, torch.zeros(3, dtype=D)))
    return FederatedData(tuple(centers), ("f0", "f1"))


def _fed(data, module, algo, engine=None, rounds=2, batch_size=1, **trainer) -> Federation:
    return Federation(
        data,
        module,
        algo,
        TrainerConfig(
            rounds=rounds,
            local_epochs=2,
            batch_size=batch_size,
            engine=engine or PackedEngine(),
            **trainer,
        ),
        fabric=Fabric(accelerator="cpu", devices=1, precision="64-true"),
        seed=0,
    )


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_scaffold_matches_the_hand_computation_over_two_rounds(engine_cls) -> None:
    """The derivation of :mod:`lightning_fed.algorithms.scaffold`: w = (weight, bias), g_i(w) =
    (sigmoid(x_i . w + b) - y_i) [x_i, 1]; K = 2 SGD steps of rate eta per round (one row, 2 epochs);
    equal n_i, so x = (y_1 + y_2) / 2; c <- c + (Delta c_1 + Delta c_2) / 2."""
    eta = 0.5
    data = _two_centers()
    fed = _fed(data, LogReg(2, eta), SCAFFOLD(), engine=engine_cls())
    start = fed.engine.get_params()
    x = torch.cat([start["linear.weight"][0].reshape(-1), start["linear.bias"][0].reshape(-1)])
    xs = [c.x_train[0] for c in data.centers]
    ys = [c.y_train[0] for c in data.centers]

    def g(i: int, w: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(xs[i] @ w[:2] + w[2])
        return (p - ys[i]) * torch.cat([xs[i], torch.ones(1, dtype=D)])

    c, c_i = torch.zeros(3, dtype=D), [torch.zeros(3, dtype=D)] * 2
    for _ in range(2):
        y = []
        for i in range(2):
            w = x.clone()
            for _ in range(2):
                w = w - eta * (g(i, w) - c_i[i] + c)
            y.append(w)
        c_plus = [c_i[i] - c + (x - y[i]) / (2 * eta) for i in range(2)]
        c = c + ((c_plus[0] - c_i[0]) + (c_plus[1] - c_i[1])) / 2
        c_i, x = c_plus, (y[0] + y[1]) / 2
    fed.fit()
    got = fed.engine.get_params()
    for center in range(2):
        w = torch.cat([got["linear.weight"][center].reshape(-1), got["linear.bias"][center].reshape(-1)])
        torch.testing.assert_close(w, x, rtol=0, atol=1e-14)
    alg = fed.algorithm
    server_c = torch.cat([alg.c["linear.weight"].reshape(-1), alg.c["linear.bias"].reshape(-1)])
    torch.testing.assert_close(server_c, c, rtol=0, atol=1e-14)
    for i in range(2):
        local = alg.c_local
        mine = torch.cat([local["linear.weight"][i].reshape(-1), local["linear.bias"][i].reshape(-1)])
        torch.testing.assert_close(mine, c_i[i], rtol=0, atol=1e-14)
    assert not torch.allclose(c, torch.zeros(3, dtype=D))  # the correction acted in round 1


def test_scaffold_sends_twice_fedavgs_bytes_and_packed_equals_sequential() -> None:
    data = make_federation([40, 7, 130, 3, 64, 200, 18, 9])
    runs = []
    for algo, engine in ((SCAFFOLD(), PackedEngine()), (SCAFFOLD(), SequentialEngine()), (FedAvg(), None)):
        module = MortalityMLP(hidden=(8,), dropout=0.0, optimizer="sgd", lr=0.05)
        fed = _fed(data, module, algo, engine=engine, rounds=3, batch_size=32)
        runs.append((fed.fit(), fed.engine.get_params()))
    (sa, pa), (sb, pb), (fedavg, pf) = runs
    for n in pa:
        torch.testing.assert_close(pa[n], pb[n], rtol=0, atol=1e-12)
    assert sa["total_bytes"] == sb["total_bytes"] == 2 * fedavg["total_bytes"]
    assert sa["bytes_vs_fedavg"] == pytest.approx(2 * fedavg["bytes_vs_fedavg"])  # float64 here
    first = next(iter(pa))
    assert not torch.allclose(pa[first], pf[first])  # the control variates changed the training


def test_scaffold_with_client_sampling_updates_only_the_sampled_controls() -> None:
    data = make_federation([40, 7, 130, 3, 64, 200, 18, 9])
    module = MortalityMLP(hidden=(8,), dropout=0.0, optimizer="sgd", lr=0.05)
    fed = _fed(data, module, SCAFFOLD(), rounds=1, batch_size=32, centers_per_round=3)
    fed.fit()
    sampled = fed.participants(0)
    for t in fed.algorithm.c_local.values():
        flat = t.reshape(len(sampled), -1)
        assert (flat[~sampled] == 0).all() and (flat[sampled].abs().sum(1) > 0).all()


def test_scaffold_refuses_adam_local_steps_in_one_line() -> None:
    """Option II's ``(x - y_i) / (K_i eta_l)`` is a mean gradient only under SGD; with Adam the controls
    were 100-800x the gradients and TeacherICU fell below chance (module docstring), so Adam is refused."""
    data = make_federation([40, 7, 130])
    with pytest.raises(ValueError, match=r"algorithm SCAFFOLD: .*returns Adam.*optimizer=sgd") as err:
        _fed(data, MortalityMLP(hidden=(8,), dropout=0.0), SCAFFOLD(), rounds=1, batch_size=32)
    assert "\n" not in str(err.value)


def test_mortality_mlp_sgd_option_is_torch_sgd_and_refuses_other_names() -> None:
    opt = MortalityMLP(in_features=3, optimizer="sgd", lr=0.1, weight_decay=0.01).configure_optimizers()
    assert type(opt) is torch.optim.SGD
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["weight_decay"] == 0.01
    assert opt.param_groups[0]["momentum"] == 0
    assert type(MortalityMLP(in_features=3).configure_optimizers()) is torch.optim.Adam
    with pytest.raises(ValueError, match=r"model\.optimizer must be 'adam' or 'sgd'"):
        MortalityMLP(optimizer="adamw")
