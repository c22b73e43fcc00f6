"""SCAFFOLD (Karimireddy et al., ICML 2020, Algorithm 1 with option II): control variates against
client drift.

The server holds its model ``x`` and a control variate ``c``; center ``i`` holds its own ``c_i``
(all start at 0 and cover the shared parameters only). In round ``t`` every participating center,
starting from the ``x`` it received, takes its ``K_i`` local steps on the corrected gradient

    y_i <- y_i - eta_l (g_i(y_i) - c_i + c),

which the engines compute as the local-loss term ``<c - c_i, y>`` (its gradient is ``c - c_i``;
:class:`ControlTerm`, both engines, so packed == sequential). Then option II updates the center's
control from its own progress,

    c_i^+ = c_i - c + (x - y_i) / (K_i eta_l),

and the center uploads ``(y_i, Delta c_i = c_i^+ - c_i)``. Over the accepted uploads ``S`` the server
sets ``x <- sum_{i in S} (n_i / n_S) y_i`` (FedAvg's weights: the paper's global step size
``eta_g = 1`` with its uniform mean when the ``n_i`` are equal) and ``c <- c + (1/N) sum_{i in S}
Delta c_i`` (``N`` the federation's centers, the paper's ``|S|/N`` times the mean), and sends
``(x, c)`` back to the participating centers.

Bytes: the upload carries ``y_i`` and ``Delta c_i``, the download ``x`` and ``c``, so every message is
twice FedAvg's: **SCAFFOLD sends 2x FedAvg's bytes** (``bytes_vs_fedavg = 2.0`` on a full federation).

Choices: ``eta_l`` is the rate the model's ``configure_optimizers`` returns times the round's
``trainer.lr_schedule`` factor, ``K_i`` the center's optimizer steps that round
(:func:`~lightning_fed.engine.schedule.steps_per_round`). The local optimizer must be SGD (the
paper's; momentum and weight decay allowed), and any other is refused at setup: under SGD,
``(x - y_i) / (K_i eta_l)`` is the mean corrected gradient, so ``c_i^+`` is the mean raw gradient
over the local steps; under Adam each step is about ``eta_l`` per coordinate whatever the gradient's
size, so ``c_i`` is in normalized-step units. Measured on TeacherICU (230 centers, Adam 1e-3, 2 local
epochs): median ``|c_i|`` 23-76 against raw gradients ``|g_i(x)|`` of 0.09-0.23 over rounds 0-5, so the
correction outweighed the gradient 100-800x and the run fell below chance (AUROC 0.43-0.46). A center
that missed the last download (a fault; client sampling sends it first,
:meth:`FedAvg.start_round <lightning_fed.algorithms.fedavg.FedAvg.start_round>`) uses the ``c`` it
holds and ``x`` = the model it started from. Faults and the norm defence act on each whole message.

Hand derivation used by ``tests/algorithms/test_scaffold.py`` (2 centers, one row each, SGD with
rate ``eta``, ``K = 2`` steps per round, 2 rounds, all controls 0 at first): round 0 has ``c = c_i
= 0``, so it is FedAvg: ``y_i = x_0 - eta g_i(x_0) - eta g_i(x_0 - eta g_i(x_0))``,
``c_i^1 = (x_0 - y_i) / (2 eta)``, ``x_1 = sum_i w_i y_i``, ``c^1 = (c_1^1 + c_2^1) / 2``; round 1
steps ``y <- y - eta (g_i(y) + c^1 - c_i^1)`` twice from ``x_1``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.aggregation.mixing import sample_weights, weighted_average
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.comm.exchange import exchange, rows
from lightning_fed.comm.ledger import SERVER
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.base import Engine
from lightning_fed.engine.objective import LocalTerm, TermBatch
from lightning_fed.engine.optim import optimizer_and_scheduler
from lightning_fed.engine.schedule import steps_per_round
from lightning_fed.models.base import CenterModule
from lightning_fed.types import RoundContext

__all__ = ["SCAFFOLD", "ControlTerm"]

#: Prefix of the control-variate tensors in SCAFFOLD's messages.
CONTROL = "control."


class ControlTerm(LocalTerm):
    """``<c - c_i, y>`` over the shared parameters, with the control variates each center holds."""

    def __init__(self, algorithm: SCAFFOLD) -> None:
        self.algorithm = algorithm

    def loss(self, batch: TermBatch) -> Tensor:
        alg, value = self.algorithm, None
        for n in alg.shared_names:
            p = batch.params[n]
            at = batch.centers.to(alg.c_local[n].device)
            diff = alg.c_held[n].index_select(0, at) - alg.c_local[n].index_select(0, at)
            part = (diff.to(p.device, p.dtype) * p).reshape(p.shape[0], -1).sum(1)
            value = part if value is None else value + part
        return value


class SCAFFOLD(FedAvg):
    """FedAvg's star with server and client control variates (module docstring; option II).

    Args:
        personal_layers: Head layers kept local (no control variate covers them).
    """

    def __init__(self, personal_layers: int = 0) -> None:
        super().__init__(personal_layers)

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        params = dict(module.named_parameters())
        #: The server's ``c`` ``[1, ...]``, each center's ``c_i`` and the ``c`` each center last received.
        self.c = {n: torch.zeros_like(params[n].detach()).unsqueeze(0) for n in self.shared_names}
        self.c_local = {n: t.repeat(self.num_centers, *([1] * (t.dim() - 1))) for n, t in self.c.items()}
        self.c_held = {n: t.clone() for n, t in self.c_local.items()}
        self.last_sent = {**self.last_sent, **{CONTROL + n: t.clone() for n, t in self.c.items()}}
        optimizer, _ = optimizer_and_scheduler(module.configure_optimizers())
        if not isinstance(optimizer, torch.optim.SGD):
            raise ValueError(
                f"algorithm SCAFFOLD: option II's control update (x - y_i) / (K_i eta_l) assumes SGD local "
                f"steps, but model {type(module).__name__}'s configure_optimizers returns "
                f"{type(optimizer).__name__} (its controls would be in units of the optimizer's normalized "
                "steps, not gradients); use an SGD model, e.g. --model.init_args.optimizer=sgd for "
                "MortalityMLP"
            )
        self.base_lr = float(optimizer.param_groups[0]["lr"])

    def local_term(self) -> LocalTerm:
        return ControlTerm(self)

    def train_round(self, engine: Engine, round_idx: int) -> Tensor:
        """Remember each center's start ``x``, steps ``K_i`` and rate ``eta_l``, then train."""
        inner = getattr(engine, "inner", engine)
        self._start = {n: t.clone() for n, t in self.shared(engine.get_params()).items()}
        self._steps = torch.tensor(
            [
                steps_per_round(int(n), inner.batch_size, inner.epochs, inner.local_steps)
                for n in self.n_train.tolist()
            ],
            dtype=torch.float64,
        )
        self._lr = self.base_lr * engine.lr_factor(round_idx)
        return engine.train_round(round_idx)

    def receive(
        self, params: dict[str, Tensor], dst: Tensor, received: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        """The model part as FedAvg; the control part becomes the ``c`` the centers ``dst`` hold."""
        for n in self.shared_names:
            t = received[CONTROL + n]
            index = dst.to(self.c_held[n].device)
            self.c_held[n].index_copy_(0, index, t.to(self.c_held[n].dtype).expand(len(index), *t.shape[1:]))
        return super().receive(params, dst, {n: received[n] for n in self.shared_names})

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        available = wire.available(ctx.round, self.num_centers)
        centers = torch.arange(self.num_centers)[available]
        if not len(centers):
            return dict(params)
        y = rows(self.shared(params), centers)
        steps = self._steps[centers].clamp(min=1)
        delta = {}
        for n, t in y.items():
            at = centers.to(t.device)
            c_i, c_held = self.c_local[n].index_select(0, at), self.c_held[n].index_select(0, at)
            scale = (1.0 / (steps * self._lr)).to(t.device, t.dtype).view(-1, *([1] * (t.dim() - 1)))
            c_plus = c_i - c_held + (self._start[n].index_select(0, at) - t) * scale
            delta[n] = c_plus - c_i
            self.c_local[n].index_copy_(0, at, c_plus)
        server = torch.full_like(centers, SERVER)
        message = {**y, **{CONTROL + n: d for n, d in delta.items()}}
        upload = exchange(wire, message, centers, server, ctx.round)
        if not len(upload.src):
            return dict(params)
        models = {n: upload.received[n] for n in self.shared_names}
        model = weighted_average(models, sample_weights(self.n_train[upload.src]))
        for n in self.shared_names:
            self.c[n] = self.c[n] + upload.received[CONTROL + n].sum(0, keepdim=True) / self.num_centers
        reply = {**model, **{CONTROL + n: t for n, t in self.c.items()}}
        download = exchange(wire, reply, server, centers, ctx.round, own=y)
        self.last_sent = {n: t.detach().clone() for n, t in reply.items()}
        self.holds = torch.zeros(self.num_centers, dtype=torch.bool)
        self.holds[download.dst] = True
        if not len(download.dst):
            return dict(params)
        return self.receive(dict(params), download.dst, download.received)

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            **{k: {n: t.clone() for n, t in getattr(self, k).items()} for k in ("c", "c_local", "c_held")},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        for k in ("c", "c_local", "c_held"):
            setattr(self, k, {n: t.clone() for n, t in state[k].items()})
