"""FedSPD (Lin, Yagan & Joe-Wong, UAI 2025): soft-clustering personalized decentralized FL.

The clients' data are modelled as mixtures of ``S`` shared data clusters. Every client ``i`` keeps
``S`` cluster models ``theta_i1 .. theta_iS`` (stacked ``{name: [C, S, ...]}``, all starting from the
common initialization plus a seeded perturbation ``eps_s`` shared by all clients, so cluster ``s``
means the same thing everywhere) and, each round, local training in :meth:`FedSPD.train_round`:

1. E-step (local): the soft membership of each training row ``r`` in cluster ``s``,
   ``gamma_irs = softmax_s(-l(theta_is; x_ir, y_ir) / T)``, and the client's total membership
   ``m_is = sum_r gamma_irs`` (its soft count of cluster-``s`` rows; ``pi_is = m_is / n_i``);
2. M-step (local): ``local_steps`` SGD steps of every cluster model on the membership-weighted loss
   ``sum_b gamma_ibs l(theta_is; x_ib, y_ib) / sum_b gamma_ibs`` over seeded minibatches (all ``C x S``
   models at once, vmapped);

then the exchange in :meth:`FedSPD.aggregate`:

3. exchange: each client sends its ``S`` cluster models and its memberships ``m_i`` to every graph
   neighbour (one message per directed edge, booked on the ledger, validated by the receiver:
   :meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>` on the cluster models and the shares
   ``m_js / sum_s m_js``, against its own), and
   every cluster is averaged with weights proportional to the memberships:
   ``theta_is <- (m_is theta_is + sum_{j in A_i} m_js theta_js) / (m_is + sum_{j in A_i} m_js)``
   (``A_i``: the accepted neighbours);
4. the client's personalized model, the one the engine holds and evaluation sees, becomes its
   mixture ``sum_s pi_is theta_is``.

:meth:`FedSPD.finish` runs the paper's final personalization: ``final_steps`` local SGD steps of each
client's mixture on all of its rows (EdgeDRM App. D.2: 999 rounds of 5 updates, then 5 final ones).
Prediction uses the personalized model of the client a query enters at, like every other method.

Simplifications, documented: (a) soft (softmax) instead of the paper's hard argmin-loss assignments,
with temperature ``T`` (``T = 0`` is the hard rule). The cluster models start nearly identical, so
their per-row losses differ little and with ``T = 1`` the memberships stay near 1/S and the
clusters barely separate (measured on the Fashion-MNIST preset, 8 rounds, S = 2: membership entropy
0.687 of log 2 = 0.693 at ``T = 1``, 0.606-0.649 at ``T = 0.1`` with per-client shares 0.17-0.64), hence
the default ``T = 0.1``; (b) every client updates and sends all ``S`` cluster models
each round, where the paper's clients train and send one cluster model per round (its communication
saving): per-edge bytes here are ``S (|W| + 1)`` floats. The engine holds only the personalized
mixtures and never trains them (:meth:`FedSPD.train_round` replaces its local epochs); the round's
``train_loss`` is each client's membership-weighted M-step loss ``sum_s pi_is mean_steps L_is``.
Unavailable clients (fault plans) still run steps 1-2 but send and receive nothing; a cluster model
whose M-step diverges (non-finite loss or parameters) is rolled back to its value before the M-step
(``diverged_cluster_models`` in the round statistics).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.algorithms.base import Algorithm
from lightning_fed.algorithms.fedspd_steps import (
    cluster_average,
    draw_rows,
    gather_rows,
    mixture,
    soft_assignments,
    weighted_sgd_step,
)
from lightning_fed.comm.exchange import exchange, rows
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.base import Engine
from lightning_fed.graphs.gossip import build_graph, directed_edges, graph_stats
from lightning_fed.graphs.topology import RandomRegular, Topology
from lightning_fed.models.base import CenterModule
from lightning_fed.seeding import torch_generator
from lightning_fed.types import FinishContext, RoundContext
from lightning_fed.validation import check_int, check_number

__all__ = ["FedSPD"]

#: Payload key of the memberships ``m_j`` that travel with the cluster models.
MEMBERSHIP = "_membership"


class FedSPD(Algorithm):
    """Soft-clustered cluster models exchanged with graph neighbours, personalized as mixtures.

    Args:
        topology: Communication graph (default :class:`~lightning_fed.graphs.RandomRegular` of degree
            4, EdgeDRM's RR4), built with the run seed.
        num_clusters: Cluster models per client ``S`` (>= 1).
        local_steps: Membership-weighted SGD steps per cluster model and round (EdgeDRM App. D.2: 5).
        final_steps: Final personalization steps in :meth:`finish` (EdgeDRM App. D.2: 5).
        lr: SGD step size of the algorithm's own steps (M-step and final personalization).
        batch_size: Rows per step (clients with fewer rows use all of them).
        temperature: E-step softmax temperature ``T >= 0`` (0: hard argmin-loss assignments).
        init_noise: Cluster ``s`` starts at ``theta_0 + init_noise * rms(theta_0) * eps_s`` per
            parameter tensor, ``eps_s ~ N(0, I)`` seeded by ``(seed, "fedspd-init", s)``.
        eval_batch_size: Rows per forward call of the E-step.
    """

    def __init__(
        self,
        topology: Topology | None = None,
        num_clusters: int = 2,
        local_steps: int = 5,
        final_steps: int = 5,
        lr: float = 0.01,
        batch_size: int = 64,
        temperature: float = 0.1,
        init_noise: float = 0.1,
        eval_batch_size: int = 1024,
    ) -> None:
        super().__init__(0)
        self.topology = topology if topology is not None else RandomRegular(4)
        self.num_clusters = check_int("algorithm.num_clusters", num_clusters, 1)
        self.local_steps = check_int("algorithm.local_steps", local_steps, 0)
        self.final_steps = check_int("algorithm.final_steps", final_steps, 0)
        self.lr = check_number("algorithm.lr", lr, 0.0, strict=True)
        self.batch_size = check_int("algorithm.batch_size", batch_size, 1)
        self.temperature = check_number("algorithm.temperature", temperature, 0.0, strict=False)
        self.init_noise = check_number("algorithm.init_noise", init_noise, 0.0, strict=False)
        self.eval_batch_size = check_int("algorithm.eval_batch_size", eval_batch_size, 1)
        self._round: dict[str, float] = {}

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """Build the graph, keep each client's training rows, initialize the cluster models."""
        super().setup(data, module, seed)
        self.graph = build_graph(self.topology, self.num_centers, seed)
        self.module, self.seed = module, int(seed)
        self.rows = [(c.x_train, c.y_train) for c in data.centers]
        self.clusters = self.initial_clusters(module, self.num_centers, self.num_clusters, self.seed)
        self.share = torch.full((self.num_centers, self.num_clusters), 1.0 / self.num_clusters)

    def initial_clusters(
        self, module: CenterModule, clients: int, clusters: int, seed: int
    ) -> dict[str, Tensor]:
        """``{name: [clients, clusters, ...]}``: the common init plus the shared per-cluster perturbation."""
        gens = [torch_generator(seed, "fedspd-init", s) for s in range(clusters)]
        out = {}
        for name, p in module.named_parameters():
            base = p.detach()
            rms = base.pow(2).mean().sqrt() if base.numel() else base.new_zeros(())
            eps = torch.stack([torch.randn(base.shape, generator=g) for g in gens]).to(base)
            out[name] = (
                (base + self.init_noise * rms * eps).unsqueeze(0).repeat(clients, *([1] * (base.dim() + 1)))
            )
        return out

    def memberships(self) -> list[Tensor]:
        """E-step on every client with the current cluster models: ``gamma_i`` ``[n_i, S]`` each."""
        return [
            soft_assignments(
                self.module,
                {n: t[i] for n, t in self.clusters.items()},
                x,
                y,
                self.temperature,
                self.eval_batch_size,
            )[0]
            for i, (x, y) in enumerate(self.rows)
        ]

    def m_step(self, gamma: list[Tensor], round_idx: int, lr_factor: float = 1.0) -> Tensor:
        """``local_steps`` membership-weighted SGD steps on all ``C x S`` cluster models (in place).

        Client ``i``'s batches come from ``(seed, "fedspd-batches", round, i)``; all of its clusters
        see the same rows. The step size is ``lr * lr_factor`` (the round's ``trainer.lr_schedule``
        factor; plain SGD keeps no optimizer state, so ``trainer.reset_optimizer_each_round`` changes
        nothing here). Returns the mean weighted loss per cluster model ``[C, S]`` over the steps.
        """
        c, s = self.num_centers, self.num_clusters
        gens = [torch_generator(self.seed, "fedspd-batches", round_idx, i) for i in range(c)]
        start = {n: t.reshape(c * s, *t.shape[2:]) for n, t in self.clusters.items()}
        flat = start
        loss_sum = torch.zeros(c * s, dtype=torch.float64)
        for _ in range(self.local_steps):
            idx, x, y, mask = self._batch(gens, flat)
            w = torch.stack([gamma[i][idx[i].clamp_min(0)] for i in range(c)]).to(mask)
            w = (w * mask.unsqueeze(2)).permute(0, 2, 1).reshape(c * s, -1)
            xs, ys = x.repeat_interleave(s, 0), y.repeat_interleave(s, 0)
            flat, loss = weighted_sgd_step(self.module, flat, xs, ys, w, self.lr * lr_factor)
            loss_sum += loss.cpu().to(torch.float64)
        # A cluster model whose steps diverged is rolled back to its value before the M-step.
        bad = ~torch.isfinite(loss_sum)
        for t in flat.values():
            bad |= ~torch.isfinite(t.reshape(c * s, -1)).all(1).cpu()
        if bool(bad.any()):
            keep = bad.to(next(iter(flat.values())).device)
            flat = {
                n: torch.where(keep.view(-1, *([1] * (t.dim() - 1))), start[n], t) for n, t in flat.items()
            }
        self.clusters = {n: t.reshape(c, s, *t.shape[1:]) for n, t in flat.items()}
        self._round["diverged_cluster_models"] = float(bad.sum())
        return (loss_sum / max(1, self.local_steps)).reshape(c, s)

    def _batch(
        self, gens: list[torch.Generator], like: dict[str, Tensor]
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One minibatch per client (``min(batch_size, n_i)`` distinct rows, padded to a common width):
        row indices ``[C, B]`` and ``x``, ``y``, real-row mask on ``like``'s device and dtype."""
        ref = next(iter(like.values()))
        width = min(self.batch_size, max(len(y) for _, y in self.rows))
        idx = torch.stack([draw_rows(len(y), width, gens[i]) for i, (_, y) in enumerate(self.rows)])
        x, y, mask = gather_rows(
            [r[0] for r in self.rows], [r[1] for r in self.rows], idx, ref.device, ref.dtype
        )
        return idx, x, y, mask

    def exchange(self, weight: Tensor, wire: Wire, round_idx: int) -> None:
        """Send ``(theta_j, m_j)`` along every available directed edge; per-cluster weighted average.

        The norm test sees the memberships as shares ``m_j / sum_s m_js``: the counts themselves scale
        with the client's size (40 to 3,000 rows: honest count ratios of 0.05 to 20), the shares do
        not, and a non-finite or all-zero count still makes the message non-finite.
        """
        src, dst = directed_edges(self.graph, wire.available(round_idx, self.num_centers))
        payload = rows({**self.clusters, MEMBERSHIP: weight.to(torch.float32)}, src)
        own = rows(self.clusters, dst)
        own[MEMBERSHIP] = _shares(weight.index_select(0, dst.to(weight.device)).to(torch.float32))
        got = exchange(
            wire,
            payload,
            src,
            dst,
            round_idx,
            own=own,
            checked=lambda r: {**{n: r[n] for n in self.clusters}, MEMBERSHIP: _shares(r[MEMBERSHIP])},
        )
        received = {n: got.received[n] for n in self.clusters}
        received_weight = got.received[MEMBERSHIP].to(weight)
        self._round["mean_neighbours"] = len(got.dst) / self.num_centers
        self.clusters = cluster_average(self.clusters, weight, received, received_weight, got.dst)

    def train_round(self, engine: Engine, round_idx: int) -> Tensor:
        """E-step and M-step on every client (module docstring, steps 1-2); the engine does not train.

        Returns:
            Each client's membership-weighted mean M-step loss ``[C]``.
        """
        gamma = self.memberships()
        device = next(iter(self.clusters.values())).device
        self._weight = torch.stack([g.sum(0) for g in gamma]).to(device)
        loss = self.m_step(gamma, round_idx, engine.lr_factor(round_idx))
        share = (self._weight / self._weight.sum(1, keepdim=True)).cpu()
        client_loss = (loss.cpu() * share).sum(1)
        self._round["cluster_loss"] = float(client_loss.mean())
        return client_loss.to(torch.float32)

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        """Exchange and per-cluster averaging with this round's memberships, then the mixtures."""
        weight = self._weight
        self.exchange(weight, wire, ctx.round)
        self.share = (weight / weight.sum(1, keepdim=True)).cpu()
        entropy = -(self.share * self.share.clamp_min(1e-300).log()).sum(1)
        self._round["membership_entropy"] = float(entropy.mean())
        mixed = mixture(self.clusters, self.share)
        return {n: mixed[n].to(params[n]) for n in params}

    def finish(self, ctx: FinishContext) -> dict[str, Tensor]:
        """Final personalization: ``final_steps`` SGD steps of each client's mixture on its own rows."""
        if self.final_steps == 0:
            return ctx.params
        params = {n: t.detach().clone() for n, t in ctx.params.items()}
        gens = [torch_generator(self.seed, "fedspd-final", i) for i in range(self.num_centers)]
        for _ in range(self.final_steps):
            _, x, y, mask = self._batch(gens, params)
            params, loss = weighted_sgd_step(self.module, params, x, y, mask, self.lr)
            ctx.log({"personalize_loss": float(loss.mean())})
        return params

    def round_stats(self) -> dict[str, float]:
        return dict(self._round)

    def summary_stats(self) -> dict[str, float]:
        return graph_stats(self.graph)

    def state_dict(self) -> dict[str, Any]:
        return {"clusters": {n: t.detach().cpu() for n, t in self.clusters.items()}, "share": self.share}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "clusters" not in state:
            return
        device = next(iter(self.clusters.values())).device
        self.clusters = {n: t.to(device) for n, t in state["clusters"].items()}
        self.share = state["share"].cpu()


def _shares(weight: Tensor) -> Tensor:
    """Memberships ``[E, S]`` as shares of their row sum, ``m_js / sum_s m_js`` (NaN for a zero row)."""
    return weight / weight.sum(1, keepdim=True)
