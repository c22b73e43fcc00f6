"""Budgeted local expert referral (EdgeDRM Sec. 3.2, Algorithm 3.2) and the referral baselines.

Every router walks queries greedily from their entry client: at the current client ``c`` it scores
the unvisited candidates, takes the largest score (ties go to the lowest client id: ``argmax``
returns the first maximum) and moves there only while that score exceeds the threshold, at most
``L`` moves, never revisiting a client. The routers differ in the score and the candidates:

* :class:`EdgeDRMRouter`: ``log(n_j/n_c) + (b_j - b_c) + (theta_j - theta_c)^T z`` over the
  neighbours of ``c``, ``z`` from client ``c``'s encoder, threshold ``eta`` (Eq. 6); with
  ``prior=False`` the ``log(n_j/n_c)`` offset is dropped (Sec. 5.3, "w/o prior").
* :class:`CountOnlyRouter`: only ``log(n_j/n_c)``, same threshold (App. D.2.2).
* :class:`RandomRouter`: a uniformly random unvisited neighbour, moving until the budget is spent or
  none remains (App. D.2.2); its accepted hop scores are 0 (it computes none).
* :class:`NoReferral` (EdgeDRM-NR): the query stays at its entry.
* :class:`OracleSourceRouter` ("oracle router on EdgeDRM experts"): a global ``m``-client source
  head ``s_j(z) ∝ exp{log rho_j + b_j + theta_j^T z}`` (Eq. 2), fitted afterwards on the pooled
  ``(z, source)`` pairs of the EdgeDRM run's own experts (each ``z`` from its own client's encoder),
  scores *all* clients and sends the query in one move straight to its argmax, ignoring the graph.
  It sees every client's training representations at once, so it cannot run under the decentralized
  constraint: an upper-bound diagnostic of routing on the same experts. It is not FedDRM, which
  trains its own encoder and selection head (:class:`~lightning_fed.algorithms.FedDRM`).
  ``FedDRMReference`` is its deprecated former name.

Work is vectorized over queries: at each hop the queries are grouped by current client and each
group gets one encoder pass, which yields both the representation used for scoring and the
client's logits used by the prediction rules. Scores are computed as a dense ``[q, C]`` block for
vectorization; every entry outside the candidate set (non-neighbours, visited clients) is replaced by
``-inf`` before the argmax, so a decision reads only the current client's neighbours' potentials and
counts (what the stage-II exchange gave it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_fed.algorithms.edgedrm.experts import Experts
from lightning_fed.algorithms.edgedrm.potentials import Potentials
from lightning_fed.seeding import torch_generator

__all__ = [
    "CountOnlyRouter",
    "EdgeDRMRouter",
    "FedDRMReference",
    "NoReferral",
    "OracleSourceRouter",
    "RandomRouter",
    "RouteSetup",
    "Router",
    "Routes",
]


@dataclass(frozen=True, eq=False)
class RouteSetup:
    """What every router gets: graph, fitted potentials, the experts, budget, threshold and seed.

    Attributes:
        adjacency: Bool ``[C, C]`` graph adjacency.
        potentials: Fitted potentials and training counts.
        experts: The clients' models.
        max_hops: Movement budget ``L`` (>= 0).
        eta: Move threshold (moves need a score strictly above it).
        seed: Run seed (the random router draws from it).
    """

    adjacency: Tensor
    potentials: Potentials
    experts: Experts
    max_hops: int = 2
    eta: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_hops < 0:
            raise ValueError(f"max_hops (movement budget L) must be >= 0, got {self.max_hops}")


@dataclass(frozen=True, eq=False)
class Routes:
    """The walks of ``Q`` queries.

    Attributes:
        visited: Clients visited per query ``[Q, L+1]`` (int64, entry first, -1 after the end).
        scores: Accepted score of the move into each hop ``[Q, L+1]`` (float64; 0 at the entry and
            after the end).
        logits: Each visited client's logits ``[Q, L+1, K]`` (0 after the end).
        incident: Incident scores evaluated per query ``[Q]`` (int64).
    """

    visited: Tensor
    scores: Tensor
    logits: Tensor
    incident: Tensor

    @property
    def valid(self) -> Tensor:
        """Bool ``[Q, L+1]``: hop ``t`` was reached."""
        return self.visited >= 0

    @property
    def calls(self) -> Tensor:
        """Classifier calls per query ``T_q + 1`` ``[Q]``."""
        return self.valid.sum(1)


class Router(ABC):
    """A referral rule: ``route(x, entry, setup) -> Routes``, with the label of its table rows.

    A router is built from its own parameters only (a config's ``class_path`` / ``init_args``, e.g.
    ``lightning-fed refer --routers``); what it routes over (graph, potentials, experts, budget,
    threshold, seed) comes with each :meth:`route` call in the :class:`RouteSetup`. A new router
    subclasses this and implements :meth:`scores` (or overrides :meth:`route`).

    Args:
        label: Its rows' ``router`` value in the referral table (default: :meth:`default_label`),
            free to change (``refer --routers``: ``init_args: {label: ...}``).
        key: Its rows' ``router_key`` value: the stable identity the report tables select and
            order routers by, unaffected by ``label`` (written as the ``router_key`` column).
            Default: :meth:`default_label`, the label the class gives itself, so an unrelabelled
            router's key equals its label (and the label of tables written before keys existed).
            Pass one only for a row the tables know under a name of its own (the stage-I and
            ``--baselines`` rows of :func:`lightning_fed.referral.run.refer_run`).
    """

    #: Whether moves are limited to graph neighbours (False only for the oracle router).
    graph_constrained: bool = True
    #: Whether the router computes scores (its candidates count as incident scores).
    computes_scores: bool = True

    def __init__(self, label: str | None = None, key: str | None = None) -> None:
        for name, value in (("label", label), ("key", key)):
            if value is not None and not value.strip():
                raise ValueError(f"a router's {name} must not be empty; leave it out for the default")
        self._label = label
        self._key = key

    @property
    def label(self) -> str:
        """The ``router`` value of its rows in the referral table."""
        return getattr(self, "_label", None) or self.default_label()

    @property
    def key(self) -> str:
        """The ``router_key`` value of its rows: its stable identity, whatever its :attr:`label`."""
        return getattr(self, "_key", None) or self.default_label()

    def default_label(self) -> str:
        """The label when none is given (the class name unless a router names itself)."""
        return type(self).__name__

    def budget(self, setup: RouteSetup) -> int:
        """Moves this router may make (``L`` by default)."""
        return setup.max_hops

    def threshold(self, setup: RouteSetup) -> float:
        """A move needs a score strictly above this."""
        return setup.eta

    @abstractmethod
    def scores(self, current: int, z: Tensor, setup: RouteSetup, hop: int) -> Tensor:
        """Candidate scores ``[q, C]`` (float64) for the queries now at ``current``."""

    def route(self, x: Tensor, entry: Tensor, setup: RouteSetup) -> Routes:
        """Walk every query from ``entry`` (see the module docstring).

        Args:
            x: Query inputs ``[Q, ...]``.
            entry: Entry client per query ``[Q]``.
            setup: Graph, potentials, experts, budget, threshold, seed.
        """
        q, c = int(entry.shape[0]), setup.experts.num_clients
        width, moves = setup.max_hops + 1, min(self.budget(setup), setup.max_hops)
        entry = entry.to("cpu", torch.int64)
        visited = torch.full((q, width), -1, dtype=torch.int64)
        visited[:, 0] = entry
        scores = torch.zeros(q, width, dtype=torch.float64)
        incident = torch.zeros(q, dtype=torch.int64)
        seen = torch.zeros(q, c, dtype=torch.bool)
        seen[torch.arange(q), entry] = True
        allowed_from = (
            setup.adjacency.to("cpu", torch.bool)
            if self.graph_constrained
            else ~torch.eye(c, dtype=torch.bool)
        )
        logits = None
        current, active = entry.clone(), torch.ones(q, dtype=torch.bool)
        for hop in range(moves + 1):
            here, at = active.clone(), current.clone()  # groups are fixed at the start of the hop
            for client in torch.unique(at[here]).tolist():
                idx = torch.nonzero(here & (at == client)).reshape(-1)
                z, lg = setup.experts(client, x[idx])
                if logits is None:
                    logits = lg.new_zeros(q, width, lg.shape[1])
                logits[idx, hop] = lg
                if hop == moves:
                    continue
                cand = allowed_from[client].unsqueeze(0) & ~seen[idx]
                s = self.scores(client, z, setup, hop).to("cpu", torch.float64)
                s = torch.where(cand, s, torch.tensor(-torch.inf, dtype=torch.float64))
                if self.computes_scores:
                    incident[idx] += cand.sum(1)
                best = s.argmax(1)
                top = s.gather(1, best.unsqueeze(1)).squeeze(1)
                go = torch.isfinite(top) & (top > self.threshold(setup))
                active[idx[~go]] = False
                mv, dest = idx[go], best[go]
                current[mv] = dest
                visited[mv, hop + 1] = dest
                scores[mv, hop + 1] = top[go]
                seen[mv, dest] = True
        if logits is None:
            raise ValueError("refer: no queries to route (the clients' test splits are empty)")
        return Routes(visited, scores, logits, incident)


class EdgeDRMRouter(Router):
    """EdgeDRM's learned referral (Eq. 6); ``prior=False`` drops the ``log(n_j/n_c)`` offset.

    Args:
        prior: Keep the sample-count prior ``log(n_j/n_c)`` in the score.
        label: Table label (default ``"EdgeDRM"``, ``"EdgeDRM w/o prior"`` without the prior).
        key: Stable key (:class:`Router`; default the default label).
    """

    def __init__(self, prior: bool = True, label: str | None = None, key: str | None = None) -> None:
        super().__init__(label, key)
        self.prior = bool(prior)

    def default_label(self) -> str:
        return "EdgeDRM" if self.prior else "EdgeDRM w/o prior"

    def scores(self, current: int, z: Tensor, setup: RouteSetup, hop: int) -> Tensor:
        return setup.potentials.incident_scores(current, z.to(torch.float64), prior=self.prior)


class CountOnlyRouter(Router):
    """Count-only referral: score ``log(n_j/n_c)`` with the learned rule's threshold (App. D.2.2)."""

    def default_label(self) -> str:
        return "count-only"

    def scores(self, current: int, z: Tensor, setup: RouteSetup, hop: int) -> Tensor:
        return setup.potentials.log_count_ratio(current).unsqueeze(0).expand(z.shape[0], -1)


class RandomRouter(Router):
    """Uniformly random unvisited neighbour until the budget is spent or none remains (App. D.2.2).

    Draws come from ``(seed, "referral_random", hop, current client)``.
    """

    computes_scores = False

    def default_label(self) -> str:
        return "random"

    def threshold(self, setup: RouteSetup) -> float:
        return -torch.inf

    def scores(self, current: int, z: Tensor, setup: RouteSetup, hop: int) -> Tensor:
        gen = torch_generator(setup.seed, "referral_random", hop, current)
        return torch.rand(z.shape[0], setup.experts.num_clients, generator=gen, dtype=torch.float64)

    def route(self, x: Tensor, entry: Tensor, setup: RouteSetup) -> Routes:
        routes = super().route(x, entry, setup)
        # The random keys were only a device to pick uniformly; no score was accepted.
        return Routes(routes.visited, torch.zeros_like(routes.scores), routes.logits, routes.incident)


class NoReferral(Router):
    """EdgeDRM-NR: every query is answered by its entry client."""

    computes_scores = False

    def default_label(self) -> str:
        return "EdgeDRM-NR"

    def budget(self, setup: RouteSetup) -> int:
        return 0

    def scores(self, current: int, z: Tensor, setup: RouteSetup, hop: int) -> Tensor:
        raise RuntimeError("NoReferral never scores")  # budget 0: the walk never asks


class OracleSourceRouter(Router):
    """Oracle router on EdgeDRM experts: a global source head, one move straight to its argmax.

    Fit with :meth:`fit` on every client's training representations (pooled: the centralized
    privilege this oracle has). The head is the ``m``-class source classifier of Eq. 2,
    ``logit_j(z) = log rho_j + b_j + theta_j^T z``, fitted by full-batch Adam on the pooled
    cross-entropy with ``log rho_j`` fixed. The move score is ``logit_j(z) - logit_c(z)``. It routes
    over the EdgeDRM run's experts (its encoders and heads), so its accuracy depends on that run and
    its graph; the paper's FedDRM reference is its own method, :class:`~lightning_fed.algorithms.FedDRM`.

    Args:
        epochs: Full-batch Adam steps.
        lr: Adam learning rate.
        label: Table label (default ``"oracle router on EdgeDRM experts"``).
        key: Stable key (:class:`Router`; default the default label).
    """

    graph_constrained = False

    def __init__(
        self, epochs: int = 300, lr: float = 0.05, label: str | None = None, key: str | None = None
    ) -> None:
        super().__init__(label, key)
        if epochs < 1 or not lr > 0:
            raise ValueError(f"OracleSourceRouter needs epochs >= 1 and lr > 0, got {epochs}, {lr}")
        self.epochs, self.lr = int(epochs), float(lr)
        self.head: Potentials | None = None

    def default_label(self) -> str:
        return "oracle router on EdgeDRM experts"

    def fit(self, z: list[Tensor]) -> Potentials:
        """Fit the global source head on client ``u``'s representations ``z[u] [n_u, d]``."""
        x = torch.cat([t.detach().to(torch.float64) for t in z])
        src = torch.cat([torch.full((t.shape[0],), u, dtype=torch.int64) for u, t in enumerate(z)])
        counts = torch.tensor([t.shape[0] for t in z], dtype=torch.int64)
        log_rho = torch.log(counts.to(torch.float64) / counts.sum())
        b = torch.zeros(len(z), dtype=torch.float64, requires_grad=True)
        theta = torch.zeros(len(z), x.shape[1], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([b, theta], lr=self.lr)
        for _ in range(self.epochs):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(x @ theta.T + b + log_rho, src).backward()
            opt.step()
        self.head = Potentials(b.detach(), theta.detach(), counts)
        return self.head

    def budget(self, setup: RouteSetup) -> int:
        return 1

    def threshold(self, setup: RouteSetup) -> float:
        return 0.0  # straight to the argmax: move whenever another client beats the entry

    def scores(self, current: int, z: Tensor, setup: RouteSetup, hop: int) -> Tensor:
        if self.head is None:
            raise ValueError("OracleSourceRouter.fit(z) must run before routing (refer does this)")
        return self.head.incident_scores(current, z.to(torch.float64), prior=True)


#: Deprecated former name of :class:`OracleSourceRouter` (kept for ``--routers`` configs naming
#: ``lightning_fed.referral.routers.FedDRMReference`` and for :mod:`lightning_fed.referral.refer`).
#: It is not FedDRM: that is :class:`~lightning_fed.algorithms.FedDRM`.
FedDRMReference = OracleSourceRouter
