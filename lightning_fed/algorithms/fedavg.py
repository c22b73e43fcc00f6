"""FedAvg (McMahan et al. 2017) on a star: every round every center uploads, the server averages.

Each center trains locally, uploads its shared parameters to the server (one message), the server
computes ``theta_bar = sum_j (n_j / n) theta_j`` (the mixing matrix ``1 w^T``) and sends it back (one
message per center). Cost per center per round: one upload and one download of the shared
parameters, ``2|W|`` bytes (ABPS Eq. 2). Personal (head) layers, when configured, stay local.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.aggregation.mixing import sample_weights, weighted_average
from lightning_fed.algorithms.base import Algorithm
from lightning_fed.comm.ledger import SERVER
from lightning_fed.comm.wire import Wire
from lightning_fed.types import RoundContext

__all__ = ["FedAvg"]


class FedAvg(Algorithm):
    """Sample-weighted averaging of all centers' shared parameters through a server."""

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        centers = torch.arange(self.num_centers)
        server = torch.full_like(centers, SERVER)
        uploaded = wire.send(self.shared(params), centers, server, ctx.round)
        average = weighted_average(uploaded, sample_weights(self.n_train))
        downloaded = wire.send(average, server, centers, ctx.round)
        out = dict(params)
        out.update({n: t.expand_as(params[n]).clone() for n, t in downloaded.items()})
        return out
