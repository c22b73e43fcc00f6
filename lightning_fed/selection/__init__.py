"""Partner selection: which peers a center exchanges parameters with each round.

A :class:`PartnerSelector` (select / observe / state) is the plugin ABPS calls every round; any
selector plugs into it from config (``algorithm.init_args.selector.class_path``):

* :class:`~lightning_fed.selection.abps.BayesianSelector`: ABPS itself (Beta posterior over Shapley
  utility, UCB, propose-reject with rest; it learns from the credit);
* :class:`RandomPartners`: up to ``kappa`` uniformly random partners a round (random-k baseline);
* :class:`GraphNeighbours`: the neighbours on a fixed graph (graph baseline).

:mod:`lightning_fed.selection.abps` holds the building blocks of Adaptive Bayesian Partner
Selection (ABPS): the goal-aware metadata pre-filter, the Beta posterior over peer utility, the UCB
score, the propose-reject matching and Shapley credit assignment.
"""

from __future__ import annotations

from lightning_fed.selection.base import PartnerSelector, partner_edges, partner_lists
from lightning_fed.selection.baselines import GraphNeighbours, RandomPartners

__all__ = ["GraphNeighbours", "PartnerSelector", "RandomPartners", "partner_edges", "partner_lists"]
