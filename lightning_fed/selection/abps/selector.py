"""The ABPS partner selector: filter, Beta posterior, UCB and propose-reject, connected.

This is the :class:`~lightning_fed.selection.PartnerSelector` of Algorithm 1 lines 11-22 and 27-31:
:meth:`BayesianSelector.select` returns the round's symmetric partner sets;
:meth:`BayesianSelector.observe` folds Shapley credits into the posterior (it :attr:`learns`, so ABPS
computes the credit). The math lives in the pure modules beside it (posterior, ucb, matching,
filter); this class only holds the state and the settings.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator
from lightning_fed.selection.abps.filter import GOALS, candidate_mask
from lightning_fed.selection.abps.matching import propose_reject
from lightning_fed.selection.abps.posterior import BetaPosterior, clip_utility
from lightning_fed.selection.abps.ucb import ucb
from lightning_fed.selection.base import PartnerSelector

__all__ = ["BayesianSelector", "GoalFilter"]


class GoalFilter:
    """Goal-aware metadata pre-filter (ABPS Sec. 4.1, Eq. 3).

    Args:
        goal: ``"homogeneity"``, ``"diversity"`` or ``"alignment"``.
        tau_sim: Fixed admission threshold on ``f_i(v_i, v_j)``; mutually exclusive with
            ``keep_fraction``.
        keep_fraction: Auto-calibrate ``tau_sim`` to keep this fraction of peer pairs (paper: 0.25).
        metadata_dim: Descriptor entries used: 3 (base) or 15 (with the 12 Charlson prevalences).
    """

    def __init__(
        self,
        goal: str = "homogeneity",
        tau_sim: float | None = None,
        keep_fraction: float | None = 0.25,
        metadata_dim: int = 3,
    ) -> None:
        if goal not in GOALS:
            raise ValueError(f"filter.goal must be one of {sorted(GOALS)}, got {goal!r}")
        if tau_sim is not None and keep_fraction is not None:
            raise ValueError("filter: give either tau_sim or keep_fraction, not both (set the other to null)")
        if keep_fraction is not None and not 0.0 < keep_fraction <= 1.0:
            raise ValueError(f"filter.keep_fraction must be in (0, 1], got {keep_fraction}")
        if metadata_dim < 1:
            raise ValueError(f"filter.metadata_dim must be >= 1, got {metadata_dim}")
        self.goal, self.tau_sim, self.keep_fraction = goal, tau_sim, keep_fraction
        self.metadata_dim = int(metadata_dim)

    def candidates(self, metadata: Tensor, published: Tensor | None = None) -> Tensor:
        """``C_i`` for every center as a bool ``[C, C]`` matrix (False on the diagonal).

        Args:
            metadata: Descriptors ``[C, d]`` with ``d >= metadata_dim``.
            published: Optional bool ``[C]``, whose descriptor has arrived (see
                :func:`~lightning_fed.selection.abps.filter.candidate_mask`); None = everyone's.
        """
        if metadata.shape[1] < self.metadata_dim:
            raise ValueError(
                f"filter.metadata_dim={self.metadata_dim} but the data's descriptors have "
                f"{metadata.shape[1]} entries"
            )
        return candidate_mask(
            metadata[:, : self.metadata_dim], self.goal, self.tau_sim, self.keep_fraction, published
        )


class BayesianSelector(PartnerSelector):
    """Epsilon-greedy UCB propose-reject over Beta beliefs of Shapley utility.

    Args:
        kappa: Most partners per center and round (paper: 3; 1 for the bandwidth presets).
        epsilon: Probability of swapping the top candidate for a random one (paper: 0.1).
        gamma: UCB exploration weight (paper: sqrt 2).
        tau_acc: A peer accepts a proposal when its own UCB on the proposer is >= tau_acc (0.5).
        alpha0: Beta prior alpha.
        beta0: Beta prior beta.
        phi_min: Lower clip of the Shapley value (Eq. 5, paper: -0.1).
        phi_max: Upper clip (paper: +0.1).
        filter: Optional goal-aware pre-filter; None admits every peer (base ABPS).
    """

    learns = True

    def __init__(
        self,
        kappa: int = 3,
        epsilon: float = 0.1,
        gamma: float = math.sqrt(2.0),
        tau_acc: float = 0.5,
        alpha0: float = 1.0,
        beta0: float = 1.0,
        phi_min: float = -0.1,
        phi_max: float = 0.1,
        filter: GoalFilter | None = None,
    ) -> None:
        if kappa < 1:
            raise ValueError(f"algorithm.kappa must be >= 1, got {kappa}")
        if not 0.0 <= epsilon < 1.0:
            raise ValueError(f"algorithm.epsilon must be in [0, 1), got {epsilon}")
        if gamma < 0:
            raise ValueError(f"algorithm.gamma must be >= 0, got {gamma}")
        if tau_acc < 0:
            raise ValueError(f"algorithm.tau_acc must be >= 0, got {tau_acc}")
        if alpha0 <= 0 or beta0 <= 0:
            raise ValueError(f"algorithm.alpha0 and beta0 must be > 0, got {alpha0}, {beta0}")
        if phi_min >= phi_max:
            raise ValueError(f"algorithm.phi_min must be < phi_max, got {phi_min} >= {phi_max}")
        self.kappa, self.epsilon, self.gamma, self.tau_acc = int(kappa), float(epsilon), float(gamma), tau_acc
        self.alpha0, self.beta0, self.phi_min, self.phi_max = alpha0, beta0, phi_min, phi_max
        self.filter = filter

    def setup(self, metadata: Tensor, seed: int) -> None:
        """Fresh posteriors (Alg. 1 lines 4-9) and the candidate sets from the descriptors."""
        c = metadata.shape[0]
        self.seed = seed
        self.posterior = BetaPosterior(c, self.alpha0, self.beta0)
        if self.filter is None:
            self.candidates = ~torch.eye(c, dtype=torch.bool)
        else:
            self.candidates = self.filter.candidates(metadata)

    def select(self, round_idx: int, available: Tensor | None = None) -> list[list[int]]:
        """Partner sets of round ``round_idx`` (Eq. 7 with ``t_k = round_idx + 1``; Alg. 1 l. 13-22).

        Args:
            round_idx: The round.
            available: Optional bool ``[C]``; a center marked False is nobody's candidate and has
                none itself this round (it can neither propose nor accept).
        """
        scores = ucb(self.posterior.mean(), self.posterior.count, round_idx + 1, self.gamma)
        gen = torch_generator(self.seed, "matching", round_idx)
        candidates = self.candidates
        if available is not None:
            candidates = candidates & available.unsqueeze(0) & available.unsqueeze(1)
        return propose_reject(scores, candidates, self.kappa, self.tau_acc, self.epsilon, gen)

    def observe(self, i: Tensor, j: Tensor, phi: Tensor) -> None:
        """Fold Shapley values ``phi_{j->i}`` into ``i``'s beliefs about ``j`` (Eqs. 5-6)."""
        if i.numel():
            self.posterior.update(i, j, clip_utility(phi, self.phi_min, self.phi_max))

    def state_dict(self) -> dict[str, Any]:
        return {"posterior": self.posterior.state_dict(), "candidates": self.candidates.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.posterior.load_state_dict(state["posterior"])
        self.candidates = state["candidates"].clone()
