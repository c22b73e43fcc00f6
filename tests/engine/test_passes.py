"""``trainer.max_centers_per_pass``: the packed engine in bounded passes equals one pass, bit for bit.

The reference is the one-pass :class:`PackedEngine` on the same 24 uneven centers (sizes 3 to 300,
short last batches), trained with dropout so that every center's own stream is consumed; the pass
engine splits them into 5 passes of at most 5 centers. Every comparison is ``torch.equal`` (rtol = 0,
atol = 0) in float64 and float32.
"""

from __future__ import annotations

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import ABPS, FedAvg
from lightning_fed.algorithms.fedprox import ProximalTerm
from lightning_fed.dp.config import DPConfig
from lightning_fed.engine import Cosine, PackedEngine, SequentialEngine
from lightning_fed.engine.passes import PassEngine
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

#: 24 uneven centers (5 passes of <= 5 centers).
SIZES = [40, 7, 130, 3, 64, 200, 18, 9, 300, 11, 55, 4, 90, 27, 150, 6, 33, 71, 12, 240, 5, 48, 100, 21]
PER_PASS = 5


def _train_sets() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(n, 6, generator=gen), (torch.rand(n, generator=gen) < 0.4).float()) for n in SIZES]


def _engines(dtype: torch.dtype, **setup: object) -> tuple[PackedEngine, PassEngine]:
    torch.manual_seed(0)
    module = MortalityMLP(in_features=6, hidden=(16, 8), dropout=0.3).to(dtype)
    one, passes = PackedEngine(), PassEngine(PackedEngine(), PER_PASS)
    for engine in (one, passes):
        engine.setup(module, _train_sets(), batch_size=16, epochs=2, seed=3, dtype=dtype, **setup)
    return one, passes


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        if isinstance(a[name], dict):
            _assert_same(a[name], b[name])
        else:
            assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_passes_train_bit_identically_to_one_pass(dtype: torch.dtype) -> None:
    """Personalized starts, 3 rounds, dropout 0.3: losses, parameters and optimizer states equal."""
    one, passes = _engines(dtype)
    assert len(passes.passes) == 5 and max(e.num_models for e in passes.passes) == PER_PASS
    gen = torch.Generator().manual_seed(1)
    start = {n: t + 0.1 * torch.randn(t.shape, generator=gen).to(dtype) for n, t in one.get_params().items()}
    one.set_params(start)
    passes.set_params(start)
    for r in range(3):
        assert torch.equal(one.train_round(r), passes.train_round(r))
        assert torch.equal(one.last_diverged.cpu(), passes.last_diverged.cpu())
        _assert_same(one.get_params(), passes.get_params())
    _assert_same(one.state_dict(), passes.state_dict())
    assert passes.training_path == f"{one.training_path} in 5 passes of <= {PER_PASS} centers"


def test_passes_share_round_scratch_sized_by_a_pass() -> None:
    """The passes hold one scratch, sized by the largest pass: less than one pass over all centers."""
    one, passes = _engines(torch.float64)
    one.train_round(0)
    passes.train_round(0)
    assert all(e.scratch is passes.scratch for e in passes.passes)
    grad = passes.scratch.buffers["grad"]
    assert grad.numel() == PER_PASS * one.flat.shape[1]
    assert passes.scratch.nbytes() < one.scratch.nbytes()


def test_passes_release_round_scratch_after_a_round() -> None:
    """After a round only the flat gradient (the engines hold views of it) stays in the scratch: the
    dropout words, activation workspace, snapshot and optimizer temporaries are not held through the
    aggregation (issue 33); the next rounds still equal one pass (the test above trains 3)."""
    _, passes = _engines(torch.float32)
    passes.train_round(0)
    assert set(passes.scratch.buffers) == {"grad"}
    assert not passes.scratch.workspace and not passes.scratch.optimizer
    grad = passes.scratch.buffers["grad"].untyped_storage().data_ptr()
    assert all(e.grad.untyped_storage().data_ptr() == grad for e in passes.passes)


def test_lr_schedule_reset_and_local_steps_match_one_pass() -> None:
    """A cosine schedule, an optimizer reset each round and fixed local steps, through the passes."""
    one, passes = _engines(
        torch.float64, lr_schedule=Cosine(horizon=3), reset_optimizer_each_round=True, steps=4
    )
    for r in range(3):
        assert torch.equal(one.train_round(r), passes.train_round(r))
    _assert_same(one.state_dict(), passes.state_dict())


def test_a_local_term_on_the_autograd_path_matches_one_pass() -> None:
    """FedProx's proximal term (the autograd path through ``packed_forward``, dropout keyed per center)."""
    names = tuple(n for n, _ in MortalityMLP(in_features=6, hidden=(16, 8)).named_parameters())
    one, passes = _engines(torch.float64, local_term=ProximalTerm(0.1, names))
    assert "autograd" in passes.training_path
    for r in range(2):
        assert torch.equal(one.train_round(r), passes.train_round(r))
    _assert_same(one.state_dict(), passes.state_dict())


def test_dp_sgd_matches_one_pass() -> None:
    """DP-SGD (per-row clipping, noise keyed by center, step and round), without dropout: the vmapped
    per-row gradients draw dropout from torch's global generator, which is not keyed per center."""
    torch.manual_seed(0)
    module = MortalityMLP(in_features=6, hidden=(16, 8), dropout=0.0).to(torch.float64)
    one, passes = PackedEngine(), PassEngine(PackedEngine(), PER_PASS)
    dp = DPConfig(level="sample", noise_multiplier=0.8, max_grad_norm=1.0)
    for engine in (one, passes):
        engine.setup(module, _train_sets(), batch_size=16, epochs=1, seed=3, dtype=torch.float64, dp=dp)
    for r in range(2):
        assert torch.equal(one.train_round(r), passes.train_round(r))
    _assert_same(one.state_dict(), passes.state_dict())


def test_a_resume_from_state_dict_matches_one_pass() -> None:
    """A one-pass checkpoint loaded into the pass engine (and back) continues to the same bits."""
    one, passes = _engines(torch.float64)
    one.train_round(0)
    saved = one.state_dict()
    passes.load_state_dict(saved)
    _assert_same(passes.state_dict(), saved)
    for r in (1, 2):
        assert torch.equal(one.train_round(r), passes.train_round(r))
    _assert_same(one.state_dict(), passes.state_dict())
    one.load_state_dict(passes.state_dict())
    assert torch.equal(one.train_round(3), passes.train_round(3))
    _assert_same(one.get_params(), passes.get_params())


def test_mask_phase_and_label_flips_match_one_pass() -> None:
    """A sparse mask (saved in the state), a frozen-layer phase and flipped labels, through the passes."""
    one, passes = _engines(torch.float64)
    gen = torch.Generator().manual_seed(2)
    mask = {n: torch.rand(t.shape, generator=gen) < 0.7 for n, t in one.get_params().items()}
    for engine in (one, passes):
        engine.set_mask(mask)
        engine.flip_labels({0, 5, 17})
        engine.set_phase(epochs=1, frozen=("layers.0.weight",))
    assert torch.equal(one.train_round(0), passes.train_round(0))
    _assert_same(one.state_dict(), passes.state_dict())
    assert passes.epochs == one.epochs == 1


def _fit(dtype_precision: str, per_pass: int | None, algorithm: str = "fedavg") -> tuple[Federation, dict]:
    federation = Federation(
        make_federation(SIZES, seed=3),
        MortalityMLP(hidden=(16, 8), dropout=0.2),
        ABPS() if algorithm == "abps" else FedAvg(),
        TrainerConfig(rounds=3, batch_size=16, max_centers_per_pass=per_pass),
        fabric=Fabric(accelerator="cpu", devices=1, precision=dtype_precision),
        seed=5,
    )
    return federation, federation.fit()


@pytest.mark.parametrize(
    ("precision", "algorithm"), [("64-true", "fedavg"), ("32-true", "fedavg"), ("64-true", "abps")]
)
def test_a_fit_in_passes_equals_one_pass(precision: str, algorithm: str) -> None:
    """FedAvg (and ABPS) over 24 centers, 3 rounds: the same parameters, optimizer states and summary
    with passes of 5 centers."""
    one, summary_one = _fit(precision, None, algorithm)
    passes, summary_passes = _fit(precision, PER_PASS, algorithm)
    assert isinstance(passes.engine, PassEngine) and not isinstance(one.engine, PassEngine)
    _assert_same(one.engine.state_dict(), passes.engine.state_dict())
    summary_one.pop("wall_seconds"), summary_passes.pop("wall_seconds")
    assert summary_one == summary_passes and summary_one["rounds"] == 3


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_bad_values_are_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^trainer\.max_centers_per_pass must be an integer >= 1") as err:
        TrainerConfig(max_centers_per_pass=bad)
    assert "\n" not in str(err.value)


def test_only_the_packed_engine_takes_passes() -> None:
    with pytest.raises(ValueError, match=r"^trainer\.max_centers_per_pass bounds the passes of") as err:
        TrainerConfig(engine=SequentialEngine(), max_centers_per_pass=5)
    assert "\n" not in str(err.value)
    assert TrainerConfig().max_centers_per_pass is None
