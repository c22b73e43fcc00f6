"""Client sampling (``trainer.centers_per_round``): the documented count, seeded, composing with faults,
and FedAvg with sampling equal to FedAvg over the sampled centers alone."""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import DeceFL, FedAvg
from lightning_fed.comm import Wire
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.comm.sampling import CenterSampler
from lightning_fed.data.center import FederatedData
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.graphs import Complete
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

SIZES = [40, 7, 130, 3, 64, 200, 18, 9]


def _fed(data, algo=None, engine=None, wire=None, rounds=3, batch_size=32, **trainer) -> Federation:
    return Federation(
        data,
        MortalityMLP(hidden=(8,), dropout=0.0),
        algo or FedAvg(),
        TrainerConfig(rounds=rounds, batch_size=batch_size, engine=engine or PackedEngine(), **trainer),
        fabric=Fabric(accelerator="cpu", devices=1, precision="64-true"),
        seed=5,
        wire=wire,
    )


@pytest.mark.parametrize(("k", "reachable", "expected"), [(3, 8, 3), (20, 8, 8), (3, 2, 2), (0.25, 8, 2)])
def test_sampler_draws_the_documented_count_among_the_reachable(k, reachable, expected) -> None:
    mask = torch.zeros(8, dtype=torch.bool)
    mask[:reachable] = True
    for r in range(5):
        drawn = CenterSampler(k, seed=1).draw(r, mask)
        assert int(drawn.sum()) == expected
        assert not bool((drawn & ~mask).any())  # an unreachable center is never sampled


def test_sampler_fraction_rounds_and_keeps_at_least_one() -> None:
    s = CenterSampler(0.01, 0)
    assert s.count(230, 230) == 2 and CenterSampler(0.001, 0).count(230, 230) == 1
    assert CenterSampler(1.0, 0).count(230, 17) == 17 and CenterSampler(1, 0).count(230, 17) == 1


def test_sampler_is_a_function_of_seed_and_round() -> None:
    everyone = torch.ones(50, dtype=torch.bool)
    a = [CenterSampler(5, 3).draw(r, everyone) for r in range(4)]
    b = [CenterSampler(5, 3).draw(r, everyone) for r in reversed(range(4))][::-1]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0], a[1])
    assert not torch.equal(a[0], CenterSampler(5, 4).draw(0, everyone))


@pytest.mark.parametrize("bad", [0, -2, 0.0, 1.5, "half", True, float("nan")])
def test_centers_per_round_refuses_bad_values_in_one_line(bad) -> None:
    with pytest.raises(ValueError, match=r"^trainer\.centers_per_round must be") as err:
        TrainerConfig(centers_per_round=bad)
    assert "\n" not in str(err.value)


def test_fedavg_with_sampling_trains_sends_and_counts_only_the_sampled() -> None:
    data = make_federation(SIZES)
    fed = _fed(data, centers_per_round=3, rounds=4)
    w = fed.num_shared_parameters * 8  # float64 messages
    seen = []
    before = fed.engine.get_params()
    for r in range(4):
        result = fed._run_round(r)
        fed.round += 1
        sampled = fed.participants(r)
        seen.append(sampled)
        assert result.stats["sampled_centers"] == 3 == int(sampled.sum())
        after = fed.engine.get_params()
        for n in after:  # the others did not train and received nothing
            assert torch.equal(after[n][~sampled], before[n][~sampled])
        assert torch.isnan(result.train_loss[~sampled]).all()
        assert torch.isfinite(result.train_loss[sampled]).all()
        got = result.bytes_per_center
        assert (got[~sampled] == 0).all()
        # upload + download, plus the catch-up download for a sampled center that missed the last one
        missed = sampled & ~(seen[-2] if r else torch.ones_like(sampled))
        assert got[sampled].tolist() == [(2 + int(m)) * w for m in missed[sampled]]
        assert result.stats["isolated_centers"] == 0 and result.stats["ledger_isolation_rate"] == 0.0
        before = after
    assert not all(torch.equal(seen[0], s) for s in seen[1:])
    summary = fed.summary()
    assert summary["isolated_center_rounds"] == 0 and summary["isolation_rate"] == 0.0


def test_every_sampled_center_trains_from_the_servers_current_model() -> None:
    data = make_federation(SIZES)
    fed = _fed(data, centers_per_round=3, rounds=4)
    alg, starts = fed.algorithm, []
    start_round = alg.start_round

    def spy(ctx, engine, wire) -> None:
        server = {n: t.clone() for n, t in alg.last_sent.items()}
        start_round(ctx, engine, wire)
        starts.append((ctx.round, server, engine.get_params()))

    alg.start_round = spy
    fed.fit()
    assert len(starts) == 4
    for r, server, params in starts:
        sampled = fed.participants(r)
        for n, t in server.items():
            assert torch.equal(params[n][sampled], t.expand_as(params[n][sampled]))


def test_packed_equals_sequential_under_sampling_and_faults() -> None:
    data = make_federation(SIZES)
    faults = FaultInjection(unavailable={1: [0, 2, 5], 2: [4]})
    runs = []
    for engine in (PackedEngine(), SequentialEngine()):
        fed = _fed(data, engine=engine, wire=Wire(faults=faults), centers_per_round=0.5, rounds=3)
        summary = fed.fit()
        runs.append((fed.engine.get_params(), summary, [fed.participants(r) for r in range(3)]))
        assert not bool((fed.participants(1)[[0, 2, 5]]).any())  # unavailable: never sampled
    (pa, sa, ra), (pb, sb, rb) = runs
    assert all(torch.equal(x, y) for x, y in zip(ra, rb, strict=True))
    assert all(int(x.sum()) == 4 for x in ra)  # round(0.5 * 8), at most the 5 reachable
    for n in pa:
        torch.testing.assert_close(pa[n], pb[n], rtol=0, atol=1e-12)
    assert sa["total_bytes"] == sb["total_bytes"]


def test_fedavg_with_sampling_equals_fedavg_over_the_sampled_centers_alone() -> None:
    """Full-batch local steps (batch order cannot matter) and a fresh optimizer each round, so a
    round of a sampled center depends only on the model it starts from: round r of the sampled run
    equals one round of FedAvg over the federation of ``S_r`` alone started from the server model."""
    data = make_federation(SIZES)
    common = {"batch_size": 256, "local_epochs": 1, "reset_optimizer_each_round": True}
    fed = _fed(data, centers_per_round=3, rounds=2, **common)
    for r in range(2):
        server = {n: t.clone() for n, t in fed.algorithm.last_sent.items()}
        fed._run_round(r)
        fed.round += 1
        sampled = torch.nonzero(fed.participants(r)).reshape(-1)
        alone = FederatedData(tuple(data.centers[int(c)] for c in sampled), data.feature_names)
        ref = _fed(alone, rounds=1, **common)
        ref.engine.set_params({n: t.expand(len(sampled), *t.shape[1:]).clone() for n, t in server.items()})
        ref.fit()
        got, want = fed.engine.get_params(), ref.engine.get_params()
        for n in want:
            torch.testing.assert_close(got[n][sampled], want[n], rtol=0, atol=1e-12)


def test_peer_method_non_sampled_centers_neither_send_nor_receive() -> None:
    data = make_federation(SIZES)
    fed = _fed(data, algo=DeceFL(topology=Complete()), centers_per_round=4, rounds=3)
    fed.fit()
    table = fed.wire.ledger.table()
    for r in range(3):
        sampled = fed.participants(r)
        rows = table["round"] == r
        ends = torch.cat([table["u"][rows], table["v"][rows]])
        assert set(ends.tolist()) == set(torch.nonzero(sampled).reshape(-1).tolist())
        # complete graph on the 4 sampled: 6 undirected edges, both directions booked on each
        assert int(rows.sum()) == 6


def test_sampling_refuses_a_pooled_model() -> None:
    from lightning_fed.algorithms import Centralized

    with pytest.raises(ValueError, match=r"^trainer\.centers_per_round=2: Centralized"):
        _fed(make_federation(SIZES), algo=Centralized(), centers_per_round=2)
