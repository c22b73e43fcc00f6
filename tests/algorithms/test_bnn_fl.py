"""BNN+FL: the server's aggregation of posterior moments on hand-computed 2-3 center cases, the
exchange on the wire, and an end-to-end run."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_fed.algorithms import AverageVariance, BNNFedAvg, MixtureMoments
from lightning_fed.comm import Wire
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.models import BayesianMLP, MortalityMLP
from lightning_fed.types import RoundContext
from tests.conftest import make_federation

CTX = RoundContext(round=0, seed=0, val_utility=lambda params, centers: centers.double())


def _rho(sigma: float) -> float:
    """softplus^{-1}(sigma) = log(e^sigma - 1)."""
    return math.log(math.expm1(sigma))


def _posteriors(module: BayesianMLP, mus: list[float], sigmas: list[float]) -> dict[str, torch.Tensor]:
    """Center c has every mean = mus[c] and every standard deviation = sigmas[c] (float64)."""
    return {
        n: torch.stack(
            [
                torch.full_like(p, _rho(s) if n.endswith("_rho") else m, dtype=torch.float64)
                for m, s in zip(mus, sigmas, strict=True)
            ]
        )
        for n, p in module.named_parameters()
    }


def _moments(out: dict[str, torch.Tensor], name: str) -> tuple[torch.Tensor, torch.Tensor]:
    return out[f"{name}_mu"], torch.nn.functional.softplus(out[f"{name}_rho"]).square()


@pytest.mark.parametrize(("rule", "variance"), [(MixtureMoments(), 4.75), (AverageVariance(), 1.75)])
def test_bnn_aggregation_of_moments_two_centers(rule, variance: float) -> None:
    """BNN aggregation of moments. n = (30, 10) -> w = (0.75, 0.25); center 0: mu = 1, sigma = 1;
    center 1: mu = 5, sigma = 2.
    mean: 0.75 * 1 + 0.25 * 5 = 2.
    mixture moments: 0.75 (1 + 1) + 0.25 (4 + 25) - 2^2 = 1.5 + 7.25 - 4 = 4.75
        (= within 0.75 * 1 + 0.25 * 4 = 1.75 plus between 0.75 (1 - 2)^2 + 0.25 (5 - 2)^2 = 3).
    average of variances: 0.75 * 1 + 0.25 * 4 = 1.75.
    Both centers receive (mu, rho) = (2, softplus^{-1}(sqrt(variance)))."""
    data = make_federation([30, 10])
    module = BayesianMLP(in_features=data.num_features, hidden=(4, 3))
    algo = BNNFedAvg(variance=rule)
    algo.setup(data, module)
    out = algo.aggregate(CTX, _posteriors(module, [1.0, 5.0], [1.0, 2.0]), Wire())
    for i in range(3):
        for kind in ("weight", "bias"):
            mu, var = _moments(out, f"layers.{i}.{kind}")
            assert torch.allclose(mu, torch.full_like(mu, 2.0), rtol=0, atol=1e-12)
            assert torch.allclose(var, torch.full_like(var, variance), rtol=0, atol=1e-12)
            rho = out[f"layers.{i}.{kind}_rho"]
            assert torch.allclose(rho, torch.full_like(rho, _rho(variance**0.5)), rtol=0, atol=1e-12)


def test_three_centers_one_offline_renormalizes_and_costs_2w() -> None:
    """n = (30, 10, 20), center 2 offline: w = (0.75, 0.25) over centers 0 and 1 (mu = 1, 5; sigma = 1, 2),
    so centers 0 and 1 get mu = 2, sigma^2 = 4.75 as above; center 2 keeps (mu, sigma) = (9, 3).
    Bytes: centers 0, 1 each upload and download |W| (means and rho), center 2 nothing."""
    data = make_federation([30, 10, 20])
    module = BayesianMLP(in_features=data.num_features, hidden=(4, 3))
    algo = BNNFedAvg()
    algo.setup(data, module)
    params = _posteriors(module, [1.0, 5.0, 9.0], [1.0, 2.0, 3.0])
    wire = Wire(faults=FaultInjection(unavailable={0: [2]}))
    out = algo.aggregate(CTX, params, wire)
    mu, var = _moments(out, "layers.0.weight")
    assert torch.allclose(mu[:2], torch.full_like(mu[:2], 2.0), rtol=0, atol=1e-12)
    assert torch.allclose(var[:2], torch.full_like(var[:2], 4.75), rtol=0, atol=1e-12)
    for n in out:
        assert torch.equal(out[n][2], params[n][2])
    size = sum(p.numel() for p in module.parameters()) * 8
    assert wire.ledger.per_center(3).tolist() == [2 * size, 2 * size, 0]


def test_personal_head_stays_local_and_is_not_sent() -> None:
    data = make_federation([30, 10])
    module = BayesianMLP(in_features=data.num_features, hidden=(4, 3))
    algo = BNNFedAvg(personal_layers=1)
    algo.setup(data, module)
    params = _posteriors(module, [1.0, 5.0], [1.0, 2.0])
    wire = Wire()
    out = algo.aggregate(CTX, params, wire)
    head = set(module.head_parameter_names(1))
    for n in head:
        assert torch.equal(out[n], params[n])
    assert torch.allclose(out["layers.0.weight_mu"], torch.full_like(out["layers.0.weight_mu"], 2.0))
    shared = sum(p.numel() for n, p in module.named_parameters() if n not in head) * 8
    assert wire.ledger.total() == 4 * shared


def test_model_without_posterior_pairs_is_rejected_at_setup() -> None:
    data = make_federation([30, 10])
    with pytest.raises(ValueError, match="BayesianMLP"):
        BNNFedAvg().setup(data, MortalityMLP(in_features=data.num_features, hidden=(4,)))


def test_two_rounds_end_to_end_on_synthetic_icu() -> None:
    """A tiny SyntheticICU federation, 2 rounds of BNN+FL: finite AUROC, both rounds' bytes booked,
    and the centers end the round holding the same posterior (the server's aggregate)."""
    from lightning.fabric import Fabric

    from lightning_fed.data import SyntheticICU
    from lightning_fed.federation import Federation
    from lightning_fed.types import TrainerConfig

    data = SyntheticICU(num_centers=6, num_stays=900).build(0)
    fed = Federation(
        data,
        BayesianMLP(hidden=(16, 8)),
        BNNFedAvg(),
        TrainerConfig(rounds=2, batch_size=32),
        fabric=Fabric(accelerator="cpu", devices=1),
        seed=0,
    )
    summary = fed.fit()
    assert math.isfinite(summary["test_auroc_mean"]) and 0.0 <= summary["test_auroc_mean"] <= 1.0
    assert summary["total_bytes"] == 2 * data.num_centers * 2 * fed.num_shared_parameters * 4
    params = fed.engine.get_params()
    for t in params.values():
        assert torch.equal(t, t[:1].expand_as(t))
