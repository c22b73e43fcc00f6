"""DeceFL, DeFTA and WPFed on hand-computed 3-center toys, plus 2 rounds end to end."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.aggregation import mix
from lightning_fed.algorithms import DeceFL, DeFTA, WPFed
from lightning_fed.algorithms.wpfed import lsh_codes, nearest_by_hamming, rank_weights
from lightning_fed.comm import Wire
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.data import SyntheticICU
from lightning_fed.federation import Federation
from lightning_fed.graphs import Complete, EdgeList, Path, RandomRegular, metropolis_weights
from lightning_fed.models import MortalityMLP
from lightning_fed.types import RoundContext, TrainerConfig
from tests.conftest import make_federation

CTX = RoundContext(round=0, seed=0, val_utility=lambda params, centers: torch.full((len(centers),), 0.5))


def _setup(algo, sizes, hidden=(4, 3)):
    data = make_federation(sizes)
    module = MortalityMLP(in_features=data.num_features, hidden=hidden)
    algo.setup(data, module)
    return data, module


def _const(module, values):
    return {n: torch.stack([torch.full_like(p, v) for v in values]) for n, p in module.named_parameters()}


def _size(module, names=None) -> int:
    return sum(p.numel() for n, p in module.named_parameters() if names is None or n in names) * 4


def _values(out):
    return [float(v) for v in out["layers.0.weight"][:, 0, 0]]


def test_decefl_path_equals_metropolis_mixing_and_books_2w_per_edge() -> None:
    """Path 0-1-2, W = [[2,1,0],[1,1,1],[0,1,2]] / 3 (degrees 1, 2, 1). theta = (3, 6, 9):
    theta_0 = (2*3 + 6)/3 = 4, theta_1 = (3+6+9)/3 = 6, theta_2 = (6 + 2*9)/3 = 8.
    Each of the 2 edges carries one message each way: 2|W| per edge, centers (2, 4, 2)|W|."""
    algo = DeceFL(topology=Path())
    _, module = _setup(algo, [30, 10, 20])
    params, wire = _const(module, [3.0, 6.0, 9.0]), Wire()
    out = algo.aggregate(CTX, params, wire)
    assert _values(out) == pytest.approx([4.0, 6.0, 8.0])
    expected = mix(params, metropolis_weights(algo.graph))
    assert all(torch.allclose(out[n], expected[n]) for n in out)
    w = _size(module)
    table = wire.ledger.table()
    assert table["u"].tolist() == [0, 1] and table["v"].tolist() == [1, 2]
    assert table["bytes"].tolist() == [2 * w, 2 * w]
    assert wire.ledger.per_center(3).tolist() == [2 * w, 4 * w, 2 * w]
    assert algo.round_stats() == {"mean_neighbours": 4 / 3}
    assert algo.summary_stats() == {"graph_edges": 2.0, "graph_mean_degree": 4 / 3, "graph_diameter": 2.0}


def test_decefl_faults_renormalize_the_metropolis_row() -> None:
    """Center 2 unavailable: center 1 mixes itself and 0 only, (6/3 + 3/3) / (1/3 + 1/3) = 4.5;
    center 0 as before (2*3 + 6)/3 = 4; center 2 keeps 9; only edge (0, 1) is booked.
    Center 0 sending NaN instead: center 1 drops it, (6/3 + 9/3) / (2/3) = 7.5; center 0 gets 4,
    center 2 gets 8; both edges stay booked (the bad message was sent) and one rejection is counted."""
    algo = DeceFL(topology=Path())
    _, module = _setup(algo, [30, 10, 20])
    params = _const(module, [3.0, 6.0, 9.0])
    wire = Wire(faults=FaultInjection(unavailable={0: [2]}))
    assert _values(algo.aggregate(CTX, params, wire)) == pytest.approx([4.0, 4.5, 9.0])
    assert wire.ledger.table()["v"].tolist() == [1]
    wire = Wire(faults=FaultInjection(corrupt={0: {0: "nan"}}))
    assert _values(algo.aggregate(CTX, params, wire)) == pytest.approx([4.0, 7.5, 8.0])
    assert wire.ledger.total() == 4 * _size(module) and wire.rejected_in(0) == 1


def test_decefl_gossips_without_the_dense_matrix_bit_for_bit(monkeypatch) -> None:
    """60 centers on a cycle plus random chords (degrees 2 to 8), 7 of them unavailable, and the
    receivers mixed a few messages' bytes at a time: every row is the renormalized row of the dense
    Metropolis matrix bit for bit (``renormalize`` of its diagonal and its entries ``W[dst, src]``, as
    DeceFL computed it before), and DeceFL holds nothing of ``C^2`` elements (0.8 GB of float64 at
    10,000 centers)."""
    import lightning_fed.algorithms.decefl as decefl
    from lightning_fed.aggregation.mixing import mix_received, renormalize

    n = 60
    gen = torch.Generator().manual_seed(3)
    chords = torch.randint(0, n, (40, 2), generator=gen)
    pairs = {tuple(sorted((i, (i + 1) % n))) for i in range(n)}
    pairs |= {tuple(sorted(p)) for p in chords.tolist() if p[0] != p[1]}
    pairs = [list(p) for p in sorted(pairs)]
    algo = DeceFL(topology=EdgeList(pairs))
    _, module = _setup(algo, [12 + i % 7 for i in range(n)])
    assert len(set(algo.graph.degree.tolist())) > 2
    message = _size(module)
    monkeypatch.setattr(decefl, "MIX_CHUNK_BYTES", 3 * message)
    params = {k: torch.randn(n, *v.shape[1:], generator=gen) for k, v in _const(module, [0.0] * n).items()}
    wire = Wire(faults=FaultInjection(unavailable={0: [1, 8, 9, 20, 33, 47, 59]}))
    out = algo.aggregate(CTX, params, wire)
    src, dst = algo.round_edges(wire, 0)
    w = metropolis_weights(algo.graph)
    self_w, edge_w = renormalize(w.diagonal().clone(), w[dst, src], dst)
    expected = mix_received(params, {k: v[src] for k, v in params.items()}, dst, self_w, edge_w)
    assert all(torch.equal(out[k], expected[k]) for k in out)
    held = [t for t in vars(algo).values() if isinstance(t, torch.Tensor)]
    assert held and all(t.numel() < n * n for t in held)


def test_decefl_personal_head_stays_local() -> None:
    algo = DeceFL(topology=Path(), personal_layers=1)
    _, module = _setup(algo, [30, 10, 20])
    params, wire = _const(module, [3.0, 6.0, 9.0]), Wire()
    out = algo.aggregate(CTX, params, wire)
    head = set(module.head_parameter_names(1))
    assert all(torch.equal(out[n], params[n]) for n in head)
    assert wire.ledger.total() == 4 * _size(module, set(algo.shared_names))


def test_decefl_rejects_impossible_or_disconnected_topologies() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.topology=RandomRegular.*data\.num_centers=3"):
        _setup(DeceFL(), [30, 10, 20])
    with pytest.raises(ValueError, match="disconnected"):
        _setup(DeceFL(topology=EdgeList([[0, 1]])), [30, 10, 20])


def _theta_utility(calls: list, nan_at: tuple[int, float] | None = None):
    """Fake val_utility: model q scores u = 0.5 + 0.1 * theta_q (theta read from its first weight);
    NaN for (center, theta) == nan_at. Records every call."""

    def utility(params, centers):
        theta = params["layers.0.weight"][:, 0, 0].double()
        u = 0.5 + 0.1 * theta
        calls.append((centers.tolist(), theta.tolist()))
        if nan_at is not None:
            u[(centers == nan_at[0]) & (theta == nan_at[1])] = math.nan
        return u

    return utility


def test_defta_trust_weights_on_a_three_center_path() -> None:
    """n = (30, 10, 20), theta = (1, 2, 3), u_ij = 0.5 + 0.1 theta_j, beta = 10 ln 2 so that
    exp(beta u_ij) is proportional to 2^theta_j: factors n_j 2^theta_j = (60, 40, 160).
    Path 0-1-2: theta_0 = (60*1 + 40*2) / 100 = 1.4, theta_1 = (60 + 80 + 480) / 260 = 31/13.
    Center 2's own model gets NaN -> 0.5 (factor 2^0): weights (40, 20), theta_2 = (80 + 60)/60 = 7/3.
    One batched call scores the 3 own models and the 4 received ones."""
    algo = DeFTA(topology=Path(), beta=10 * math.log(2))
    _, module = _setup(algo, [30, 10, 20])
    calls: list = []
    ctx = RoundContext(round=0, seed=0, val_utility=_theta_utility(calls, nan_at=(2, 3.0)))
    out = algo.aggregate(ctx, _const(module, [1.0, 2.0, 3.0]), Wire())
    assert _values(out) == pytest.approx([1.4, 31 / 13, 7 / 3])
    assert len(calls) == 1
    centers, theta = calls[0]
    assert sorted(zip(centers[3:], theta[3:], strict=True)) == [(0, 2.0), (1, 1.0), (1, 3.0), (2, 2.0)]
    assert centers[:3] == [0, 1, 2] and theta[:3] == [1.0, 2.0, 3.0]


def test_defta_beta_zero_is_sample_weighted_neighbourhood_average() -> None:
    """beta = 0, complete graph, n = (30, 10, 20), theta = (1, 2, 3): (30 + 20 + 60) / 60 = 11/6."""
    algo = DeFTA(topology=Complete(), beta=0.0)
    _, module = _setup(algo, [30, 10, 20])
    ctx = RoundContext(round=0, seed=0, val_utility=_theta_utility([]))
    wire = Wire()
    assert _values(algo.aggregate(ctx, _const(module, [1.0, 2.0, 3.0]), wire)) == pytest.approx([11 / 6] * 3)
    assert wire.ledger.total() == 6 * _size(module)
    with pytest.raises(ValueError, match=r"algorithm\.beta"):
        DeFTA(beta=-1.0)


def test_lsh_codes_follow_output_angles() -> None:
    """Centered outputs: o and 2 o + 5 hash identically; -o gets the complementary code (distance = bits)."""
    gen = torch.Generator().manual_seed(0)
    o = torch.randn(16, generator=gen, dtype=torch.float64)
    planes = torch.randn(32, 16, generator=gen, dtype=torch.float64)
    codes = lsh_codes(torch.stack([o, 2 * o + 5, -o]), planes)
    assert torch.equal(codes[0], codes[1])
    assert bool((codes[0] != codes[2]).all())


def test_nearest_by_hamming_by_hand() -> None:
    """Codes 0000, 0001, 0111, 1111 (all-to-all messages). k=1: 0 -> 1 (d 1), 1 -> 0 (d 1 vs 2 vs 3),
    2 -> 3 (d 1 vs 2 vs 3), 3 -> 2 (d 1). k=2: 1 -> {0 (d 1), 2 (d 2)}. Tie: codes 0000, 0001, 0010,
    0011: center 3 is at distance 1 from both 1 and 2 -> the lower id, 1, wins."""
    own = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    pairs = torch.cartesian_prod(torch.arange(4), torch.arange(4))
    src, dst = pairs[pairs[:, 0] != pairs[:, 1]].T
    pick = nearest_by_hamming(own, own[src], src, dst, 1)
    assert sorted(zip(dst[pick].tolist(), src[pick].tolist(), strict=True)) == [
        (0, 1),
        (1, 0),
        (2, 3),
        (3, 2),
    ]
    pick2 = nearest_by_hamming(own, own[src], src, dst, 2)
    assert sorted(src[pick2 & (dst == 1)].tolist()) == [0, 2]
    tie = torch.tensor([[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
    pick = nearest_by_hamming(tie, tie[src], src, dst, 1)
    assert src[pick & (dst == 3)].tolist() == [1]


def test_rank_weights_by_hand() -> None:
    """Group 0 scores (own 0.7, 0.9, 0.8): ranks (3, 1, 2), 1/r = (1/3, 1, 1/2), sum 11/6 ->
    (2/11, 6/11, 3/11). Group 1 (own NaN -> 0.5, 0.5): tie, own listed first -> ranks (1, 2),
    weights (2/3, 1/3)."""
    scores = torch.tensor([0.7, 0.9, 0.8, math.nan, 0.5], dtype=torch.float64)
    w = rank_weights(scores, torch.tensor([0, 0, 0, 1, 1]), 2)
    assert w.tolist() == pytest.approx([2 / 11, 6 / 11, 3 / 11, 2 / 3, 1 / 3])


def test_wpfed_picks_the_identical_model_and_mixes_by_rank() -> None:
    """Centers 0 and 1 hold the same model A, center 2 a different model B; k = 1. Codes of 0 and 1
    coincide (distance 0), so 0 pulls 1 and 1 pulls 0; center 2 is equally far from both and pulls
    the lower id, 0. The fake utility scores A as 1 and B as 0: at center 2, A ranks 1 and its own B
    ranks 2, so theta_2 = (1 * A + 1/2 * B) / (3/2) = 2/3 A + 1/3 B; centers 0 and 1 stay A.
    Ledger: 6 codes of 64 bool bytes (all-to-all) + 3 model messages."""
    algo = WPFed(neighbours=1, bits=64, reference_size=32)
    _, module = _setup(algo, [30, 10, 20])
    gen = torch.Generator().manual_seed(1)
    a = {n: torch.randn(p.shape, generator=gen) for n, p in module.named_parameters()}
    b = {n: torch.randn(p.shape, generator=gen) for n, p in module.named_parameters()}
    params = {n: torch.stack([a[n], a[n], b[n]]) for n in a}
    first = a["layers.0.weight"][0, 0]

    def utility(p, centers):
        return (p["layers.0.weight"][:, 0, 0] == first).double()

    wire = Wire()
    out = algo.aggregate(RoundContext(round=0, seed=0, val_utility=utility), params, wire)
    for n in a:
        assert torch.allclose(out[n][0], a[n]) and torch.allclose(out[n][1], a[n])
        assert torch.allclose(out[n][2], 2 / 3 * a[n] + 1 / 3 * b[n], atol=1e-6)
    assert wire.ledger.total() == 6 * 64 + 3 * _size(module)
    assert algo.round_stats()["mean_neighbours"] == 1.0


def test_wpfed_rejects_too_many_neighbours() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.neighbours=3 must be < data\.num_centers=3"):
        _setup(WPFed(neighbours=3), [30, 10, 20])
    with pytest.raises(ValueError, match=r"algorithm\.bits"):
        WPFed(bits=0)


@pytest.mark.parametrize(
    "algo",
    [lambda: DeceFL(topology=RandomRegular(3)), lambda: DeFTA(), lambda: WPFed(neighbours=2, bits=16)],
    ids=["decefl", "defta", "wpfed"],
)
def test_two_rounds_end_to_end_on_tiny_synthetic_icu(algo) -> None:
    data = SyntheticICU(num_centers=8, num_stays=1500).build(0)
    fed = Federation(
        data,
        MortalityMLP(hidden=(16, 8)),
        algo(),
        TrainerConfig(rounds=2, batch_size=32),
        fabric=Fabric(accelerator="cpu", devices=1),
    )
    summary = fed.fit()
    assert summary["rounds"] == 2 and math.isfinite(summary["test_auroc_mean"])
    assert all(torch.isfinite(p).all() for p in fed.engine.get_params().values())
    assert summary["total_bytes"] > 0 and fed.last_result.stats["mean_neighbours"] > 0
    if isinstance(fed.algorithm, DeceFL):
        # RR3 on 8 centers: 12 edges, each carrying 2|W| per round.
        assert summary["total_bytes"] == 2 * 12 * 2 * fed.num_shared_parameters * 4
