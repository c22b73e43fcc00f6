"""Attacks from config (``wire.faults``): any-sign scales, Gaussian noise at the honest norm, label
flipping, and the sustained-attack schedule (from_round, centers as a list or a fraction, largest or
random, seeded)."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import FedAvg
from lightning_fed.comm import FaultInjection, Wire
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

SIZES = [40, 7, 130, 3, 64, 200, 18, 9]


def test_scale_minus_one_flips_the_sign() -> None:
    plan = FaultInjection(attacks=[{"kind": {"scale": -1}, "centers": [1]}])
    w = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    assert plan.corrupt_payload({"w": w}, torch.tensor([0, 1]), 7)["w"].tolist() == [[1, -2], [-3, -4]]


def test_gaussian_keeps_the_honest_norm_and_is_seeded() -> None:
    """Center 1's two tensors (norm sqrt(3^2 + 4^2 + 12^2) = 13 together) are replaced by noise of
    norm 13 over both; center 0's row is untouched; the same seed and round draw the same noise, another
    seed other noise; the integer mask travels as it is."""
    w = torch.tensor([[1.0, 1.0], [3.0, 4.0]])
    b = torch.tensor([[5.0], [12.0]])
    mask = torch.tensor([[1], [0]])
    plan = FaultInjection(corrupt={2: {1: "gaussian"}})
    plan.bind(7, torch.tensor([10, 10]))
    out = plan.corrupt_payload({"w": w, "b": b, "m": mask}, torch.tensor([0, 1]), 2)
    assert out["w"][0].tolist() == [1.0, 1.0] and out["b"][0].tolist() == [5.0]
    assert math.sqrt(float(out["w"][1].pow(2).sum() + out["b"][1].pow(2).sum())) == pytest.approx(13.0)
    assert not torch.equal(out["w"][1], w[1]) and torch.equal(out["m"], mask)
    again = plan.corrupt_payload({"w": w, "b": b, "m": mask}, torch.tensor([0, 1]), 2)
    assert torch.equal(again["w"], out["w"])
    plan.bind(8, torch.tensor([10, 10]))
    assert not torch.equal(plan.corrupt_payload({"w": w, "b": b}, torch.tensor([0, 1]), 2)["w"], out["w"])


def test_schedule_from_round_until_round_and_centers_list() -> None:
    plan = FaultInjection(
        attacks=[{"kind": {"scale": 3}, "centers": [4, 2], "from_round": 5, "until_round": 7}],
        corrupt={5: {2: "nan", 1: "inf"}},
    )
    assert plan.corruptions(4) == {}
    assert plan.corruptions(5) == {2: 3.0, 1: "inf", 4: 3.0}  # the attack overrides corrupt for 2
    assert plan.corruptions(6) == {2: 3.0, 4: 3.0}
    assert plan.corruptions(7) == {}


def test_fraction_largest_picks_the_most_rows() -> None:
    """A quarter of 8 centers is 2: the largest by training rows are 5 (200) and 2 (130)."""
    plan = FaultInjection(attacks=[{"kind": {"scale": 3}, "centers": 0.25, "pick": "largest"}])
    plan.bind(0, torch.tensor(SIZES))
    assert plan.attackers == [(2, 5)]
    assert set(plan.corruptions(0)) == {2, 5}


def test_fraction_random_is_seeded_and_rounds_to_at_least_one() -> None:
    """``random``: the same seed picks the same centers, and over seeds the picks differ; 1 % of
    8 centers rounds to 0 and is raised to 1."""

    def picked(seed: int, fraction: float) -> tuple[int, ...]:
        plan = FaultInjection(attacks=[{"kind": "gaussian", "centers": fraction, "pick": "random"}])
        plan.bind(seed, torch.tensor(SIZES))
        return plan.attackers[0]

    assert picked(3, 0.5) == picked(3, 0.5) and len(picked(3, 0.5)) == 4
    assert len({picked(s, 0.5) for s in range(6)}) > 1
    assert len(picked(0, 0.01)) == 1


@pytest.mark.parametrize(
    ("attack", "message"),
    [
        ({"centers": [1]}, r"^faults\.attacks\[0\] needs kind and centers"),
        ({"kind": "flip", "centers": [1]}, r"^faults\.attacks\[0\]\.kind must be one of"),
        ({"kind": "nan", "centers": 1.5}, r"^faults\.attacks\[0\]\.centers: a fraction must be in \(0, 1\]"),
        ({"kind": "nan", "centers": []}, r"^faults\.attacks\[0\]\.centers is empty"),
        ({"kind": "nan", "centers": [1], "pick": "smallest"}, r"^faults\.attacks\[0\]\.pick must be one of"),
        (
            {"kind": "nan", "centers": [1], "from_round": 4, "until_round": 4},
            r"until_round \(4\) must be after",
        ),
        ({"kind": "nan", "centers": [1], "start": 4}, r"^faults\.attacks\[0\]: unknown keys \['start'\]"),
        ({"kind": "nan", "centers": [-1]}, r"^faults\.attacks\[0\]\.centers: center must be a non-negative"),
    ],
)
def test_attack_validation_names_the_field(attack: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FaultInjection(attacks=[attack])


def test_attack_naming_a_missing_center_fails() -> None:
    with pytest.raises(
        ValueError, match=r"faults\.attacks\[0\]\.centers names center 9, but the federation has 8"
    ):
        FaultInjection(attacks=[{"kind": "nan", "centers": [9]}]).check(8)


class _Losses:
    """Records every round's training losses ``[C]``."""

    def __init__(self) -> None:
        self.rounds: list[torch.Tensor] = []

    def on_round_end(self, federation: Federation, result) -> None:
        self.rounds.append(result.train_loss)


def _fit(engine_cls, faults: FaultInjection | None, rounds: int = 3) -> tuple[Federation, torch.Tensor]:
    """FedAvg for ``rounds`` rounds; the federation and its losses ``[rounds, C]``."""
    losses = _Losses()
    fed = Federation(
        make_federation(SIZES),
        MortalityMLP(hidden=(8, 4), lr=0.01),
        FedAvg(),
        TrainerConfig(rounds=rounds, batch_size=16, engine=engine_cls()),
        Fabric(accelerator="cpu", devices=1, callbacks=[losses]),
        wire=Wire(faults=faults),
    )
    fed.fit()
    return fed, torch.stack(losses.rounds)


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_label_flip_trains_center_on_flipped_labels(engine_cls) -> None:
    """Center 5 flips its labels from round 1: round 0 is the clean run's; from round 1 center 5's
    loss is higher (it fits 1 - y starting from a model that fits y), and from round 1 its loss is
    the loss of a run whose stored labels of center 5 are flipped before round 1 (the engine trains
    on ``1 - y``)."""
    plan = FaultInjection(attacks=[{"kind": "label_flip", "centers": [5], "from_round": 1}])
    (_, loss_clean), (flipped, loss_flip) = _fit(engine_cls, None), _fit(engine_cls, plan)
    assert flipped.flipped == {5}
    assert torch.equal(loss_clean[0], loss_flip[0])
    assert bool((loss_flip[1:, 5] > loss_clean[1:, 5]).all())
    y = flipped.data.centers[5].y_train
    assert set(y.unique().tolist()) <= {0.0, 1.0}  # the stored data is untouched


def test_label_flip_is_the_same_on_both_engines() -> None:
    """Engine level, float64, no dropout: the packed engine flipping centers 2 and 5 before round 1
    and flipping 5 back before round 2 ends where the sequential engine given those labels by hand
    (``1 - y`` for rounds 1 and, for center 2, 2) ends."""
    gen = torch.Generator().manual_seed(0)
    sizes = [5, 17, 33, 2, 64, 40]
    train = [
        (torch.randn(n, 7, generator=gen, dtype=torch.float64), (torch.rand(n, generator=gen) < 0.4).double())
        for n in sizes
    ]
    torch.manual_seed(1)
    module = MortalityMLP(in_features=7, hidden=(8, 4), dropout=0.0).double()
    packed, sequential = PackedEngine(), SequentialEngine()
    for engine in (packed, sequential):
        engine.setup(module, train, batch_size=16, epochs=1, seed=5, dtype=torch.float64)
        engine.train_round(0)
    packed.flip_labels({2, 5})
    sequential.data = [(x, 1 - y) if c in (2, 5) else (x, y) for c, (x, y) in enumerate(sequential.data)]
    packed.train_round(1), sequential.train_round(1)
    packed.flip_labels({5})
    sequential.data[5] = (sequential.data[5][0], train[5][1].clone())
    packed.train_round(2), sequential.train_round(2)
    for name, t in packed.get_params().items():
        assert float((sequential.get_params()[name] - t).abs().max()) < 1e-10


def test_label_flip_until_round_flips_back() -> None:
    plan = FaultInjection(
        attacks=[{"kind": "label_flip", "centers": 0.25, "from_round": 1, "until_round": 2}]
    )
    fed, _ = _fit(PackedEngine, plan)
    assert fed.flipped == set()  # flipped in round 1 only, back for round 2
    assert plan.flipped(1) == {2, 5} and plan.flipped(2) == set()


def test_label_flip_on_non_binary_labels_is_one_line() -> None:
    """Refused when the federation is built, before any training."""
    data = make_federation(SIZES)
    data.centers[0].y_train[0] = 2.0
    plan = FaultInjection(attacks=[{"kind": "label_flip", "centers": [1]}])
    with pytest.raises(ValueError, match=r"^wire\.faults\.attacks\[0\]: label_flip flips binary labels"):
        Federation(
            data, MortalityMLP(hidden=(8, 4)), FedAvg(), TrainerConfig(rounds=1), wire=Wire(faults=plan)
        )


def test_attacks_from_the_config() -> None:
    """``wire.faults.attacks`` parses from YAML into the plan."""
    from lightning_fed.cli import fit_parser

    parser = fit_parser()
    cfg = parser.parse_args(
        [
            "--trainer.rounds=1",
            "--wire.faults={attacks: [{kind: {scale: -1}, centers: 0.1, pick: random, from_round: 5}, "
            "{kind: label_flip, centers: [0, 3]}]}",
        ]
    )
    plan = parser.instantiate_classes(cfg).wire.faults
    assert [a.kind for a in plan.attacks] == [-1.0, "label_flip"]
    assert (
        plan.attacks[0].fraction == 0.1
        and plan.attacks[0].pick == "random"
        and plan.attacks[0].from_round == 5
    )
    assert plan.attacks[1].centers == (0, 3)
