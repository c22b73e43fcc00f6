"""``trainer.dp`` in the round loop: the logged epsilon is dp-accounting's own, DP-FedAvg's server
step by hand, and the one-line refusals."""

from __future__ import annotations

import statistics
import sys

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import SCAFFOLD, FedAvg, FedProx, LocalOnly
from lightning_fed.dp import DPConfig, clipped_noisy_mean
from lightning_fed.engine import SequentialEngine
from lightning_fed.engine.schedule import steps_per_round
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.seeding import torch_generator
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

SKIP = "dp-accounting is the optional 'privacy' extra: pip install -e '.[privacy]'"
SIZES = [40, 7, 130, 3, 64, 200, 18, 9]


def _fed(
    data, dp: DPConfig, algorithm=None, rounds: int = 2, optimizer: str = "adam", **trainer
) -> Federation:
    return Federation(
        data,
        MortalityMLP(hidden=(8,), dropout=0.0, optimizer=optimizer),
        algorithm or FedAvg(),
        TrainerConfig(rounds=rounds, batch_size=32, local_epochs=2, dp=dp, **trainer),
        fabric=Fabric(accelerator="cpu", devices=1),
        seed=3,
    )


def _library_epsilon(lib, sigma: float, q: float, steps: int, delta: float) -> float:
    """A fresh accountant composing ``steps`` Poisson-sampled Gaussian steps: the library's own answer."""
    accountant = lib.rdp.RdpAccountant()
    accountant.compose(
        lib.SelfComposedDpEvent(lib.PoissonSampledDpEvent(q, lib.GaussianDpEvent(sigma)), steps)
    )
    return accountant.get_epsilon(delta)


def test_sample_level_epsilon_is_the_librarys_for_each_centers_steps_and_rate() -> None:
    """Center ``c`` takes ``T_c = r * epochs * ceil(n_c / B)`` steps by round ``r`` at ``q_c = min(1,
    B / n_c)``; the logged ``privacy/epsilon`` is the largest library epsilon over the centers, the
    summary's median the median one (exact equality: the ledger multiplies the library's one-step
    RDP by ``T`` as the library's composition does)."""
    lib = pytest.importorskip("dp_accounting", reason=SKIP)
    dp = DPConfig(level="sample", noise_multiplier=1.1, max_grad_norm=1.0, delta=1e-5)
    fed = _fed(make_federation(SIZES), dp)
    logged = []
    for r in range(2):
        logged.append(fed._run_round(r).stats["privacy/epsilon"])
        fed.round += 1
    for r, value in enumerate(logged):
        eps = [
            _library_epsilon(lib, 1.1, min(1.0, 32 / n), (r + 1) * steps_per_round(n, 32, 2), 1e-5)
            for n in SIZES
        ]
        assert value == max(eps)
    summary = fed.summary()
    assert summary["privacy/epsilon"] == logged[-1] and summary[
        "privacy/epsilon_median"
    ] == statistics.median(eps)
    assert summary["privacy/delta"] == 1e-5 and summary["privacy/level"] == "sample"


def test_client_level_epsilon_is_the_librarys_at_the_sampling_rate_of_centers() -> None:
    """DP-FedAvg with 3 of 8 centers a round: one sampled Gaussian event per round at q = 3/8."""
    lib = pytest.importorskip("dp_accounting", reason=SKIP)
    dp = DPConfig(level="client", noise_multiplier=0.9, max_grad_norm=0.5, delta=1e-6)
    fed = _fed(make_federation(SIZES), dp, rounds=3, centers_per_round=3)
    for r in range(3):
        value = fed._run_round(r).stats["privacy/epsilon"]
        fed.round += 1
        assert value == _library_epsilon(lib, 0.9, 3 / 8, r + 1, 1e-6)


def test_dp_fedavg_server_step_by_hand() -> None:
    """Reference x = (1, 1); updates (3, 4) (norm 5: clipped to S = 1, so (0.6, 0.8)) and (0.3, 0.4)
    (norm 0.5 < S: kept), unweighted: the sum (0.9, 1.2) plus sigma S z over W = 2 participants."""
    ref = {"w": torch.tensor([[1.0, 1.0]])}
    up = {"w": torch.tensor([[4.0, 5.0], [1.3, 1.4]])}
    got = clipped_noisy_mean(up, ref, 1.0, 0.5, 2, seed=7, round_idx=4)
    z = torch.randn(2, generator=torch_generator(7, "dp-server", 4), dtype=torch.float64)
    expected = torch.tensor([1.0, 1.0]) + (torch.tensor([0.9, 1.2], dtype=torch.float64) + 0.5 * z) / 2
    torch.testing.assert_close(got["w"][0], expected.float(), rtol=0, atol=1e-6)


def test_client_dp_without_noise_or_binding_clip_is_unweighted_fedavg() -> None:
    """sigma = 1e-300, S = 1e10: DP-FedAvg's server step is the unweighted mean of the models, which
    for centers of equal size is FedAvg's (float32: 1e-6)."""
    data = make_federation([30, 30, 30, 30])
    loose = DPConfig(level="client", noise_multiplier=1e-300, max_grad_norm=1e10)
    pytest.importorskip("dp_accounting", reason=SKIP)
    dp_fed = _fed(data, loose)
    dp_fed.fit()
    plain = Federation(
        data,
        MortalityMLP(hidden=(8,), dropout=0.0),
        FedAvg(),
        TrainerConfig(rounds=2, batch_size=32, local_epochs=2),
        fabric=Fabric(accelerator="cpu", devices=1),
        seed=3,
    )
    plain.fit()
    a, b = dp_fed.engine.get_params(), plain.engine.get_params()
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-6


def test_client_dp_noise_moves_the_server_model() -> None:
    pytest.importorskip("dp_accounting", reason=SKIP)
    data = make_federation([30, 30, 30, 30])
    a = _fed(data, DPConfig(level="client", noise_multiplier=1e-300, max_grad_norm=1.0))
    b = _fed(data, DPConfig(level="client", noise_multiplier=2.0, max_grad_norm=1.0))
    a.fit()
    b.fit()
    pa, pb = a.engine.get_params(), b.engine.get_params()
    assert max(float((pa[n] - pb[n]).abs().max()) for n in pa) > 1e-2


@pytest.mark.parametrize(
    ("level", "algorithm", "match"),
    [
        ("client", LocalOnly, r"^trainer\.dp\.level=client: LocalOnly has no server"),
        ("client", SCAFFOLD, r"^trainer\.dp\.level=client: SCAFFOLD overrides FedAvg's"),
        ("sample", FedProx, r"^trainer\.dp\.level=sample: .*local term"),
    ],
)
def test_dp_with_a_method_it_does_not_cover_is_refused_in_one_line(level, algorithm, match) -> None:
    pytest.importorskip("dp_accounting", reason=SKIP)
    with pytest.raises(ValueError, match=match) as err:
        # SGD: SCAFFOLD refuses other local optimizers itself; the refusal tested here is DP's.
        _fed(make_federation([20, 20]), DPConfig(level=level), algorithm=algorithm(), optimizer="sgd")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("noise_multiplier", 0.0),
        ("noise_multiplier", -1.0),
        ("max_grad_norm", 0.0),
        ("delta", 1.0),
        ("level", "center"),
    ],
)
def test_bad_dp_settings_are_refused_in_one_line(field, value) -> None:
    with pytest.raises(ValueError, match=rf"^trainer\.dp\.{field} must be") as err:
        DPConfig(**{field: value})
    assert "\n" not in str(err.value)


def test_missing_dp_accounting_is_refused_before_training(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    with pytest.raises(ImportError, match=r"pip install 'lightning-fed\[privacy\]'"):
        _fed(make_federation([20, 20]), DPConfig(level="sample"))


def test_sequential_engine_with_dp_trains_and_logs_epsilon() -> None:
    pytest.importorskip("dp_accounting", reason=SKIP)
    fed = _fed(make_federation([20, 9]), DPConfig(level="sample"), engine=SequentialEngine(), rounds=1)
    summary = fed.fit()
    assert summary["privacy/epsilon"] > 0 and "DP-SGD" in fed.engine.training_path


def test_sample_level_spends_only_on_the_sampled_centers() -> None:
    """With 2 of 8 centers a round, the 6 not sampled take no DP-SGD step and spend nothing."""
    pytest.importorskip("dp_accounting", reason=SKIP)
    fed = _fed(make_federation(SIZES), DPConfig(level="sample"), rounds=1, centers_per_round=2)
    fed._run_round(0)
    eps = torch.tensor(fed.privacy.epsilons())
    sampled = fed.participants(0)
    assert int(sampled.sum()) == 2 and bool((eps[sampled] > 0).all()) and bool((eps[~sampled] == 0).all())


def test_a_noise_too_small_for_the_library_reports_infinite_epsilon() -> None:
    """sigma = 1e-300 at q < 1: the library's series divides by zero; the ledger reports epsilon inf
    (no privacy) instead of a traceback."""
    pytest.importorskip("dp_accounting", reason=SKIP)
    from lightning_fed.dp import RdpLedger

    ledger = RdpLedger(1e-300, 1e-5, 1)
    ledger.record([0.1], [3])
    assert ledger.epsilons() == [float("inf")]
