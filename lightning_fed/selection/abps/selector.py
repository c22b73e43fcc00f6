"""The ABPS partner selector: filter, Beta posterior, UCB and propose-reject, connected.

This is the :class:`~lightning_fed.selection.PartnerSelector` of Algorithm 1 lines 11-22 and 27-31:
:meth:`BayesianSelector.select` returns the round's symmetric partner sets;
:meth:`BayesianSelector.observe` folds Shapley credits into the posterior (it :attr:`learns`, so ABPS
computes the credit). The math lives in the pure modules beside it (posterior, ucb, matching,
filter); this class only holds the state and the settings.

State size (issue 17): the posterior keeps the observed pairs only and the round's scores are a
:class:`~lightning_fed.selection.abps.policy.PairScores` table read a block of centers at a time
(the matching and the diagnostics never build a ``[C, C]`` float64 matrix for the UCB policies); the
one ``[C, C]`` structure kept is the bool candidate mask, 1 byte a pair (13.5 MB at 3,680 centers).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator
from lightning_fed.selection.abps.filter import GOALS, KEEP_MODES, candidate_mask
from lightning_fed.selection.abps.matching import propose_reject
from lightning_fed.selection.abps.policy import UCB, SelectionPolicy
from lightning_fed.selection.abps.posterior import BetaPosterior, clip_utility
from lightning_fed.selection.base import PartnerSelector
from lightning_fed.selection.diagnostics import MatchRecord

__all__ = ["BayesianSelector", "GoalFilter"]


class GoalFilter:
    """Goal-aware metadata pre-filter (ABPS Sec. 4.1, Eq. 3).

    Args:
        goal: ``"homogeneity"``, ``"diversity"`` or ``"alignment"``.
        tau_sim: Fixed admission threshold on ``f_i(v_i, v_j)``; mutually exclusive with
            ``keep_fraction``.
        keep_fraction: Calibrate ``tau_sim`` from this keep fraction ``rho`` (paper: 0.25).
        metadata_dim: Descriptor entries used: 3 (base) or 15 (with the 12 Charlson prevalences).
        keep: How ``keep_fraction`` calibrates: ``"per_center"`` (every center keeps its own
            ``ceil(rho (n - 1))`` best peers, symmetrized by union; the paper's presets) or
            ``"global"`` (one quantile over all pairs; before issue 14 the only mode). See
            :mod:`~lightning_fed.selection.abps.filter`.
    """

    def __init__(
        self,
        goal: str = "homogeneity",
        tau_sim: float | None = None,
        keep_fraction: float | None = 0.25,
        metadata_dim: int = 3,
        keep: str = "per_center",
    ) -> None:
        if keep not in KEEP_MODES:
            raise ValueError(f"filter.keep must be one of {', '.join(KEEP_MODES)}, got {keep!r}")
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
        self.keep = keep

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
            metadata[:, : self.metadata_dim],
            self.goal,
            self.tau_sim,
            self.keep_fraction,
            published,
            self.keep,
        )


class BayesianSelector(PartnerSelector):
    """Epsilon-greedy propose-reject over Beta beliefs of Shapley utility, scored by a policy.

    Args:
        kappa: Most partners per center and round (paper: 3; 1 for the bandwidth presets).
        epsilon: Probability of swapping the top candidate for a random one (paper: 0.1).
        gamma: UCB exploration weight (paper: sqrt 2) of the default policy, ``UCB(gamma)``; give
            it inside ``policy`` when a policy is set.
        tau_acc: A peer accepts a proposal when its own score on the proposer is >= tau_acc (0.5).
        alpha0: Beta prior alpha.
        beta0: Beta prior beta.
        phi_min: Lower clip of the Shapley value (Eq. 5, paper: -0.1).
        phi_max: Upper clip (paper: +0.1).
        filter: Optional goal-aware pre-filter; None admits every peer (base ABPS).
        policy: How peers are scored from the posterior
            (:mod:`~lightning_fed.selection.abps.policy`: ``UCB``, the paper's Eq. 7, the default;
            ``ScaledUCB``; ``Thompson``). The same scores rank proposals and decide acceptance.
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
        policy: SelectionPolicy | None = None,
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
        if policy is not None and not math.isclose(self.gamma, math.sqrt(2.0)):
            raise ValueError(
                "algorithm.selector.gamma is the default UCB policy's; with a policy set, give gamma "
                "under algorithm.selector.policy.init_args instead"
            )
        self.policy: SelectionPolicy = policy if policy is not None else UCB(self.gamma)

    def setup(self, metadata: Tensor, seed: int) -> None:
        """Fresh posteriors (Alg. 1 lines 4-9) and the candidate sets from the descriptors."""
        c = metadata.shape[0]
        self.seed = seed
        self.posterior = BetaPosterior(c, self.alpha0, self.beta0)
        self.policy.setup()
        if self.filter is None:
            self.candidates = ~torch.eye(c, dtype=torch.bool)
        else:
            self.candidates = self.filter.candidates(metadata)

    def select(self, round_idx: int, available: Tensor | None = None) -> list[list[int]]:
        """Partner sets of round ``round_idx`` (scores at ``t_k = round_idx + 1``; Alg. 1 l. 13-22).

        Args:
            round_idx: The round.
            available: Optional bool ``[C]``; a center marked False is nobody's candidate and has
                none itself this round (it can neither propose nor accept).
        """
        policy_gen = torch_generator(self.seed, "policy", round_idx)
        scores = self.policy.pair_scores(self.posterior, round_idx + 1, policy_gen)
        gen = torch_generator(self.seed, "matching", round_idx)
        candidates = self.candidates
        if available is not None:
            candidates = candidates & available.unsqueeze(0) & available.unsqueeze(1)
        self.last_match = MatchRecord(candidates, scores, float(self.tau_acc))
        return propose_reject(scores, candidates, self.kappa, self.tau_acc, self.epsilon, gen)

    def observe(self, i: Tensor, j: Tensor, phi: Tensor) -> None:
        """Fold Shapley values ``phi_{j->i}`` into ``i``'s beliefs about ``j`` (Eqs. 5-6)."""
        if i.numel():
            phi_bar = clip_utility(phi, self.phi_min, self.phi_max)
            self.posterior.update(i, j, phi_bar)
            self.policy.observe(i, j, phi_bar, self.posterior.num_centers)

    def state_dict(self) -> dict[str, Any]:
        return {
            "posterior": self.posterior.state_dict(),
            "candidates": self.candidates.clone(),
            "policy": self.policy.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.posterior.load_state_dict(state["posterior"])
        self.candidates = state["candidates"].clone()
        self.policy.load_state_dict(state.get("policy", {}))
