"""FedDyn (Acar et al., ICLR 2021): federated learning with dynamic regularization.

Center ``k`` keeps a state ``g_k`` (initially 0; it tracks ``grad L_k`` at its last local model) and
in round ``t`` minimizes

    L_k(theta) - <g_k, theta> + (alpha / 2) ||theta - theta^{t-1}||^2,

with ``theta^{t-1}`` the server model it received; each local step follows
``grad L_k(theta) - g_k + alpha (theta - theta^{t-1})``. After local training (Algorithm 1 of the
paper) the center updates ``g_k <- g_k - alpha (theta_k^t - theta^{t-1})`` and uploads
``theta_k^t``; the server, over the participating set ``P_t`` of the ``m`` centers, updates

    h^t = h^{t-1} - (alpha / m) sum_{k in P_t} (theta_k^t - theta^{t-1}),
    theta^t = (1 / |P_t|) sum_{k in P_t} theta_k^t - h^t / alpha,

and sends ``theta^t`` back. The exchange on the wire is FedAvg's (one upload, one download).

Choices: the paper's average is unweighted (kept); only shared parameters have a server model, so
the state and both terms cover the shared parameters; ``P_t`` is the set of centers whose upload
the server accepted (faults, :mod:`lightning_fed.comm.faults`); ``theta^{t-1}`` starts as the
common initial model.

Why FedDyn overrides :meth:`FedAvg.server_model` (the server's aggregation rule) rather than being a
:class:`~lightning_fed.aggregation.server_optimizer.ServerOptimizer`: a server optimizer steps from
the round's aggregate alone, and FedDyn's server is not a function of it. ``h^t`` needs the
unweighted *sum* over ``P_t`` divided by the federation size ``m`` (not the sample-weighted average;
``|P_t| (mean - theta^{t-1})`` equals the sum only up to rounding, so results would change bit for
bit), and its server model ``theta^{t-1}`` is read every round by the centers' local term and by
their state update ``g_k`` before the upload, so the state belongs to the method, not to a
swappable server rule. FedDyn therefore takes no ``server_optimizer`` (it keeps FedAvg's default,
:class:`~lightning_fed.aggregation.ServerAverage`, which sends ``theta^t`` as computed).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.aggregation.robust import Aggregator, refuse_aggregator
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.objective import LocalTerm, TermBatch, squared_distance
from lightning_fed.models.base import CenterModule
from lightning_fed.types import RoundContext
from lightning_fed.validation import check_number

__all__ = ["DynamicTerm", "FedDyn"]


class DynamicTerm(LocalTerm):
    """``-<g_k, theta> + (alpha / 2) ||theta - theta^{t-1}||^2`` with the algorithm's live state."""

    def __init__(self, algorithm: FedDyn) -> None:
        self.algorithm = algorithm

    def loss(self, batch: TermBatch) -> Tensor:
        alg = self.algorithm
        server = {n: t.expand_as(batch.params[n]) for n, t in alg.server.items()}
        value = 0.5 * alg.alpha * squared_distance(batch.params, server, alg.shared_names)
        for n in alg.shared_names:
            g = alg.grad_state[n].index_select(0, batch.centers.to(alg.grad_state[n].device))
            p = batch.params[n]
            value = value - (g.to(p.dtype) * p).reshape(p.shape[0], -1).sum(1)
        return value


class FedDyn(FedAvg):
    """FedAvg exchange with FedDyn's linear + quadratic local terms and server state ``h``.

    Args:
        alpha: Regularization weight (the paper uses 0.01-0.1; default 0.01).
        personal_layers: Head layers kept local.
        aggregator: Refused (one line) unless None: FedDyn's server model is its own rule (module
            docstring), not an aggregate of the uploads a robust aggregator could replace.
    """

    #: It takes ``aggregator`` only to refuse it (``fit`` lists the methods that use one).
    refuses_aggregator = True

    def __init__(
        self, alpha: float = 0.01, personal_layers: int = 0, aggregator: Aggregator | None = None
    ) -> None:
        refuse_aggregator("FedDyn", aggregator, "its server model is the upload mean corrected by h / alpha")
        super().__init__(personal_layers)
        self.alpha = check_number("algorithm.alpha", alpha, 0.0, strict=True)

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        params = dict(module.named_parameters())
        self.server = {n: params[n].detach().clone().unsqueeze(0) for n in self.shared_names}
        self.h = {n: torch.zeros_like(t) for n, t in self.server.items()}
        self.grad_state = {
            n: torch.zeros(self.num_centers, *t.shape[1:], dtype=t.dtype, device=t.device)
            for n, t in self.server.items()
        }

    def local_term(self) -> LocalTerm:
        return DynamicTerm(self)

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        # Client side, before uploading: g_k <- g_k - alpha (theta_k^t - theta^{t-1}) for every
        # center that takes part this round.
        available = wire.available(ctx.round, self.num_centers).to(next(iter(params.values())).device)
        for n, g in self.grad_state.items():
            step = self.alpha * (params[n].to(g.dtype) - self.server[n])
            g.sub_(torch.where(available.view(-1, *([1] * (g.dim() - 1))), step, torch.zeros_like(step)))
        return super().aggregate(ctx, params, wire)

    def server_model(
        self, uploaded: dict[str, Tensor], senders: Tensor, ctx: RoundContext
    ) -> dict[str, Tensor]:
        """``h <- h - (alpha/m) sum_P (theta_k - theta^{t-1})``; ``theta^t = mean_P theta_k - h/alpha``."""
        out = {}
        for n, theta in uploaded.items():
            delta = (theta.to(self.server[n].dtype) - self.server[n]).sum(0, keepdim=True)
            self.h[n] = self.h[n] - (self.alpha / self.num_centers) * delta
            model = theta.to(self.server[n].dtype).mean(0, keepdim=True) - self.h[n] / self.alpha
            self.server[n] = model
            out[n] = model.to(theta.dtype)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "server": {n: t.clone() for n, t in self.server.items()},
            "h": {n: t.clone() for n, t in self.h.items()},
            "grad_state": {n: t.clone() for n, t in self.grad_state.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.server = {n: t.clone() for n, t in state["server"].items()}
        self.h = {n: t.clone() for n, t in state["h"].items()}
        self.grad_state = {n: t.clone() for n, t in state["grad_state"].items()}
