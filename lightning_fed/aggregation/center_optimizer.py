"""Server optimizers with every center as its own server: the per-center variant for peer methods.

ABPS has no server, so its server optimizer (``algorithm.init_args.server_optimizer`` of
:class:`~lightning_fed.algorithms.ABPS`) is applied by each center to its own model. Center ``i``'s
"server model" is the model it started the round from, ``s_i`` (its parameters after last round's
aggregation, from which local training started), and its "aggregate" is what mixing with its
partners produced, ``m_i``; the pseudo-gradient is ``Delta_i = m_i - s_i`` (it contains the round's
local training and the mixing, as FedAvgM's does on the star,
:mod:`~lightning_fed.aggregation.server_optimizer`). A center that did not aggregate this round (it
rested or was unavailable) keeps its trained parameters and its state.

* :class:`CenterServerAverage` (the default): ``theta_i = m_i``, plain ABPS;
* :class:`CenterServerMomentum` (ABPS-X, ABPS Sec. 6.4, ``beta = 0.5``; the server momentum
  FedAvg-X uses): ``v_i <- beta v_i + Delta_i``, ``theta_i <- s_i + v_i``.

The float ``algorithm.init_args.server_momentum: beta`` of earlier releases is an alias of
``CenterServerMomentum(beta)`` (0: :class:`CenterServerAverage`), resolved by
:func:`center_server_optimizer_from`. This is not
:class:`~lightning_fed.aggregation.momentum.UpdateMomentum` (``algorithm.momentum``), which smooths
only the mixing correction ``m_i - theta_i`` (trained parameters), with a ``(1 - beta)`` dampening.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from torch import Tensor

from lightning_fed.aggregation.server_optimizer import check_beta

__all__ = [
    "CenterServerAverage",
    "CenterServerMomentum",
    "CenterServerOptimizer",
    "center_server_optimizer_from",
    "keep_own_rows_",
]


class CenterServerOptimizer(ABC):
    """Each center's server step from its round-start model ``s_i`` and its mix ``m_i``.

    Attributes:
        needs_start: Whether :meth:`apply` reads ``start`` (the algorithm then keeps a copy of the
            round-start shared parameters before local training; otherwise it passes ``own``).
        identity: True when the rule returns ``m_i`` unchanged (:class:`CenterServerAverage`).
    """

    needs_start: ClassVar[bool] = True
    identity: ClassVar[bool] = False

    def reset(self) -> None:  # noqa: B027 (stateless by default)
        """Clear the state before training (a fresh run)."""

    @abstractmethod
    def apply(self, name: str, start: Tensor, own: Tensor, mixed: Tensor, active: Tensor) -> Tensor:
        """New parameters ``[C, ...]`` of tensor ``name``; a rule may write them into ``mixed``
        (the caller gives it away: ABPS's mix, dropped after the call).

        Args:
            name: The tensor's name (state is kept per tensor).
            start: Round-start parameters ``s_i`` (``own`` when :attr:`needs_start` is False).
            own: Trained parameters (kept by inactive centers).
            mixed: Mixed parameters ``m_i``.
            active: bool ``[C]``, who aggregated.
        """

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore :meth:`state_dict`."""


def _rows(active: Tensor, like: Tensor) -> Tensor:
    """``active`` (bool ``[C]``) shaped to broadcast over ``like`` ``[C, ...]``."""
    return active.to(like.device).view(-1, *([1] * (like.dim() - 1)))


def keep_own_rows_(target: Tensor, own: Tensor, active: Tensor) -> Tensor:
    """``torch.where(active, target, own)`` written into ``target`` and returned: the rows of the
    centers that did not aggregate copied from ``own`` (the same numbers, no new ``[C, ...]``)."""
    inactive = (~active).nonzero().flatten().to(target.device)
    if len(inactive):
        target.index_copy_(0, inactive, own.index_select(0, inactive))
    return target


class CenterServerAverage(CenterServerOptimizer):
    """``theta_i = m_i`` for every center that aggregated (plain ABPS)."""

    needs_start: ClassVar[bool] = False
    identity: ClassVar[bool] = True

    def apply(self, name: str, start: Tensor, own: Tensor, mixed: Tensor, active: Tensor) -> Tensor:
        """``torch.where(active, mixed, own)`` written into ``mixed``: the inactive centers' rows
        copied from ``own`` (the same numbers, without a third ``[C, ...]`` tensor; issue 33)."""
        return keep_own_rows_(mixed, own, active)


class CenterServerMomentum(CenterServerOptimizer):
    """FedAvgM with every center as its own server (module docstring).

    ``Delta_i = m_i - s_i``, ``v_i <- beta v_i + Delta_i``, ``theta_i <- s_i + v_i``; ``beta = 0``
    gives ``theta_i = m_i``.

    Args:
        beta: Momentum in [0, 1) (ABPS-X: 0.5).
    """

    def __init__(self, beta: float = 0.5) -> None:
        self.beta = check_beta("algorithm.init_args.server_optimizer.init_args.beta", beta)
        self.velocity: dict[str, Tensor] = {}

    def reset(self) -> None:
        self.velocity = {}

    def apply(self, name: str, start: Tensor, own: Tensor, mixed: Tensor, active: Tensor) -> Tensor:
        keep = _rows(active, own)
        vel = self.velocity.get(name)
        if vel is None:
            vel = torch.zeros_like(own)
        new = self.beta * vel + (mixed - start)
        self.velocity[name] = torch.where(keep, new, vel)
        return torch.where(keep, start + self.velocity[name], own)

    def state_dict(self) -> dict[str, Any]:
        return {n: t.clone() for n, t in self.velocity.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.velocity = {n: t.clone() for n, t in state.items()}


def center_server_optimizer_from(
    server_optimizer: CenterServerOptimizer | None, server_momentum: float = 0.0
) -> CenterServerOptimizer:
    """ABPS's per-center server optimizer from ``server_optimizer`` or its float alias ``server_momentum``.

    Raises:
        ValueError: If a nonzero ``server_momentum`` and a ``server_optimizer`` are both given, or
            ``server_momentum`` is not in [0, 1). (``server_momentum`` defaults to 0, the value
            earlier releases resolved, so that configs written before the plugin keep their
            fingerprint; an explicit 0 beside a server optimizer is therefore accepted.)
    """
    if server_momentum and server_optimizer is not None:
        raise ValueError(
            "algorithm.init_args.server_momentum is the old alias of algorithm.init_args.server_optimizer: "
            "give only server_optimizer (e.g. class_path: lightning_fed.aggregation.CenterServerMomentum)"
        )
    if server_optimizer is not None:
        return server_optimizer
    beta = check_beta("algorithm.init_args.server_momentum", server_momentum)
    return CenterServerMomentum(beta) if beta else CenterServerAverage()
