"""FedAvg, Local-only and the mixing matrix on hand-computed 2-3 center cases."""

from __future__ import annotations

import torch

from lightning_fed.aggregation import mix, sample_weights, weighted_average
from lightning_fed.algorithms import Centralized, FedAvg, LocalOnly
from lightning_fed.comm import Wire
from lightning_fed.models import MortalityMLP
from lightning_fed.types import RoundContext
from tests.conftest import make_federation

CTX = RoundContext(round=0, seed=0, val_utility=lambda params, centers: centers.double())


def test_mix_three_centers_by_hand() -> None:
    """M = [[.5,.5,0],[0,1,0],[.25,.25,.5]] on scalars theta = (2, 4, 8):
    row 0: .5*2 + .5*4 = 3; row 1: 4; row 2: .25*2 + .25*4 + .5*8 = 5.5."""
    m = torch.tensor([[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.25, 0.25, 0.5]])
    out = mix({"t": torch.tensor([[2.0], [4.0], [8.0]])}, m)
    assert out["t"].squeeze(1).tolist() == [3.0, 4.0, 5.5]


def test_fedavg_weights_by_train_size_two_centers() -> None:
    """n = (30, 10): w = (0.75, 0.25); theta = (1, 5) -> 0.75*1 + 0.25*5 = 2 for both centers."""
    w = sample_weights(torch.tensor([30, 10]))
    assert w.tolist() == [0.75, 0.25]
    avg = weighted_average({"t": torch.tensor([[1.0], [5.0]])}, w)
    assert avg["t"].item() == 2.0


def _params(data, module, values):
    return {n: torch.stack([torch.full_like(p, v) for v in values]) for n, p in module.named_parameters()}


def test_fedavg_star_equals_rank_one_mixing_and_costs_2w_per_center() -> None:
    data = make_federation([30, 10, 20])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo = FedAvg()
    algo.setup(data, module)
    params = _params(data, module, [1.0, 5.0, 2.0])
    wire = Wire()
    out = algo.aggregate(CTX, params, wire)
    # w = (30, 10, 20) / 60 = (.5, 1/6, 1/3): .5*1 + 5/6 + 2/3 = 2.0
    for p in out.values():
        assert torch.allclose(p, torch.full_like(p, 2.0))
    w = sample_weights(data.n_train)
    mixed = mix(params, torch.ones(3, 1, dtype=torch.float64) * w.unsqueeze(0))
    assert all(torch.allclose(out[n], mixed[n]) for n in out)
    size = sum(p.numel() for p in module.parameters()) * 4
    assert wire.ledger.per_center(3).tolist() == [2 * size] * 3
    assert wire.ledger.total() == 6 * size


def test_fedavg_personal_head_stays_local_and_is_not_sent() -> None:
    data = make_federation([30, 10])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo = FedAvg(personal_layers=1)
    algo.setup(data, module)
    params = _params(data, module, [1.0, 5.0])
    wire = Wire()
    out = algo.aggregate(CTX, params, wire)
    head = set(module.head_parameter_names(1))
    assert head == {"layers.2.weight", "layers.2.bias"}
    for n in head:
        assert torch.equal(out[n], params[n])
    shared = sum(p.numel() for n, p in module.named_parameters() if n not in head) * 4
    assert wire.ledger.total() == 4 * shared


def test_local_only_and_centralized_send_nothing() -> None:
    data = make_federation([30, 10])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    for algo in (LocalOnly(), Centralized()):
        algo.setup(data, module)
        params = _params(data, module, [1.0, 5.0])
        wire = Wire()
        assert algo.aggregate(CTX, params, wire) is params
        assert wire.ledger.total() == 0
    assert Centralized().train_groups(data) == [[0, 1]]
