"""Server optimizers on the star: how the server moves its model from the round's aggregate.

One home for the server step of every star method (docs/architecture.md, decision 15).

A :class:`ServerOptimizer` is the plugin of the star methods (:class:`~lightning_fed.algorithms.FedAvg`
and its subclasses), chosen by ``algorithm.init_args.server_optimizer.class_path``. Each round the
server aggregates the accepted uploads into ``theta_bar_t`` (FedAvg: the sample-weighted average)
and the optimizer turns it into the model the server sends back. Following Reddi et al. 2021
("Adaptive Federated Optimization", Algorithm 2), the server keeps its own model ``x_t`` and treats

    Delta_t = theta_bar_t - x_t

as a pseudo-gradient (the negative of one), which a server rule turns into a step ``s_t``:
``x_{t+1} = x_t + s_t``. The shipped rules:

* :class:`ServerAverage` (the default): ``x_{t+1} = theta_bar_t``, plain FedAvg; it keeps no state
  and returns the aggregate itself, so it costs nothing and changes no bit;
* :class:`ServerMomentum` (FedAvgM, Hsu et al. 2019): ``v <- beta v + Delta_t``, ``s_t = v``.

:class:`PseudoGradientStep` is the base of the rules that keep ``x_t`` (FedAdam / FedYogi /
FedAdagrad add a per-coordinate second moment in :meth:`PseudoGradientStep.direction`). Its state
is kept in float64 whatever the wire and parameter dtypes, so ``beta = 0`` reproduces
``theta_bar_t`` bit for bit after the cast back and bf16 messages do not round the server's own
model; the sent model is cast to the aggregate's dtype (the wire then encodes it).

Round 0: ``x_0`` is the common initial model every center starts from (the federation's seeded
init of the shared tensors; personal layers have no server state, :meth:`ServerOptimizer.start`),
so the first round sends ``theta_bar_0`` exactly as FedAvg does; a round with no accepted upload
calls no step and leaves the state unchanged.

The float ``algorithm.init_args.server_momentum: beta`` of earlier releases is an alias of
``ServerMomentum(beta)`` (0: :class:`ServerAverage`), resolved by :func:`server_optimizer_from`.
ABPS, which has no server, uses the per-center variant of
:mod:`~lightning_fed.aggregation.center_optimizer`. Neither is
:class:`~lightning_fed.aggregation.momentum.UpdateMomentum` (``algorithm.momentum``), one EMA
buffer per center of that center's aggregated update.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from torch import Tensor

from lightning_fed.validation import check_number

__all__ = [
    "PseudoGradientStep",
    "ServerAverage",
    "ServerMomentum",
    "ServerOptimizer",
    "check_beta",
    "server_optimizer_from",
]


def check_beta(key: str, beta: object) -> float:
    """A momentum ``beta`` in [0, 1), or a one-line ``ValueError`` naming the config ``key``."""
    value = check_number(key, beta, 0.0, strict=False)
    if value >= 1.0:
        raise ValueError(f"{key} must be in [0, 1), got {value}: use e.g. 0.5 or 0.9")
    return float(value)


class ServerOptimizer(ABC):
    """How the server turns the round's aggregate ``theta_bar_t`` into the model it sends.

    Attributes:
        identity: True when the server sends ``theta_bar_t`` unchanged (:class:`ServerAverage`).
    """

    identity: ClassVar[bool] = False

    def start(self, initial: dict[str, Tensor]) -> None:  # noqa: B027 (stateless by default)
        """Before training: the common initial model ``{name: [...]}`` of the shared tensors; resets
        any state (a fresh run)."""

    @abstractmethod
    def step(self, average: dict[str, Tensor]) -> dict[str, Tensor]:
        """The model ``{name: [1, ...]}`` to send, from the round's aggregate ``{name: [1, ...]}``."""

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore :meth:`state_dict`."""


class ServerAverage(ServerOptimizer):
    """Send the aggregate itself, ``x_{t+1} = theta_bar_t`` (FedAvg, McMahan et al. 2017)."""

    identity: ClassVar[bool] = True

    def step(self, average: dict[str, Tensor]) -> dict[str, Tensor]:
        return average


class PseudoGradientStep(ServerOptimizer):
    """A server rule that keeps its model ``x_t`` and steps along the pseudo-gradient (module docstring).

    Subclasses implement :meth:`direction`, the step ``s_t`` of one tensor from its
    ``Delta_t = theta_bar_t - x_t``; their own state goes through :meth:`rule_state` /
    :meth:`load_rule_state`.
    """

    def __init__(self) -> None:
        self.server: dict[str, Tensor] = {}

    def start(self, initial: dict[str, Tensor]) -> None:
        """``x_0`` = the common initial model (float64, ``[1, ...]``); the rule's state is reset."""
        self.server = {n: t.detach().to(torch.float64).clone().unsqueeze(0) for n, t in initial.items()}
        self.reset()

    @abstractmethod
    def reset(self) -> None:
        """Clear the rule's own state (called by :meth:`start`, after ``x_0`` is set)."""

    @abstractmethod
    def direction(self, name: str, delta: Tensor) -> Tensor:
        """The step ``s_t`` (float64, like ``delta``) of tensor ``name`` from ``Delta_t``."""

    def step(self, average: dict[str, Tensor]) -> dict[str, Tensor]:
        """``Delta = theta_bar_t - x_t``, ``x_{t+1} = x_t + direction(Delta)``; ``average``'s dtypes.

        Raises:
            KeyError: If ``average`` names a tensor :meth:`start` did not set (a programming error).
        """
        out = {}
        for n, bar in average.items():
            # The state follows the aggregate's device (a checkpoint may have been loaded onto the CPU).
            server = self.server[n].to(bar.device)
            self.server[n] = server + self.direction(n, bar.to(torch.float64) - server)
            out[n] = self.server[n].to(bar.dtype)
        return out

    def rule_state(self) -> dict[str, Any]:
        """The rule's own state (beside ``x_t``)."""
        return {}

    def load_rule_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`rule_state`."""

    def state_dict(self) -> dict[str, Any]:
        return {"server": {n: t.clone() for n, t in self.server.items()}, **self.rule_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.server = {n: t.clone() for n, t in state["server"].items()}
        self.load_rule_state(state)


class ServerMomentum(PseudoGradientStep):
    """FedAvgM (Hsu et al. 2019, Sec. 3): one velocity on the server's model.

    ``v <- beta v + Delta_t``, ``x_{t+1} = x_t + v``, with ``v = 0`` at the start; ``beta = 0`` sends
    ``theta_bar_t`` (FedAvg). FedAvg-X (``configs/fedavg_x.yaml``) uses ``beta = 0.5``.

    Args:
        beta: Momentum in [0, 1).
    """

    def __init__(self, beta: float = 0.9) -> None:
        super().__init__()
        self.beta = check_beta("algorithm.init_args.server_optimizer.init_args.beta", beta)
        self.velocity: dict[str, Tensor] = {}

    def reset(self) -> None:
        self.velocity = {n: torch.zeros_like(t) for n, t in self.server.items()}

    def direction(self, name: str, delta: Tensor) -> Tensor:
        self.velocity[name] = self.beta * self.velocity[name].to(delta.device) + delta
        return self.velocity[name]

    def rule_state(self) -> dict[str, Any]:
        return {"velocity": {n: t.clone() for n, t in self.velocity.items()}}

    def load_rule_state(self, state: dict[str, Any]) -> None:
        self.velocity = {n: t.clone() for n, t in state["velocity"].items()}


def server_optimizer_from(
    server_optimizer: ServerOptimizer | None, server_momentum: float = 0.0
) -> ServerOptimizer:
    """The star's server optimizer from ``algorithm.init_args.server_optimizer`` or its float alias.

    ``server_momentum: beta`` (the key of earlier releases) maps to ``ServerMomentum(beta)``, and
    ``0`` to :class:`ServerAverage`; neither given: :class:`ServerAverage`.

    Raises:
        ValueError: If a nonzero ``server_momentum`` and a ``server_optimizer`` are both given, or
            ``server_momentum`` is not in [0, 1). (``server_momentum`` defaults to 0, the value
            earlier releases resolved, so that configs written before the plugin keep their
            fingerprint; an explicit 0 beside a server optimizer is therefore accepted.)
    """
    if server_momentum and server_optimizer is not None:
        raise ValueError(
            "algorithm.init_args.server_momentum is the old alias of algorithm.init_args.server_optimizer: "
            "give only server_optimizer (e.g. class_path: lightning_fed.aggregation.ServerMomentum)"
        )
    if server_optimizer is not None:
        return server_optimizer
    beta = check_beta("algorithm.init_args.server_momentum", server_momentum)
    return ServerMomentum(beta) if beta else ServerAverage()
