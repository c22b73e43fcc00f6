r"""A receiver that refuses: acceptance relative to the receiver's own alternatives (issue 30).

Why. Eq. 7's line 19 (``score >= tau_acc``) and
:class:`~lightning_fed.selection.abps.rest.PosteriorExceedance` (``P(u > c_neg) >= level``) compare a
proposer with an *absolute* bar, ``c_neg`` (Lemma 1, 0.5 on the clipped scale). On the mixed
federation (TeacherICU with 15 % off-concept centers) an off-concept peer's utility to an
in-concept receiver is below the in-concept peers' but near ``c_neg`` (its Shapley value is a small
negative number, within the credit noise of zero), so both rules accept it; links are mutual, and an
off-concept center that proposes to an in-concept one takes one of its ``kappa`` slots (measured:
0.77-0.88x chance of off-concept partner slots, ``docs/results/abps_learned/README.md``). What a
slot given to ``j`` costs the receiver is not ``c_neg`` but the partner it could have had instead.

The rule (:class:`RelativeAcceptance`). Let :math:`(\hat u_{ij}, s_{ij})` be center ``i``'s
posterior mean and sd of ``j``'s utility (the policy's model posterior with ``model_posterior``, as
in :class:`~lightning_fed.selection.abps.rest.PosteriorExceedance`; else the Beta mean of Eq. 6 with
the sd :math:`\sigma/\sqrt{n_{ij} + n_0}` of that rule's normal approximation). Center ``i``'s
reference is the ``quantile`` of its candidates' posterior means, floored at ``c_neg``:

.. math:: r_i = \max\bigl(c_{neg},\; Q_q\{\hat u_{ij} : j \in C_i\}\bigr), \qquad
          a_{i\to j} = \Phi\!\left(\frac{\hat u_{ij} - r_i}{s_{ij}}\right) \ge \text{level}.

So ``i`` refuses ``j`` iff :math:`\hat u_{ij} + z\,s_{ij} < r_i` (``z = Phi^{-1}(1 - level)``): ``j``
is clearly worse than the receiver's typical alternative (``q = 0.5``: the median candidate; ``q =
1 - kappa/|C_i|``: the ``kappa``-th best), or clearly below ``c_neg``. Accepting ``j`` in place of a
random other candidate costs in expectation :math:`\hat u_{i\cdot} - \hat u_{ij}`, and a candidate
clearly below the median is one a random replacement beats with probability above one half.

When it rests and when it does not. (a) If :math:`Q_q \ge c_{neg}`, every candidate whose mean is at
least :math:`Q_q` scores :math:`a \ge \Phi(0) = 0.5 \ge` level, so ``i`` accepts at least a
:math:`1 - q` share of its candidates: the relative bar alone never makes a center rest; it only
thins out who may take its slots. (b) If :math:`Q_q < c_{neg}` then :math:`r_i = c_{neg}` and the
rule is :class:`~lightning_fed.selection.abps.rest.PosteriorExceedance` exactly: with ``mutual``
(default) ``i`` rests iff every candidate's upper bound is below ``c_neg`` (Lemma 1 with the oracle
mean replaced by a ``1 - level`` upper bound). A center may also rest because every candidate it
accepts refuses it or is full (case (a) for an off-concept center whose peers all rank it below
their median: the intent). With ``mutual`` a pair forms only when each end ranks the other not
clearly below its own reference.

What it needs to work. The rule refuses ``j`` only when the posterior separates ``j`` from the
receiver's reference by ``z`` sds: with a per-pair Beta posterior every stranger has the prior mean,
so :math:`Q_q` is the prior mean (0.5) while most candidates are strangers and the rule reduces to
:class:`~lightning_fed.selection.abps.rest.PosteriorExceedance`; with a model posterior that pools
over observers (``PairRegression(peer_effect: true)``, ``model_posterior: true``) an off-concept
peer's pooled effect moves its mean for every receiver at once.

Measured (230 centers, 5 seeds, ``configs/abps_learned_relative.yaml``: quantile 0.5, level 0.5,
``PairRegression(peer_effect: true)``; ``docs/results/abps_learned/README.md``). On the mixed
federation the median candidate's posterior mean is within 1e-4 of ``c_neg`` (5 of 6 candidates are
cross-unit pairs predicted at about 0.499), so the relative bar binds for 1-1.5 % of centers and the
rule acts mostly as a posterior-mean test against ``c_neg``: off-concept partner slots 0.45x chance
over rounds 30-39 (Eq. 7's base ABPS 1.01x, ``PosteriorExceedance`` at level 0.05 0.77x). A higher
``quantile`` (e.g. the kappa-th best candidate) would make the bar bind; not measured.

Cost: the table is dense, ``[C, C]`` float64 (as the model posterior's is).
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.selection.abps.policy import DenseScores, PairScores
from lightning_fed.selection.abps.posterior import BetaPosterior
from lightning_fed.selection.abps.rest import PosteriorExceedance
from lightning_fed.selection.base import SELECTOR_KEY
from lightning_fed.validation import check_number

__all__ = ["RelativeAcceptance", "relative_reference"]

_KEY = f"{SELECTOR_KEY}.acceptance.init_args"

#: Mean differences this small are floating-point noise of the model's sums (every stranger has the
#: same prediction up to ~1e-16) and count as ties, so a candidate at the reference scores exactly 0.5.
_TIE = 1e-12


def relative_reference(mean: Tensor, candidates: Tensor, quantile: float, c_neg: float) -> Tensor:
    """Each receiver's reference ``r_i = max(c_neg, Q_q{mean[i, j] : j candidate})``, float64 ``[C]``
    (``c_neg`` for a center without candidates; the diagonal is never a candidate)."""
    cand = candidates.to("cpu", torch.bool).clone().fill_diagonal_(False)
    masked = torch.where(cand, mean, torch.nan)
    q = torch.nanquantile(masked, quantile, dim=1, interpolation="lower")  # a candidate's own mean
    return torch.nan_to_num(q, nan=c_neg).clamp(min=c_neg)


class RelativeAcceptance(PosteriorExceedance):
    r"""Accept ``j`` iff ``P(u_{i->j} > max(c_neg, Q_q(i's candidates))) >= level`` (module docstring).

    Args:
        quantile: Which of the receiver's candidates sets its reference: the ``quantile`` of their
            posterior means, in ``[0, 1]`` (0.5: the median; 0: the worst, i.e. ``c_neg`` in
            practice).
        c_neg: As :class:`~lightning_fed.selection.abps.rest.PosteriorExceedance` (the floor of the
            reference).
        level: Smallest accepted posterior probability of exceeding the reference, in ``(0, 0.5]``.
        scale: Fixed credit noise for the Beta route (None: the pooled within-pair sd).
        min_scale: Floor of the noise / of the model's posterior sd.
        mutual: Whether the proposer applies the rule too.
        empirical_prior: A stranger's mean is the receiver's track record (Beta route).
        model_posterior: Use the policy's model posterior (``PairRegression``) for every pair.
    """

    def __init__(
        self,
        quantile: float = 0.5,
        c_neg: float | None = None,
        level: float = 0.05,
        scale: float | None = None,
        min_scale: float = 1e-3,
        mutual: bool = True,
        empirical_prior: bool = False,
        model_posterior: bool = False,
    ) -> None:
        quantile = check_number(f"{_KEY}.quantile", quantile, 0.0, strict=False)
        if quantile > 1.0:
            raise ValueError(
                f"{_KEY}.quantile is a quantile of the receiver's candidates: use [0, 1], got {quantile}"
            )
        super().__init__(c_neg, level, scale, min_scale, mutual, empirical_prior, model_posterior)
        self.quantile = quantile
        self.reference: Tensor | None = None

    def moments(self, posterior: BetaPosterior) -> tuple[Tensor, Tensor]:
        """Every pair's posterior ``(mean, sd)`` of its utility, float64 ``[C, C]``."""
        if self.model_posterior:
            mean, var = self.policy.predictive(posterior)  # type: ignore[union-attr]
            return mean, var.clamp(min=self.min_scale**2).sqrt()
        n0 = posterior.alpha0 + posterior.beta0
        count = posterior.count
        mean = posterior.mean()
        if self.empirical_prior:  # a stranger's mean: the receiver's track record m_i
            mean = torch.where(count > 0, mean, self.track_record(posterior)[:, None])
        return mean, self.sigma() / torch.sqrt(count + n0)

    def table(self, posterior: BetaPosterior, t: int, candidates: Tensor | None = None) -> PairScores:
        """``a_{i->j} = Phi((u_hat_ij - r_i) / s_ij)``, dense; ``candidates`` (bool ``[C, C]``, None:
        every other center) define each receiver's reference ``r_i``."""
        c = posterior.num_centers
        if candidates is None:
            candidates = ~torch.eye(c, dtype=torch.bool)
        mean, sd = self.moments(posterior)
        self.reference = relative_reference(mean, candidates, self.quantile, self.c_neg)
        gap = mean - self.reference[:, None]
        gap = torch.where(gap.abs() <= _TIE, 0.0, gap)  # the model's float sums: a tie is a tie
        return DenseScores(torch.special.ndtr(gap / sd))

    def diagnostics(
        self, posterior: BetaPosterior, table: PairScores, candidates: Tensor
    ) -> dict[str, float]:
        """:class:`~lightning_fed.selection.abps.rest.PosteriorExceedance`'s plus the reference.

        ``rest_reference``: mean ``r_i`` over centers with a candidate; ``rest_reference_relative``:
        share of them whose reference is above ``c_neg`` (the relative bar binds);
        ``rest_refused_share``: share of candidate pairs ``(i, j)`` that ``i`` refuses.
        """
        out = super().diagnostics(posterior, table, candidates)
        cand = candidates.to("cpu", torch.bool).clone().fill_diagonal_(False)
        has = cand.any(1)
        if self.reference is None or not bool(has.any()):
            return out
        ref = self.reference[has]
        refused = (table.rows(torch.arange(posterior.num_centers)) < self.threshold) & cand
        out.update(
            rest_reference=float(ref.mean()),
            rest_reference_relative=float((ref > self.c_neg).to(torch.float64).mean()),
            rest_refused_share=float(refused.sum() / cand.sum()),
        )
        return out

    def __repr__(self) -> str:
        return f"RelativeAcceptance(quantile={self.quantile}, " + super().__repr__().split("(", 1)[1]
