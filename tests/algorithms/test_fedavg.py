"""FedAvg (with and without FedAvgM server momentum), Local-only and the mixing matrix on hand-computed
2-3 center cases."""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.aggregation import ServerAverage, ServerMomentum, mix, sample_weights, weighted_average
from lightning_fed.algorithms import Centralized, FedAvg, LocalOnly
from lightning_fed.comm import Wire
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import RoundContext, TrainerConfig
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


def _zero_init(module: MortalityMLP) -> MortalityMLP:
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()
    return module


def _ctx(r: int) -> RoundContext:
    return RoundContext(round=r, seed=0, val_utility=CTX.val_utility)


def test_server_momentum_two_centers_three_rounds_by_hand() -> None:
    """FedAvgM, beta = 0.5, n = (30, 10) so w = (.75, .25); theta_server starts at the common init 0, v = 0.

    Each round the centers upload the scalars below (every tensor filled with them):

    round 0: (1, 5) -> theta_bar = .75 + 1.25 = 2; Delta = 2 - 0 = 2;  v = .5*0 + 2 = 2;  server = 0 + 2 = 2
    round 1: (4, 0) -> theta_bar = 3;              Delta = 3 - 2 = 1;  v = .5*2 + 1 = 2;  server = 2 + 2 = 4
    round 2: (2, 6) -> theta_bar = 1.5 + 1.5 = 3;  Delta = 3 - 4 = -1; v = .5*2 - 1 = 0;  server = 4 + 0 = 4

    Both centers receive the server model: 2, 4, 4 (plain FedAvg: 2, 3, 3). The personal head (one
    layer) has no server state and stays each center's own value.
    """
    data = make_federation([30, 10])
    module = _zero_init(MortalityMLP(in_features=data.num_features, hidden=(4, 3)))
    algo, plain = FedAvg(personal_layers=1, server_momentum=0.5), FedAvg(personal_layers=1)
    algo.setup(data, module)
    plain.setup(data, module)
    head = set(module.head_parameter_names(1))
    for r, (uploads, expected, fedavg) in enumerate(
        [((1.0, 5.0), 2.0, 2.0), ((4.0, 0.0), 4.0, 3.0), ((2.0, 6.0), 4.0, 3.0)]
    ):
        params = _params(data, module, list(uploads))
        out, ref = algo.aggregate(_ctx(r), params, Wire()), plain.aggregate(_ctx(r), params, Wire())
        for n, p in out.items():
            if n in head:
                assert torch.equal(p, params[n])
            else:
                assert torch.equal(p, torch.full_like(p, expected)), (r, n)
                assert torch.equal(ref[n], torch.full_like(p, fedavg))
    assert set(algo.server_optimizer.server) == set(algo.shared_names)
    assert all(float(v.abs().max()) == 0.0 for v in algo.server_optimizer.velocity.values())


def test_server_momentum_zero_is_plain_fedavg_bit_for_bit() -> None:
    """beta = 0: v = Delta, server = server + (theta_bar - server) = theta_bar; in float64 state the
    difference of two float32 values is exact, so the cast back gives theta_bar exactly. Random float32
    uploads over 3 rounds from a random init must match the plain average bit for bit."""
    gen = torch.Generator().manual_seed(0)
    momentum = ServerMomentum(0.0)
    momentum.start({"w": torch.randn(3, 2, generator=gen)})
    for _ in range(3):
        bar = {"w": torch.randn(1, 3, 2, generator=gen) * 10}
        assert torch.equal(momentum.step(bar)["w"], bar["w"])


def test_server_momentum_state_round_trips_and_resume_is_identical() -> None:
    """Rounds 0-1 of the hand case above, then state_dict into a fresh FedAvgM: round 2 gives 4 in both
    (server 2 + v 2 ... see the three-round docstring); a fresh one without the state would give
    0 + (3 - 0) = 3 instead."""
    data = make_federation([30, 10])
    module = _zero_init(MortalityMLP(in_features=data.num_features, hidden=(4, 3)))
    algo = FedAvg(server_momentum=0.5)
    algo.setup(data, module)
    for r, uploads in enumerate([(1.0, 5.0), (4.0, 0.0)]):
        algo.aggregate(_ctx(r), _params(data, module, list(uploads)), Wire())
    resumed, fresh = FedAvg(server_momentum=0.5), FedAvg(server_momentum=0.5)
    resumed.setup(data, module)
    fresh.setup(data, module)
    resumed.load_state_dict(algo.state_dict())
    last = _params(data, module, [2.0, 6.0])
    a, b, c = (x.aggregate(_ctx(2), last, Wire()) for x in (algo, resumed, fresh))
    assert all(torch.equal(a[n], b[n]) and torch.equal(a[n], torch.full_like(a[n], 4.0)) for n in a)
    assert all(torch.equal(c[n], torch.full_like(c[n], 3.0)) for n in c)


def test_server_momentum_federation_resume_equals_straight_run() -> None:
    """A FedAvgM federation checkpointed after 2 rounds and continued to 4 ends with the same
    parameters and bytes as a straight 4-round run (the server model and velocity are in the state)."""
    data = make_federation([30, 10, 20])

    def build(rounds: int) -> Federation:
        return Federation(
            data,
            MortalityMLP(hidden=(4, 3), dropout=0.0),
            FedAvg(server_momentum=0.5),
            TrainerConfig(rounds=rounds, batch_size=16),
            Fabric(accelerator="cpu", devices=1),
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
    assert resumed.wire.ledger.total() == straight.wire.ledger.total()


def test_momentum_and_server_momentum_are_mutually_exclusive() -> None:
    with pytest.raises(
        ValueError,
        match=r"momentum=0\.5 and algorithm\.init_args\.server_optimizer=ServerMomentum",
    ):
        FedAvg(momentum=0.5, server_momentum=0.5)
    with pytest.raises(ValueError, match=r"algorithm\.init_args\.server_momentum must be in \[0, 1\)"):
        FedAvg(server_momentum=1.0)
    with pytest.raises(ValueError, match=r"server_optimizer\.init_args\.beta must be in \[0, 1\)"):
        ServerMomentum(1.0)
    assert isinstance(FedAvg(momentum=0.5).server_optimizer, ServerAverage)


def test_server_momentum_alias_maps_to_the_server_momentum_plugin() -> None:
    """``server_momentum: beta`` is ``server_optimizer: ServerMomentum(beta)``; 0 and unset are the
    average; giving both keys is a one-line error naming them."""
    alias = FedAvg(server_momentum=0.5).server_optimizer
    assert type(alias) is ServerMomentum and alias.beta == 0.5
    assert type(FedAvg(server_momentum=0.0).server_optimizer) is ServerAverage
    assert type(FedAvg().server_optimizer) is ServerAverage
    with pytest.raises(
        ValueError, match=r"server_momentum is the old alias of algorithm\.init_args\.server_optimizer"
    ):
        FedAvg(server_momentum=0.5, server_optimizer=ServerMomentum(0.5))


def test_server_momentum_alias_and_plugin_give_identical_federations() -> None:
    """The alias and the plugin it maps to train the same parameters bit for bit (2 rounds)."""
    data = make_federation([30, 10, 20])

    def run(algo: FedAvg) -> dict[str, torch.Tensor]:
        fed = Federation(
            data,
            MortalityMLP(hidden=(4, 3), dropout=0.0),
            algo,
            TrainerConfig(rounds=2, batch_size=16),
            Fabric(accelerator="cpu", devices=1),
        )
        fed.fit()
        return fed.engine.get_params()

    a = run(FedAvg(server_momentum=0.5))
    b = run(FedAvg(server_optimizer=ServerMomentum(beta=0.5)))
    assert all(torch.equal(a[n], b[n]) for n in a)


def test_server_momentum_checkpoint_key_of_earlier_releases_still_loads() -> None:
    """A state saved under ``server_momentum`` (before the plugin) restores the server model and velocity."""
    data = make_federation([30, 10])
    module = _zero_init(MortalityMLP(in_features=data.num_features, hidden=(4, 3)))
    algo = FedAvg(server_momentum=0.5)
    algo.setup(data, module)
    algo.aggregate(_ctx(0), _params(data, module, [1.0, 5.0]), Wire())
    state = algo.state_dict()
    old = {"momentum": state["momentum"], "server_momentum": state["server_optimizer"]}
    again = FedAvg(server_optimizer=ServerMomentum(0.5))
    again.setup(data, module)
    again.load_state_dict(old)
    assert all(
        torch.equal(again.server_optimizer.server[n], algo.server_optimizer.server[n])
        for n in algo.shared_names
    )
    assert all(
        torch.equal(again.server_optimizer.velocity[n], algo.server_optimizer.velocity[n])
        for n in algo.shared_names
    )
