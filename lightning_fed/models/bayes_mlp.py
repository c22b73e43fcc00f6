"""A mean-field Gaussian Bayesian MLP (Bayes by Backprop, Blundell et al. 2015) for BNN+FL.

BNN+FL (Saile et al. 2024; ABPS Sec. 6.2 baseline) replaces the mortality MLP with a Bayesian neural
network of the same shape (input -> 128 -> 64 -> 1, ReLU). Every weight and bias ``w`` has the
variational posterior ``q(w) = N(mu, sigma^2)`` with ``sigma = softplus(rho) = log(1 + e^rho)`` (so
``sigma > 0`` without constraints), independent across weights (mean field). Layer ``i`` holds
``layers.{i}.weight_mu``, ``weight_rho``, ``bias_mu``, ``bias_rho``.

Training minimizes the negative ELBO per training row of a center with ``n`` rows:

    L = (1/|B|) sum_{b in B} BCE(f_w(x_b), y_b) + beta KL(q || p) / n,   w = mu + sigma * eps,
    eps ~ N(0, I)  (reparameterization: one weight draw per center per optimizer step)

with the prior ``p(w) = N(0, prior_sigma^2)`` and, per weight, the closed form

    KL(N(mu, s^2) || N(0, p^2)) = log(p / s) + (s^2 + mu^2) / (2 p^2) - 1/2.

The batch term is the engines' mean batch loss; the KL term is :meth:`BayesianMLP.penalty`, which
the engines add to it before autograd. ``beta`` (``kl_weight``) is 1 for the ELBO; smaller values
temper the prior (a documented knob, not part of the paper).

Choices the paper leaves open, made here: ``mu`` starts like ``nn.Linear`` (Kaiming uniform) and
``rho`` at the constant ``softplus^{-1}(init_sigma)``, so the initial draw is close to the
deterministic MLP; no dropout (the weight noise regularizes); evaluation (``eval()`` mode, or
``packed_forward`` without a generator) predicts with the posterior means ``w = mu``, which is
deterministic and needs no extra random stream at evaluation time.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lightning_fed.models.base import CenterModule, RowStreams, hidden_widths, input_width_to_build

__all__ = ["BayesianLinear", "BayesianMLP", "gaussian_kl", "inverse_softplus", "standard_normal"]

_KINDS = ("weight", "bias")


def inverse_softplus(sigma: Tensor) -> Tensor:
    """``rho = softplus^{-1}(sigma) = log(e^sigma - 1) = sigma + log(1 - e^{-sigma})`` (stable form)."""
    return sigma + torch.log(-torch.expm1(-sigma))


def gaussian_kl(mu: Tensor, rho: Tensor, prior_sigma: float) -> Tensor:
    """Elementwise ``KL(N(mu, s^2) || N(0, p^2)) = log(p / s) + (s^2 + mu^2) / (2 p^2) - 1/2``,
    ``s = softplus(rho)``, ``p = prior_sigma``."""
    sigma = nn.functional.softplus(rho)
    quadratic = (sigma.square() + mu.square()) / (2 * prior_sigma**2)
    return math.log(prior_sigma) - torch.log(sigma) + quadratic - 0.5


def standard_normal(like: Tensor, generator: torch.Generator | RowStreams | None) -> Tensor:
    """Standard normal draws shaped like ``like``.

    ``None``: torch's global RNG (``randn_like``; the sequential engine seeds it per center).
    A ``torch.Generator``: ``torch.randn`` from it. Per-row streams (:class:`RowStreams`, the
    packed engine's one stream per center): row ``c`` (``like[c]``, one center) takes
    ``ceil(m / 2)`` 64-bit words from stream ``c`` alone (``m = like[c].numel()``), so a center's
    draws do not depend on which centers share the step. Each word's two 32-bit halves give
    uniforms ``u_1, u_2 = (bits + 1/2) / 2^32`` in (0, 1) and, by Box-Muller,
    ``z = sqrt(-2 ln u_1) (cos 2 pi u_2, sin 2 pi u_2)``, two independent N(0, 1) draws (tails cut at
    ``sqrt(2 ln 2^33) = 6.8`` standard deviations).
    """
    if generator is None:
        return torch.randn_like(like)
    if isinstance(generator, torch.Generator):
        return torch.randn(like.shape, generator=generator, dtype=like.dtype, device=like.device)
    rows, m = like.shape[0], like[0].numel()
    words = generator.words(rows, (m + 1) // 2)
    low = (words & 0xFFFFFFFF).to(torch.float64)
    high = ((words >> 32) & 0xFFFFFFFF).to(torch.float64)
    u1, u2 = (low + 0.5) / 2.0**32, (high + 0.5) / 2.0**32
    radius, angle = torch.sqrt(-2.0 * torch.log(u1)), (2.0 * math.pi) * u2
    z = torch.cat([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)[:, :m]
    return z.reshape(like.shape).to(like.dtype)


class BayesianLinear(nn.Module):
    """A linear layer whose weight and bias are mean-field Gaussians ``N(mu, softplus(rho)^2)``.

    Args:
        in_features: Input width.
        out_features: Output width.
        init_sigma: Initial posterior standard deviation of every weight and bias.
    """

    def __init__(self, in_features: int, out_features: int, init_sigma: float) -> None:
        super().__init__()
        self.in_features, self.out_features, self.init_sigma = in_features, out_features, init_sigma
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_rho = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_rho = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """``mu`` as ``nn.Linear`` initializes its weight and bias; ``rho = softplus^{-1}(init_sigma)``."""
        nn.init.kaiming_uniform_(self.weight_mu, a=math.sqrt(5))
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.bias_mu, -bound, bound)
        rho = float(inverse_softplus(torch.tensor(self.init_sigma, dtype=torch.float64)))
        self.weight_rho.fill_(rho)
        self.bias_rho.fill_(rho)


class BayesianMLP(CenterModule):
    """Mean-field Gaussian Bayesian MLP for binary mortality prediction (see the module docstring).

    Args:
        in_features: Input width; ``None`` takes it from the data when the federation starts.
        hidden: Hidden widths (the MLP's 128, 64).
        prior_sigma: Standard deviation of the zero-mean Gaussian prior on every weight and bias.
        init_sigma: Initial posterior standard deviation (``rho`` starts at ``softplus^{-1}`` of it).
        kl_weight: ``beta`` in front of ``KL / n`` (1: the ELBO).
        lr: Adam learning rate (as the MLP: 1e-3).
        weight_decay: Adam L2 weight decay; 0 by default because the KL term already regularizes
            (decay would also pull ``rho`` towards 0, i.e. ``sigma`` towards ``log 2``).
    """

    def __init__(
        self,
        in_features: int | None = None,
        hidden: Sequence[int] = (128, 64),
        prior_sigma: float = 1.0,
        init_sigma: float = 0.01,
        kl_weight: float = 1.0,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        if not prior_sigma > 0:
            raise ValueError(f"model.prior_sigma must be > 0, got {prior_sigma}")
        if not init_sigma > 0:
            raise ValueError(f"model.init_sigma must be > 0, got {init_sigma}")
        if not kl_weight >= 0:
            raise ValueError(f"model.kl_weight must be >= 0 (1 is the ELBO), got {kl_weight}")
        if not lr > 0:
            raise ValueError(f"model.lr must be > 0, got {lr}")
        if not weight_decay >= 0:
            raise ValueError(f"model.weight_decay must be >= 0, got {weight_decay}")
        widths = hidden_widths(hidden)
        self.save_hyperparameters()
        self.hidden = widths
        self.prior_sigma, self.init_sigma = float(prior_sigma), float(init_sigma)
        self.kl_weight, self.lr, self.weight_decay = float(kl_weight), float(lr), float(weight_decay)
        self.layers = nn.ModuleList()
        self.in_features: int | None = None
        if in_features is not None:
            self.set_num_features(in_features)

    def set_num_features(self, num_features: int) -> None:
        """Build the layers for ``num_features`` inputs (error if built for another width)."""
        if not input_width_to_build(self.in_features, num_features):
            return
        self.in_features = int(num_features)
        widths = [self.in_features, *self.hidden, 1]
        self.layers = nn.ModuleList(
            BayesianLinear(a, b, self.init_sigma) for a, b in itertools.pairwise(widths)
        )

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        """``mu`` and ``rho`` of the weight and bias of the last ``layers`` layers."""
        if not 1 <= layers <= len(self.layers):
            raise ValueError(f"head layers must be in [1, {len(self.layers)}], got {layers}")
        first = len(self.layers) - layers
        return tuple(
            f"layers.{i}.{kind}_{part}"
            for i in range(first, len(self.layers))
            for kind in _KINDS
            for part in ("mu", "rho")
        )

    def reference_parameters(self) -> int:
        """The deterministic MLP's count (the model this one replaces): the ``*_mu`` entries only,
        ``sum_i (in_i out_i + out_i)``. BNN+FL sends ``mu`` and ``rho``, so it shows as 2x FedAvg."""
        return sum(layer.weight_mu.numel() + layer.bias_mu.numel() for layer in self.layers)

    def noise(self, like: Tensor, generator: torch.Generator | RowStreams | None) -> Tensor:
        """Standard normal ``eps`` shaped like ``like`` (see :func:`standard_normal`)."""
        return standard_normal(like, generator)

    def _run(
        self,
        params: dict[str, Tensor],
        x: Tensor,
        sample: bool,
        generator: torch.Generator | RowStreams | None,
    ) -> tuple[Tensor, Tensor]:
        """Logits ``[k, B]`` and last hidden activations ``[k, B, H]`` of ``k`` stacked posteriors.

        With ``sample``, layer by layer (weight first, then bias) ``w = mu + softplus(rho) * eps``
        with ``eps`` from :meth:`noise`; otherwise ``w = mu``.
        """
        h = x
        last = len(self.layers) - 1
        for i in range(last + 1):
            w, b = (params[f"layers.{i}.{kind}_mu"] for kind in _KINDS)
            if sample:
                w_rho, b_rho = (params[f"layers.{i}.{kind}_rho"] for kind in _KINDS)
                w = w + nn.functional.softplus(w_rho) * self.noise(w, generator)
                b = b + nn.functional.softplus(b_rho) * self.noise(b, generator)
            z = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            if i == last:
                return z.squeeze(-1), h
            h = torch.relu(z)
        raise AssertionError("unreachable: the model has at least one layer")

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[n]`` for inputs ``[n, F]`` (a weight draw in training mode, the means in eval)."""
        return self.forward_features(x)[0]

    def forward_features(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Logits ``[n]`` and the last hidden activation ``[n, H]``; training draws ``eps`` from torch's
        global RNG (the sequential engine seeds it from the run seed)."""
        # Attribute access (not named_parameters) so torch.func.functional_call's substitutes are used.
        params = {
            f"layers.{i}.{kind}_{part}": getattr(layer, f"{kind}_{part}").unsqueeze(0)
            for i, layer in enumerate(self.layers)
            for kind in _KINDS
            for part in ("mu", "rho")
        }
        logits, h = self._run(params, x.unsqueeze(0), self.training, None)
        return logits[0], h[0]

    def packed_forward(
        self, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | RowStreams | None
    ) -> Tensor:
        """Logits ``[k, B]`` of ``k`` stacked posteriors on ``x [k, B, F]``.

        With ``generator`` (training), each center gets its own weight draw: per layer, ``eps`` of the
        weight ``[k, out, in]`` then of the bias ``[k, out]`` are drawn from ``generator`` (the
        packed engine's per-center streams; :func:`standard_normal`). Without it (evaluation), the
        posterior means.
        """
        return self._run(params, x, generator is not None, generator)[0]

    def packed_forward_features(
        self, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | RowStreams | None
    ) -> tuple[Tensor, Tensor]:
        """Packed logits ``[k, B]`` and last hidden activations ``[k, B, H]`` (see :meth:`packed_forward`)."""
        return self._run(params, x, generator is not None, generator)

    def penalty(self, params: dict[str, Tensor], n_train: Tensor) -> Tensor:
        """``beta KL(q || N(0, prior_sigma^2 I)) / n`` per stacked model ``[k]`` (closed form, summed
        over every weight and bias; see :func:`gaussian_kl`)."""
        first = next(iter(params.values()))
        kl = torch.zeros(first.shape[0], dtype=first.dtype, device=first.device)
        for i in range(len(self.layers)):
            for kind in _KINDS:
                mu, rho = params[f"layers.{i}.{kind}_mu"], params[f"layers.{i}.{kind}_rho"]
                kl = kl + gaussian_kl(mu, rho, self.prior_sigma).flatten(1).sum(1)
        return self.kl_weight * kl / n_train.to(kl.device, kl.dtype)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam, as the MLP (lr 1e-3), with L2 weight decay ``weight_decay`` (0 by default)."""
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
