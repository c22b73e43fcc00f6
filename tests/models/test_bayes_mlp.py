"""The mean-field Bayesian MLP: KL closed form, posterior-mean evaluation, reparameterized training
draws, and its KL penalty inside both engines."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Normal, kl_divergence

from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.models import BayesianMLP
from lightning_fed.models.bayes_mlp import inverse_softplus, standard_normal
from lightning_fed.seeding import torch_generator


class Streams:
    """Per-row streams (the RowStreams protocol): row p draws from generator p only."""

    def __init__(self, keys: list[int], seed: int = 0) -> None:
        self.generators = [torch_generator(seed, "test", k) for k in keys]

    def words(self, rows: int, count: int) -> torch.Tensor:
        return torch.stack(
            [
                torch.randint(-(2**63), 2**63 - 1, (count,), dtype=torch.int64, generator=g)
                for g in self.generators[:rows]
            ]
        )


class FixedWord:
    """Every word has low 32 bits 2^31 and high 32 bits 2^30."""

    def words(self, rows: int, count: int) -> torch.Tensor:
        return torch.full((rows, count), (2**30 << 32) | 2**31, dtype=torch.int64)


def _stacked(model: BayesianMLP, k: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``k`` random posteriors: means ~ N(0, 1), rho ~ N(-2, 1) (sigma ~ 0.13)."""
    gen = torch.Generator().manual_seed(seed)
    return {
        n: torch.randn(k, *p.shape, generator=gen, dtype=torch.float64) - (2.0 if n.endswith("_rho") else 0.0)
        for n, p in model.named_parameters()
    }


def _reference_forward(weights: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
    """A plain MLP with the given (W, b) per layer: ReLU between layers, logits [n]."""
    h = x
    for i, (w, b) in enumerate(weights):
        h = h @ w.T + b
        if i < len(weights) - 1:
            h = torch.relu(h)
    return h.squeeze(-1)


def test_penalty_is_kl_to_the_prior_over_n_train() -> None:
    """penalty_c = beta * sum_w KL(N(mu, softplus(rho)^2) || N(0, p^2)) / n_c, against torch.distributions."""
    model = BayesianMLP(in_features=4, hidden=(5, 3), prior_sigma=0.7, kl_weight=0.5).double()
    params = _stacked(model, 3)
    n_train = torch.tensor([10, 3, 250])
    got = model.penalty(params, n_train)
    prior = Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(0.7, dtype=torch.float64))
    for c in range(3):
        kl = sum(
            kl_divergence(
                Normal(params[n][c], torch.nn.functional.softplus(params[n[:-3] + "_rho"][c])), prior
            ).sum()
            for n in params
            if n.endswith("_mu")
        )
        assert torch.allclose(got[c], 0.5 * kl / n_train[c], rtol=1e-12, atol=0)


def test_kl_is_zero_at_the_prior_and_inverse_softplus_inverts() -> None:
    """q = prior (mu = 0, sigma = p) has KL 0; softplus(softplus^-1(s)) = s from 1e-6 to 30."""
    model = BayesianMLP(in_features=3, hidden=(2,), prior_sigma=0.3).double()
    sigma = torch.tensor([1e-6, 0.01, 0.3, 1.0, 30.0], dtype=torch.float64)
    assert torch.allclose(torch.nn.functional.softplus(inverse_softplus(sigma)), sigma, rtol=1e-12, atol=0)
    rho = float(inverse_softplus(torch.tensor(0.3, dtype=torch.float64)))
    params = {
        n: torch.full((1, *p.shape), rho if n.endswith("_rho") else 0.0, dtype=torch.float64)
        for n, p in model.named_parameters()
    }
    assert abs(float(model.penalty(params, torch.tensor([7])))) < 1e-12


def test_eval_uses_posterior_means_packed_and_single() -> None:
    """Without a generator (and in eval mode) the weights are the means: the MLP with W = mu."""
    model = BayesianMLP(in_features=5, hidden=(6, 4)).double().eval()
    params = _stacked(model, 3)
    x = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    packed = model.packed_forward(params, x, None)
    for c in range(3):
        means = [(params[f"layers.{i}.weight_mu"][c], params[f"layers.{i}.bias_mu"][c]) for i in range(3)]
        expected = _reference_forward(means, x[c])
        single = torch.func.functional_call(model, {n: p[c] for n, p in params.items()}, (x[c],))
        assert torch.allclose(packed[c], expected, rtol=0, atol=1e-10)
        assert torch.allclose(single, expected, rtol=0, atol=1e-10)


def test_packed_training_draw_is_the_reparameterized_weights() -> None:
    """With a generator, center c uses W = mu + softplus(rho) * eps where eps is drawn layer by layer,
    weight [k, out, in] then bias [k, out]; replaying the same draws reproduces the logits exactly."""
    model = BayesianMLP(in_features=5, hidden=(6, 4)).double().train()
    params = _stacked(model, 3)
    x = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    packed = model.packed_forward(params, x, torch.Generator().manual_seed(42))
    replay = torch.Generator().manual_seed(42)
    sampled = []
    for i in range(3):
        layer = []
        for kind in ("weight", "bias"):
            mu, rho = params[f"layers.{i}.{kind}_mu"], params[f"layers.{i}.{kind}_rho"]
            eps = torch.randn(mu.shape, generator=replay, dtype=torch.float64)
            layer.append(mu + torch.nn.functional.softplus(rho) * eps)
        sampled.append(layer)
    for c in range(3):
        expected = _reference_forward([(w[c], b[c]) for w, b in sampled], x[c])
        assert torch.allclose(packed[c], expected, rtol=0, atol=1e-10)
    means = model.packed_forward(params, x, None)
    assert (packed - means).abs().max() > 1e-3  # the draw really perturbs the weights


def test_box_muller_on_a_fixed_word() -> None:
    """low = 2^31, high = 2^30: u1 = (2^31 + 1/2) / 2^32 ~ 1/2, u2 ~ 1/4, so the pair is
    sqrt(-2 ln u1) (cos(pi/2), sin(pi/2)) ~ (0, sqrt(2 ln 2) = 1.17741); 3 entries take 2 words."""
    z = standard_normal(torch.empty(1, 3, dtype=torch.float64), FixedWord())
    r = (2 * math.log(2)) ** 0.5
    assert torch.allclose(z, torch.tensor([[0.0, 0.0, r]], dtype=torch.float64), atol=1e-8)


def test_row_stream_normals_are_standard_and_per_center() -> None:
    """200,000 draws per row: mean within 0.01 of 0, std within 0.01 of 1, P(|z| < 1) within 0.005
    of 0.6827 (all > 4 standard errors); rows uncorrelated; row 0 is the same packed with other rows
    or alone (a center's draws do not depend on its neighbours in the pack)."""
    z = standard_normal(torch.empty(3, 400, 500), Streams([0, 1, 2])).reshape(3, -1).double()
    assert z.mean(1).abs().max() < 0.01
    assert (z.std(1) - 1).abs().max() < 0.01
    assert ((z.abs() < 1).double().mean(1) - 0.6827).abs().max() < 0.005
    assert abs(float(torch.corrcoef(z)[0, 1])) < 0.01
    alone = standard_normal(torch.empty(1, 400, 500), Streams([0])).reshape(1, -1).double()
    assert torch.equal(alone[0], z[0])


def test_packed_training_draw_with_row_streams() -> None:
    """The packed engine passes per-center streams: replaying them layer by layer (weight, then bias)
    gives W = mu + softplus(rho) * eps and the logits of the plain MLP with those weights."""
    model = BayesianMLP(in_features=5, hidden=(6, 4)).double().train()
    params = _stacked(model, 3)
    x = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    packed = model.packed_forward(params, x, Streams([4, 5, 6]))
    replay = Streams([4, 5, 6])
    layers = []
    for i in range(3):
        layers.append(
            [
                params[f"layers.{i}.{k}_mu"]
                + torch.nn.functional.softplus(params[f"layers.{i}.{k}_rho"])
                * standard_normal(params[f"layers.{i}.{k}_mu"], replay)
                for k in ("weight", "bias")
            ]
        )
    for c in range(3):
        expected = _reference_forward([(w[c], b[c]) for w, b in layers], x[c])
        assert torch.allclose(packed[c], expected, rtol=0, atol=1e-10)


def test_training_forward_samples_and_eval_is_deterministic() -> None:
    """Training mode: two calls differ (fresh eps from torch's global RNG); eval mode repeats exactly."""
    torch.manual_seed(0)
    model = BayesianMLP(in_features=4, hidden=(8,), init_sigma=0.5)
    x = torch.randn(16, 4)
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


def test_head_names_and_bad_config() -> None:
    model = BayesianMLP(hidden=(8, 4))
    model.set_num_features(6)
    assert model.head_parameter_names(1) == (
        "layers.2.weight_mu",
        "layers.2.weight_rho",
        "layers.2.bias_mu",
        "layers.2.bias_rho",
    )
    assert len(model.head_parameter_names(2)) == 8
    with pytest.raises(ValueError, match="head layers"):
        model.head_parameter_names(4)
    with pytest.raises(ValueError, match="in_features"):
        model.set_num_features(7)
    for kwargs, field in (
        ({"prior_sigma": 0.0}, "model.prior_sigma"),
        ({"init_sigma": -1.0}, "model.init_sigma"),
        ({"kl_weight": -0.1}, "model.kl_weight"),
        ({"lr": 0.0}, "model.lr"),
        ({"hidden": ()}, "model.hidden"),
    ):
        with pytest.raises(ValueError, match=field):
            BayesianMLP(**kwargs)


def test_init_sigma_sets_rho() -> None:
    model = BayesianMLP(in_features=3, hidden=(4,), init_sigma=0.05)
    for n, p in model.named_parameters():
        if n.endswith("_rho"):
            assert torch.allclose(torch.nn.functional.softplus(p), torch.full_like(p, 0.05))


def test_packed_engine_equals_sequential_with_kl_penalty(monkeypatch: pytest.MonkeyPatch) -> None:
    """With eps = 0 (monkeypatched noise) both engines minimize mean BCE + KL / n_c by Adam; the packed
    engine sorts centers by size, so this pins that each center gets its own n_c in the penalty."""
    monkeypatch.setattr(BayesianMLP, "noise", lambda self, like, generator: torch.zeros_like(like))
    gen = torch.Generator().manual_seed(0)
    sizes = [5, 40, 17]
    train = [
        (torch.randn(n, 4, generator=gen, dtype=torch.float64), (torch.rand(n, generator=gen) < 0.4).double())
        for n in sizes
    ]
    torch.manual_seed(1)
    module = BayesianMLP(in_features=4, hidden=(6, 3), init_sigma=0.1, lr=0.01).double()
    engines = []
    for engine in (PackedEngine(), SequentialEngine()):
        engine.setup(module, train, batch_size=8, epochs=2, seed=3, dtype=torch.float64)
        losses = engine.train_round(0)
        engines.append((engine.get_params(), losses))
    (pa, la), (sa, ls) = engines
    assert torch.allclose(la, ls, rtol=0, atol=1e-10)
    assert max(float((pa[n] - sa[n]).abs().max()) for n in pa) < 1e-10
    start = dict(module.named_parameters())
    rho = "layers.0.weight_rho"
    assert float((pa[rho] - start[rho].detach()).abs().max()) > 1e-3  # the KL term moved sigma
