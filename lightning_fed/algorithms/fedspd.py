"""FedSPD (Lin, Yagan & Joe-Wong, UAI 2025): clustered personalized decentralized FL.

The clients' data are modelled as mixtures of ``S`` shared data clusters (Lin et al. Sec. 3: client
``i``'s distribution is ``sum_s pi_is D_s``). Every client ``i`` keeps ``S`` cluster models
``theta_i1 .. theta_iS`` (stacked ``{name: [C, S, ...]}``) that all clients agree on through
neighbour averaging, and a personalized model. Each round, :meth:`FedSPD.train_round` runs

1. the assignment (E-) step (Sec. 3, "clustering"): every training row ``r`` goes to the cluster
   model with the lowest loss on it, ``k_ir = argmin_s l(theta_is; x_ir, y_ir)`` (ties: the lowest
   ``s``); the client's counts ``m_is = |{r: k_ir = s}|`` and proportions ``pi_is = m_is / n_i``
   (``assignment="hard"``, the paper's rule and the default). ``assignment="soft"`` keeps the
   earlier relaxation ``gamma_irs = softmax_s(-l / temperature)``, ``m_is = sum_r gamma_irs``;
2. local training (M-step, Sec. 3): ``local_steps`` updates of every cluster model the client has
   rows of (``m_is > 0``) on minibatches of those rows only, with **the model's own optimizer**
   (``module.configure_optimizers()``, replayed on the stacked ``[C*S, ...]`` cluster models by
   :func:`~lightning_fed.engine.optim.stacked_optimizer_for`: SGD with its momentum and weight
   decay for the CNNs, Adam where a model asks for it), one optimizer state per (client, cluster)
   model, kept across rounds unless ``trainer.reset_optimizer_each_round``, at the round's step size
   ``lr * trainer.lr_schedule factor``. A cluster without rows at a client does not step (neither its
   parameters nor its optimizer state or step count move);

then :meth:`FedSPD.aggregate` runs

3. the exchange (Sec. 3, "aggregation"): each client sends each cluster model it has rows of
   (``m_js > 0``) together with its count ``m_js`` to every graph neighbour, one message of
   ``|W| + 1`` float32 per (directed edge, cluster with data), booked on the ledger and validated by
   the receiver (:meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>` against its own model of
   that cluster; a non-finite or non-positive count is dropped too), and every cluster is averaged
   with the count weights
   ``theta_is <- (m_is theta_is + sum_{j in A_is} m_js theta_js) / (m_is + sum_{j in A_is} m_js)``
   (``A_is``: the accepted neighbours that sent cluster ``s``). A client with no rows of ``s``
   still receives and adopts its neighbours' average of it, so that its assignment step next
   round compares current cluster models;
4. the client's personalized model, the one the engine holds and evaluation sees, becomes its
   mixture ``sum_s pi_is theta_is`` (Sec. 3, "personalization").

:meth:`FedSPD.finish` is the paper's final personalization: ``final_steps`` local updates of each
client's mixture on all of its rows with a fresh state of the model's optimizer (EdgeDRM App. D.2:
999 rounds of 5 updates, then 5 final ones). Prediction uses the personalized model of the client a
query enters at, like every other method. The final updates trade entry accuracy for own-client
accuracy: on the digits runs below, ``final_steps = 0`` gives 0.706 / 0.530 (own / entry) against
0.863 / 0.337 with 5. ``benchmarks/fedspd_clusters.py`` scores each stage of a finished run (each
cluster model, the mixture, the mixture after each final update); on the Fashion-MNIST EdgeDRM-protocol
runs one update takes the entry accuracy from 0.38-0.55 to 0.18-0.33
(docs/results/fedspd_protocol/README.md).

Which clusters travel, and why. The paper's communication saving comes from selective updates:
a client trains and sends only the cluster models its data belong to ("allowing selective model
updates based on data distribution", Lin et al., abstract and Sec. 3), not all ``S`` of them. Here
that is every cluster with ``m_is > 0`` after the hard assignment. If the paper's Algorithm 1 has a
client update only one of those clusters per round, this is its superset (more bytes, never a
cluster without data). Under soft assignments every cluster has ``m_is > 0`` and all ``S`` travel,
as before. The count rides along because the receivers weight by it. (Section references to Lin et
al. are from the UAI 2025 version as recalled; that paper is not in this repository. The EdgeDRM
paper's description and budgets are its Sec. 5.1 and App. D.1-D.2.)

The authors' protocol (``schedule="rotating"``, ``weighting="uniform"``, ``init="data_split"``;
read from their released code, the UAI submission's ``src/main.py``, ``train.py`` and ``utils.py``):

* **One cluster per client and round.** In the first round every client trains every cluster. In
  each later round the clients are split at random into ``S`` groups and group ``s`` trains, sends
  and averages only cluster ``s``, so a client sends one cluster model per edge and round, to the
  neighbours of its own group. The authors draw ``floor(C / S)`` clients per group and leave the
  remainder out of the round; here the ``k``-th client of a seeded order joins group ``k mod S``,
  so every client trains every round (:meth:`FedSPD.groups`).
* **Group-uniform averaging.** A receiver averages cluster ``s`` uniformly over itself and the
  accepted same-group neighbours that sent it, ``theta_is <- (theta_is + sum_j theta_js) /
  (1 + |A_is|)``, not by row counts. The count still travels (the ledger books ``|W| + 1``), so the
  two weightings cost the same bytes.
* **Data-split initialization.** The first assignment is a seeded equal split of each client's
  training rows over the ``S`` clusters, not the E-step of the init. The authors mix the two halves
  of a client's index list in different proportions per cluster, which relies on their data
  ordering (unrotated, then rotated images); here the rows are in partition order, so the split
  is uniform. Their cluster models start from independent random inits per client. Here they
  start from the shared init of ``init_noise`` (below), which keeps cluster ``s`` the same cluster
  at every client without their alignment step.
* **Left out:** their E-step moves rows so that each cluster keeps at least 10 rows and no
  batch has a single row. Their periodic ``checkCluster`` permutes every client's clusters to
  match a running average over all clients (a Hungarian assignment on cosine similarity), which
  needs a view of every client and is not decentralized. Their final phase fine-tunes the mixture
  for ``ft_ep`` epochs at half the rate, decayed every 3 epochs; here it is ``final_steps`` steps at
  the base rate (EdgeDRM App. D.2's 5).

The defaults are the earlier superset (every cluster with rows travels, count-weighted), so runs made
before these options exist keep their numbers; the EdgeDRM benchmark configs use the authors'
protocol.

Initialization (``init_noise``). All clusters start from the common initialization ``theta_0``
plus a seeded perturbation ``init_noise * rms(theta_0) * eps_s`` per parameter tensor, shared by all
clients (``eps_s`` from ``(seed, "fedspd-init", s)``) so cluster ``s`` means the same thing
everywhere. The default ``1e-3`` only breaks the tie of the first assignment step (with
``init_noise = 0`` every row ties and cluster 0 takes all of them; cluster 1 then only picks up the
rows the untrained init fits better) and is trained away by the first updates. Measured (sklearn
digits, 8 clients, fixed RR4, SmallCNN embed 32, 19 rounds x 5 updates + 5 final, batch 32, seeds
2025-2027, mean own-client / entry accuracy): init_noise 1e-3 0.863 / 0.337, 0 0.896 / 0.349,
0.1 0.887 / 0.342: under hard assignments the perturbation's size is within the seed spread
(entry 0.27-0.42 at 0). The earlier soft-assignment default (``T = 0.1``, noise 0.1, plain SGD)
gave 0.650 / 0.215 on the same runs, 0.712 / 0.264 at noise 0; Local 0.992 / 0.287.

The engine holds only the personalized mixtures and never trains them (:meth:`FedSPD.train_round`
replaces its local epochs); the round's ``train_loss`` is each client's count-weighted M-step loss
``sum_s pi_is mean_steps L_is``. Unavailable clients (fault plans) still run steps 1-2 but send and
receive nothing; a cluster model whose M-step diverges (non-finite loss or parameters) is rolled
back to its value before the M-step with a fresh optimizer state (``diverged_cluster_models`` in the
round statistics).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.algorithms.fedspd_steps import (
    cluster_average,
    draw_cluster_rows,
    draw_rows,
    gather_rows,
    mixture,
    soft_assignments,
    weighted_grads,
)
from lightning_fed.algorithms.peers import PeerAlgorithm
from lightning_fed.comm.exchange import exchange, rows
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.base import Engine
from lightning_fed.engine.optim import StackedOptimizer, stacked_optimizer_for
from lightning_fed.graphs.topology import Topology
from lightning_fed.models.base import CenterModule
from lightning_fed.seeding import torch_generator
from lightning_fed.selection.base import PartnerSelector
from lightning_fed.types import FinishContext, RoundContext
from lightning_fed.validation import check_int, check_number

__all__ = ["FedSPD"]

#: Guard of a client's loss share when it trains no cluster this round.
_TINY = 1e-300

#: Payload key of the count ``m_js`` that travels with each cluster model.
MEMBERSHIP = "_membership"

#: The E-step rules: the paper's argmin-loss assignment and the softmax relaxation.
ASSIGNMENTS = ("hard", "soft")

#: Which cluster models a client trains and sends each round: every one it has rows of, or the
#: authors' one cluster per client and round (module docstring, "The authors' protocol").
SCHEDULES = ("data", "rotating")

#: How a receiver averages a cluster: by the senders' row counts, or uniformly (the authors' code).
WEIGHTINGS = ("counts", "uniform")

#: The first assignment: argmin loss of the perturbed common init, or a seeded split of the rows.
INITS = ("perturb", "data_split")


class FedSPD(PeerAlgorithm):
    """Clustered cluster models exchanged with graph neighbours, personalized as mixtures.

    Args:
        topology: Communication graph (default :class:`~lightning_fed.graphs.RandomRegular` of degree
            4, EdgeDRM's RR4), built with the run seed.
        num_clusters: Cluster models per client ``S`` (>= 1).
        local_steps: Updates per cluster model (with data) and round (EdgeDRM App. D.2: 5).
        final_steps: Final personalization updates in :meth:`finish` (EdgeDRM App. D.2: 5).
        lr: Step size of the algorithm's own updates; None (default): the model's optimizer's rate.
            Either way the optimizer is the model's (``configure_optimizers``), and each round's rate
            is this times the ``trainer.lr_schedule`` factor.
        batch_size: Rows per update (a cluster with fewer rows uses all of them).
        assignment: ``"hard"`` (the paper's argmin-loss rule, default) or ``"soft"`` (softmax).
        temperature: Softmax temperature ``T > 0`` of ``assignment="soft"`` (unused when hard).
        init_noise: Cluster ``s`` starts at ``theta_0 + init_noise * rms(theta_0) * eps_s`` per
            parameter tensor, ``eps_s ~ N(0, I)`` seeded by ``(seed, "fedspd-init", s)``.
        eval_batch_size: Rows per forward call of the E-step.
        schedule: ``"data"`` (default): every cluster a client has rows of trains and travels each
            round; ``"rotating"``: the authors' one cluster per client and round (module docstring).
        weighting: ``"counts"`` (default): receivers average a cluster by the senders' row counts;
            ``"uniform"``: by the number of senders, the receiver included (the authors' code).
        init: ``"perturb"`` (default): the first assignment is the E-step on the perturbed common
            init; ``"data_split"``: a seeded equal split of every client's rows (the authors' code).
        selector: Who exchanges cluster models with whom (default ``GraphNeighbours(topology)``;
            any :class:`~lightning_fed.selection.PartnerSelector`); exclusive with ``topology``.
    """

    def __init__(
        self,
        topology: Topology | None = None,
        num_clusters: int = 2,
        local_steps: int = 5,
        final_steps: int = 5,
        lr: float | None = None,
        batch_size: int = 64,
        assignment: str = "hard",
        temperature: float = 0.1,
        init_noise: float = 1e-3,
        eval_batch_size: int = 1024,
        selector: PartnerSelector | None = None,
        schedule: str = "data",
        weighting: str = "counts",
        init: str = "perturb",
    ) -> None:
        super().__init__(topology, selector, 0)
        self.num_clusters = check_int("algorithm.num_clusters", num_clusters, 1)
        self.local_steps = check_int("algorithm.local_steps", local_steps, 0)
        self.final_steps = check_int("algorithm.final_steps", final_steps, 0)
        self.lr = None if lr is None else check_number("algorithm.lr", lr, 0.0, strict=True)
        self.batch_size = check_int("algorithm.batch_size", batch_size, 1)
        if assignment not in ASSIGNMENTS:
            raise ValueError(f"algorithm.assignment must be one of {list(ASSIGNMENTS)}, got {assignment!r}")
        self.assignment = assignment
        self.temperature = check_number("algorithm.temperature", temperature, 0.0, strict=True)
        self.init_noise = check_number("algorithm.init_noise", init_noise, 0.0, strict=False)
        self.eval_batch_size = check_int("algorithm.eval_batch_size", eval_batch_size, 1)
        for key, value, allowed in (
            ("schedule", schedule, SCHEDULES),
            ("weighting", weighting, WEIGHTINGS),
            ("init", init, INITS),
        ):
            if value not in allowed:
                raise ValueError(f"algorithm.{key} must be one of {list(allowed)}, got {value!r}")
        self.schedule, self.weighting, self.init = schedule, weighting, init
        self.started = False
        self._round: dict[str, float] = {}

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """Set up the selector (the graph), keep each client's training rows, initialize the cluster
        models and the stacked optimizer state of the ``C x S`` cluster models."""
        super().setup(data, module, seed)
        self.module, self.seed = module, int(seed)
        self.rows = [(c.x_train, c.y_train) for c in data.centers]
        self.clusters = self.initial_clusters(module, self.num_centers, self.num_clusters, self.seed)
        self.share = torch.full((self.num_centers, self.num_clusters), 1.0 / self.num_clusters)
        self.optimizer = self._optimizer()
        self.base_lr = float(self.optimizer.lr) if self.lr is None else self.lr
        self.opt_state = self.optimizer.init_state(self._flat())

    def _optimizer(self) -> StackedOptimizer:
        """The stacked equivalent of the model's optimizer (``configure_optimizers``)."""
        return stacked_optimizer_for(self.module.configure_optimizers())

    def _flat(self) -> dict[str, Tensor]:
        """The cluster models as one stack ``{name: [C*S, ...]}`` (model ``i*S + s``; views)."""
        c, s = self.num_centers, self.num_clusters
        return {n: t.reshape(c * s, *t.shape[2:]) for n, t in self.clusters.items()}

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
        """E-step on every client with the current cluster models: ``gamma_i`` ``[n_i, S]`` each
        (one-hot rows under hard assignments)."""
        temperature = {"hard": 0.0, "soft": self.temperature}[self.assignment]  # 0: one-hot (argmin loss)
        return [
            soft_assignments(
                self.module,
                {n: t[i] for n, t in self.clusters.items()},
                x,
                y,
                temperature,
                self.eval_batch_size,
            )[0]
            for i, (x, y) in enumerate(self.rows)
        ]

    def split_memberships(self) -> list[Tensor]:
        """The authors' data-split start: client ``i``'s rows in a seeded order (``(seed,
        "fedspd-split", i)``), row ``k`` of that order to cluster ``k mod S``; one-hot ``[n_i, S]``."""
        out = []
        for i, (_, y) in enumerate(self.rows):
            order = torch.randperm(len(y), generator=torch_generator(self.seed, "fedspd-split", i))
            gamma = torch.zeros(len(y), self.num_clusters, dtype=torch.float64)
            gamma[order, torch.arange(len(y)) % self.num_clusters] = 1.0
            out.append(gamma)
        return out

    def groups(self, round_idx: int, first: bool) -> Tensor:
        """``[C, S]`` bool: which cluster each client trains, sends and receives this round.

        ``schedule="data"`` and the first round of ``"rotating"``: every cluster. Later rounds of
        ``"rotating"``: clients in a seeded order (``(seed, "fedspd-groups", round)``), the ``k``-th
        to cluster ``k mod S``, so the groups differ in size by at most one client.
        """
        c, s = self.num_centers, self.num_clusters
        if self.schedule == "data" or first:
            return torch.ones(c, s, dtype=torch.bool)
        order = torch.randperm(c, generator=torch_generator(self.seed, "fedspd-groups", round_idx))
        out = torch.zeros(c, s, dtype=torch.bool)
        out[order, torch.arange(c) % s] = True
        return out

    def m_step(self, gamma: list[Tensor], round_idx: int, lr_factor: float = 1.0) -> Tensor:
        """``local_steps`` updates with the model's optimizer of every cluster model with rows (in place).

        Hard assignments: model ``(i, s)`` draws each batch among client ``i``'s rows assigned to
        ``s`` (uniform weights); soft: every cluster of client ``i`` sees the same batch of all its
        rows, weighted by the memberships. Batches come from ``(seed, "fedspd-batches", round, i)``.
        Models with no rows (``m_is = 0``) do not step. The step size is ``base_lr * lr_factor``.
        Returns the mean weighted loss per cluster model ``[C, S]`` over the steps (0 where not trained).
        """
        c, s = self.num_centers, self.num_clusters
        gens = [torch_generator(self.seed, "fedspd-batches", round_idx, i) for i in range(c)]
        flat = self._flat()
        start = {n: t.clone() for n, t in flat.items()}
        ref = next(iter(flat.values()))
        counts = torch.stack([g.sum(0) for g in gamma]).reshape(-1).cpu()
        active = torch.nonzero(counts > 0).reshape(-1)
        self.optimizer.lr = self.base_lr * float(lr_factor)
        loss_sum = torch.zeros(c * s, dtype=torch.float64)
        xs = [self.rows[i][0] for i in range(c) for _ in range(s)]
        ys = [self.rows[i][1] for i in range(c) for _ in range(s)]
        draw = _BATCH_PLANS[self.assignment](self, gamma, counts, xs, ys)
        sub = {n: t.index_select(0, active.to(t.device)) for n, t in flat.items()}
        state = {n: t.index_select(0, active.to(t.device)) for n, t in self.opt_state.items()}
        for _ in range(self.local_steps if len(active) else 0):
            x, y, w = draw(gens, ref)
            pick = active.to(x.device)
            grads, loss = weighted_grads(
                self.module, sub, x.index_select(0, pick), y.index_select(0, pick), w.index_select(0, pick)
            )
            self.optimizer.step(sub, grads, state, len(active))
            loss_sum.index_add_(0, active, loss.cpu().to(torch.float64))
        for n, t in flat.items():
            t.index_copy_(0, active.to(t.device), sub[n])
        for n, t in self.opt_state.items():
            t.index_copy_(0, active.to(t.device), state[n])
        # A cluster model whose steps diverged is rolled back to its value before the M-step.
        bad = ~torch.isfinite(loss_sum)
        for t in flat.values():
            bad |= ~torch.isfinite(t.reshape(c * s, -1)).all(1).cpu()
        if bool(bad.any()):
            keep = torch.nonzero(bad).reshape(-1)
            for n, t in flat.items():
                t.index_copy_(0, keep.to(t.device), start[n].index_select(0, keep.to(t.device)))
            for t in self.opt_state.values():
                t.index_fill_(0, keep.to(t.device), 0)
        self.clusters = {n: t.reshape(c, s, *t.shape[1:]) for n, t in flat.items()}
        self._round["diverged_cluster_models"] = float(bad.sum())
        self._round["trained_cluster_models"] = float(len(active))
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

    def exchange(
        self,
        weight: Tensor,
        wire: Wire,
        round_idx: int,
        own_weight: Tensor | None = None,
        receives: Tensor | None = None,
    ) -> None:
        """Send ``(theta_js, m_js)`` for every cluster ``s`` with ``m_js > 0`` along every available
        directed edge ``j -> i``; per-cluster count-weighted average (module docstring, step 3).

        ``own_weight`` (default ``weight``) is the receiver's own weight in its average, and
        ``receives`` (``[C, S]`` bool, default all) limits each cluster's messages to the receivers
        that hold it this round (``schedule="rotating"``: the sender's own group).

        The norm test compares each received cluster model with the receiver's own model of that
        cluster; the count is checked separately (finite and positive): counts scale with the
        client's size, the models do not.
        """
        c, s = self.num_centers, self.num_clusters
        src_e, dst_e = self.round_edges(wire, round_idx)
        has = (weight > 0).cpu()
        edge, cluster = torch.nonzero(has.index_select(0, src_e.to(torch.int64)), as_tuple=True)
        src, dst = src_e.to(torch.int64)[edge], dst_e.to(torch.int64)[edge]
        if receives is not None and len(dst):
            keep = receives.cpu()[dst, cluster]
            src, dst, cluster = src[keep], dst[keep], cluster[keep]
        flat = self._flat()
        payload = rows(flat, src * s + cluster)
        payload[MEMBERSHIP] = weight.reshape(-1).index_select(0, (src * s + cluster).to(weight.device))
        payload[MEMBERSHIP] = payload[MEMBERSHIP].to(torch.float32).reshape(-1, 1)
        got = exchange(
            wire,
            payload,
            src,
            dst,
            round_idx,
            own=rows(flat, dst * s + cluster),
            checked=lambda r: {n: r[n] for n in flat},
            valid=lambda r: (torch.isfinite(r[MEMBERSHIP]) & (r[MEMBERSHIP] > 0)).reshape(-1),
            anchored=False,
        )
        kept = cluster[got.accepted] if len(cluster) else cluster
        received = {n: got.received[n] for n in flat}
        received_weight = got.received[MEMBERSHIP].reshape(-1).to(weight)
        self._round["mean_neighbours"] = len(torch.unique(got.src * c + got.dst)) / c if len(got.src) else 0.0
        self._round["sent_cluster_models"] = float(len(src))
        own = weight if own_weight is None else own_weight
        self.clusters = cluster_average(self.clusters, own, received, received_weight, got.dst, kept)

    def train_round(self, engine: Engine, round_idx: int) -> Tensor:
        """E-step and M-step on every client (module docstring, steps 1-2); the engine does not train.

        Returns:
            Each client's count-weighted mean M-step loss ``[C]``.
        """
        if getattr(engine, "reset_optimizer_each_round", False):
            self.optimizer.reset_state(self.opt_state)
        first, self.started = not self.started, True
        gamma = self.split_memberships() if first and self.init == "data_split" else self.memberships()
        device = next(iter(self.clusters.values())).device
        self._weight = torch.stack([g.sum(0) for g in gamma]).to(device)
        self._groups = self.groups(round_idx, first)
        trained = [g * self._groups[i].to(g) for i, g in enumerate(gamma)]
        loss = self.m_step(trained, round_idx, engine.lr_factor(round_idx))
        counts = self._weight.cpu() * self._groups.to(self._weight.dtype)
        share = counts / counts.sum(1, keepdim=True).clamp_min(_TINY)
        client_loss = (loss.cpu() * share).sum(1)
        self._round["cluster_loss"] = float(client_loss.mean())
        return client_loss.to(torch.float32)

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        """Exchange and per-cluster averaging with this round's counts, then the mixtures."""
        weight, groups = self._weight, self._groups.to(self._weight.device)
        sent = groups & ((weight > 0) | (self.weighting == "uniform"))
        if self.weighting == "uniform":
            send, own = sent.to(weight.dtype), groups.to(weight.dtype)
        else:
            send = own = weight * groups.to(weight.dtype)
        self.exchange(send, wire, ctx.round, own_weight=own, receives=None if groups.all() else groups)
        self.share = (weight / weight.sum(1, keepdim=True)).cpu()
        entropy = -(self.share * self.share.clamp_min(1e-300).log()).sum(1)
        self._round["membership_entropy"] = float(entropy.mean())
        mixed = mixture(self.clusters, self.share)
        return {n: mixed[n].to(params[n]) for n in params}

    def finish(self, ctx: FinishContext) -> dict[str, Tensor]:
        """Final personalization: ``final_steps`` updates of each client's mixture on its own rows,
        with a fresh state of the model's optimizer at the base step size."""
        if self.final_steps == 0:
            return ctx.params
        params = {n: t.detach().clone() for n, t in ctx.params.items()}
        optimizer = self._optimizer()
        optimizer.lr = self.base_lr
        state = optimizer.init_state(params)
        gens = [torch_generator(self.seed, "fedspd-final", i) for i in range(self.num_centers)]
        for _ in range(self.final_steps):
            _, x, y, mask = self._batch(gens, params)
            grads, loss = weighted_grads(self.module, params, x, y, mask)
            optimizer.step(params, grads, state, self.num_centers)
            ctx.log({"personalize_loss": float(loss.mean())})
        return params

    def round_stats(self) -> dict[str, float]:
        return dict(self._round)

    def state_dict(self) -> dict[str, Any]:
        return {
            "clusters": {n: t.detach().cpu() for n, t in self.clusters.items()},
            "share": self.share,
            "opt_state": {n: t.detach().cpu() for n, t in self.opt_state.items()},
            "started": self.started,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "clusters" not in state:
            return
        device = next(iter(self.clusters.values())).device
        self.clusters = {n: t.to(device) for n, t in state["clusters"].items()}
        self.share = state["share"].cpu()
        self.started = bool(state.get("started", True))  # a checkpoint without it has trained
        if "opt_state" in state:
            self.opt_state = {n: t.to(device) for n, t in state["opt_state"].items()}


def _hard_plan(algo: FedSPD, gamma: list[Tensor], counts: Tensor, xs: list[Tensor], ys: list[Tensor]) -> Any:
    """Batches of ``assignment="hard"``: model ``(i, s)`` draws among client ``i``'s rows assigned to
    ``s``, uniform weights. Returns ``draw(gens, ref) -> (x, y, w)`` for one step of every model."""
    c, s = algo.num_centers, algo.num_clusters
    assign = [g.argmax(1).cpu() for g in gamma]
    width = min(algo.batch_size, max(int(counts.max()) if len(counts) else 1, 1))

    def draw(gens: list[torch.Generator], ref: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        idx = torch.cat([draw_cluster_rows(assign[i], s, width, gens[i]) for i in range(c)])
        return gather_rows(xs, ys, idx, ref.device, ref.dtype)

    return draw


def _soft_plan(algo: FedSPD, gamma: list[Tensor], counts: Tensor, xs: list[Tensor], ys: list[Tensor]) -> Any:
    """Batches of ``assignment="soft"``: every cluster of client ``i`` sees the same batch of all its
    rows, weighted by the memberships. Returns ``draw(gens, ref) -> (x, y, w)``."""
    c, s = algo.num_centers, algo.num_clusters
    width = min(algo.batch_size, max(len(y) for _, y in algo.rows))

    def draw(gens: list[torch.Generator], ref: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        one = torch.stack([draw_rows(len(y), width, gens[i]) for i, (_, y) in enumerate(algo.rows)])
        x, y, mask = gather_rows(xs, ys, one.repeat_interleave(s, 0), ref.device, ref.dtype)
        g = torch.stack([gamma[i][one[i].clamp_min(0)] for i in range(c)]).to(mask)
        return x, y, (g.permute(0, 2, 1).reshape(c * s, -1)) * mask

    return draw


#: M-step batch plan of each ``algorithm.assignment``.
_BATCH_PLANS = {"hard": _hard_plan, "soft": _soft_plan}
