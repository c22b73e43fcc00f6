"""Server momentum (FedAvgM, Hsu et al. 2019): one velocity on the server's global model.

The server keeps one global model ``theta_server`` and one velocity ``v`` per shared tensor (a single
model, not one per center). In a round whose accepted uploads average to ``theta_bar_t`` (the
sample-weighted average FedAvg would send), the pseudo-gradient and the server step are

    Delta_t = theta_bar_t - theta_server,
    v <- beta v + Delta_t,
    theta_server <- theta_server + v,

and the server sends the new ``theta_server`` to the centers. ``beta = 0`` gives
``theta_server = theta_bar_t``: plain FedAvg.

Round 0: ``theta_server`` starts as the common initial model every center starts from (the
federation's seeded init of the shared tensors; personal layers have no server state) and
``v = 0``. So the first round sends ``theta_bar_0`` exactly as FedAvg does; the momentum acts from
round 1 on. A round with no accepted upload leaves ``theta_server`` and ``v`` unchanged.

The state is kept in float64 (whatever the wire and parameter dtypes), so ``beta = 0`` reproduces
``theta_bar_t`` bit for bit after the cast back, and bf16 messages do not round the server's own
model; the sent model is cast to the uploads' dtype (the wire then encodes it).

This is not :class:`~lightning_fed.aggregation.momentum.UpdateMomentum` (``algorithm.momentum``),
which keeps one EMA buffer per center of that center's aggregated update ``m_i - theta_i``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.validation import check_number

__all__ = ["CenterServerMomentum", "ServerMomentum"]


class ServerMomentum:
    """The FedAvgM server step on a single global model (module docstring).

    Args:
        beta: Momentum ``beta`` in [0, 1) (0: plain FedAvg).
    """

    def __init__(self, beta: float = 0.0) -> None:
        beta = check_number("algorithm.server_momentum", beta, 0.0, strict=False)
        if beta >= 1.0:
            raise ValueError(
                f"algorithm.server_momentum must be in [0, 1), got {beta}: use e.g. 0.5 or 0.9 (FedAvgM)"
            )
        self.beta = float(beta)
        self.server: dict[str, Tensor] = {}
        self.velocity: dict[str, Tensor] = {}

    def start(self, initial: dict[str, Tensor]) -> None:
        """Set ``theta_server`` to the common initial model ``{name: [...]}`` and ``v = 0``."""
        self.server = {n: t.detach().to(torch.float64).clone().unsqueeze(0) for n, t in initial.items()}
        self.velocity = {n: torch.zeros_like(t) for n, t in self.server.items()}

    def step(self, average: dict[str, Tensor]) -> dict[str, Tensor]:
        """One server step from ``theta_bar_t`` (``{name: [1, ...]}``); returns the new ``theta_server``.

        ``Delta = theta_bar_t - theta_server``, ``v <- beta v + Delta``, ``theta_server <- theta_server + v``;
        the result has ``average``'s dtypes.

        Raises:
            KeyError: If ``average`` names a tensor :meth:`start` did not set (a programming error).
        """
        out = {}
        for n, bar in average.items():
            # The state follows the uploads' device (a checkpoint may have been loaded onto the CPU).
            server = self.server[n].to(bar.device)
            delta = bar.to(torch.float64) - server
            self.velocity[n] = self.beta * self.velocity[n].to(bar.device) + delta
            self.server[n] = server + self.velocity[n]
            out[n] = self.server[n].to(bar.dtype)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "server": {n: t.clone() for n, t in self.server.items()},
            "velocity": {n: t.clone() for n, t in self.velocity.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.server = {n: t.clone() for n, t in state["server"].items()}
        self.velocity = {n: t.clone() for n, t in state["velocity"].items()}


class CenterServerMomentum:
    """FedAvgM with every center as its own server: server momentum in a peer-to-peer federation.

    ABPS has no server, so ABPS-X's server momentum (ABPS Sec. 6.4) is FedAvgM applied by each center
    to its own model: center ``i``'s "server model" is the model it started the round from,
    ``s_i`` (its parameters after last round's aggregation, from which local training started), and
    its "average" is what mixing with its partners produced, ``m_i``. Then, as in :class:`ServerMomentum`,

        Delta_i = m_i - s_i,     v_i <- beta v_i + Delta_i,     theta_i <- s_i + v_i.

    ``beta = 0`` gives ``theta_i = m_i``: plain ABPS. The pseudo-gradient ``Delta_i`` contains the
    round's local training and the mixing, as FedAvgM's does; the per-center EMA of
    :class:`~lightning_fed.aggregation.momentum.UpdateMomentum` (``algorithm.momentum``) instead
    smooths only the mixing correction ``m_i - theta_i`` (trained parameters), with a ``(1 - beta)``
    dampening. A center that did not aggregate this round (it rested or was unavailable) keeps its
    trained parameters and its velocity.

    Args:
        beta: Momentum in [0, 1) (0 disables; ABPS-X: 0.5).
    """

    def __init__(self, beta: float = 0.0) -> None:
        beta = check_number("algorithm.server_momentum", beta, 0.0, strict=False)
        if beta >= 1.0:
            raise ValueError(f"algorithm.server_momentum must be in [0, 1), got {beta}: use e.g. 0.5")
        self.beta = float(beta)
        self.velocity: dict[str, Tensor] = {}

    def apply(self, name: str, start: Tensor, own: Tensor, mixed: Tensor, active: Tensor) -> Tensor:
        """New parameters ``[C, ...]`` of tensor ``name``.

        Args:
            name: The tensor's name (one velocity per tensor).
            start: Round-start parameters ``s_i``.
            own: Trained parameters (kept by inactive centers).
            mixed: Mixed parameters ``m_i``.
            active: bool ``[C]``, who aggregated.
        """
        keep = active.to(own.device).view(-1, *([1] * (own.dim() - 1)))
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
