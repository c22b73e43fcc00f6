"""MOON (Li, He and Song, CVPR 2021): model-contrastive federated learning.

FedAvg's exchange with an extra local loss that pulls each center's representation towards the
global model's and away from its own previous local model's. For a row ``x`` with representation
``z`` under the current local model, ``z_glob`` under the global model received this round and
``z_prev`` under the center's local model at the end of the previous round,

    l_con(x) = -log( exp(sim(z, z_glob) / tau) / (exp(sim(z, z_glob) / tau) + exp(sim(z, z_prev) / tau)) )
             = softplus( (sim(z, z_prev) - sim(z, z_glob)) / tau ),

with ``sim`` the cosine similarity, and the local loss is ``l_task + mu * mean_x l_con(x)``.

Choices: the representation is the MLP's last hidden layer (64 units, after ReLU; the issue's
choice: the tabular MLP has no projection head); ``z_glob`` and ``z_prev`` are computed without
dropout and without gradient (they are fixed targets); in round 0 the previous local model is the
initial model (as in the MOON code, where it starts as a copy of the global model). Defaults
``mu = 1``, ``tau = 0.5`` follow the paper's CIFAR-10 setting.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.objective import LocalTerm, TermBatch
from lightning_fed.models.base import CenterModule
from lightning_fed.types import RoundContext
from lightning_fed.validation import check_number

__all__ = ["MOON", "ContrastiveTerm", "contrastive_loss"]


def contrastive_loss(z: Tensor, z_glob: Tensor, z_prev: Tensor, mask: Tensor, tau: float) -> Tensor:
    """Mean over real rows of ``softplus((sim(z, z_prev) - sim(z, z_glob)) / tau)``, per center ``[k]``.

    Args:
        z, z_glob, z_prev: Representations ``[k, B, H]``.
        mask: ``[k, B]``, 1 for real rows.
        tau: Temperature.
    """
    pos = torch.nn.functional.cosine_similarity(z, z_glob.to(z.dtype), dim=-1)
    neg = torch.nn.functional.cosine_similarity(z, z_prev.to(z.dtype), dim=-1)
    per_row = torch.nn.functional.softplus((neg - pos) / tau)
    mask = mask.to(per_row.dtype)
    return (per_row * mask).sum(1) / mask.sum(1)


class ContrastiveTerm(LocalTerm):
    """``mu * l_con`` using the algorithm's previous local models."""

    needs_features = True

    def __init__(self, algorithm: MOON) -> None:
        self.algorithm = algorithm

    def loss(self, batch: TermBatch) -> Tensor:
        alg = self.algorithm
        assert batch.features is not None
        prev = {n: t.index_select(0, batch.centers.to(t.device)) for n, t in alg.previous.items()}
        z_glob = batch.features_fn(batch.start, batch.x)
        z_prev = batch.features_fn(prev, batch.x)
        return alg.mu * contrastive_loss(batch.features, z_glob, z_prev, batch.mask, alg.tau)


class MOON(FedAvg):
    """FedAvg with MOON's model-contrastive local loss.

    Args:
        mu: Weight of the contrastive loss (paper: 1 for CIFAR-10, 5 for CIFAR-100).
        tau: Temperature (paper: 0.5).
        personal_layers: Head layers kept local.
    """

    def __init__(self, mu: float = 1.0, tau: float = 0.5, personal_layers: int = 0) -> None:
        super().__init__(personal_layers)
        self.mu = check_number("algorithm.mu", mu, 0.0, strict=False)
        self.tau = check_number("algorithm.tau", tau, 0.0, strict=True)

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        self.previous = {
            n: p.detach().unsqueeze(0).repeat(self.num_centers, *([1] * p.dim()))
            for n, p in module.named_parameters()
        }

    def local_term(self) -> LocalTerm:
        return ContrastiveTerm(self)

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        self.previous = {n: t.detach().clone() for n, t in params.items()}
        return super().aggregate(ctx, params, wire)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous": {n: t.clone() for n, t in self.previous.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.previous = {n: t.clone() for n, t in state["previous"].items()}
