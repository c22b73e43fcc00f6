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
sent back and every center keeps its parameters. Both legs go through the one exchange path
(:func:`~lightning_fed.comm.exchange.exchange`: send, validate, drop the rejected).

The server's step is a plugin, ``server_optimizer`` (a
:class:`~lightning_fed.aggregation.server_optimizer.ServerOptimizer`; docs/architecture.md,
decision 15): from the accepted uploads' aggregate ``theta_bar_t`` (:meth:`FedAvg.server_model`)
it computes the model the server sends.

* :class:`~lightning_fed.aggregation.ServerAverage` (default): sends ``theta_bar_t``.
* :class:`~lightning_fed.aggregation.ServerMomentum` (FedAvgM, Hsu et al. 2019): the server keeps
  one global model ``theta_server`` and one velocity ``v`` over the shared tensors and steps
  ``v <- beta v + (theta_bar_t - theta_server)``, ``theta_server <- theta_server + v``; it sends
  ``theta_server``. ``theta_server`` starts as the common initial model (the seeded init every
  center starts from, shared tensors only) with ``v = 0``, so round 0 sends ``theta_bar_0``.
  FedAvg-X (``configs/fedavg_x.yaml``) uses it with ``beta = 0.5``: on a star, the server momentum
  among ABPS-X's extensions (ABPS Sec. 6.4) is FedAvgM. The float ``server_momentum: beta`` of
  earlier releases is an alias of ``ServerMomentum(beta)`` (0: ``ServerAverage``).

Client sampling (``trainer.centers_per_round``, :mod:`lightning_fed.comm.sampling`): the
centers :meth:`Wire.available <lightning_fed.comm.wire.Wire.available>` returns are the round's
sampled ones, so only they upload and download, and the server's weights are ``n_j / sum_{k in S_t}
n_k`` over the accepted uploads of the sample ``S_t`` (the ratio estimator; the module docstring of
:mod:`lightning_fed.comm.sampling` says when it is unbiased). A sampled center must train from the
server's current model, which it does not hold if it missed the last download (not sampled then, or
unreachable): :meth:`FedAvg.start_round` first sends it that model (one more message, booked to the
round), then the round runs as above. Without sampling nothing changes (a center that missed a
download because of a fault still continues from its own model, as before).

The aggregation itself is a plugin too, ``aggregator`` (an
:class:`~lightning_fed.aggregation.robust.Aggregator`, docs/robustness.md "Robust aggregators"):
:class:`~lightning_fed.aggregation.WeightedMean` (default) is the weighted average above, bit for
bit; :class:`~lightning_fed.aggregation.CoordinateMedian`, :class:`~lightning_fed.aggregation.TrimmedMean`,
:class:`~lightning_fed.aggregation.Krum` and :class:`~lightning_fed.aggregation.CenteredClipping`
(started from the model the server sent last round) replace it as comparators; the server optimizer
then steps from their result. Subclasses that override :meth:`FedAvg.server_model` (FedDyn,
BNNFedAvg) take no aggregator.

Client-level differential privacy (``trainer.dp.level: client``, :meth:`FedAvg.use_client_dp`):
DP-FedAvg (McMahan et al. 2018) replaces the aggregate by :func:`~lightning_fed.dp.clipped_noisy_mean`:
each accepted upload's update from the model the server sent last round is clipped to
``max_grad_norm``, the clipped updates are summed **unweighted** (the paper's ``w_j = 1``: the
``n_j`` weights above would let a large center's update exceed the clip), Gaussian noise is added
and the sum divided by the round's participant count (the sampled, or reachable, centers). The
server optimizer then steps from that model (post-processing). With client sampling a sampled center
first receives the server's current model (:meth:`FedAvg.start_round`), so every upload's update is
against the model it trained from; without sampling every center holds it already.

Exclusive with any server optimizer but the average: ``momentum`` beta > 0
(:class:`~lightning_fed.aggregation.momentum.UpdateMomentum`, the per-center EMA ABPS-X uses on its
mesh): a center that takes the download moves by ``u_i <- beta u_i + (1 - beta) (theta_bar_t -
theta_i)``, ``theta_i <- theta_i + u_i``, one buffer per center. This is NOT server momentum.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from lightning_fed.aggregation.momentum import UpdateMomentum
from lightning_fed.aggregation.robust import Aggregator, WeightedMean, aggregator_from
from lightning_fed.aggregation.server_optimizer import ServerOptimizer, server_optimizer_from
from lightning_fed.algorithms.base import Algorithm
from lightning_fed.comm.exchange import exchange, rows
from lightning_fed.comm.ledger import SERVER
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.dp.client import clipped_noisy_mean
from lightning_fed.dp.config import DPConfig
from lightning_fed.engine.base import Engine
from lightning_fed.models.base import CenterModule
from lightning_fed.types import RoundContext

__all__ = ["FedAvg"]


class FedAvg(Algorithm):
    """Sample-weighted averaging of the available centers' shared parameters through a server.

    Args:
        personal_layers: Head layers kept local (0 shares everything; FedAvg+P uses 1 or 2).
        momentum: Per-center EMA weight on each center's aggregated update
            (:class:`~lightning_fed.aggregation.momentum.UpdateMomentum`, ``u_i <- beta u_i +
            (1 - beta)(theta_bar - theta_i)``); one buffer per center, NOT server momentum.
        server_momentum: Deprecated alias: ``beta`` means ``server_optimizer:
            ServerMomentum(beta)`` (0: ``ServerAverage``); give ``server_optimizer`` instead.
        server_optimizer: The server's step from the round's aggregate
            (:class:`~lightning_fed.aggregation.server_optimizer.ServerOptimizer`; default
            :class:`~lightning_fed.aggregation.ServerAverage`, FedAvg-X:
            ``ServerMomentum(beta=0.5)``).
        aggregator: How the server combines the accepted uploads
            (:class:`~lightning_fed.aggregation.robust.Aggregator`; default
            :class:`~lightning_fed.aggregation.WeightedMean`, the ``n_j``-weighted average).

    Raises:
        ValueError: If both ``server_momentum`` and ``server_optimizer`` are given, or ``momentum``
            is > 0 with a server optimizer other than the average.
    """

    #: Audited (:meth:`Algorithm.replay_blocker`): the server averages messages; a receiver
    #: takes the download or keeps its own rows.
    owner_rows_suffice: ClassVar[bool] = True

    def __init__(
        self,
        personal_layers: int = 0,
        momentum: float = 0.0,
        server_momentum: float = 0.0,
        server_optimizer: ServerOptimizer | None = None,
        aggregator: Aggregator | None = None,
    ) -> None:
        super().__init__(personal_layers)
        self.aggregator = aggregator_from(aggregator)
        self.update_momentum = UpdateMomentum(momentum)
        self.server_optimizer = server_optimizer_from(server_optimizer, server_momentum)
        if self.update_momentum.beta and not self.server_optimizer.identity:
            raise ValueError(
                f"algorithm.init_args.momentum={momentum} and algorithm.init_args.server_optimizer="
                f"{type(self.server_optimizer).__name__} are mutually exclusive: set momentum to 0 or "
                "drop the server optimizer (it is FedAvgM's server momentum; momentum the per-center EMA)"
            )

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """Sizes and shared names; fresh momentum state (``theta_server`` = the common initial model)."""
        super().setup(data, module, seed)
        self.update_momentum = UpdateMomentum(self.update_momentum.beta)
        params = dict(module.named_parameters())
        self.server_optimizer.start({n: params[n] for n in self.shared_names})
        #: The server's last model sent ``{name: [1, ...]}`` (the common initial model at first) and
        #: which centers took that download (every center holds the initial model).
        self.last_sent = {n: params[n].detach().clone().unsqueeze(0) for n in self.shared_names}
        self.holds = torch.ones(self.num_centers, dtype=torch.bool)

    def use_client_dp(self, dp: DPConfig) -> None:
        """DP-FedAvg (module docstring): :meth:`server_model` becomes the clipped, noised, unweighted
        mean of the updates.

        Raises:
            ValueError: One line naming ``trainer.dp.level``, for a subclass that exchanges or
                aggregates more than FedAvg's models (SCAFFOLD's controls, FedDyn's state, APFL,
                MOON, BNN+FL, FedDRM's final stage) or a robust aggregator (their own rule would be
                replaced).
        """
        own = [
            name
            for name in ("aggregate", "server_model", "receive", "finish")
            if getattr(type(self), name) is not getattr(FedAvg, name)
        ]
        if own:
            raise ValueError(
                f"trainer.dp.level=client: {type(self).__name__} overrides FedAvg's {own[0]}, which "
                "DP-FedAvg's clipping and noise do not cover; use FedAvg (or FedProx, FedRep, FedBN, "
                "Ditto), or trainer.dp.level=sample"
            )
        if not isinstance(self.aggregator, WeightedMean):
            raise ValueError(
                f"trainer.dp.level=client replaces the server's average, and algorithm.init_args.aggregator="
                f"{type(self.aggregator).__name__} is another rule: remove the aggregator"
            )
        self.client_dp = dp

    #: DP-FedAvg's settings (:meth:`use_client_dp`); None: plain FedAvg.
    client_dp: DPConfig | None = None

    def replay_blocker(self) -> str | None:
        """:meth:`Algorithm.replay_blocker`; also ``algorithm.momentum > 0``, whose buffer per center
        is computed from each center's own rows."""
        if self.update_momentum.beta:
            return (
                f"algorithm.momentum={self.update_momentum.beta:g} keeps a buffer per center from its own "
                "rows (algorithm.momentum: 0 lets the processes gather in the wire's dtype)"
            )
        return super().replay_blocker()

    def start_round(self, ctx: RoundContext, engine: Engine, wire: Wire) -> None:
        """With client sampling: send :attr:`last_sent` to the sampled centers that do not hold it."""
        if wire.sampler is None:
            return
        stale = wire.available(ctx.round, self.num_centers) & ~self.holds
        if not bool(stale.any()):
            return
        centers = torch.nonzero(stale).reshape(-1)
        params = engine.replay_params()  # own rows exact at their owner (replay_blocker)
        server = torch.full_like(centers, SERVER)
        own = rows(self.shared(params), centers)
        got = exchange(wire, self.last_sent, server, centers, ctx.round, own=own)
        if not len(got.dst):
            return
        engine.set_params(self.receive(params, got.dst, got.received))
        self.holds[got.dst] = True

    def receive(
        self, params: dict[str, Tensor], dst: Tensor, received: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        """``params`` with the centers ``dst`` holding the server's message ``received`` ``[1, ...]``
        (a catch-up download of :meth:`start_round`; SCAFFOLD's message also carries its control)."""
        out = dict(params)
        for n, t in received.items():
            index = dst.to(out[n].device)
            out[n] = out[n].index_copy(0, index, t.to(out[n].dtype).expand(len(index), *t.shape[1:]))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "momentum": self.update_momentum.state_dict(),
            "server_optimizer": self.server_optimizer.state_dict(),
            "last_sent": {n: t.clone() for n, t in self.last_sent.items()},
            "holds": self.holds.clone(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.update_momentum.load_state_dict(state.get("momentum", {}))
        # "server_momentum": the key of checkpoints written before the server optimizer plugin.
        saved = state.get("server_optimizer", state.get("server_momentum"))
        if saved is not None:
            self.server_optimizer.load_state_dict(saved)
        if "last_sent" in state:  # checkpoints written before client sampling have neither
            self.last_sent = {n: t.clone() for n, t in state["last_sent"].items()}
            self.holds = state["holds"].clone()

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        out = dict(params)
        available = wire.available(ctx.round, self.num_centers)
        centers = torch.arange(self.num_centers)[available]
        #: The round's participants: DP-FedAvg's fixed denominator (:mod:`lightning_fed.dp.client`).
        self.participants = len(centers)
        if not len(centers):
            return out
        shared = self.shared(params)
        if not bool(available.all()):
            shared = rows(shared, centers)
        server = torch.full_like(centers, SERVER)
        upload = exchange(wire, shared, centers, server, ctx.round)
        if not len(upload.src):
            return out
        average = self.server_optimizer.step(self.server_model(upload.received, upload.src, ctx))
        download = exchange(wire, average, server, centers, ctx.round, own=shared)
        self.last_sent = {n: t.detach().clone() for n, t in average.items()}
        self.holds = torch.zeros(self.num_centers, dtype=torch.bool)
        self.holds[download.dst] = True
        if not len(download.dst):
            return out
        active = torch.zeros(self.num_centers, dtype=torch.bool)
        active[download.dst] = True
        for n, t in download.received.items():
            out[n] = self.update_momentum.apply(
                n, params[n], t.expand_as(params[n]).to(params[n].dtype), active
            )
        return out

    def server_model(
        self, uploaded: dict[str, Tensor], senders: Tensor, ctx: RoundContext
    ) -> dict[str, Tensor]:
        """The model the server sends back ``{name: [1, ...]}`` from the accepted uploads ``[m, ...]``.

        FedAvg: the :attr:`aggregator` of the uploads with the senders' rows ``n_j`` as weights and
        the model sent last round as reference; by default ``sum_j (n_j / sum_k n_k) theta_j``
        (FedDyn and BNNFedAvg override this). The :attr:`server_optimizer` then steps from it.

        Args:
            uploaded: Decoded uploads of the accepted senders, stacked in ``senders`` order.
            senders: Center ids ``[m]`` of those uploads.
            ctx: The round.
        """
        dp = self.client_dp
        if dp is not None:
            return clipped_noisy_mean(
                uploaded,
                self.last_sent,
                dp.max_grad_norm,
                dp.noise_multiplier,
                self.participants,
                ctx.seed,
                ctx.round,
            )
        return self.aggregator(uploaded, self.n_train[senders], self.last_sent)
