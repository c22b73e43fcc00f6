r"""A policy that shares strength across peers: Bayesian linear regression of credit on pair features.

Why (issue 30). A Beta posterior per pair learns about peer ``j`` only from ``i``'s observations of
``j``: at 230 centers a center sees 50-150 credits in 50 rounds spread over 229 peers, and with the
credits' noise (same-unit advantage / within-pair sd = 0.24 for the AUROC utility) one pair needs
about 70 observations to separate. Every pair, however, is described by features both ends know
(Sec. 4.1's descriptors, a declared categorical attribute such as the care unit), and a credit
model on those features learns from every observation at once.

Model. For observer ``i`` and peer ``j`` the clipped credit (Eq. 5) is

.. math:: \bar\phi_{ijk} = x_{ij}^\top w_i + r_{ij} + e_{ijk}, \qquad e \sim N(0, \sigma^2),
          \qquad w_i \sim N(m_0, s_0^2 I),

with features :math:`x_{ij} = (1, |v_i - v_j| / sd(v), [a_i = a_j]_{a \in \text{attributes}})`
(the intercept's prior mean :math:`m_0 = 0.5` (``phi = 0``), every other 0), :math:`v` the metadata
descriptors (first ``metadata_dim`` entries, each difference scaled by the descriptor's standard
deviation over centers) and :math:`[a_i = a_j]` one indicator per declared attribute. The posterior
is Gaussian: precision :math:`P_i = I/s_0^2 + \sum x x^\top/\sigma^2`, mean
:math:`\hat w_i = P_i^{-1}(m_0/s_0^2 + \sum x\bar\phi/\sigma^2)`; with ``pool`` (default) the sums run
over every observer's observations (one ``w`` for the federation: what a center learns about
"same unit helps" transfers to all), else over ``i``'s own. :math:`\sigma^2` is the residual
variance of the pooled fit (floored at ``min_noise^2``; 0.25, the ``[0, 1]`` bound, before
``d + 1`` observations). The per-pair residual is the Beta posterior's evidence beyond the model,
a random effect :math:`r_{ij} \sim N(0, \tau^2)` estimated by empirical Bayes: with the pair's mean
residual :math:`\bar e_{ij} = \sum_k \bar\phi_{ijk}/n_{ij} - x_{ij}^\top \hat w_i` (the sum and ``n``
are the pair's Beta ``alpha - alpha0`` and count), :math:`E[\bar e^2] = \tau^2 + \sigma^2/n`, so
:math:`\hat\tau^2 = \max(0, \mathrm{mean}(\bar e^2 - \sigma^2/n))` over the observed pairs, and the
posterior mean of the residual is the shrunk :math:`r_{ij} = \bar e_{ij}\, n_{ij}/(n_{ij} +
\sigma^2/\hat\tau^2)` (0 when :math:`\hat\tau^2 = 0`: the features explain every pair; a fixed
pseudo-count would let the noise of the most observed pairs, the ones the model favours, push them
out: measured on the oracle of ``tests/selection/test_regression_oracle.py``, 0.62 same-group
partners at rounds 25-29 with 10 pseudo-observations against 0.85 without the residual).

Peer effect (``peer_effect``, off by default). Some peers hurt (or help) every receiver for a reason
no declared feature names: an off-concept hospital whose labels follow another rule. Its pairs' mean
residuals then share one sign whoever observes them, so a per-peer random effect :math:`s_j \sim
N(0, \tau_s^2)` pooled over observers learns it from every observation of ``j`` at once (a sender is
observed by many centers each round) where the per-pair residual needs many observations of each
pair. Model :math:`\bar\phi_{ijk} = x_{ij}^\top w_i + s_j + r_{ij} + e_{ijk}`, fitted in two empirical
Bayes stages: first, with :math:`n_j = \sum_i n_{ij}` and the peer's pooled mean residual
:math:`\bar e_j = \sum_i n_{ij}\bar e_{ij} / n_j`, :math:`E[\bar e_j^2] \approx \tau_s^2 + \sigma^2/n_j`
gives :math:`\hat\tau_s^2 = \max(0, \mathrm{mean}_j(\bar e_j^2 - \sigma^2/n_j))` and the shrunk
:math:`s_j = \bar e_j\, n_j/(n_j + \sigma^2/\hat\tau_s^2)` (posterior variance :math:`(1/\hat\tau_s^2 +
n_j/\sigma^2)^{-1}`, :math:`\hat\tau_s^2` for a peer nobody has observed); then the per-pair residual
above is estimated on :math:`\bar e_{ij} - s_j`. (:math:`\sigma^2` is the pooled linear fit's residual
variance, which includes the peer effects' spread: it overstates the noise and shrinks more, the
conservative direction.) The effect is pooled over observers also with ``pool: false``: it is what the
federation has seen of ``j``.

Scores. Thompson sampling: each round, each observer draws :math:`\tilde w_i \sim N(\hat w_i,
P_i^{-1})` (one draw per observer from the round's policy generator, also when pooled, so centers
explore differently) and scores :math:`x_{ij}^\top \tilde w_i + r_{ij}`, on the clipped-credit scale
(0.5 = ``phi = 0``). With Eq. 7's acceptance (``score >= tau_acc``) a score below ``tau_acc`` is a
refusal; set ``tau_acc: 0`` to accept everyone, or an acceptance rule
(:mod:`~lightning_fed.selection.abps.rest`) to rest on the Beta posterior.

Wire. The features are public (descriptors, declared attributes); pooling means every center
publishes its sufficient statistics :math:`(\sum x x^\top, \sum x \bar\phi, \sum \bar\phi^2, n)` each
round, ``(d + 1)(d + 2)/2 + 1`` numbers and never a row; the peer effect needs, per observation, the
peer and the credit (two numbers). ABPS books the simplest complete form, every observation posted
to the directory, and each center's feature record once (:mod:`~lightning_fed.selection.abps.board`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fed.selection.abps.policy import DenseScores, SelectionPolicy
from lightning_fed.selection.abps.posterior import BLOCK_ROWS, BetaPosterior
from lightning_fed.selection.base import SELECTOR_KEY
from lightning_fed.validation import check_number

__all__ = ["PairRegression"]

_KEY = f"{SELECTOR_KEY}.policy.init_args"


class PairRegression(SelectionPolicy):
    """Thompson sampling on a Bayesian linear model of credit on pair features (module docstring).

    Args:
        attributes: Declared categorical attributes of the centers (``center.attributes``, e.g.
            ``["care_unit"]``), one same-value indicator each; every center must declare them.
        metadata_dim: Descriptor entries used as ``|v_i - v_j|`` features (0: none).
        pool: Fit one model on every observer's observations (True) or one per observer.
        prior_sd: ``s_0``, the prior standard deviation of every coefficient (> 0).
        min_noise: Floor of the estimated noise ``sigma`` (> 0).
        residual: Add the per-pair residual (the Beta evidence beyond the model, shrunk by empirical
            Bayes; module docstring).
        peer_effect: Add a per-peer effect pooled over observers (module docstring); default False
            (the model measured in docs/results/abps_learned).

    The noise ``sigma^2`` and the residual spread ``tau^2`` are federation-wide estimates also with
    ``pool: false``, so the policy always reads every observer's observations
    (:attr:`pools_observations`).
    """

    pools_observations = True

    def __init__(
        self,
        attributes: Sequence[str] = ("care_unit",),
        metadata_dim: int = 3,
        pool: bool = True,
        prior_sd: float = 0.1,
        min_noise: float = 1e-3,
        residual: bool = True,
        peer_effect: bool = False,
    ) -> None:
        if isinstance(attributes, str) or not all(isinstance(a, str) for a in attributes):
            raise ValueError(f"{_KEY}.attributes must be a list of attribute names, got {attributes!r}")
        if int(metadata_dim) != metadata_dim or metadata_dim < 0:
            raise ValueError(f"{_KEY}.metadata_dim must be an integer >= 0, got {metadata_dim}")
        self.attributes, self.metadata_dim, self.pool = list(attributes), int(metadata_dim), bool(pool)
        self.prior_sd = check_number(f"{_KEY}.prior_sd", prior_sd, 0.0, strict=True)
        self.min_noise = check_number(f"{_KEY}.min_noise", min_noise, 0.0, strict=True)
        self.residual = bool(residual)
        self.peer_effect = bool(peer_effect)
        self.dim = 1 + self.metadata_dim + len(self.attributes)
        #: Each center's public feature record: descriptor entries in float64, attribute codes in int32.
        self.feature_record_bytes = 8 * self.metadata_dim + 4 * len(self.attributes)
        self.descriptors: Tensor | None = None
        self.codes: Tensor | None = None
        self.setup()

    def bind(self, metadata: Tensor, attributes: Sequence[dict[str, Any]] | None) -> None:
        """The public pair features: descriptors ``[C, d]`` and each center's declared attributes.

        Raises:
            ValueError: If the descriptors have fewer than ``metadata_dim`` entries or a center does
                not declare an attribute.
        """
        c = int(metadata.shape[0])
        if metadata.ndim != 2 or metadata.shape[1] < self.metadata_dim:
            raise ValueError(
                f"{_KEY}.metadata_dim is {self.metadata_dim} but the descriptors have "
                f"{metadata.shape[1] if metadata.ndim == 2 else 0} entries"
            )
        v = metadata[:, : self.metadata_dim].to("cpu", torch.float64)
        sd = (
            v.std(0, unbiased=False)
            if c > 1 and self.metadata_dim
            else torch.ones(self.metadata_dim, dtype=torch.float64)
        )
        self.descriptors = v / torch.where(sd > 0, sd, 1.0)
        codes = torch.zeros(c, len(self.attributes), dtype=torch.int64)
        for k, name in enumerate(self.attributes):
            values = [None if attributes is None else attributes[i].get(name) for i in range(c)]
            if any(x is None for x in values):
                raise ValueError(f"{_KEY}.attributes: not every center declares {name!r}")
            index = {x: n for n, x in enumerate(sorted(set(map(str, values))))}
            codes[:, k] = torch.tensor([index[str(x)] for x in values])
        self.codes = codes
        self.setup()

    def setup(self) -> None:
        #: Per observer: sum x x^T [C, d, d], sum x phi_bar [C, d]; pooled: sum phi_bar^2 and count.
        self.xx: Tensor | None = None
        self.xy: Tensor | None = None
        self.yy, self.n = 0.0, 0

    def features(self, i: Tensor, j: Tensor) -> Tensor:
        """``x_ij`` for broadcastable index tensors ``i``, ``j``: float64 ``[..., d]``."""
        if self.descriptors is None or self.codes is None:
            raise RuntimeError("PairRegression needs the pair features: the selector binds them at setup")
        i, j = torch.broadcast_tensors(torch.as_tensor(i), torch.as_tensor(j))
        parts = [torch.ones(*i.shape, 1, dtype=torch.float64)]
        if self.metadata_dim:
            parts.append((self.descriptors[i] - self.descriptors[j]).abs())
        if self.attributes:
            parts.append((self.codes[i] == self.codes[j]).to(torch.float64))
        return torch.cat(parts, -1)

    def observe(self, i: Tensor, j: Tensor, phi_bar: Tensor, num_centers: int) -> None:
        """Accumulate the sufficient statistics of this round's observations."""
        i, j = torch.as_tensor(i).reshape(-1), torch.as_tensor(j).reshape(-1)
        y = torch.as_tensor(phi_bar, dtype=torch.float64).reshape(-1)
        if self.xx is None:
            self.xx = torch.zeros(num_centers, self.dim, self.dim, dtype=torch.float64)
            self.xy = torch.zeros(num_centers, self.dim, dtype=torch.float64)
        x = self.features(i, j)
        self.xx.index_add_(0, i, x[:, :, None] * x[:, None, :])
        self.xy.index_add_(0, i, x * y[:, None])
        self.yy += float((y * y).sum())
        self.n += int(y.numel())

    def _prior(self) -> tuple[Tensor, Tensor]:
        m0 = torch.zeros(self.dim, dtype=torch.float64)
        m0[0] = 0.5
        return m0, torch.eye(self.dim, dtype=torch.float64) / self.prior_sd**2

    def noise(self) -> float:
        """``sigma^2``: residual variance of the pooled fit, floored (0.25 before ``d + 1`` points)."""
        if self.xx is None or self.n <= self.dim:
            return 0.25
        xx, xy = self.xx.sum(0), self.xy.sum(0)  # least squares (a 1e-9 ridge for unused features)
        w = torch.linalg.solve(xx + 1e-9 * torch.eye(self.dim, dtype=torch.float64), xy)
        rss = self.yy - 2.0 * float(w @ xy) + float(w @ xx @ w)
        return max(rss / (self.n - self.dim), self.min_noise**2)

    def posterior(self, num_centers: int) -> tuple[Tensor, Tensor]:
        """``(w_hat [C, d], chol [C, d, d])``: each observer's posterior mean and the Cholesky factor of
        its posterior precision."""
        m0, p0 = self._prior()
        s2 = self.noise()
        if self.xx is None:
            xx = torch.zeros(num_centers, self.dim, self.dim, dtype=torch.float64)
            xy = torch.zeros(num_centers, self.dim, dtype=torch.float64)
        elif self.pool:
            xx = self.xx.sum(0).expand(num_centers, -1, -1)
            xy = self.xy.sum(0).expand(num_centers, -1)
        else:
            xx, xy = self.xx, self.xy
        precision = p0 + xx / s2
        chol = torch.linalg.cholesky(precision)
        rhs = (p0 @ m0) + xy / s2
        w = torch.cholesky_solve(rhs.unsqueeze(-1), chol).squeeze(-1)
        return w, chol

    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        c = posterior.num_centers
        w, chol = self.posterior(c)
        z = torch.randn(c, self.dim, generator=generator, dtype=torch.float64)
        # w~ = w + L^{-T} z has covariance (L L^T)^{-1} = P^{-1}
        drawn = w + torch.linalg.solve_triangular(
            chol.transpose(-1, -2), z.unsqueeze(-1), upper=True
        ).squeeze(-1)
        out = torch.empty(c, c, dtype=torch.float64)
        peers = torch.arange(c)
        for lo in range(0, c, BLOCK_ROWS):
            rows = torch.arange(lo, min(c, lo + BLOCK_ROWS))
            x = self.features(rows[:, None], peers[None, :])  # [B, C, d]
            out[rows] = torch.einsum("bcd,bd->bc", x, drawn[rows])
        s, _, _ = self.peer_effects(posterior, w)
        i, j, r, _, _ = self.residual_effects(posterior, w)
        out += s[None, :]
        out[i, j] += r
        return out

    def _pair_residuals(self, posterior: BetaPosterior, w: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(i, j, n, e_bar)`` on the observed pairs: count and mean residual from the model."""
        pairs = posterior.pairs
        n = pairs.values["count"] if len(pairs) else torch.zeros(0, dtype=torch.float64)
        seen = n > 0
        i, j, n = pairs.i[seen], pairs.j[seen], n[seen]
        mean = (pairs.values["alpha"][seen] - posterior.alpha0) / n
        return i, j, n, mean - (self.features(i, j) * w[i]).sum(-1)

    def peer_effects(self, posterior: BetaPosterior, w: Tensor) -> tuple[Tensor, Tensor, float]:
        """``(s, v, tau_s2)``: each peer's shrunk effect ``s_j`` pooled over observers, its posterior
        variance ``v_j`` (``tau_s^2`` for a peer nobody observed) and ``tau_s^2``, float64 ``[C]``
        (module docstring); zeros without ``peer_effect``, before any observation or while
        ``tau_s^2 = 0``."""
        c = posterior.num_centers
        zeros = torch.zeros(c, dtype=torch.float64)
        if not (self.peer_effect and len(posterior.pairs)):
            return zeros, zeros.clone(), 0.0
        _, j, n, e = self._pair_residuals(posterior, w)
        n_j = torch.zeros(c, dtype=torch.float64).index_add_(0, j, n)
        seen = n_j > 0
        if not bool(seen.any()):
            return zeros, zeros.clone(), 0.0
        e_j = torch.zeros(c, dtype=torch.float64).index_add_(0, j, n * e)[seen] / n_j[seen]
        s2 = self.noise()
        tau2 = max(0.0, float((e_j * e_j - s2 / n_j[seen]).mean()))
        if tau2 <= 0:
            return zeros, zeros.clone(), 0.0
        effect, var = zeros.clone(), torch.full((c,), tau2, dtype=torch.float64)
        effect[seen] = e_j * n_j[seen] / (n_j[seen] + s2 / tau2)
        var[seen] = 1.0 / (1.0 / tau2 + n_j[seen] / s2)
        return effect, var, tau2

    def residual_effects(
        self, posterior: BetaPosterior, w: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, float]:
        """``(i, j, r, v, tau2)``: on the observed pairs the shrunk residual ``r_ij`` and its posterior
        variance ``v_ij = (1/tau^2 + n_ij/sigma^2)^{-1}``, and ``tau^2 = max(0, mean(e_bar^2 -
        sigma^2/n))`` (module docstring; no pairs without ``residual`` or while ``tau^2 = 0``)."""
        empty = torch.zeros(0, dtype=torch.int64)
        none = (empty, empty, empty.to(torch.float64), empty.to(torch.float64), 0.0)
        if not (self.residual and len(posterior.pairs)):
            return none
        i, j, n, e = self._pair_residuals(posterior, w)
        if not len(n):
            return none
        e = e - self.peer_effects(posterior, w)[0][j]  # the pair's residual beyond its peer's effect
        s2 = self.noise()
        tau2 = max(0.0, float((e * e - s2 / n).mean()))
        if tau2 <= 0:
            return none
        return i, j, e * n / (n + s2 / tau2), 1.0 / (1.0 / tau2 + n / s2), tau2

    def predictive(self, posterior: BetaPosterior) -> tuple[Tensor, Tensor]:
        r"""The posterior of every pair's utility :math:`u_{ij} = x_{ij}^\top w_i + r_{ij}`: ``(mean,
        var)``, float64 ``[C, C]``.

        ``mean = x^T w_hat_i + r_ij`` (the shrunk residual, 0 for an unobserved pair), ``var = x^T
        P_i^{-1} x + v_ij`` with ``v_ij`` the residual's posterior variance on an observed pair and
        its prior ``tau^2`` on an unobserved one (:meth:`residual_effects`). This is what a center
        believes about a peer it has never met: the model's prediction for that pair's features,
        with the spread of pairs around the model. With ``peer_effect`` the peer's pooled effect
        ``s_j`` is added to the mean and its variance ``v_j`` to the variance (:meth:`peer_effects`).
        """
        c = posterior.num_centers
        w, chol = self.posterior(c)
        cov = torch.cholesky_inverse(chol)  # P_i^{-1} [C, d, d]
        i, j, r, v, tau2 = self.residual_effects(posterior, w)
        s, s_var, _ = self.peer_effects(posterior, w)
        mean = torch.empty(c, c, dtype=torch.float64)
        var = torch.empty(c, c, dtype=torch.float64)
        peers = torch.arange(c)
        for lo in range(0, c, BLOCK_ROWS):
            rows = torch.arange(lo, min(c, lo + BLOCK_ROWS))
            x = self.features(rows[:, None], peers[None, :])  # [B, C, d]
            mean[rows] = torch.einsum("bcd,bd->bc", x, w[rows])
            var[rows] = torch.einsum("bcd,bde,bce->bc", x, cov[rows], x) + tau2
        mean[i, j] += r
        var[i, j] += v - tau2
        return mean + s[None, :], var + s_var[None, :]

    def pair_scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> DenseScores:
        return DenseScores(self.scores(posterior, t, generator))

    def state_dict(self) -> dict[str, Any]:
        """The sufficient statistics (``{}`` before any observation)."""
        if self.xx is None or self.xy is None:
            return {}
        return {"xx": self.xx.clone(), "xy": self.xy.clone(), "yy": self.yy, "n": self.n}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "xx" in state:
            self.xx, self.xy = state["xx"].clone(), state["xy"].clone()
            self.yy, self.n = float(state["yy"]), int(state["n"])

    def __repr__(self) -> str:
        return (
            f"PairRegression(attributes={self.attributes}, metadata_dim={self.metadata_dim}, "
            f"pool={self.pool}, prior_sd={self.prior_sd}, min_noise={self.min_noise}, "
            f"residual={self.residual}, peer_effect={self.peer_effect})"
        )
