"""Robust aggregators (lightning_fed.aggregation.robust) against hand computations on 3-5 small
vectors, the default's bit-identity with the methods' own average, packed == sequential, the config
key, and the one-line refusals."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.aggregation import (
    CenteredClipping,
    CoordinateMedian,
    Krum,
    TrimmedMean,
    WeightedMean,
    mix_received,
    renormalize,
    sample_weights,
    weighted_average,
)
from lightning_fed.aggregation.robust import Aggregator, aggregator_from
from lightning_fed.algorithms import ABPS, BNNFedAvg, DeceFL, Ditto, FedAvg, FedBN, FedDyn, FedProx, FedRep
from lightning_fed.comm import Wire
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.graphs import Path, metropolis_weights
from lightning_fed.models import MortalityMLP
from lightning_fed.types import RoundContext, TrainerConfig
from tests.conftest import make_federation

D = torch.float64
CTX = RoundContext(round=0, seed=0, val_utility=lambda params, centers: centers.double())

#: Five models of two tensors: "a" is [5, 2] (columns below), "b" is [5, 1, 1].
A = torch.tensor([[3.0, 9.0], [1.0, 2.0], [4.0, 6.0], [1.0, 5.0], [5.0, 3.0]], dtype=D)
B = torch.tensor([0.0, 1.0, 2.0, 10.0, 100.0], dtype=D).view(5, 1, 1)
ROWS = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0], dtype=D)


def _models(k: int) -> dict[str, torch.Tensor]:
    return {"a": A[:k], "b": B[:k]}


def _ref(k: int = 5) -> dict[str, torch.Tensor]:
    return {n: torch.zeros(1, *t.shape[1:], dtype=D) for n, t in _models(k).items()}


def test_median_of_odd_and_even_counts_ignores_rows() -> None:
    """a's columns (3, 1, 4, 1, 5) and (9, 2, 6, 5, 3): sorted (1, 1, 3, 4, 5) and (2, 3, 5, 6, 9),
    medians 3 and 5; b = (0, 1, 2, 10, 100): 2. The first four, even: (1, 1, 3, 4) -> (1 + 3)/2 = 2,
    (2, 5, 6, 9) -> 5.5, b (0, 1, 2, 10) -> 1.5. Rows change nothing (every center one vote)."""
    odd = CoordinateMedian()(_models(5), ROWS, _ref())
    assert odd["a"].tolist() == [[3.0, 5.0]] and odd["b"].tolist() == [[[2.0]]]
    even = CoordinateMedian()(_models(4), torch.tensor([1.0, 1e6, 1.0, 1.0]), _ref(4))
    assert even["a"].tolist() == [[2.0, 5.5]] and even["b"].tolist() == [[[1.5]]]


def test_trimmed_mean_drops_floor_beta_k_per_side() -> None:
    """beta = 0.2, k = 5: b = 1 per side: a -> ((1 + 3 + 4)/3, (3 + 5 + 6)/3) = (8/3, 14/3), b -> (1 + 2 +
    10)/3 = 13/3. k = 4: floor(0.8) = 0, the unweighted mean a = (9/4, 22/4). beta = 0.4, k = 5: b = 2,
    the median."""
    five = TrimmedMean(0.2)(_models(5), ROWS, _ref())
    assert torch.allclose(five["a"], torch.tensor([[8 / 3, 14 / 3]], dtype=D), atol=0, rtol=1e-15)
    assert torch.allclose(five["b"], torch.tensor([[[13 / 3]]], dtype=D), atol=0, rtol=1e-15)
    four = TrimmedMean(0.2)(_models(4), ROWS[:4], _ref(4))
    assert four["a"].tolist() == [[9 / 4, 22 / 4]]
    median = TrimmedMean(0.4)(_models(5), ROWS, _ref())
    assert median["a"].tolist() == CoordinateMedian()(_models(5), ROWS, _ref())["a"].tolist()


def test_krum_picks_the_hand_computed_model_and_multi_krum_averages_by_rows() -> None:
    """One-tensor models x = (0, 1, 2, 10, 100), f = 1: q = 5 - 1 - 2 = 2 nearest. Squared distances:
    x=0: 1, 4 -> 5; x=1: 1, 1 -> 2; x=2: 1, 4 -> 5; x=10: 64, 81 -> 145; x=100: 8100, 8281. Krum
    returns x = 1; Multi-Krum m = 3 the scores 2, 5, 5 = models (1, 0, 2) with rows (20, 10, 30):
    (20*1 + 10*0 + 30*2) / 60 = 4/3."""
    models = {"b": B}
    assert Krum(f=1)(models, ROWS, {"b": B[:1]})["b"].item() == 1.0
    assert Krum(f=1, m=3)(models, ROWS, {"b": B[:1]})["b"].item() == pytest.approx(4 / 3, rel=1e-15)
    assert Krum(f=1).select(B.reshape(5, 1)).tolist() == [1]


def test_krum_reads_the_whole_model_and_reduces_to_the_weighted_mean() -> None:
    """With both tensors, model j is the vector (a_j, b_j): (3, 9, 0), (1, 2, 1), (4, 6, 2), (1, 5, 10),
    (5, 3, 100). Squared distances d01 = 4 + 49 + 1 = 54, d02 = 1 + 9 + 4 = 14, d12 = 9 + 16 + 1 = 26,
    d23 = 9 + 1 + 64 = 74, d13 = 0 + 9 + 81 = 90; f = 1, q = 2: scores 14 + 54 = 68, 26 + 54 = 80,
    14 + 26 = 40, 74 + 90 = 164, and model 4's > 8000: Krum picks model 2 (b alone would pick model
    1). Multi-Krum with m >= k selects everyone: the row-weighted mean."""
    got = Krum(f=1)(_models(5), ROWS, _ref())
    assert got["a"].tolist() == [[4.0, 6.0]] and got["b"].item() == 2.0
    everyone = Krum(f=0, m=9)(_models(5), ROWS, _ref())
    mean = weighted_average(_models(5), sample_weights(ROWS))
    assert all(torch.allclose(everyone[n], mean[n], rtol=1e-14, atol=0) for n in mean)


def test_krum_with_fewer_models_than_its_guarantee_is_still_defined() -> None:
    """k = 2 with f = 1: q cut to 1, equal scores, the earlier model (a receiver's own) wins; k = 1:
    that model."""
    two = {"b": torch.tensor([3.0, 7.0], dtype=D).view(2, 1)}
    assert Krum(f=1)(two, torch.ones(2, dtype=D), {"b": two["b"][:1]})["b"].item() == 3.0
    one = {"b": torch.tensor([[5.0]], dtype=D)}
    assert Krum(f=3)(one, torch.ones(1, dtype=D), one)["b"].item() == 5.0


def test_centered_clipping_steps_and_fixed_point() -> None:
    """x = (0, 0, 10), uniform weights, tau = 1, v_0 = 0. Step: v <- v + (1/3)(-v - v + 1) while
    0 <= v < 1 (the far model is clipped to +1), so v_l = 1/2 - (1/2)(1/3)^l: v_1 = 1/3, v_2 = 4/9, and
    the fixed point solves 2 (-v) + 1 = 0: v* = 1/2."""
    models = {"t": torch.tensor([0.0, 0.0, 10.0], dtype=D).view(3, 1)}
    ones, zero = torch.ones(3, dtype=D), {"t": torch.zeros(1, 1, dtype=D)}
    for iters, expected in ((1, 1 / 3), (2, 4 / 9), (60, 0.5)):
        got = CenteredClipping(tau=1.0, iters=iters)(models, ones, zero)["t"].item()
        assert got == pytest.approx(expected, rel=1e-14)


def test_centered_clipping_with_a_large_radius_is_the_weighted_mean() -> None:
    """tau above every distance: nothing is clipped, so one step from any v_0 is sum_j w_j theta_j
    (rows 10..50 over a and b)."""
    got = CenteredClipping(tau=1e6, iters=1)(_models(5), ROWS, _ref())
    mean = weighted_average(_models(5), sample_weights(ROWS))
    assert all(torch.allclose(got[n], mean[n], rtol=1e-13, atol=1e-13) for n in mean)


def test_centered_clipping_clips_the_whole_model_from_the_reference() -> None:
    """Two models (3, 4) and (0, 0) as two tensors, weights (1, 1), v_0 = (0, 0), tau = 1: the first
    is at distance 5, clipped to (0.6, 0.8); one step: v = (0.3, 0.4)."""
    models = {"x": torch.tensor([[3.0], [0.0]], dtype=D), "y": torch.tensor([[4.0], [0.0]], dtype=D)}
    ref = {"x": torch.zeros(1, 1, dtype=D), "y": torch.zeros(1, 1, dtype=D)}
    got = CenteredClipping(tau=1.0, iters=1)(models, torch.ones(2, dtype=D), ref)
    assert got["x"].item() == pytest.approx(0.3) and got["y"].item() == pytest.approx(0.4)


def _const(module, values) -> dict[str, torch.Tensor]:
    return {n: torch.stack([torch.full_like(p, v) for v in values]) for n, p in module.named_parameters()}


def _random(module, centers: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {n: torch.randn(centers, *p.shape, generator=gen) for n, p in module.named_parameters()}


def test_weighted_mean_is_fedavg_bit_for_bit() -> None:
    """FedAvg's server with the default and with WeightedMean given returns exactly the FedAvg average
    ``weighted_average(uploads, n_j / n)`` that it computed before aggregators existed."""
    data = make_federation([30, 10, 20, 7])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    params = _random(module, 4)
    expected = weighted_average(params, sample_weights(data.n_train))
    for algo in (FedAvg(), FedAvg(aggregator=WeightedMean())):
        algo.setup(data, module)
        out = algo.aggregate(CTX, params, Wire())
        assert all(torch.equal(out[n], expected[n].expand_as(out[n])) for n in out)


def test_weighted_mean_at_receivers_is_the_metropolis_mix_bit_for_bit() -> None:
    """DeceFL on the path 0-1-2 with the default: the renormalized Metropolis mix_received."""
    data = make_federation([30, 10, 20])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    params = _random(module, 3)
    algo = DeceFL(topology=Path(), aggregator=WeightedMean())
    algo.setup(data, module)
    out = algo.aggregate(CTX, params, Wire())
    w, (src, dst) = metropolis_weights(algo.graph), algo.round_edges(Wire(), 0)  # the dense matrix
    expected = mix_received(params, {n: t[src] for n, t in params.items()}, dst, w.diagonal(), w[dst, src])
    assert all(torch.equal(out[n], expected[n]) for n in out)


def test_receivers_aggregate_themselves_and_what_they_accepted() -> None:
    """DeceFL on the path 0-1-2 with the median, scalars theta = (3, 6, 100) and no norm test (it would
    reject 100 at center 1): center 0 has (3, 6) ->
    4.5, center 1 has (6, 3, 100) -> 6, center 2 has (100, 6) -> 53. The base loop with WeightedMean's
    rule equals the linear mix up to rounding."""
    data = make_federation([30, 10, 20])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    params = _const(module, [3.0, 6.0, 100.0])
    algo = DeceFL(topology=Path(), aggregator=CoordinateMedian())
    algo.setup(data, module)
    out = algo.aggregate(CTX, params, Wire(max_norm_ratio=math.inf))
    assert out["layers.0.weight"][:, 0, 0].tolist() == [4.5, 6.0, 53.0]
    src, dst = torch.tensor([1, 0, 2, 1]), torch.tensor([0, 1, 1, 2])
    received = {n: t[src] for n, t in _random(module, 3).items()}
    own = _random(module, 3, seed=1)
    a, b = renormalize(torch.ones(3, dtype=D), torch.tensor([2.0, 1.0, 3.0, 1.0], dtype=D), dst)

    class Looped(Aggregator):
        def __call__(self, stacked, weights, reference):
            return WeightedMean()(stacked, weights, reference)

    looped = Looped().mix_received(own, received, dst, a, b)
    linear = mix_received(own, received, dst, a, b)
    assert all(torch.allclose(looped[n], linear[n], rtol=1e-6, atol=1e-6) for n in own)


def test_a_receiver_without_messages_keeps_its_model() -> None:
    own = {"t": torch.tensor([[1.0], [2.0], [3.0]], dtype=D)}
    out = CoordinateMedian().mix_received(
        own,
        {"t": torch.tensor([[9.0]], dtype=D)},
        torch.tensor([2]),
        torch.ones(3, dtype=D),
        torch.ones(1, dtype=D),
    )
    assert out["t"].reshape(-1).tolist() == [1.0, 2.0, 6.0]


def _fit(algo, engine) -> dict[str, torch.Tensor]:
    data = make_federation([12, 5, 20, 9, 7])
    fed = Federation(
        data,
        MortalityMLP(in_features=data.num_features, hidden=(4,), dropout=0.0),
        algo,
        TrainerConfig(rounds=2, local_epochs=1, batch_size=4, engine=engine),
        fabric=Fabric(accelerator="cpu", devices=1, precision="64-true"),
        seed=0,
    )
    fed.fit()
    return fed.engine.get_params()


@pytest.mark.parametrize(
    "make",
    [
        lambda: FedAvg(aggregator=Krum(f=1, m=2)),
        lambda: FedAvg(aggregator=CenteredClipping(tau=0.5)),
        lambda: DeceFL(aggregator=TrimmedMean(0.2)),
        lambda: ABPS(aggregator=CoordinateMedian()),
    ],
    ids=["fedavg-krum", "fedavg-clipping", "decefl-trimmed", "abps-median"],
)
def test_packed_equals_sequential_with_a_robust_aggregator(make) -> None:
    """Two rounds on 5 centers in float64: the packed engine's models equal the sequential one's."""
    packed, sequential = _fit(make(), PackedEngine()), _fit(make(), SequentialEngine())
    for name, t in packed.items():
        assert float((sequential[name] - t).abs().max()) < 1e-10, name


def test_a_robust_server_changes_the_model_the_average_sends() -> None:
    """Not a no-op: the median's FedAvg run differs from the default's (same seed)."""
    default, median = (
        _fit(FedAvg(), PackedEngine()),
        _fit(FedAvg(aggregator=CoordinateMedian()), PackedEngine()),
    )
    assert any(not torch.equal(default[n], median[n]) for n in default)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: TrimmedMean(beta=0.5), "aggregator.init_args.beta must be < 0.5"),
        (lambda: TrimmedMean(beta=-0.1), "aggregator.init_args.beta must be >= 0"),
        (lambda: Krum(f=-1), "aggregator.init_args.f must be >= 0"),
        (lambda: Krum(m=0), "aggregator.init_args.m must be >= 1"),
        (lambda: Krum(f=1.5), "aggregator.init_args.f must be an integer"),
        (lambda: CenteredClipping(tau=0.0), "aggregator.init_args.tau must be > 0"),
        (lambda: CenteredClipping(tau=float("inf")), "aggregator.init_args.tau must be > 0"),
        (lambda: CenteredClipping(iters=0), "aggregator.init_args.iters must be >= 1"),
        (lambda: aggregator_from("median"), "algorithm.init_args.aggregator must be an Aggregator"),
    ],
)
def test_bad_arguments_are_one_line_naming_the_field(make, field: str) -> None:
    with pytest.raises(ValueError, match=field) as err:
        make()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("cls", [FedDyn, BNNFedAvg])
def test_methods_with_their_own_server_rule_refuse_an_aggregator(cls) -> None:
    with pytest.raises(
        ValueError, match=f"algorithm.init_args.aggregator .* is not supported by {cls.__name__}"
    ) as err:
        cls(aggregator=CoordinateMedian())
    assert "\n" not in str(err.value)
    assert cls().aggregator.__class__ is WeightedMean  # nothing given: accepted


def test_the_aggregator_is_chosen_by_class_path_in_a_config(capsys: pytest.CaptureFixture) -> None:
    """``algorithm.init_args.aggregator`` from the command line builds the aggregator with its
    arguments; under FedDyn the same key ends in one line (exit 2)."""
    from lightning_fed.commands.common import instantiate
    from lightning_fed.fit_parser import fit_parser

    parser = fit_parser()
    cfg = parser.parse_args(
        [
            "--config=configs/fedavg.yaml",
            "--algorithm.init_args.aggregator=lightning_fed.aggregation.Krum",
            "--algorithm.init_args.aggregator.init_args.f=2",
        ]
    )
    algo = instantiate(parser, cfg).algorithm
    assert isinstance(algo.aggregator, Krum) and (algo.aggregator.f, algo.aggregator.m) == (2, 1)
    cfg = parser.parse_args(
        [
            "--config=configs/feddyn.yaml",
            "--algorithm.init_args.aggregator=lightning_fed.aggregation.CoordinateMedian",
        ]
    )
    with pytest.raises(SystemExit) as exit_:
        instantiate(parser, cfg)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not supported by FedDyn" in err


def test_a_config_without_the_key_keeps_its_fingerprint() -> None:
    """``aggregator: null`` (the default every older config resolves to) is left out of the
    fingerprint (``ADDED_LATER``), so runs from before the key resume; an aggregator changes it."""
    from lightning_fed.fit_parser import fit_parser
    from lightning_fed.runfolder.fingerprint import config_fingerprint

    parser = fit_parser()
    now = parser.parse_args(["--config=configs/fedavg.yaml"]).as_dict()
    assert now["algorithm"]["init_args"]["aggregator"] is None
    before = {**now, "algorithm": {**now["algorithm"], "init_args": dict(now["algorithm"]["init_args"])}}
    del before["algorithm"]["init_args"]["aggregator"]
    assert config_fingerprint(now) == config_fingerprint(before)
    krum = parser.parse_args(
        ["--config=configs/fedavg.yaml", "--algorithm.init_args.aggregator=lightning_fed.aggregation.Krum"]
    )
    assert config_fingerprint(krum.as_dict()) != config_fingerprint(now)


def _norm_under_attack(aggregator, attack: bool) -> float:
    """FedAvg on 8 centers, 8 rounds; with ``attack`` the largest center (200 of 471 rows) sends 3x
    its model every round (a ratio of 3 passes the wire's test); the final mean model norm."""
    from lightning_fed.comm.faults import FaultInjection

    data = make_federation([40, 7, 130, 3, 64, 200, 18, 9])
    plan = FaultInjection(attacks=[{"kind": {"scale": 3.0}, "centers": [5]}]) if attack else None
    fed = Federation(
        data,
        MortalityMLP(in_features=data.num_features, hidden=(8, 4), lr=0.01),
        FedAvg(aggregator=aggregator),
        TrainerConfig(rounds=8, batch_size=16),
        fabric=Fabric(accelerator="cpu", devices=1),
        wire=Wire(faults=plan),
        seed=0,
    )
    fed.fit()
    params = fed.engine.get_params()
    norms = torch.sqrt(sum(t.double().reshape(len(t), -1).pow(2).sum(1) for t in params.values()))
    return float(norms.mean())


def test_a_sustained_3x_attack_from_the_largest_center_grows_the_weighted_mean() -> None:
    """The reference for the test below: under the default the largest center's 3x carries 42 % of
    the weight, so the model grows every round (measured: mean norm 3.69 clean, 327 attacked)."""
    assert _norm_under_attack(None, True) > 10 * _norm_under_attack(None, False)


@pytest.mark.parametrize(
    "make",
    [CoordinateMedian, lambda: TrimmedMean(0.2), lambda: Krum(f=1, m=4), lambda: CenteredClipping(0.5)],
    ids=["median", "trimmed", "krum", "clipping"],
)
def test_a_sustained_3x_attack_from_the_largest_center_stays_bounded(make) -> None:
    """Each robust aggregator keeps the attacked model's norm within 2x of its clean run's (the
    issue's bound; measured clean / attacked: median 2.58 / 2.70, trimmed 2.86 / 3.12, Krum 2.28 /
    2.28, clipping tau = 0.5 3.69 / 5.26)."""
    assert _norm_under_attack(make(), True) < 2 * _norm_under_attack(make(), False)


@pytest.mark.parametrize("cls", [FedProx, Ditto, FedRep, FedBN])
def test_fedavg_family_servers_take_the_aggregator(cls) -> None:
    """The methods that keep FedAvg's server rule (they do not override ``server_model``) pass
    ``aggregator`` to it."""
    median = CoordinateMedian()
    assert cls.server_model is FedAvg.server_model and cls(aggregator=median).aggregator is median
    assert isinstance(cls().aggregator, WeightedMean)


@pytest.mark.parametrize("cls", [FedProx, FedRep])
def test_a_fedavg_family_server_computes_the_median(cls) -> None:
    """Constant uploads (1, 5, 2, 3) with rows (30, 10, 20, 7): the median 2.5 on every shared tensor
    (the weighted mean would be 141/67 = 2.10)."""
    data = make_federation([30, 10, 20, 7])
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo = cls(aggregator=CoordinateMedian())
    algo.setup(data, module)
    params = algo.shared(_const(module, [1.0, 5.0, 2.0, 3.0]))
    out = algo.server_model(params, torch.arange(4), CTX)
    assert out and all(torch.equal(t, torch.full_like(t, 2.5)) for t in out.values())
