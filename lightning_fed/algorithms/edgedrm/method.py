"""EdgeDRM (Ma, Wang & Zhang): DFedAvgM stage I, then frozen-encoder stage II (Sec. 3.1, App. D.2).

Stage I is :class:`~lightning_fed.algorithms.dfedavgm.DFedAvgM` unchanged (full-model Metropolis
mixing with graph neighbours). :meth:`EdgeDRM.finish` runs stage II:

1. every client encodes its own training rows once with its frozen encoder (``z_ur = g_{theta_u}(x_ur)``);
2. neighbours exchange training counts ``n_u`` (for the inference prior ``log(n_j / n_i)``);
3. heads and potentials ``(b_u, theta_u)`` are fitted with the balanced endpoint objective
   ``sum_u [lambda T_u + kappa sum_{v in N(u)} L_uv^(u)]``, ``kappa = m(1 - lambda)/(2|E|)``
   (:mod:`lightning_fed.algorithms.edgedrm.stage2`), by default as the paper fits it: ``stage2_epochs`` rounds
   of ``stage2_steps_per_round`` mini-batch momentum-SGD steps on a cosine rate (App. D.2.1, D.3.2);
   per optimizer step each client sends its potential to each neighbour and gets back the gradient of
   the neighbour's endpoint term with respect to it (App. B.4, ``G_i``);
4. final potentials are published to neighbours.

All stage-II messages are booked on the ledger at round ``ctx.round`` with the bytes the wire's hook
encodes (:meth:`Wire.message_bytes <lightning_fed.comm.wire.Wire.message_bytes>`); the simulation
computes the edge terms from the exact endpoint values. Potentials and counts live in
:meth:`state_dict` so a checkpoint restores them for referral (:func:`lightning_fed.referral.refer`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from lightning_fed.algorithms.dfedavgm import DFedAvgM
from lightning_fed.algorithms.edgedrm.experts import Experts
from lightning_fed.algorithms.edgedrm.potentials import Potentials
from lightning_fed.algorithms.edgedrm.stage2 import Stage2Optim, fit_stage2
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.graphs.gossip import directed_edges
from lightning_fed.graphs.topology import Topology
from lightning_fed.models.base import CenterModule
from lightning_fed.selection.base import PartnerSelector
from lightning_fed.types import FinishContext

__all__ = ["EdgeDRM"]


class EdgeDRM(DFedAvgM):
    """DFedAvgM training plus learned routing potentials for budgeted local expert referral.

    Args:
        topology: Communication graph recipe (default RR4).
        stage2_epochs: Stage-II rounds ``R`` (paper: 200 on CIFAR, 50 on ISIC); with
            ``stage2_optimizer="adam"`` the number of full-batch steps.
        lam: Task weight ``lambda`` in ``[0, 1]`` (paper: 0.9 primary; Table 5 sweeps it).
        eta: Referral threshold: move only while the best incident score exceeds it (paper: 0).
        max_hops: Movement budget ``L`` (paper: 2 on 8 clients, 8 for 32).
        lr: Stage-II base learning rate (paper: 0.01): SGD's round-``r`` rate is
            ``lr/2 (1 + cos(pi (r - 1) / stage2_horizon))``; Adam's constant rate.
        encode_batch_size: Rows per frozen-encoder call.
        personal_layers: Head layers kept out of stage-I mixing (0: full model, as the paper).
        consensus_steps: Extra gossip steps on the encoders (Metropolis mixing over the graph, every
            message on the wire) between stage I and stage II. The model assumes one shared encoder
            ``g_theta`` (Sec. 2); the paper's 800 DFedAvgM rounds bring the local encoders close to
            it and it adds no consensus phase (0, the default). With the few rounds a CPU affords the
            encoders still differ, each client's representation then carries its own encoder's
            signature, and a source classifier keys on the encoder instead of the data (measured:
            EdgeDRM barely moves queries); a few dozen steps of plain gossip fix that. Booked on
            the ledger like every other message. Not the paper's protocol (the shipped paper-protocol
            configs set 0); when used, referral reads the DFedAvgM row with the stage-I heads on the
            same post-consensus encoders, plus a pre-consensus row (:mod:`lightning_fed.referral.run`).
        stage2_optimizer: ``"sgd"`` (the paper's mini-batch momentum SGD) or ``"adam"`` (full-batch
            Adam at the constant rate ``lr``; lambda then has almost no effect, see
            :mod:`lightning_fed.algorithms.edgedrm.stage2`).
        stage2_steps_per_round: SGD mini-batch steps per stage-II round (paper: 5, App. D.3.2).
        stage2_batch_size: Rows per client mini-batch (paper: 32).
        stage2_momentum: SGD momentum (paper: 0.9), reset every round when ``stage2_reset_momentum``.
        stage2_weight_decay: SGD weight decay on heads and potentials (paper: 5e-4).
        stage2_horizon: Cosine horizon ``H`` in rounds (paper: 600, stopping at round 200).
        stage2_reset_momentum: Reset the momentum buffer at every round start (paper: yes).
        selector: Stage I's partners (default ``GraphNeighbours(topology)``; exclusive with
            ``topology``). Stage II and referral need a fixed graph, so the selector must have one
            (:attr:`~lightning_fed.selection.PartnerSelector.graph`).
    """

    #: Audited (:meth:`Algorithm.replay_blocker`): stage I is DFedAvgM's gossip; stage II
    #: starts from the full-precision rows.
    owner_rows_suffice: ClassVar[bool] = True

    def __init__(
        self,
        topology: Topology | None = None,
        stage2_epochs: int = 200,
        lam: float = 0.9,
        eta: float = 0.0,
        max_hops: int = 2,
        lr: float = 0.01,
        encode_batch_size: int = 1024,
        personal_layers: int = 0,
        consensus_steps: int = 0,
        stage2_optimizer: str = "sgd",
        stage2_steps_per_round: int = 5,
        stage2_batch_size: int = 32,
        stage2_momentum: float = 0.9,
        stage2_weight_decay: float = 5e-4,
        stage2_horizon: int = 600,
        stage2_reset_momentum: bool = True,
        selector: PartnerSelector | None = None,
    ) -> None:
        super().__init__(topology, personal_layers, selector)
        if int(consensus_steps) < 0:
            raise ValueError(f"algorithm.consensus_steps must be >= 0, got {consensus_steps}")
        self.consensus_steps = int(consensus_steps)
        if not 0.0 <= float(lam) <= 1.0:
            raise ValueError(f"algorithm.lam must lie in [0, 1] (task weight lambda), got {lam}")
        if int(max_hops) < 0:
            raise ValueError(f"algorithm.max_hops (movement budget L) must be >= 0, got {max_hops}")
        if int(encode_batch_size) < 1:
            raise ValueError(f"algorithm.encode_batch_size must be >= 1, got {encode_batch_size}")
        #: Stage II's optimizer (validated there: one-line errors naming ``algorithm.<argument>``).
        self.stage2 = Stage2Optim(
            name=stage2_optimizer,
            lr=float(lr),
            momentum=float(stage2_momentum),
            weight_decay=float(stage2_weight_decay),
            batch_size=stage2_batch_size,
            rounds=stage2_epochs,
            steps_per_round=stage2_steps_per_round,
            horizon=stage2_horizon,
            reset_momentum=bool(stage2_reset_momentum),
        )
        self.stage2_epochs, self.lam, self.eta = int(stage2_epochs), float(lam), float(eta)
        self.max_hops, self.lr, self.encode_batch_size = int(max_hops), float(lr), int(encode_batch_size)
        self.potentials: Potentials | None = None
        #: The stage-I (DFedAvgM) parameters that stage II changes (the heads, and the encoders when
        #: ``consensus_steps > 0``), kept so that referral can report the DFedAvgM baseline (the
        #: stage-I heads at the entry client, on the post-consensus encoders; the saved encoders give
        #: the pre-consensus row) from the same run.
        self.stage1_head: dict[str, Tensor] | None = None

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """DFedAvgM's setup; the selector must have a fixed graph (stage II and referral route on it).

        Raises:
            ValueError: If the selector's partners change from round to round (no fixed graph).
        """
        super().setup(data, module, seed)
        if self.graph is None:
            raise ValueError(
                f"algorithm.init_args.selector={type(self.selector).__name__} has no fixed graph: EdgeDRM's "
                "stage II and referral route along one; use GraphNeighbours (or algorithm.init_args.topology)"
            )

    def finish(self, ctx: FinishContext) -> dict[str, Tensor]:
        """Stage II (module docstring): returns ``ctx.params`` with the refitted heads."""
        if self.graph.num_edges < 1:
            raise ValueError("algorithm.topology has no edges: EdgeDRM's stage II needs at least one edge")
        changed = [n for n in ctx.params if n.startswith("head.") or self.consensus_steps > 0]
        self.stage1_head = {n: ctx.params[n].detach().cpu().clone() for n in changed}
        params = self._encoder_consensus(ctx)
        experts = Experts(ctx.module, params, batch_size=self.encode_batch_size, device=ctx.device)
        z = [experts.encode(u, c.x_train) for u, c in enumerate(ctx.data.centers)]
        y = [c.y_train.to(ctx.device) for c in ctx.data.centers]
        src, dst = directed_edges(self.graph)
        self._book(ctx.wire, {"n": ctx.data.n_train.unsqueeze(1)}, src, dst, ctx.round, 1)
        fit = fit_stage2(
            z,
            y,
            params["head.weight"],
            params["head.bias"],
            self.graph.adjacency,
            self.lam,
            ctx.module.loss_rows,
            self.stage2,
            ctx.seed,
            ctx.log,
        )
        potential = {"a": torch.cat([fit.potentials.b.unsqueeze(1), fit.potentials.theta], 1)}
        # Per optimizer step: a_u to every neighbour, and grad_{a_u} L_uv^(v) back; then the final a_u.
        self._book(ctx.wire, potential, src, dst, ctx.round, 2 * self.stage2.steps + 1)
        self.potentials = Potentials(fit.potentials.b.cpu(), fit.potentials.theta.cpu(), ctx.data.n_train)
        out = dict(params)
        out["head.weight"] = fit.weight.to(params["head.weight"].dtype)
        out["head.bias"] = fit.bias.to(params["head.bias"].dtype)
        return out

    def _encoder_consensus(self, ctx: FinishContext) -> dict[str, Tensor]:
        """``consensus_steps`` gossip steps on every non-head parameter (heads stay private)."""
        params = dict(ctx.params)
        encoder = {n: t for n, t in params.items() if not n.startswith("head.")}
        for _ in range(self.consensus_steps):
            encoder = self.gossip(encoder, ctx.wire, ctx.round)
        params.update(encoder)
        return params

    @staticmethod
    def _book(
        wire: Wire, payload: dict[str, Tensor], src: Tensor, dst: Tensor, round_idx: int, times: int
    ) -> None:
        """Record ``times`` messages of ``payload``'s encoded size along every directed edge."""
        wire.ledger.record(round_idx, src, dst, times * wire.message_bytes(payload))

    def summary_stats(self) -> dict[str, float]:
        if self.potentials is None:
            return {}
        return {"stage2_theta_norm": float(self.potentials.theta.norm(dim=1).mean())}

    def state_dict(self) -> dict[str, Any]:
        if self.potentials is None:
            return {}
        return {"potentials": self.potentials.state_dict(), "stage1_head": self.stage1_head}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pot = state.get("potentials")
        self.potentials = None if pot is None else Potentials.from_state_dict(pot)
        self.stage1_head = state.get("stage1_head")
