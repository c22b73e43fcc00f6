r"""Acceptance rules with Lemma 1's meaning: a center rests when every peer's utility is below ``c_neg``.

Why Eq. 7 cannot rest (the paper's rule, the default). Algorithm 1 line 19 accepts a proposal when
the receiver's Eq. 7 score :math:`\mu + \gamma\sqrt{2\ln t/(n+1)}` is :math:`\ge \tau_{acc}`. With
the Beta(1, 1) prior the lowest score a pair can hold at round ``t`` is reached when it has been
observed in every earlier round (``n = t - 1``) with :math:`\bar\phi = 0` each time: the mean is
:math:`1/(n + 2) = 1/(t + 1)` and the score is

.. math:: s_{\min}(t) = \frac{1}{t+1} + \gamma\sqrt{\frac{2\ln t}{t}}
          \overset{\gamma=\sqrt 2}{=} \frac{1}{t+1} + 2\sqrt{\frac{\ln t}{t}}.

Both terms decrease in ``n`` for fixed ``t``, so this is the minimum over pairs; it decreases in ``t``
for ``t >= 3`` and :math:`s_{\min}(50) = 1/51 + 2\sqrt{\ln 50/50} = 0.0196 + 0.5594 = 0.579 > 0.5`
(:math:`s_{\min}(2) = 1.51`, :math:`s_{\min}(10) = 1.05`; at ``t = 1`` the bonus is 0 and every pair
scores its prior mean 0.5, which is accepted). So with :math:`\tau_{acc} = 0.5` no pair can be
rejected before ``t = 73`` (the first ``t`` with :math:`s_{\min}(t) < 0.5`), whatever the credits:
``isolation_rejected = 0`` in a 50-round run is a property of the hyperparameters.

The rule here (:class:`PosteriorExceedance`). Lemma 1 (Appendix C.3, Eq. 21) sets the
negative-transfer threshold :math:`c_{neg} = -\phi_{\min}/(\phi_{\max}-\phi_{\min})` (0.5 for the
paper's clip), the clipped mean utility at which one-peer collaboration breaks even; resting is
Bayes-optimal when every peer's true :math:`\mu^\star_{i\to j} < c_{neg}`. The rule accepts peer
``j`` only when the posterior probability that its utility exceeds :math:`c_{neg}` is at least
``level``:

.. math:: a_{i\to j} = P(u_{i\to j} > c_{neg} \mid \text{data})
          = \Phi\!\left(\frac{(\mu_{i\to j} - c_{neg})\sqrt{n_{i\to j} + n_0}}{\sigma}\right)
          \ge \text{level}.

Derivation: model the clipped credits as :math:`\bar\phi_{ijk} \sim N(u_{ij}, \sigma^2)` with the
prior :math:`u_{ij} \sim N(\alpha_0/n_0, \sigma^2/n_0)`, :math:`n_0 = \alpha_0 + \beta_0` (the Beta
prior's pseudo-count at its mean). The conjugate posterior is
:math:`N((\alpha_0 + \sum_k \bar\phi_{ijk})/(n_0 + n), \sigma^2/(n_0 + n))`: its mean is the Beta
posterior mean :math:`\mu_{i\to j}` of Eq. 6 exactly; only the width differs. The Beta width is set
by the pseudo-count (:math:`\approx 1/(2\sqrt{n+3})`, the worst case of a ``[0, 1]`` variable); here
it is the noise of the credits themselves: :math:`\sigma` is the pooled within-pair standard
deviation of :math:`\bar\phi` (one-way ANOVA residual over every observed pair, as
:class:`~lightning_fed.selection.abps.policy.ScaledUCB` estimates it), 0.5 (the bound for a
``[0, 1]`` variable) until some pair has two observations, floored at ``min_scale``; ``scale``
fixes it instead.

When it rests and when it does not. With ``z = Phi^{-1}(1 - level)`` center ``i`` refuses ``j`` iff
its upper bound is below the threshold:

.. math:: \mu_{i\to j} + z\,\sigma/\sqrt{n_{i\to j} + n_0} < c_{neg}.

With ``mutual`` (default) the proposer applies the rule too (it proposes only to peers it accepts),
so a partnership needs both ends' consent, and center ``i`` rests whenever it refuses every
candidate: exactly Lemma 1's condition with the oracle mean replaced by a ``1 - level`` upper bound.
It does **not** rest while (a) some candidate is unobserved and the prior mean is
:math:`\ge c_{neg}` (Beta(1, 1): :math:`a = \Phi(0) = 0.5 \ge` level for any level <= 0.5, so every
candidate is tried once), or (b) some candidate's upper bound reaches :math:`c_{neg}`, i.e. its
credits are not clearly harmful. E.g. with :math:`\sigma = 0.1`, level 0.05 (``z = 1.645``) and
``n0 = 2``, a peer observed once (:math:`\mu = (1 + \bar\phi)/3`, bound
:math:`\mu + 0.1645/\sqrt 3 = \mu + 0.095`) is refused iff :math:`\bar\phi < 0.215` (a Shapley
value below -0.057 on the paper's clip); after ``n`` observations at mean :math:`m`, iff
:math:`(1 + n m)/(n + 2) < 0.5 - 0.1645/\sqrt{n + 2}`. A refused
pair is not observed again (neither end proposes it), so the decision is final for that pair unless
the noise estimate :math:`\sigma` grows; the epsilon swap of the matching only reorders proposals.
Without ``mutual`` only the receiver tests (as Eq. 7's line 19): a center that refuses every peer
can still be accepted by a peer that does not refuse it, so it rests only if those refuse it too.

The empirical prior (``empirical_prior: true``) removes case (a) once a center has a record. An
unobserved peer's prior mean becomes the receiver's own track record
:math:`m_i = (\alpha_0 + S_i)/(n_0 + N_i)`, the Beta prior updated with all :math:`N_i` credits
``i`` has observed from any peer (sum :math:`S_i`): the expected utility of a peer drawn from the
population ``i`` has sampled, with the pseudo-count :math:`n_0` kept as its weight (a stranger is
one more draw from that population, not its mean). ``i`` then refuses strangers too when
:math:`m_i + z\sigma/\sqrt{n_0} < c_{neg}`, e.g. :math:`m_i < 0.384` with :math:`\sigma = 0.1`,
``n0 = 2``, level 0.05, and rests when it refuses every candidate: on a federation where
collaboration hurts every center (each its own concept) centers stop trying strangers after a few
harmful credits; where some peers help, :math:`m_i` stays near or above :math:`c_{neg}` and
strangers are still tried. Off by default (the rule as first built).

Why the empirical prior still does not rest at 230 centers (measured, issue 30). The per-round
diagnostics (``rest_*`` columns of ``rounds.parquet``, :meth:`PosteriorExceedance.diagnostics`) show
the stranger bound :math:`m_i + z\sigma/\sqrt{n_0}`: the stranger's width is the prior's,
:math:`\sigma/\sqrt{n_0}` with :math:`n_0 = 2`, so with the measured credit noise it is refused only
when :math:`m_i` is far below ``c_neg`` (docs/methods.md gives the measured values). One
Beta pseudo-count's worth of belief about a stranger is all the per-pair model has; it does not use
what the federation has learned about pairs like this one.

The model posterior (``model_posterior: true``). With a policy that models credit on pair
features (:class:`~lightning_fed.selection.abps.regression.PairRegression`), every pair, observed or
not, is scored by that model's posterior of its utility,
:math:`u_{ij} \mid \text{data} \approx N(\hat u_{ij}, s^2_{ij})` with
:math:`\hat u_{ij} = x_{ij}^\top\hat w_i + \hat r_{ij}` and
:math:`s^2_{ij} = x_{ij}^\top P_i^{-1}x_{ij} + v_{ij}`
(:meth:`~lightning_fed.selection.abps.regression.PairRegression.predictive`: the coefficient
uncertainty plus the per-pair residual's, :math:`v_{ij} = \hat\tau^2` for a stranger), and

.. math:: a_{i\to j} = \Phi\!\left(\frac{\hat u_{ij} - c_{neg}}{s_{ij}}\right).

When it rests: with ``mutual``, ``i`` refuses ``j`` iff :math:`\hat u_{ij} + z s_{ij} < c_{neg}` and
rests iff that holds for every candidate, i.e. when the model predicts every candidate's utility
below ``c_neg`` with a margin of ``z`` posterior sds. Pooled over observers, :math:`P^{-1}` shrinks
like ``1/N`` in the federation's total number of credits ``N`` (hundreds per round), so after a few
rounds :math:`s_{ij} \approx \hat\tau` for strangers: (a) where pairs differ little beyond their
features (:math:`\hat\tau \to 0`) a center rests as soon as every candidate's predicted mean is below
``c_neg`` (on a federation where every peer hurts: the intercept falls below ``c_neg`` and every
center rests; on one where a declared attribute separates helpful from harmful peers: the harmful
group is refused, the helpful one kept, and a center rests only if its helpful group is empty or
itself predicted below ``c_neg``); (b) where pairs spread widely around the model,
:math:`\hat u + z\hat\tau \ge c_{neg}` keeps strangers worth a try, and only observed pairs (whose
:math:`v_{ij}` shrinks with :math:`n_{ij}`) are refused. A refusal is final as before (a refused
pair is not observed), but the model keeps learning from the other pairs, so a stranger's score
moves with the pooled fit. Needs a policy with ``predictive`` (an error at setup otherwise).

Scores: the acceptance table is a :class:`~lightning_fed.selection.abps.policy.SparseScores` of
:math:`a_{i\to j}` (the observed pairs, plus one value for every unobserved pair), so nothing
``[C, C]`` is built. Ranking is unchanged: the policy's scores order the proposals.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor

from lightning_fed.selection.abps.policy import DenseScores, PairScores, SelectionPolicy, SparseScores
from lightning_fed.selection.abps.posterior import BLOCK_ROWS, MOMENTS, BetaPosterior, PairValues, add_moments
from lightning_fed.selection.base import SELECTOR_KEY
from lightning_fed.validation import check_number

__all__ = ["AcceptanceRule", "PosteriorExceedance", "best_candidate_scores", "negative_transfer_threshold"]

_KEY = f"{SELECTOR_KEY}.acceptance.init_args"


def best_candidate_scores(table: PairScores, candidates: Tensor) -> Tensor:
    """Each center's highest acceptance score over its candidates, float64 ``[C]`` (``-inf``: none),
    read :data:`~lightning_fed.selection.abps.posterior.BLOCK_ROWS` rows at a time."""
    c = candidates.shape[0]
    best = torch.full((c,), -torch.inf, dtype=torch.float64)
    for lo in range(0, c, BLOCK_ROWS):
        index = torch.arange(lo, min(c, lo + BLOCK_ROWS))
        cand = candidates[index].to("cpu", torch.bool).clone()
        cand[torch.arange(len(index)), index] = False
        best[index] = torch.where(cand, table.rows(index), -torch.inf).amax(1)
    return best


def negative_transfer_threshold(phi_min: float, phi_max: float) -> float:
    """Lemma 1's ``c_neg = -phi_min / (phi_max - phi_min)`` (Eq. 21; 0.5 for the paper's clip)."""
    return -phi_min / (phi_max - phi_min)


class AcceptanceRule(ABC):
    """Who accepts whom in the matching, in place of Eq. 7's ``score >= tau_acc``.

    A rule returns one table per round, ``table[i, j]`` = center ``i``'s acceptance score of peer
    ``j``; ``j`` accepts ``i``'s proposal iff ``table[j, i] >= threshold`` (and, when :attr:`mutual`,
    ``i`` proposes to ``j`` only if ``table[i, j] >= threshold``).

    Attributes:
        mutual: Whether the proposer applies the rule to its own proposals too.
        threshold: The level the table is compared with.
        pools_observations: Whether the table reads other centers' observations (booked by ABPS,
            :mod:`~lightning_fed.selection.abps.board`).
    """

    mutual: bool = True
    threshold: float = 0.5
    pools_observations: bool = False

    def setup(self, c_neg: float) -> None:  # noqa: B027 (stateless by default)
        """Forget everything learned; ``c_neg`` is the selector's Eq. 21 threshold (used when the
        rule has none of its own)."""

    def bind_policy(self, policy: SelectionPolicy) -> None:  # noqa: B027 (needs none by default)
        """The selector's policy, given at setup (a rule may score pairs by its model)."""

    @abstractmethod
    def table(self, posterior: BetaPosterior, t: int, candidates: Tensor | None = None) -> PairScores:
        """The acceptance table at 1-based round ``t`` from the selector's posterior (``candidates``:
        the round's bool ``[C, C]`` candidate mask, for rules relative to a center's alternatives)."""

    def diagnostics(
        self, posterior: BetaPosterior, table: PairScores, candidates: Tensor
    ) -> dict[str, float]:
        """Per-round scalars of why centers rest or not (``rest_*`` columns of ``rounds.parquet``).

        ``rest_best_acceptance``: mean over centers with a candidate of their best candidate's
        acceptance score; ``rest_refuses_all``: share of those centers whose every candidate scores
        below :attr:`threshold` (with :attr:`mutual` each of them rests on its own beliefs).
        """
        best = best_candidate_scores(table, candidates)
        has = torch.isfinite(best)
        if not bool(has.any()):
            return {}
        return {
            "rest_best_acceptance": float(best[has].mean()),
            "rest_refuses_all": float((best[has] < self.threshold).to(torch.float64).mean()),
        }

    def observe(self, i: Tensor, j: Tensor, phi_bar: Tensor, num_centers: int) -> None:  # noqa: B027
        """This round's clipped observations (no-op by default)."""

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore :meth:`state_dict`."""


class PosteriorExceedance(AcceptanceRule):
    r"""Accept ``j`` iff ``P(u_{i->j} > c_neg | data) >= level`` (module docstring: derivation, rest).

    Its width is the within-pair noise pooled over every observed pair, so it reads every center's
    observations (:attr:`pools_observations`).

    Args:
        c_neg: The negative-transfer threshold on the clipped utility (None: Lemma 1's Eq. 21 from
            the selector's ``phi_min``/``phi_max``, 0.5 for the paper's clip), in ``[0, 1]``.
        level: Smallest posterior probability of exceeding ``c_neg`` that is accepted, in
            ``(0, 0.5]`` (0.5 or less keeps every unobserved pair acceptable under a prior mean
            ``>= c_neg``; 0.05: refuse when the 95 % upper bound is below ``c_neg``).
        scale: A fixed credit noise ``sigma`` (None: the pooled within-pair standard deviation).
        min_scale: Floor of the estimated ``sigma`` (> 0).
        mutual: Whether the proposer applies the rule too (needed for a center to rest on its own
            beliefs; module docstring).
        empirical_prior: Score an unobserved peer by the receiver's track record ``m_i`` instead of
            the Beta prior mean (module docstring), so strangers can be refused too.
        model_posterior: Score every pair by the policy's model posterior of its utility (module
            docstring; needs a policy with ``predictive``, e.g. ``PairRegression``); exclusive with
            ``empirical_prior``.
    """

    pools_observations = True

    def __init__(
        self,
        c_neg: float | None = None,
        level: float = 0.05,
        scale: float | None = None,
        min_scale: float = 1e-3,
        mutual: bool = True,
        empirical_prior: bool = False,
        model_posterior: bool = False,
    ) -> None:
        if c_neg is not None:
            c_neg = check_number(f"{_KEY}.c_neg", c_neg, 0.0, strict=False)
            if c_neg > 1.0:
                raise ValueError(f"{_KEY}.c_neg is a clipped utility and must be <= 1, got {c_neg}")
        level = check_number(f"{_KEY}.level", level, 0.0, strict=True)
        if level > 0.5:
            raise ValueError(
                f"{_KEY}.level must be in (0, 0.5] (above 0.5 no unobserved pair is tried), got {level}"
            )
        if scale is not None:
            scale = check_number(f"{_KEY}.scale", scale, 0.0, strict=True)
        self.c_neg_arg, self.level, self.scale = c_neg, level, scale
        self.min_scale = check_number(f"{_KEY}.min_scale", min_scale, 0.0, strict=True)
        self.mutual = bool(mutual)
        self.empirical_prior = bool(empirical_prior)
        self.model_posterior = bool(model_posterior)
        if self.empirical_prior and self.model_posterior:
            raise ValueError(
                f"{_KEY}.empirical_prior and {_KEY}.model_posterior are two priors for a stranger: "
                "set one of them to false"
            )
        self.policy: SelectionPolicy | None = None
        self.threshold = self.level
        self.c_neg = 0.5 if c_neg is None else c_neg
        self.stats: PairValues | None = None

    def setup(self, c_neg: float) -> None:
        self.c_neg = float(c_neg) if self.c_neg_arg is None else self.c_neg_arg
        self.stats = None

    def sigma(self) -> float:
        """The credit noise: ``scale`` if fixed, else ``max(sigma_w, min_scale)`` (0.5 before data)."""
        if self.scale is not None:
            return self.scale
        sd = None if self.stats is None else self.stats.within_pair_sd()
        return 0.5 if sd is None else max(sd, self.min_scale)

    def bind_policy(self, policy: SelectionPolicy) -> None:
        """Keep the policy whose model scores the pairs (``model_posterior``).

        Raises:
            ValueError: If ``model_posterior`` is set and the policy has no ``predictive``.
        """
        if self.model_posterior and not callable(getattr(policy, "predictive", None)):
            raise ValueError(
                f"{_KEY}.model_posterior scores pairs by the policy's model, and "
                f"{type(policy).__name__} has none: use policy PairRegression or set model_posterior false"
            )
        self.policy = policy

    def table(self, posterior: BetaPosterior, t: int, candidates: Tensor | None = None) -> PairScores:
        """``a_{i->j} = Phi((mu - c_neg) sqrt(n + n0) / sigma)`` on the observed pairs and the prior
        (``model_posterior``: ``Phi((u_hat - c_neg) / s)`` on every pair, dense)."""
        if self.model_posterior:
            mean, var = self.policy.predictive(posterior)  # type: ignore[union-attr]
            sd = var.clamp(min=self.min_scale**2).sqrt()
            return DenseScores(torch.special.ndtr((mean - self.c_neg) / sd))
        n0 = posterior.alpha0 + posterior.beta0
        sigma = self.sigma()
        count = posterior.pairs.values["count"]
        z = (posterior.observed_mean() - self.c_neg) * torch.sqrt(count + n0) / sigma
        base = (posterior.prior_mean() - self.c_neg) * math.sqrt(n0) / sigma
        row_base = None
        if self.empirical_prior:  # a stranger's prior mean: the receiver's own track record m_i
            row_base = torch.special.ndtr((self.track_record(posterior) - self.c_neg) * math.sqrt(n0) / sigma)
        return SparseScores(
            posterior.num_centers,
            torch.special.ndtr(base),
            posterior.pairs.keys,
            torch.special.ndtr(z),
            row_base=row_base,
        )

    @staticmethod
    def track_record(posterior: BetaPosterior) -> Tensor:
        """``m_i = (alpha0 + S_i) / (n0 + N_i)`` per receiver ``[C]``: the Beta prior updated with every
        credit ``i`` has observed, from any peer (``S_i`` their sum, ``N_i`` their count)."""
        c = posterior.num_centers
        pairs = posterior.pairs
        rows = torch.div(pairs.keys, c, rounding_mode="floor")
        count = pairs.values["count"]
        observed = pairs.values["alpha"] - posterior.alpha0
        total = torch.zeros(c, dtype=torch.float64).index_add_(0, rows, observed)
        n = torch.zeros(c, dtype=torch.float64).index_add_(0, rows, count)
        n0 = posterior.alpha0 + posterior.beta0
        return (posterior.alpha0 + total) / (n0 + n)

    def diagnostics(
        self, posterior: BetaPosterior, table: PairScores, candidates: Tensor
    ) -> dict[str, float]:
        """The base diagnostics plus what decides a stranger (module docstring).

        ``rest_c_neg``; ``rest_sigma`` (the credit noise); ``rest_track_record`` (mean of ``m_i`` over
        centers with an observation) and ``rest_track_record_min``; ``rest_stranger_bound`` (mean
        of the stranger's upper bound ``m_i + z sigma / sqrt(n0)`` under the empirical prior,
        ``prior mean + z sigma / sqrt(n0)`` under the Beta prior, the model's ``u_hat + z s`` on
        unobserved candidate pairs under ``model_posterior``) and ``rest_stranger_refused`` (share
        of centers whose strangers that bound refuses).
        """
        out = super().diagnostics(posterior, table, candidates)
        z = -float(torch.special.ndtri(torch.tensor(self.level, dtype=torch.float64)))
        n0 = posterior.alpha0 + posterior.beta0
        sigma = self.sigma()
        out.update(rest_c_neg=self.c_neg, rest_sigma=sigma)
        c = posterior.num_centers
        count = torch.zeros(c, dtype=torch.float64).index_add_(
            0, torch.div(posterior.pairs.keys, c, rounding_mode="floor"), posterior.pairs.values["count"]
        )
        m = self.track_record(posterior)
        if bool((count > 0).any()):
            out["rest_track_record"] = float(m[count > 0].mean())
            out["rest_track_record_min"] = float(m[count > 0].min())
        if self.model_posterior:
            mean, var = self.policy.predictive(posterior)  # type: ignore[union-attr]
            bound = mean + z * var.clamp(min=self.min_scale**2).sqrt()
            stranger = candidates.to("cpu", torch.bool).clone()
            stranger.view(-1)[posterior.pairs.keys[posterior.pairs.values["count"] > 0]] = False
            stranger.fill_diagonal_(False)
            rows = stranger.any(1)
            if bool(rows.any()):
                per_row = torch.where(stranger, bound, -torch.inf).amax(1)[rows]
                out["rest_stranger_bound"] = float(torch.where(stranger, bound, 0.0).sum() / stranger.sum())
                out["rest_stranger_refused"] = float((per_row < self.c_neg).to(torch.float64).mean())
            return out
        beta_mean = torch.full((c,), posterior.prior_mean().item(), dtype=torch.float64)
        prior = m if self.empirical_prior else beta_mean
        bound = prior + z * sigma / math.sqrt(n0)
        out["rest_stranger_bound"] = float(bound.mean())
        out["rest_stranger_refused"] = float((bound < self.c_neg).to(torch.float64).mean())
        return out

    def observe(self, i: Tensor, j: Tensor, phi_bar: Tensor, num_centers: int) -> None:
        """Accumulate the per-pair sums behind ``sigma_w``."""
        self.stats = add_moments(self.stats, i, j, phi_bar, num_centers)

    def state_dict(self) -> dict[str, Any]:
        """``{"c_neg", "pairs"}`` (the sparse sums; no ``pairs`` before any observation)."""
        out: dict[str, Any] = {"c_neg": self.c_neg}
        if self.stats is not None:
            out["pairs"] = self.stats.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.c_neg = float(state.get("c_neg", self.c_neg))
        if "pairs" in state:
            self.stats = PairValues(int(state["pairs"]["num_centers"]), MOMENTS)
            self.stats.load_state_dict(state["pairs"])

    def __repr__(self) -> str:
        return (
            f"PosteriorExceedance(c_neg={self.c_neg_arg}, level={self.level}, scale={self.scale}, "
            f"min_scale={self.min_scale}, mutual={self.mutual}, empirical_prior={self.empirical_prior}, "
            f"model_posterior={self.model_posterior})"
        )
