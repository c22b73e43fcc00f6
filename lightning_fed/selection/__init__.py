"""Partner selection: which peers a center exchanges parameters with each round.

:mod:`lightning_fed.selection.abps` holds the building blocks of Adaptive Bayesian Partner
Selection (ABPS): the goal-aware metadata pre-filter, the Beta posterior over peer utility, the UCB
score, the propose-reject matching and Shapley credit assignment.
"""

from __future__ import annotations

__all__: list[str] = []
