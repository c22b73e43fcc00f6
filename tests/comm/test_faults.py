"""Faulty centers: unavailability, dropout, corrupt payloads, divergence, and their defences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lightning_fed.algorithms import ABPS, FedAvg
from lightning_fed.comm import FaultInjection, Wire
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.models import MortalityMLP
from lightning_fed.types import RoundContext
from tests.conftest import make_federation


def _bias_utility(params: dict, centers: torch.Tensor) -> torch.Tensor:
    return params["layers.0.bias"][:, 0].double()


def _ctx(r: int) -> RoundContext:
    return RoundContext(round=r, seed=0, val_utility=_bias_utility)


def _setup(algo, values, sizes=(30, 10, 20)):
    data = make_federation(list(sizes))
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo.setup(data, module, seed=0)
    params = {n: torch.stack([torch.full_like(p, v) for v in values]) for n, p in module.named_parameters()}
    size = sum(p.numel() for p in module.parameters()) * 4
    return params, size


def _values(out: dict) -> list[list[float]]:
    """Per center, the distinct values of all its parameters."""
    flat = torch.cat([t.reshape(t.shape[0], -1) for t in out.values()], 1)
    return [row.unique().tolist() for row in flat]


def test_fedavg_unavailable_center_is_left_out_and_weights_renormalize() -> None:
    """n = (30, 10, 20), theta = (1, 5, 2), center 1 unavailable in round 0:
    average over {0, 2} = (30*1 + 20*2) / 50 = 1.4 -> centers 0 and 2 get 1.4, center 1 keeps 5;
    the ledger books one upload + one download for 0 and 2 and nothing for 1."""
    algo = FedAvg()
    params, size = _setup(algo, [1.0, 5.0, 2.0])
    wire = Wire(faults=FaultInjection(unavailable={0: [1]}))
    assert wire.available(0, 3).tolist() == [True, False, True]
    out = algo.aggregate(_ctx(0), params, wire)
    assert _values(out) == [[pytest.approx(1.4)], [5.0], [pytest.approx(1.4)]]
    assert wire.ledger.per_center(3).tolist() == [2 * size, 0, 2 * size]
    assert wire.rejected_total() == 0
    # Round 1: everyone is back: (30*1 + 10*5 + 20*2) / 60 = 2.0.
    out = algo.aggregate(_ctx(1), params, wire)
    assert _values(out) == [[pytest.approx(2.0)]] * 3
    assert wire.ledger.per_center(3, 1).tolist() == [2 * size] * 3


def test_dropout_is_for_good() -> None:
    """Center 2 drops out from round 1: round 0 averages all three, rounds 1 and 2 only {0, 1}:
    (30*1 + 10*5) / 40 = 2.0, and center 2 keeps its 2.0 with no bytes after round 0."""
    faults = FaultInjection(dropout={2: 1})
    assert [faults.available(r, 3).tolist() for r in range(3)] == [
        [True, True, True],
        [True, True, False],
        [True, True, False],
    ]
    algo = FedAvg()
    params, size = _setup(algo, [1.0, 5.0, 2.0])
    wire = Wire(faults=faults)
    for r in (1, 2):
        out = algo.aggregate(_ctx(r), params, wire)
        assert _values(out) == [[pytest.approx(2.0)], [pytest.approx(2.0)], [2.0]]
        assert wire.ledger.per_center(3, r).tolist() == [2 * size, 2 * size, 0]


@pytest.mark.parametrize("kind", ["nan", "inf", "huge"])
def test_fedavg_server_rejects_a_corrupt_upload(kind: str) -> None:
    """Center 1 sends a corrupt upload in round 0: the server drops it and averages {0, 2}, 1.4; every
    center (1 included: its download is sound) ends with finite 1.4; the rejected bytes stay booked."""
    algo = FedAvg()
    params, size = _setup(algo, [1.0, 5.0, 2.0])
    wire = Wire(faults=FaultInjection(corrupt={0: {1: kind}}))
    out = algo.aggregate(_ctx(0), params, wire)
    assert all(torch.isfinite(t).all() for t in out.values())
    assert _values(out) == [[pytest.approx(1.4)]] * 3
    assert wire.rejected_in(0) == 1 and wire.rejected_total() == 1
    assert wire.ledger.per_center(3).tolist() == [2 * size] * 3


@pytest.mark.parametrize("kind", ["nan", "inf", "huge"])
def test_abps_receiver_averages_only_accepted_partners(kind: str) -> None:
    """P = {0: [1, 2], 1: [0], 2: [0]}, n = (30, 10, 20), theta = (1, 5, 2), center 1 corrupt:
    center 0 rejects 1 and averages itself with 2: (30*1 + 20*2) / 50 = 1.4; center 1 gets
    (10*5 + 30*1) / 40 = 2.0; center 2 gets (20*2 + 30*1) / 50 = 1.4. One rejection; 4 messages booked."""
    algo = ABPS()
    params, size = _setup(algo, [1.0, 5.0, 2.0])
    algo.selector.select = lambda round_idx: [[1, 2], [0], [0]]
    wire = Wire(faults=FaultInjection(corrupt={0: {1: kind}}))
    out = algo.aggregate(_ctx(0), params, wire)
    assert all(torch.isfinite(t).all() for t in out.values())
    assert _values(out) == [[pytest.approx(1.4)], [pytest.approx(2.0)], [pytest.approx(1.4)]]
    assert wire.rejected_in(0) == 1
    assert wire.ledger.total() == 4 * size
    # No Shapley observation of the rejected sender by center 0.
    assert algo.selector.posterior.count[0, 1] == 0 and algo.selector.posterior.count[0, 2] == 1


def test_abps_unavailable_center_is_never_partnered() -> None:
    """Center 1 is unavailable in rounds 0-2: it is in no partner set, keeps its parameters, books no
    bytes and gets no observation; centers 0 and 2 still pair (Beta(1, 1) prior: UCB >= tau_acc)."""
    algo = ABPS()
    params, _ = _setup(algo, [1.0, 5.0, 2.0])
    wire = Wire(faults=FaultInjection(unavailable={0: [1], 1: [1], 2: [1]}))
    for r in range(3):
        out = algo.aggregate(_ctx(r), params, wire)
        assert algo.last_partners == [[2], [], [0]]
        assert _values(out)[1] == [5.0]
    assert wire.ledger.per_center(3)[1] == 0
    count = algo.selector.posterior.count
    assert count[1].sum() == 0 and count[:, 1].sum() == 0 and count[0, 2] == 3


def test_abps_descriptor_that_did_not_arrive_is_published_when_the_center_is_back() -> None:
    """Goal filter keeping all pairs, center 1 unavailable at publication (round 0): three
    descriptors of 3 float32 are booked in round 0 and center 1 is nobody's candidate that round; in
    round 1 it publishes (its descriptor is booked in round 1) and every pair is a candidate."""
    from lightning_fed.selection.abps import BayesianSelector, GoalFilter

    algo = ABPS(selector=BayesianSelector(filter=GoalFilter(keep_fraction=1.0, metadata_dim=3)))
    params, _ = _setup(algo, [1.0, 5.0, 2.0, 3.0], sizes=(30, 10, 20, 40))
    algo.selector.select = lambda round_idx, available=None: [[], [], [], []]
    wire = Wire(faults=FaultInjection(unavailable={0: [1]}))
    algo.aggregate(_ctx(0), params, wire)
    assert wire.ledger.round_total(0) == 3 * 3 * 4
    cand = algo.selector.candidates
    assert cand[1].sum() == 0 and cand[:, 1].sum() == 0 and cand.sum() == 6
    algo.aggregate(_ctx(1), params, wire)
    assert wire.ledger.round_total(1) == 3 * 4 and wire.ledger.per_center(4, 1).tolist() == [0, 12, 0, 0]
    assert torch.equal(algo.selector.candidates, ~torch.eye(4, dtype=torch.bool))
    algo.aggregate(_ctx(2), params, wire)
    assert wire.ledger.round_total(2) == 0  # each descriptor crosses the wire once


def _corrupt_record(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[3] = float("inf")
    return x


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_engines_contain_a_diverging_center(engine_cls) -> None:
    """One of center 1's rows is a corrupt record (+Inf features): its loss turns NaN, so it is rolled
    back to its start (loss NaN, flagged, Adam step count 0); centers 0 and 2 end exactly where they
    end when center 1's data are sound."""
    data = make_federation([40, 30, 20])
    train = [(c.x_train, c.y_train) for c in data.centers]
    bad = [train[0], (_corrupt_record(train[1][0]), train[1][1]), train[2]]
    results = []
    for sets in (train, bad):
        torch.manual_seed(0)
        module = MortalityMLP(in_features=data.num_features, hidden=(8, 4))
        engine = engine_cls()
        engine.setup(module, sets, batch_size=16, epochs=2, seed=0)
        start = engine.get_params()
        loss = engine.train_round(0)
        results.append((start, engine.get_params(), loss, engine.last_diverged))
    (_, clean, clean_loss, clean_div), (start, faulty, loss, diverged) = results
    assert clean_div.tolist() == [False, False, False] and diverged.tolist() == [False, True, False]
    assert torch.isnan(loss[1]) and torch.equal(loss[[0, 2]], clean_loss[[0, 2]])
    for name in clean:
        assert torch.equal(faulty[name][1], start[name][1])
        assert torch.equal(faulty[name][[0, 2]], clean[name][[0, 2]])
    if engine_cls is SequentialEngine:
        return
    opt = engine.state_dict()["optimizer"]
    assert opt["step"][1] == 0 and bool((opt["step"][[0, 2]] > 0).all())
    assert all(torch.isfinite(t).all() for t in opt.values() if t.is_floating_point())


def test_federation_reports_divergence_and_keeps_everyone_finite() -> None:
    from lightning.fabric import Fabric

    from lightning_fed.data.center import CenterData, FederatedData
    from lightning_fed.federation import Federation
    from lightning_fed.types import TrainerConfig

    data = make_federation([40, 30, 20, 25])
    c = data.centers[1]
    huge = CenterData(
        c.name, _corrupt_record(c.x_train), c.y_train, c.x_val, c.y_val, c.x_test, c.y_test, c.metadata
    )
    data = FederatedData((data.centers[0], huge, *data.centers[2:]), data.feature_names)
    faults = FaultInjection(corrupt={1: {3: "nan"}})
    fed = Federation(
        data,
        MortalityMLP(hidden=(8, 4)),
        FedAvg(),
        TrainerConfig(rounds=2, local_epochs=1, batch_size=16),
        fabric=Fabric(accelerator="cpu", devices=1),
        wire=Wire(faults=faults),
    )
    summary = fed.fit()
    stats = fed.last_result.stats
    assert stats["diverged_centers"] == 1 and stats["rejected_payloads"] == 1
    assert summary["diverged_center_rounds"] == 2 and summary["rejected_payloads"] == 1
    assert all(torch.isfinite(t).all() for t in fed.engine.get_params().values())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"unavailable": {-1: [0]}}, "faults.unavailable: round"),
        ({"unavailable": {0: 3}}, "faults.unavailable must map a round to a list"),
        ({"unavailable": {0: ["x"]}}, r"faults.unavailable\[0\]: center"),
        ({"corrupt": {0: {1: "zero"}}}, r"faults.corrupt\[0\]\[1\] must be one of"),
        ({"corrupt": {0: [1]}}, r"faults.corrupt\[0\] must be a mapping"),
        ({"corrupt": {"a": {1: "nan"}}}, "faults.corrupt: round"),
        ({"dropout": {0: -2}}, r"faults.dropout\[0\]: round"),
        ({"dropout": [0]}, "faults.dropout must be a mapping"),
    ],
)
def test_config_validation_names_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FaultInjection(**kwargs)


def test_plan_naming_a_missing_center_fails() -> None:
    FaultInjection(dropout={2: 1}).check(3)
    with pytest.raises(ValueError, match=r"faults\.dropout names center 3, but the federation has 3"):
        FaultInjection(dropout={3: 1}).check(3)
    with pytest.raises(ValueError, match=r"faults\.corrupt names center 5"):
        FaultInjection(corrupt={0: {5: "inf"}}).check(3)


def test_wire_validation_thresholds() -> None:
    """Own norm 2 (four entries of 1), max_norm_ratio 10: norm 20 passes, 20.000001 and NaN do not;
    a zero own norm skips the norm test."""
    wire = Wire(max_norm_ratio=10.0)
    own = {"w": torch.ones(3, 4)}
    received = {"w": torch.tensor([[10.0] * 4, [10.000001] * 4, [float("nan"), 0.0, 0.0, 0.0]])}
    assert wire.accept(received, own, 5).tolist() == [True, False, False]
    assert wire.accept({"w": torch.full((1, 4), 1e9)}, {"w": torch.zeros(1, 4)}, 5).tolist() == [True]
    assert wire.rejected_in(5) == 2
    with pytest.raises(ValueError, match="max_norm_ratio"):
        Wire(max_norm_ratio=0.0)


@pytest.mark.cli
def test_cli_fit_with_faults_yaml(tmp_path: Path) -> None:
    from lightning_fed.cli import main

    config = tmp_path / "faults.yaml"
    config.write_text("faults:\n  unavailable: {1: [0, 5]}\n  corrupt: {2: {2: nan}}\n  dropout: {7: 1}\n")
    main(
        [
            "fit",
            "--config",
            str(config),
            "--data.class_path=lightning_fed.data.SyntheticICU",
            "--data.init_args.num_centers=8",
            "--data.init_args.num_stays=1200",
            "--model.init_args.hidden=[16, 8]",
            "--trainer.rounds=3",
            "--logger.enabled=false",
            f"--output.root={tmp_path}",
            "--output.name=run",
            "--output.progress_bar=false",
        ]
    )
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["rejected_payloads"] == 1
    import polars as pl

    rounds = pl.read_parquet(tmp_path / "run" / "rounds.parquet")
    per_round = rounds.group_by("round").agg(pl.col("unavailable_centers").first()).sort("round")
    assert per_round["unavailable_centers"].to_list() == [0, 3, 1]
    byte_rows = rounds.filter(pl.col("round") == 1).sort("center")["bytes"].to_list()
    assert byte_rows[0] == byte_rows[5] == byte_rows[7] == 0 and byte_rows[1] > 0
    assert "faults:" in (tmp_path / "run" / "config.yaml").read_text()
    main(["test", "--run-dir", str(tmp_path / "run")])  # the dumped config parses back


def test_abps_with_ten_percent_of_centers_unavailable_every_round() -> None:
    """20 centers, 2 (10 %) unavailable in each of 4 rounds: ABPS runs, an unavailable center is never
    a partner that round, books no bytes that round, and the ledger equals 2 messages per partnership."""
    import numpy as np
    from lightning.fabric import Fabric

    from lightning_fed.algorithms import ABPS
    from lightning_fed.callbacks import Callback
    from lightning_fed.comm import FaultInjection, Wire
    from lightning_fed.federation import Federation
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig
    from tests.conftest import make_federation

    rng = np.random.default_rng(0)
    down = {r: sorted(rng.choice(20, 2, replace=False).tolist()) for r in range(4)}

    class Partners(Callback):
        def __init__(self) -> None:
            self.rounds: list[list[list[int]]] = []

        def on_round_end(self, federation, result) -> None:
            self.rounds.append([list(p) for p in federation.algorithm.last_partners])

    seen = Partners()
    data = make_federation([30 + 3 * i for i in range(20)])
    wire = Wire(faults=FaultInjection(unavailable=down))
    fed = Federation(
        data,
        MortalityMLP(hidden=(8, 4)),
        ABPS(),
        TrainerConfig(rounds=4, batch_size=16),
        Fabric(accelerator="cpu", devices=1, callbacks=[seen]),
        wire=wire,
    )
    fed.fit()
    message = fed.num_shared_parameters * 4
    for r, partners in enumerate(seen.rounds):
        for c in down[r]:
            assert partners[c] == [] and all(c not in p for p in partners)
            assert int(wire.ledger.per_center(20, r)[c]) == 0
        edges = sum(len(p) for p in partners) // 2
        assert edges > 0 and wire.ledger.round_total(r) == 2 * edges * message
