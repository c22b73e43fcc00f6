"""Round-indexed learning-rate schedules and per-round optimizer resets, in every engine.

The schedule's values are checked against hand computations; the packed engine against the
sequential reference (float64, SGD with momentum and Adam); the reset by showing that round ``r``
then no longer depends on the optimizer state round ``r - 1`` left; the sharded engine and a resume
by bit equality; the defaults by bit equality with an explicit :class:`Constant`; and the CLI by a
one-round fit with ``trainer.lr_schedule`` chosen by ``class_path``.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from lightning_fed.algorithms import FedAvg
from lightning_fed.cli import fit_parser, main
from lightning_fed.distributed.engine import ShardedEngine
from lightning_fed.engine import Constant, Cosine, Engine, LRSchedule, PackedEngine, SequentialEngine, Step
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.runfolder import fingerprinted
from lightning_fed.types import TrainerConfig
from tests.cli.test_cli import TINY
from tests.conftest import make_federation

# Three centers of uneven sizes (batch 8, 2 epochs: 2, 6 and 10 steps; short last batches).
SIZES = [5, 23, 37]
BATCH = 8


class SGDMomentumMLP(MortalityMLP):
    """The MLP trained with the EdgeDRM paper's optimizer: SGD, momentum 0.9, weight decay 5e-4."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)


def _train_sets(dtype: torch.dtype = torch.float64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(n, 7, generator=gen, dtype=dtype), (torch.rand(n, generator=gen) < 0.4).to(dtype))
        for n in SIZES
    ]


def _module(sgd: bool) -> MortalityMLP:
    torch.manual_seed(1)
    cls = SGDMomentumMLP if sgd else MortalityMLP
    return cls(in_features=7, hidden=(16, 8), dropout=0.0, lr=1e-2).to(torch.float64)


def _engine(
    kind: str, module: MortalityMLP, schedule: LRSchedule | None, reset: bool, **kwargs: Any
) -> Engine:
    engine: Engine = PackedEngine() if kind == "packed" else SequentialEngine()
    engine.setup(
        module,
        kwargs.pop("train", _train_sets()),
        batch_size=BATCH,
        epochs=2,
        seed=5,
        dtype=torch.float64,
        lr_schedule=schedule,
        reset_optimizer_each_round=reset,
        **kwargs,
    )
    return engine


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


# --- the schedules' values -------------------------------------------------------------------


def test_cosine_values_hand_computed_small_horizon() -> None:
    """``H = 4``: factor(t) = (1 + cos(pi t / 4)) / 2 at the 0-based round t = r - 1.

    r = 1 (t = 0): (1 + cos 0) / 2 = 1.
    r = H/2 = 2 (t = 1): (1 + cos(pi/4)) / 2 = (1 + sqrt(2)/2) / 2 = 0.853553...
    r = H/2 + 1 = 3 (t = 2): (1 + cos(pi/2)) / 2 = 1/2.
    r = H = 4 (t = 3): (1 + cos(3 pi/4)) / 2 = (1 - sqrt(2)/2) / 2 = 0.146446...
    r = H + 1 = 5 (t = 4): (1 + cos pi) / 2 = 0; and past the horizon (t = 5, 9) it stays 0.
    """
    s = Cosine(horizon=4)
    half = math.sqrt(2) / 2
    expected = [1.0, (1 + half) / 2, 0.5, (1 - half) / 2, 0.0, 0.0, 0.0]
    got = [s.factor(t) for t in (0, 1, 2, 3, 4, 5, 9)]
    assert got == pytest.approx(expected, abs=1e-15)
    assert got[0] == 1.0 and got[2] == 0.5 and got[4] == 0.0  # exact in float64
    assert got[1] == pytest.approx(0.8535533905932737, abs=1e-15)


def test_cosine_values_of_the_paper_eta0_001_h800() -> None:
    """The paper's ``eta_r = 0.005 {1 + cos(pi (r - 1) / 800)}`` (eta_0 = 0.01, H = 800, App. D.2.1)
    as ``lr = 0.01`` times ``Cosine(800).factor(r - 1)``:

    r = 1: 0.005 (1 + cos 0) = 0.01.
    r = H/2 = 400: 0.005 (1 + cos(399 pi / 800)) = 0.005 (1 + sin(pi / 800))
        = 0.005 (1 + 0.0039269807) = 0.00501963490.
    r = H/2 + 1 = 401: 0.005 (1 + cos(pi / 2)) = 0.005.
    r = H = 800: 0.005 (1 + cos(799 pi / 800)) = 0.005 (1 - cos(pi / 800)) = 0.01 sin^2(pi / 1600)
        = 0.01 * 0.0019634942^2 = 3.8553093e-8.
    r = H + 1 = 801: 0.005 (1 + cos pi) = 0.
    """
    s = Cosine(horizon=800)
    lr = {r: 0.01 * s.factor(r - 1) for r in (1, 400, 401, 800, 801)}
    assert lr[1] == 0.01
    assert lr[400] == pytest.approx(0.005 * (1 + math.sin(math.pi / 800)), rel=1e-12)
    assert lr[400] == pytest.approx(0.0050196349036, rel=1e-10)
    assert lr[401] == 0.005
    assert lr[800] == pytest.approx(0.01 * math.sin(math.pi / 1600) ** 2, rel=1e-9)
    assert lr[800] == pytest.approx(3.8553093e-8, rel=1e-7)
    assert lr[801] == 0.0


def test_cosine_floor() -> None:
    """``min_factor = m``: m + (1 - m) (1 + cos(pi t / H)) / 2; H = 4, m = 0.1: t = 0: 1; t = 2:
    0.1 + 0.9 * 0.5 = 0.55; t = 4 and beyond: 0.1."""
    s = Cosine(horizon=4, min_factor=0.1)
    assert s.factor(0) == pytest.approx(1.0, abs=1e-15)
    assert s.factor(2) == pytest.approx(0.55, abs=1e-15)
    assert s.factor(4) == pytest.approx(0.1, abs=1e-15) and s.factor(40) == pytest.approx(0.1, abs=1e-15)


def test_step_and_constant_values() -> None:
    """``Step(every=3, gamma=0.5)``: gamma ** (t // 3): rounds 0-2 at 1, 3-5 at 0.5, 6 at 0.25."""
    s = Step(every=3, gamma=0.5)
    assert [s.factor(t) for t in range(7)] == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25]
    assert all(Constant().factor(t) == 1.0 for t in (0, 1, 799, 10**6))


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Cosine(horizon=0), "horizon"),
        (lambda: Cosine(horizon=2.5), "horizon"),
        (lambda: Cosine(horizon=True), "horizon"),
        (lambda: Cosine(horizon="800"), "horizon"),
        (lambda: Cosine(horizon=4, min_factor=1.5), "min_factor"),
        (lambda: Cosine(horizon=4, min_factor=-0.1), "min_factor"),
        (lambda: Cosine(horizon=4, min_factor=float("nan")), "min_factor"),
        (lambda: Step(every=0, gamma=0.5), "every"),
        (lambda: Step(every=2, gamma=0.0), "gamma"),
        (lambda: Step(every=2, gamma=-1.0), "gamma"),
        (lambda: Step(every=2, gamma=float("inf")), "gamma"),
    ],
)
def test_invalid_schedule_is_one_line_naming_the_field(build: Any, field: str) -> None:
    with pytest.raises(ValueError) as err:
        build()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"trainer.lr_schedule.init_args.{field} must be ")


def test_trainer_config_checks_and_defaults() -> None:
    default = TrainerConfig()
    assert isinstance(default.lr_schedule, Constant) and default.reset_optimizer_each_round is False
    with pytest.raises(
        ValueError, match=r"^trainer\.lr_schedule must be a lightning_fed\.engine\.LRSchedule"
    ):
        TrainerConfig(lr_schedule="cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^trainer\.reset_optimizer_each_round must be true or false"):
        TrainerConfig(reset_optimizer_each_round="yes")  # type: ignore[arg-type]


# --- packed == sequential, with a schedule and with resets ---------------------------------------


@pytest.mark.parametrize(
    ("sgd", "schedule", "reset"),
    [(True, Cosine(horizon=4), True), (False, Step(every=1, gamma=0.5), False)],
    ids=["sgd_momentum-cosine-reset", "adam-step-no_reset"],
)
def test_packed_matches_sequential_float64(sgd: bool, schedule: LRSchedule, reset: bool) -> None:
    """3 rounds on 3 uneven centers: the packed engine equals the sequential reference (torch.optim
    per center) to float64 rounding, with the round's rate and, for SGD, the reset; and each
    engine's rate in round r is base_lr * factor(r)."""
    module = _module(sgd)
    packed, sequential = (_engine(kind, module, schedule, reset) for kind in ("packed", "sequential"))
    for r in range(3):
        packed.train_round(r)
        sequential.train_round(r)
        assert _max_diff(packed.get_params(), sequential.get_params()) < 1e-10, r
        lr = (0.05 if sgd else 1e-2) * schedule.factor(r)
        assert packed.optimizer.lr == lr
        assert all(opt.param_groups[0]["lr"] == lr for opt in sequential.optimizers)
    plain = _engine("packed", module, None, False)
    for r in range(3):
        plain.train_round(r)
    assert _max_diff(plain.get_params(), packed.get_params()) > 1e-6, "the schedule must change training"
    steps = packed.state_dict()["optimizer"]["step"]
    per_round = torch.tensor([2 * math.ceil(n / BATCH) for n in SIZES])
    assert torch.equal(steps, per_round if reset else 3 * per_round)


@pytest.mark.parametrize("kind", ["packed", "sequential"])
@pytest.mark.parametrize("sgd", [True, False], ids=["sgd_momentum", "adam"])
def test_a_reset_makes_round_r_independent_of_round_r_minus_1_state(kind: str, sgd: bool) -> None:
    """Engine A trains rounds 0 and 1; engine B never trained (fresh, zero optimizer state) and gets
    A's parameters after round 0, then trains round 1. With the reset both start round 1 from a fresh
    state, so their round-1 results are bit-identical; without it A's momentum (Adam moments and step
    counts) from round 0 carries over and they differ."""
    module = _module(sgd)
    for reset, same in ((True, True), (False, False)):
        a = _engine(kind, module, Cosine(horizon=10), reset)
        a.train_round(0)
        b = _engine(kind, module, Cosine(horizon=10), reset)
        b.set_params(a.get_params())
        loss_a, loss_b = a.train_round(1), b.train_round(1)
        assert _equal(a.get_params(), b.get_params()) is same, reset
        assert torch.equal(loss_a, loss_b) is same


@pytest.mark.parametrize("kind", ["packed", "sequential"])
def test_a_reset_ignores_perturbed_buffers(kind: str) -> None:
    """After round 0, overwrite the momentum buffers with noise: round 1 is unchanged with the reset
    and changed without it."""
    module = _module(True)

    def perturb(engine: Engine) -> None:
        gen = torch.Generator().manual_seed(7)
        if isinstance(engine, PackedEngine):
            for name, t in engine.opt_state.items():
                if name != "step":
                    t.add_(torch.randn(t.shape, generator=gen, dtype=t.dtype))
        else:
            for opt in engine.optimizers:
                for state in opt.state.values():
                    buf = state["momentum_buffer"]
                    buf.add_(torch.randn(buf.shape, generator=gen, dtype=buf.dtype))

    for reset in (True, False):
        clean, noisy = (_engine(kind, module, None, reset) for _ in range(2))
        for engine in (clean, noisy):
            engine.train_round(0)
        perturb(noisy)
        clean.train_round(1)
        noisy.train_round(1)
        assert _equal(clean.get_params(), noisy.get_params()) is reset


# --- defaults, shards, resume, the federation ------------------------------------------------------


@pytest.mark.parametrize("kind", ["packed", "sequential"])
def test_defaults_equal_an_explicit_constant_schedule(kind: str) -> None:
    """No schedule and no reset (the defaults) train to exactly the bits of ``Constant()``."""
    module = _module(False)
    default = _engine(kind, module, None, False)
    explicit = _engine(kind, module, Constant(), False)
    for r in range(3):
        assert torch.equal(default.train_round(r), explicit.train_round(r))
    assert _equal(default.get_params(), explicit.get_params())
    assert isinstance(default.lr_schedule, Constant)


def test_a_shard_trains_bit_identically_with_a_schedule_and_resets() -> None:
    """The sharded engine's shard (a packed engine over centers [1, 3) keyed by their global ids)
    gets the same rate and reset as the whole federation, so its centers train to the same bits."""
    module = _module(True)
    schedule = Cosine(horizon=3)
    whole = _engine("packed", module, schedule, True)
    shard = _engine("packed", module, schedule, True, train=_train_sets()[1:], center_ids=range(1, 3))
    for r in range(3):
        whole.train_round(r)
        shard.train_round(r)
    assert _equal({n: t[1:] for n, t in whole.get_params().items()}, shard.get_params())


def test_sharded_engine_passes_the_schedule_and_reset_to_its_shard() -> None:
    """``ShardedEngine`` (one process here) threads both settings into its inner packed engine."""
    module = _module(True)
    fabric = SimpleNamespace(world_size=1, global_rank=0)
    sharded = ShardedEngine(PackedEngine(), fabric)  # type: ignore[arg-type]
    schedule = Step(every=1, gamma=0.5)
    sharded.setup(
        module,
        _train_sets(),
        batch_size=BATCH,
        epochs=2,
        seed=5,
        dtype=torch.float64,
        lr_schedule=schedule,
        reset_optimizer_each_round=True,
    )
    assert sharded.inner.lr_schedule is schedule and sharded.inner.reset_optimizer_each_round
    plain = _engine("packed", module, schedule, True)
    for r in range(2):
        sharded.train_round(r)
        plain.train_round(r)
    assert _equal(sharded.get_params(), plain.get_params())


@pytest.mark.parametrize("kind", ["packed", "sequential"])
@pytest.mark.parametrize("reset", [False, True])
def test_resume_from_a_state_dict_continues_the_schedule(kind: str, reset: bool) -> None:
    """Nothing of the schedule is saved: a fresh engine loading round 0's state and training rounds
    1-2 ends with the bits of one that ran rounds 0-2."""
    module = _module(True)
    schedule = Cosine(horizon=4)
    through = _engine(kind, module, schedule, reset)
    for r in range(3):
        through.train_round(r)
    first = _engine(kind, module, schedule, reset)
    first.train_round(0)
    resumed = _engine(kind, module, schedule, reset)
    resumed.load_state_dict(first.state_dict())
    for r in (1, 2):
        resumed.train_round(r)
    assert _equal(through.get_params(), resumed.get_params())


def _fit(trainer: TrainerConfig) -> dict[str, torch.Tensor]:
    fed = Federation(make_federation([20, 7, 33]), MortalityMLP(hidden=(8, 4)), FedAvg(), trainer, seed=3)
    fed.fit()
    assert fed.engine.lr_schedule is trainer.lr_schedule
    assert fed.engine.reset_optimizer_each_round is trainer.reset_optimizer_each_round
    return fed.engine.get_params()


def test_the_federation_threads_the_trainer_settings_to_the_engine() -> None:
    """Default trainer == explicit Constant (bit-identical); a cosine schedule with resets changes it."""
    default = _fit(TrainerConfig(rounds=2, batch_size=8))
    constant = _fit(TrainerConfig(rounds=2, batch_size=8, lr_schedule=Constant()))
    cosine = _fit(
        TrainerConfig(rounds=2, batch_size=8, lr_schedule=Cosine(2), reset_optimizer_each_round=True)
    )
    assert _equal(default, constant)
    assert not _equal(default, cosine)


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.cli
def test_cli_fit_with_a_cosine_schedule_by_class_path(tmp_path: Path) -> None:
    """A config file choosing ``trainer.lr_schedule`` by class_path (plus the reset) fits one round of
    the tiny CLI federation, and the saved config.yaml carries both keys."""
    config = tmp_path / "schedule.yaml"
    config.write_text(
        "trainer:\n"
        "  reset_optimizer_each_round: true\n"
        "  lr_schedule:\n"
        "    class_path: lightning_fed.engine.Cosine\n"
        "    init_args:\n"
        "      horizon: 800\n"
    )
    main(
        [
            "fit",
            "--config",
            str(config),
            *TINY,
            "--trainer.rounds=1",
            f"--output.root={tmp_path}",
            "--output.name=run",
            "--output.progress_bar=false",
            "--logger.enabled=false",
        ]
    )
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "lightning_fed.engine.Cosine" in saved and "horizon: 800" in saved
    assert "reset_optimizer_each_round: true" in saved
    assert (tmp_path / "run" / "summary.json").is_file()


@pytest.mark.cli
def test_dotted_cli_overrides_parse_and_bad_values_name_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    parser = fit_parser()
    cfg = parser.parse_args(
        [
            "--trainer.lr_schedule.class_path=lightning_fed.engine.Cosine",
            "--trainer.lr_schedule.init_args.horizon=800",
        ]
    )
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
    schedule = instantiate(cfg).trainer.lr_schedule
    assert isinstance(schedule, Cosine) and schedule.horizon == 800
    cfg = parser.parse_args(["--trainer.lr_schedule=Step", "--trainer.lr_schedule.every=5"])
    schedule = instantiate(cfg).trainer.lr_schedule
    assert isinstance(schedule, Step) and (schedule.every, schedule.gamma) == (5, 0.1)
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                *TINY,
                f"--output.root={tmp_path}",
                "--logger.enabled=false",
                "--trainer.lr_schedule.class_path=lightning_fed.engine.Cosine",
                "--trainer.lr_schedule.init_args.horizon=0",
            ]
        )
    assert "trainer.lr_schedule.init_args.horizon must be an integer >= 1" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_the_new_keys_leave_old_fingerprints_alone() -> None:
    """At their defaults (the behaviour before they existed) the two keys are not fingerprinted, so a
    config written before them keeps its fingerprint; any other value is fingerprinted."""
    parser = fit_parser()
    default = fingerprinted(parser.parse_args([]).as_dict())
    assert not any(k.startswith(("trainer.lr_schedule", "trainer.reset_optimizer")) for k in default)
    changed = fingerprinted(
        parser.parse_args(
            [
                "--trainer.lr_schedule=Cosine",
                "--trainer.lr_schedule.horizon=800",
                "--trainer.reset_optimizer_each_round=true",
            ]
        ).as_dict()
    )
    assert changed["trainer.lr_schedule.class_path"] == "lightning_fed.engine.Cosine"
    assert changed["trainer.lr_schedule.init_args.horizon"] == 800
    assert changed["trainer.reset_optimizer_each_round"] is True
