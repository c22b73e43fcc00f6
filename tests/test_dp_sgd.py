"""DP-SGD: clipped per-sample gradients equal a per-sample loop; epsilon is dp-accounting's own."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lightning_fed.dp import clip_rows, dp_sgd_epsilon, noisy_clipped_sum, per_sample_grads


def _model_and_loss():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 1)).double()
    params = {n: p.detach() for n, p in model.named_parameters()}

    def loss(p, x, y):
        logits = torch.func.functional_call(model, p, (x,)).squeeze(-1)
        return nn.functional.binary_cross_entropy_with_logits(logits, y)

    return model, params, loss


def test_clipped_per_sample_grads_equal_a_per_sample_loop() -> None:
    model, params, loss = _model_and_loss()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(7, 5, generator=gen, dtype=torch.float64) * 3
    y = (torch.rand(7, generator=gen) < 0.5).double()
    clip = 0.3
    got = clip_rows(per_sample_grads(loss, params, x, y), clip)
    for b in range(7):
        model.zero_grad()
        loss(dict(model.named_parameters()), x[b : b + 1], y[b : b + 1]).backward()
        g = {n: p.grad.clone() for n, p in model.named_parameters()}
        norm = math.sqrt(sum(float(t.pow(2).sum()) for t in g.values()))
        for n, t in g.items():
            torch.testing.assert_close(got[n][b], t * min(1.0, clip / norm), rtol=0, atol=1e-14)
    norms = torch.stack([t.reshape(7, -1).pow(2).sum(1) for t in got.values()]).sum(0).sqrt()
    assert bool((norms <= clip + 1e-12).all()) and bool((norms > clip - 1e-9).any())  # some were clipped


def test_noisy_sum_is_the_clipped_mean_plus_seeded_gaussian_noise() -> None:
    _, params, loss = _model_and_loss()
    x, y = torch.randn(6, 5, dtype=torch.float64), torch.ones(6, dtype=torch.float64)
    grads = per_sample_grads(loss, params, x, y)
    plain = noisy_clipped_sum(grads, 0.5, 0.0, None)
    clipped = clip_rows(grads, 0.5)
    for n in plain:
        torch.testing.assert_close(plain[n], clipped[n].mean(0), rtol=0, atol=1e-15)
    a = noisy_clipped_sum(grads, 0.5, 2.0, torch.Generator().manual_seed(3))
    b = noisy_clipped_sum(grads, 0.5, 2.0, torch.Generator().manual_seed(3))
    assert all(torch.equal(a[n], b[n]) for n in a) and not torch.equal(a["0.weight"], plain["0.weight"])


def test_epsilon_equals_dp_accountings_own_computation() -> None:
    dp_accounting = pytest.importorskip(
        "dp_accounting", reason="dp-accounting is the optional 'privacy' extra: pip install -e '.[privacy]'"
    )

    sigma, q, steps, delta = 1.1, 128 / 6000, 940, 1e-5
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(event)
    assert dp_sgd_epsilon(sigma, q, steps, delta) == accountant.get_epsilon(delta)
    # Abadi et al. 2016 (Sec. 5.2): q = 0.01, sigma = 4, ~1e4 steps at delta 1e-5 is about epsilon 1.26
    assert 0.5 < dp_sgd_epsilon(4.0, 0.01, 10_000, 1e-5) < 2.0
    assert dp_sgd_epsilon(sigma, q, 0, delta) == 0.0 and dp_sgd_epsilon(0.0, q, 5, delta) == math.inf
    assert dp_sgd_epsilon(sigma, q, 2 * steps, delta) > dp_sgd_epsilon(sigma, q, steps, delta)


@pytest.mark.parametrize(
    ("args", "key"), [((1.0, 0.0, 5, 1e-5), "sampling rate"), ((1.0, 0.1, 5, 1.0), "delta")]
)
def test_epsilon_refuses_bad_arguments_in_one_line(args, key) -> None:
    with pytest.raises(ValueError, match=key):
        dp_sgd_epsilon(*args)


def test_missing_dp_accounting_is_refused_in_one_line(monkeypatch) -> None:
    import sys

    from lightning_fed.dp import require_dp_accounting

    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    with pytest.raises(ImportError, match=r"^differential privacy needs dp-accounting: pip install") as err:
        require_dp_accounting()
    assert "\n" not in str(err.value)
