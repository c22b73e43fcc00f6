r"""Selection policies: how a center scores its peers from the Beta posterior (ABPS Sec. 4.3).

A :class:`SelectionPolicy` turns the posterior of :class:`~lightning_fed.selection.abps.posterior.
BetaPosterior` into one score matrix per round, ``score[i, j]`` = center ``i``'s score of peer
``j``. The same matrix ranks a center's proposals and decides acceptance (``j`` accepts ``i``
when ``score[j, i] >= tau_acc``), so every policy reuses the posterior, the propose-reject matching
and the rest of :func:`~lightning_fed.selection.abps.matching.propose_reject` unchanged. Choose one
with ``algorithm.init_args.selector.init_args.policy.class_path``:

* :class:`UCB`, the paper's Eq. 7 (default):
  :math:`\mu_{i\to j} + \gamma \sqrt{2 \ln t / (n_{i\to j} + 1)}`.
* :class:`ScaledUCB`: Eq. 7 with the exploration term scaled to the observed spread of the clipped
  utilities (derivation in its docstring).
* :class:`Thompson`: one draw from every peer's Beta posterior per round.

Why a scaled bonus exists (measured, issue 14). Eq. 7's bonus is sized for rewards that fill
``[0, 1]``; Eq. 5 maps Shapley values within ``+-0.1`` to ``[0, 1]``, but real contributions are far
smaller, so the posterior means of tried peers stay within a few hundredths of 0.5 while an untried
peer's bonus at ``t = 10`` is ``sqrt 2 * sqrt(2 ln 10) = 3.0``. Every untried peer outranks every
tried one and the matching becomes a random rotating mesh (see
``tests/selection/test_policy_oracle.py`` for the measured behaviour on a utility oracle).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor

from lightning_fed.selection.abps.posterior import BetaPosterior
from lightning_fed.selection.abps.ucb import ucb
from lightning_fed.validation import check_number

__all__ = ["UCB", "ScaledUCB", "SelectionPolicy", "Thompson"]


class SelectionPolicy(ABC):
    """Scores ``[C, C]`` for one round from the Beta posterior (ranking and acceptance alike)."""

    @abstractmethod
    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        """Center ``i``'s score of peer ``j`` at 1-based round ``t``, float64 ``[C, C]``.

        Args:
            posterior: The selector's beliefs.
            t: 1-based round index ``t_k``.
            generator: This round's policy generator (``(seed, "policy", round)``, apart from the
                matching's, so the matching's draws do not depend on the policy).
        """

    def setup(self) -> None:  # noqa: B027 (stateless by default)
        """Forget everything learned (called by the selector's ``setup``, before a run)."""

    def observe(self, i: Tensor, j: Tensor, phi_bar: Tensor, num_centers: int) -> None:  # noqa: B027
        """This round's clipped observations: center ``i[e]`` saw ``phi_bar[e]`` from ``j[e]`` (no-op
        by default; :class:`ScaledUCB` estimates its noise scale from them)."""

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore :meth:`state_dict`."""


class UCB(SelectionPolicy):
    """The paper's Eq. 7: ``mu_{i->j} + gamma sqrt(2 ln t / (n_{i->j} + 1))``.

    Args:
        gamma: Exploration weight (paper: sqrt 2), ``>= 0``.
    """

    def __init__(self, gamma: float = math.sqrt(2.0)) -> None:
        self.gamma = check_number("algorithm.selector.policy.gamma", gamma, 0.0, strict=False)

    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        return ucb(posterior.mean(), posterior.count, t, self.gamma)

    def __repr__(self) -> str:
        return f"UCB(gamma={self.gamma})"


class ScaledUCB(SelectionPolicy):
    r"""Eq. 7 with the exploration term scaled to the noise of the clipped utilities.

    Derivation. UCB1's radius :math:`\sqrt{2 \ln t / n}` is the Hoeffding confidence radius of a mean
    of ``n`` rewards that are sub-Gaussian with scale :math:`\sigma = 1/2` about their mean, the worst
    case for a reward in ``[0, 1]``; for scale :math:`\sigma` the radius is
    :math:`2\sigma \sqrt{2 \ln t / n}`. The rewards here are the Eq. 5 clips :math:`\bar\phi` of
    Shapley values that are far smaller than the clip's ``+-0.1``, so their noise about each peer's
    mean is a small fraction of 1/2 and Eq. 7's radius drowns every difference the posterior means can
    show. So the bonus is

    .. math:: \mu_{i\to j} + \gamma\, s\, \sqrt{2 \ln t / (n_{i\to j} + 1)}, \qquad s = 2 \hat\sigma_w,

    with :math:`\hat\sigma_w` the pooled *within-peer* standard deviation of the observations (the
    one-way ANOVA residual over every observed ``(i, j)``:
    :math:`\hat\sigma_w^2 = \sum_{(i,j)} \sum_k (\bar\phi_{ijk} - \bar\phi_{ij\cdot})^2 / (N - P)`,
    ``N`` observations of ``P`` pairs). It is the noise of one peer's rewards about its own mean,
    which is what the confidence radius is about; pooling it over the federation gives a center with
    a single observation of a peer a usable scale. (The total spread of the observations would also
    count the differences between peers, the signal itself, and keep the bonus large exactly when
    peers differ.) Before any pair has two observations ``s = 1`` (Eq. 7 itself), and ``s`` is
    floored at ``min_scale``. ``scale`` fixes ``s`` instead (``scale = 1`` is :class:`UCB`).

    Args:
        gamma: Exploration weight, ``>= 0`` (sqrt 2 as Eq. 7).
        scale: A fixed ``s`` in place of ``2 sigma_w`` (None: estimated).
        min_scale: Floor of the estimated ``s`` (> 0).
    """

    def __init__(
        self, gamma: float = math.sqrt(2.0), scale: float | None = None, min_scale: float = 1e-3
    ) -> None:
        self.gamma = check_number("algorithm.selector.policy.gamma", gamma, 0.0, strict=False)
        if scale is not None:
            scale = check_number("algorithm.selector.policy.scale", scale, 0.0, strict=True)
        self.scale = scale
        self.min_scale = check_number("algorithm.selector.policy.min_scale", min_scale, 0.0, strict=True)
        self.setup()

    def setup(self) -> None:
        self.sum: Tensor | None = None  # per pair: sum of phi_bar
        self.sumsq: Tensor | None = None  # per pair: sum of phi_bar^2
        self.count: Tensor | None = None  # per pair: observations

    def s(self) -> float:
        """The bonus scale: ``scale`` if fixed, else ``max(2 sigma_w, min_scale)`` (1 before data)."""
        if self.scale is not None:
            return self.scale
        if self.count is None:
            return 1.0
        seen = self.count > 0
        dof = float(self.count.sum()) - int(seen.sum())
        if dof < 1:
            return 1.0
        ss = float(self.sumsq.sum()) - float((self.sum[seen] ** 2 / self.count[seen]).sum())
        return max(2.0 * math.sqrt(max(ss, 0.0) / dof), self.min_scale)

    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        return ucb(posterior.mean(), posterior.count, t, self.gamma * self.s())

    def observe(self, i: Tensor, j: Tensor, phi_bar: Tensor, num_centers: int) -> None:
        """Accumulate the per-pair sums behind ``sigma_w``."""
        if self.count is None:
            shape = (num_centers, num_centers)
            self.sum, self.sumsq, self.count = (torch.zeros(shape, dtype=torch.float64) for _ in range(3))
        x = torch.as_tensor(phi_bar, dtype=torch.float64).reshape(-1)
        index = (torch.as_tensor(i).reshape(-1), torch.as_tensor(j).reshape(-1))
        self.sum.index_put_(index, x, accumulate=True)
        self.sumsq.index_put_(index, x * x, accumulate=True)
        self.count.index_put_(index, torch.ones_like(x), accumulate=True)

    def state_dict(self) -> dict[str, Any]:
        if self.count is None:
            return {}
        return {"sum": self.sum.clone(), "sumsq": self.sumsq.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "count" in state:
            self.sum, self.sumsq, self.count = (state[k].clone() for k in ("sum", "sumsq", "count"))

    def __repr__(self) -> str:
        return f"ScaledUCB(gamma={self.gamma}, scale={self.scale}, min_scale={self.min_scale})"


class Thompson(SelectionPolicy):
    r"""Thompson sampling: ``score[i, j] ~ Beta(alpha_{i->j}, beta_{i->j})``, one draw per round.

    A center proposes in the order of its samples, and ``j`` accepts ``i`` when its own sample of
    ``i`` is ``>= tau_acc``. The draws come from the round's policy generator (apart from the
    matching's), so a seed reproduces them. A Beta sample is ``G_a / (G_a + G_b)`` with
    ``G ~ Gamma(., 1)``, drawn with ``torch._standard_gamma`` under ``torch.random.fork_rng`` seeded
    from the generator (``torch.distributions`` takes no generator).

    The posterior's width is set by the pseudo-count (``sd ~ 1/(2 sqrt(n + 3))`` near 0.5), not by the
    utilities' spread, so Thompson separates peers only once ``n`` is large against
    ``(0.5 / delta)^2`` for a clipped utility difference ``delta``: it learns fast when contributions
    reach the clip edges and slowly when they are small.
    """

    def scores(self, posterior: BetaPosterior, t: int, generator: torch.Generator) -> Tensor:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            ga = torch._standard_gamma(posterior.alpha.to(torch.float64))
            gb = torch._standard_gamma(posterior.beta.to(torch.float64))
        total = ga + gb
        return torch.where(total > 0, ga / total.clamp(min=torch.finfo(torch.float64).tiny), 0.5)

    def __repr__(self) -> str:
        return "Thompson()"
