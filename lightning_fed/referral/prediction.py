"""Prediction rules over a referral route (EdgeDRM Sec. 3.2, App. D.2, Table 6).

With visited clients ``s_0, ..., s_T`` and each client's class probabilities ``f_{s_t}(x)`` (softmax
of its logits), the mixed prediction is ``f_mix = sum_t w_t f_{s_t}(x)``, ``y_hat = argmax_k f_mix,k``:

* :class:`HardTerminal`: ``w_T = 1`` (the terminal expert alone);
* :class:`UniformHistory`: ``w_t = 1 / (T + 1)``;
* :class:`WeightedHistory`: ``w_t = softmax_t(A_t / tau)`` with ``tau = 1`` and ``A_t`` the
  accumulated route score, ``A_0 = 0``, ``A_t = sum_{s=1}^t u_s`` where ``u_s`` is the accepted score
  of the move into hop ``s``. With a common representation the sum telescopes to the prior-weighted
  log density gain ``h_{s_t}(x) - h_{s_0}(x)`` of App. C.2, so later, better-matched experts weigh
  more by exactly their estimated density ratio.

Only visited clients contribute.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from lightning_fed.referral.routers import Routes

__all__ = ["HardTerminal", "PredictionRule", "UniformHistory", "WeightedHistory", "hop_weights"]


class PredictionRule(ABC):
    """Combine the visited experts' predictions into class probabilities ``[Q, K]``."""

    #: Label used in the referral table.
    label: str = ""

    @abstractmethod
    def weights(self, routes: Routes) -> Tensor:
        """Hop weights ``[Q, L+1]`` (float64, rows sum to 1, 0 on unvisited hops)."""

    def probabilities(self, routes: Routes) -> Tensor:
        """``f_mix = sum_t w_t softmax(logits_t)`` ``[Q, K]`` (float64)."""
        probs = torch.softmax(routes.logits.to(torch.float64), dim=2)
        w = self.weights(routes).to(probs.device)
        return (w.unsqueeze(2) * probs).sum(1)

    def predict(self, routes: Routes) -> Tensor:
        """Predicted class per query ``[Q]``."""
        return self.probabilities(routes).argmax(1)


def hop_weights(routes: Routes, temperature: float) -> Tensor:
    """``softmax_t(A_t / temperature)`` over the visited hops (module docstring)."""
    acc = routes.scores.to(torch.float64).cumsum(1) / temperature
    acc = acc.masked_fill(~routes.valid, -torch.inf)
    return torch.softmax(acc, dim=1)


class HardTerminal(PredictionRule):
    """The terminal expert's prediction."""

    label = "hard terminal"

    def weights(self, routes: Routes) -> Tensor:
        last = routes.calls - 1
        w = torch.zeros(routes.visited.shape, dtype=torch.float64)
        w[torch.arange(w.shape[0]), last] = 1.0
        return w


class UniformHistory(PredictionRule):
    """Equal weight on every visited expert."""

    label = "uniform history"

    def weights(self, routes: Routes) -> Tensor:
        v = routes.valid.to(torch.float64)
        return v / v.sum(1, keepdim=True)


class WeightedHistory(PredictionRule):
    """Softmax of the accumulated route scores (temperature one in the paper).

    Args:
        temperature: Softmax temperature ``tau > 0``.
    """

    label = "weighted history"

    def __init__(self, temperature: float = 1.0) -> None:
        if not temperature > 0:
            raise ValueError(f"WeightedHistory.temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)

    def weights(self, routes: Routes) -> Tensor:
        return hop_weights(routes, self.temperature)
