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
from lightning_fed.selection.abps.filter import GoalFilter
from lightning_fed.selection.abps.matching import propose_reject
from lightning_fed.selection.abps.policy import UCB, SelectionPolicy
from lightning_fed.selection.abps.posterior import BetaPosterior, clip_utility
from lightning_fed.selection.abps.rest import AcceptanceRule, negative_transfer_threshold
from lightning_fed.selection.base import SELECTOR_KEY, PartnerSelector
from lightning_fed.selection.diagnostics import MatchRecord

__all__ = ["BayesianSelector", "GoalFilter"]


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
            ``ScaledUCB``; ``Thompson``). The same scores rank proposals and decide acceptance,
            unless ``acceptance`` is set.
        acceptance: Who accepts whom, in place of ``policy score >= tau_acc`` (Eq. 7's line 19, the
            default, None): an :class:`~lightning_fed.selection.abps.rest.AcceptanceRule` such as
            :class:`~lightning_fed.selection.abps.rest.PosteriorExceedance`, whose rest can fire
            (Lemma 1), or :class:`~lightning_fed.selection.abps.relative.RelativeAcceptance`, which also
            refuses a peer clearly below the receiver's own alternatives; ``tau_acc`` is then unused
            and the policy only ranks.
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
        acceptance: AcceptanceRule | None = None,
    ) -> None:
        if kappa < 1:
            raise ValueError(
                f"{SELECTOR_KEY}.kappa must be >= 1 (partners per center and round), got {kappa}: "
                "use e.g. 3 (the paper) or 1 (the bandwidth presets)"
            )
        if not 0.0 <= epsilon < 1.0:
            raise ValueError(f"{SELECTOR_KEY}.epsilon must be in [0, 1), got {epsilon}")
        if gamma < 0:
            raise ValueError(f"{SELECTOR_KEY}.gamma must be >= 0, got {gamma}")
        if not 0 <= tau_acc <= 1:  # NaN fails too
            raise ValueError(
                f"{SELECTOR_KEY}.tau_acc must be in [0, 1] (the clipped-credit scale, Eq. 5; 0.5: phi = 0),"
                f" got {tau_acc}: above 1 a peer accepts only while its exploration bonus lasts, then nobody"
            )
        if alpha0 <= 0 or beta0 <= 0:
            raise ValueError(f"{SELECTOR_KEY}.alpha0 and beta0 must be > 0, got {alpha0}, {beta0}")
        if phi_min >= phi_max:
            raise ValueError(f"{SELECTOR_KEY}.phi_min must be < phi_max, got {phi_min} >= {phi_max}")
        self.kappa, self.epsilon, self.gamma, self.tau_acc = int(kappa), float(epsilon), float(gamma), tau_acc
        self.alpha0, self.beta0, self.phi_min, self.phi_max = alpha0, beta0, phi_min, phi_max
        self.filter = filter
        if policy is not None and not math.isclose(self.gamma, math.sqrt(2.0)):
            raise ValueError(
                f"{SELECTOR_KEY}.gamma is the default UCB policy's; with a policy set, give gamma "
                f"under {SELECTOR_KEY}.policy.init_args instead"
            )
        self.policy: SelectionPolicy = policy if policy is not None else UCB(self.gamma)
        if acceptance is not None and not isinstance(acceptance, AcceptanceRule):
            raise ValueError(
                f"{SELECTOR_KEY}.acceptance must be an AcceptanceRule, got {type(acceptance).__name__}"
            )
        self.acceptance = acceptance
        self.pools_observations = self.policy.pools_observations or bool(
            acceptance is not None and acceptance.pools_observations
        )
        self.feature_record_bytes = self.policy.feature_record_bytes

    def declare(self, attributes: list[dict[str, Any]]) -> None:
        """The centers' declared attributes (``center.attributes``, one dict per center), public like
        the descriptors; given before :meth:`setup`, which passes them to the policy's ``bind``."""
        self.declared = [dict(a) for a in attributes]

    def setup(self, metadata: Tensor, seed: int) -> None:
        """Fresh posteriors (Alg. 1 lines 4-9) and the candidate sets from the descriptors."""
        c = metadata.shape[0]
        self.seed = seed
        self.posterior = BetaPosterior(c, self.alpha0, self.beta0)
        self.policy.bind(metadata, getattr(self, "declared", None))
        self.policy.setup()
        if self.acceptance is not None:
            self.acceptance.setup(negative_transfer_threshold(self.phi_min, self.phi_max))
            self.acceptance.bind_policy(self.policy)
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
        if self.acceptance is None:  # Eq. 7's line 19: the policy's scores against tau_acc
            self.last_match = MatchRecord(candidates, scores, float(self.tau_acc))
            return propose_reject(scores, candidates, self.kappa, self.tau_acc, self.epsilon, gen)
        rule = self.acceptance
        table = rule.table(self.posterior, round_idx + 1, candidates)
        self.last_match = MatchRecord(candidates, table, float(rule.threshold), rule.mutual)
        return propose_reject(
            scores,
            candidates,
            self.kappa,
            rule.threshold,
            self.epsilon,
            gen,
            accept=table,
            mutual=rule.mutual,
        )

    def round_diagnostics(self) -> dict[str, float]:
        """The acceptance rule's ``rest_*`` diagnostics of the last :meth:`select` (``{}`` under Eq. 7)."""
        match = self.last_match
        if self.acceptance is None or match is None or match.scores is None:
            return {}
        return self.acceptance.diagnostics(self.posterior, match.scores, match.candidates)

    def observe(self, i: Tensor, j: Tensor, phi: Tensor) -> None:
        """Fold Shapley values ``phi_{j->i}`` into ``i``'s beliefs about ``j`` (Eqs. 5-6)."""
        if i.numel():
            phi_bar = clip_utility(phi, self.phi_min, self.phi_max)
            self.posterior.update(i, j, phi_bar)
            self.policy.observe(i, j, phi_bar, self.posterior.num_centers)
            if self.acceptance is not None:
                self.acceptance.observe(i, j, phi_bar, self.posterior.num_centers)

    def state_dict(self) -> dict[str, Any]:
        out = {
            "posterior": self.posterior.state_dict(),
            "candidates": self.candidates.clone(),
            "policy": self.policy.state_dict(),
        }
        if self.acceptance is not None:
            out["acceptance"] = self.acceptance.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.posterior.load_state_dict(state["posterior"])
        self.candidates = state["candidates"].clone()
        self.policy.load_state_dict(state.get("policy", {}))
        if self.acceptance is not None:
            self.acceptance.load_state_dict(state.get("acceptance", {}))
