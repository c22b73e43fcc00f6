"""Adaptive Bayesian Partner Selection (ABPS): the per-round building blocks of Algorithm 1.

* :mod:`~lightning_fed.selection.abps.filter`: goal-aware metadata pre-filter (Eq. 3);
* :mod:`~lightning_fed.selection.abps.shapley`: Shapley credit over active partners (Eq. 4);
* :mod:`~lightning_fed.selection.abps.posterior`: affine clip and Beta posterior (Eqs. 5-6);
* :mod:`~lightning_fed.selection.abps.ucb`: upper confidence bound (Eq. 7);
* :mod:`~lightning_fed.selection.abps.policy`: how peers are scored from the posterior (``UCB``,
  ``ScaledUCB``, ``Thompson``), as a score table read by blocks (``PairScores``);
* :mod:`~lightning_fed.selection.abps.matching`: propose-reject matching with rest (lines 13-22);
* :mod:`~lightning_fed.selection.abps.regression`: ``PairRegression``, a policy on pair features that
  shares strength across peers;
* :mod:`~lightning_fed.selection.abps.rest`: acceptance rules whose rest can fire (Lemma 1),
  ``PosteriorExceedance``;
* :mod:`~lightning_fed.selection.abps.relative`: ``RelativeAcceptance``, a receiver that refuses a
  peer clearly below its own alternatives.
"""

from lightning_fed.selection.abps.credit import ShapleyCredit
from lightning_fed.selection.abps.filter import GOALS, calibrate_threshold, candidate_mask, goal_scores
from lightning_fed.selection.abps.matching import propose_reject
from lightning_fed.selection.abps.policy import (
    UCB,
    DenseScores,
    PairScores,
    ScaledUCB,
    SelectionPolicy,
    SparseScores,
    Thompson,
)
from lightning_fed.selection.abps.posterior import BetaPosterior, PairValues, clip_utility
from lightning_fed.selection.abps.regression import PairRegression
from lightning_fed.selection.abps.relative import RelativeAcceptance
from lightning_fed.selection.abps.rest import AcceptanceRule, PosteriorExceedance, negative_transfer_threshold
from lightning_fed.selection.abps.selector import BayesianSelector, GoalFilter
from lightning_fed.selection.abps.shapley import (
    coalitions_exact,
    exact_shapley,
    exact_shapley_batched,
    shapley_values,
    shapley_weights,
    tmc_masks,
    tmc_permutations,
    tmc_shapley,
)
from lightning_fed.selection.abps.ucb import ucb

__all__ = [
    "GOALS",
    "UCB",
    "AcceptanceRule",
    "BayesianSelector",
    "BetaPosterior",
    "DenseScores",
    "GoalFilter",
    "PairRegression",
    "PairScores",
    "PairValues",
    "PosteriorExceedance",
    "RelativeAcceptance",
    "ScaledUCB",
    "SelectionPolicy",
    "ShapleyCredit",
    "SparseScores",
    "Thompson",
    "calibrate_threshold",
    "candidate_mask",
    "clip_utility",
    "coalitions_exact",
    "exact_shapley",
    "exact_shapley_batched",
    "goal_scores",
    "negative_transfer_threshold",
    "propose_reject",
    "shapley_values",
    "shapley_weights",
    "tmc_masks",
    "tmc_permutations",
    "tmc_shapley",
    "ucb",
]
