"""FedAvg (McMahan et al. 2017) on a star: every round every center uploads, the server averages.

Each center trains locally, uploads its shared parameters to the server (one message), the server
computes ``theta_bar = sum_j (n_j / n) theta_j`` (the mixing matrix ``1 w^T``) and sends it back (one
message per center). Cost per center per round: one upload and one download of the shared
parameters, ``2|W|`` bytes (ABPS Eq. 2). Personal (head) layers, when configured, stay local.

Faults (:mod:`lightning_fed.comm.faults`): only the centers :meth:`Wire.available
<lightning_fed.comm.wire.Wire.available>` this round upload and download; an unavailable center
keeps its parameters and nothing is booked for it. The server validates every upload
(:meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>`, reference: the median upload norm) and
averages the accepted ones with weights renormalized over them, ``n_j / sum_{k accepted} n_k``;
a center that rejects the download keeps its own parameters. With nothing accepted, nothing is
sent back and every center keeps its parameters.
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
    """Sample-weighted averaging of the available centers' shared parameters through a server."""

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        out = dict(params)
        available = wire.available(ctx.round, self.num_centers)
        centers = torch.arange(self.num_centers)[available]
        if not len(centers):
            return out
        shared = self.shared(params)
        if not bool(available.all()):
            shared = {n: t.index_select(0, centers.to(t.device)) for n, t in shared.items()}
        server = torch.full_like(centers, SERVER)
        uploaded = wire.send(shared, centers, server, ctx.round)
        accepted = wire.accept(uploaded, None, ctx.round)
        if not bool(accepted.any()):
            return out
        if not bool(accepted.all()):
            keep = torch.nonzero(accepted).reshape(-1)
            uploaded = {n: t.index_select(0, keep.to(t.device)) for n, t in uploaded.items()}
        average = weighted_average(uploaded, sample_weights(self.n_train[centers][accepted]))
        downloaded = wire.send(average, server, centers, ctx.round)
        take = wire.accept(downloaded, shared, ctx.round)
        if bool(available.all()) and bool(take.all()):
            out.update({n: t.expand_as(params[n]).clone() for n, t in downloaded.items()})
            return out
        rows = centers[take]
        for n, t in downloaded.items():
            new = params[n].clone()
            new[rows.to(new.device)] = t.expand(len(rows), *t.shape[1:]).to(new.dtype)
            out[n] = new
        return out
