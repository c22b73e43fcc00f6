"""FedOpt: adaptive server optimizers (Reddi et al. 2021, "Adaptive Federated Optimization", Alg. 2).

The server keeps its model ``x_t`` (:class:`~lightning_fed.aggregation.server_optimizer.PseudoGradientStep`)
and, from the pseudo-gradient ``Delta_t = theta_bar_t - x_t`` of each round (``theta_bar_t`` the
sample-weighted average of the accepted uploads), per coordinate:

    m_t = beta1 m_{t-1} + (1 - beta1) Delta_t
    v_t = v_{t-1} + Delta_t^2                                           (FedAdagrad)
    v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)     (FedYogi)
    v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2                         (FedAdam)
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)

with ``m_{-1} = 0`` and ``v_{-1} = tau^2`` (the paper's ``v_{-1} >= tau^2``), and no bias correction
(Algorithm 2 has none). ``eta`` is the server rate, ``tau`` the adaptivity (the paper's grid:
``eta`` in 1e-3 .. 1, ``tau`` in 1e-3 .. 1e-1); the client rate ``eta_l`` is the model's own
optimizer (``configure_optimizers``). State (``x_t``, ``m``, ``v``) is float64 and checkpointed.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
from torch import Tensor

from lightning_fed.aggregation.server_optimizer import PseudoGradientStep
from lightning_fed.validation import check_number

__all__ = ["FedAdagrad", "FedAdam", "FedYogi"]


class _Adaptive(PseudoGradientStep):
    """The common rule of Algorithm 2; subclasses give the second-moment update :meth:`second_moment`.

    Args:
        eta: Server learning rate (> 0).
        beta1: First-moment decay in [0, 1).
        beta2: Second-moment decay in [0, 1) (unused by FedAdagrad).
        tau: Adaptivity / numerical floor (> 0); also ``sqrt(v_{-1})``.
    """

    def __init__(self, eta: float = 1e-2, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3) -> None:
        super().__init__()
        key = "algorithm.init_args.server_optimizer.init_args"
        self.eta = check_number(f"{key}.eta", eta, 0.0, strict=True)
        self.tau = check_number(f"{key}.tau", tau, 0.0, strict=True)
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= float(beta) < 1.0:
                raise ValueError(f"{key}.{name} must be in [0, 1), got {beta}: use e.g. 0.9 or 0.99")
        self.beta1, self.beta2 = float(beta1), float(beta2)
        self.m: dict[str, Tensor] = {}
        self.v: dict[str, Tensor] = {}

    def reset(self) -> None:
        self.m = {n: torch.zeros_like(t) for n, t in self.server.items()}
        self.v = {n: torch.full_like(t, self.tau**2) for n, t in self.server.items()}

    @abstractmethod
    def second_moment(self, v: Tensor, square: Tensor) -> Tensor:
        """``v_t`` from ``v_{t-1}`` and ``Delta_t^2``."""

    def direction(self, name: str, delta: Tensor) -> Tensor:
        m = self.beta1 * self.m[name].to(delta.device) + (1.0 - self.beta1) * delta
        v = self.second_moment(self.v[name].to(delta.device), delta * delta)
        self.m[name], self.v[name] = m, v
        return self.eta * m / (torch.sqrt(v) + self.tau)

    def rule_state(self) -> dict[str, Any]:
        return {
            "m": {n: t.clone() for n, t in self.m.items()},
            "v": {n: t.clone() for n, t in self.v.items()},
        }

    def load_rule_state(self, state: dict[str, Any]) -> None:
        self.m = {n: t.clone() for n, t in state["m"].items()}
        self.v = {n: t.clone() for n, t in state["v"].items()}


class FedAdagrad(_Adaptive):
    """FedAdagrad: ``v_t = v_{t-1} + Delta_t^2`` (module docstring; ``beta2`` unused)."""

    def second_moment(self, v: Tensor, square: Tensor) -> Tensor:
        return v + square


class FedYogi(_Adaptive):
    """FedYogi: ``v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)`` (module docstring)."""

    def second_moment(self, v: Tensor, square: Tensor) -> Tensor:
        return v - (1.0 - self.beta2) * square * torch.sign(v - square)


class FedAdam(_Adaptive):
    """FedAdam: ``v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2`` (module docstring)."""

    def second_moment(self, v: Tensor, square: Tensor) -> Tensor:
        return self.beta2 * v + (1.0 - self.beta2) * square
