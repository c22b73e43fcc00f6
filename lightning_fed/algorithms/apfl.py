"""APFL (Deng, Kamani and Mahdavi 2020): a learned per-center mixture of a local and the global model.

Every center ``i`` keeps its copy ``w_i`` of the global model (trained and averaged as in
:class:`~lightning_fed.algorithms.fedavg.FedAvg`), a local model ``v_i`` and a mixing weight
``alpha_i``; its personalized model is

    vbar_i = alpha_i v_i + (1 - alpha_i) w_i.

On every local batch ``B`` the three are stepped together from the same batch (Algorithm 1 of the
paper, with the adaptive ``alpha`` of its Sec. 3.3)::

    w_i     <- w_i - eta grad_w F_i(w_i; B)
    v_i     <- v_i - eta grad_v F_i(vbar_i; B)       = v_i - eta alpha_i grad F_i(vbar_i; B)
    alpha_i <- alpha_i - eta grad_alpha F_i(vbar_i; B) = alpha_i - eta <v_i - w_i, grad F_i(vbar_i; B)>

then only ``w_i`` is uploaded and replaced by the server's average; ``v_i`` and ``alpha_i`` stay.
Every evaluation uses ``vbar_i`` (with the center's current ``w_i``, i.e. the average it received).

How it is built: :class:`MixtureModule` (a :class:`~lightning_fed.algorithms.twin.TwinModule`
plus the scalar parameter ``alpha``) has the local loss ``F_i(w_i; B) + F_i(vbar_i; B)`` where
``vbar_i`` uses ``w_i`` *detached*, so one backward gives exactly the three gradients above (the
first term moves only ``w``, the second only ``v`` and ``alpha``). ``eta`` is the model's optimizer
(SGD gives the paper's rule exactly; with Adam each of the three steps is Adam's normalized step).

Choices: ``v_i^0 = w^0`` and ``alpha_i^0 = alpha`` (the config's value) at every center. The paper
projects ``alpha`` onto ``[0, 1]`` after each step; here the mixture uses ``clip(alpha, 0, 1)``
with a straight-through gradient (the value is clipped, the gradient is that of ``alpha``), which
is the paper's rule while ``alpha`` stays in ``[0, 1]`` and lets an ``alpha`` that stepped outside
come back; ``round_stats`` reports the mean clipped ``alpha``.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from lightning_fed.aggregation.server_optimizer import ServerOptimizer
from lightning_fed.algorithms.ditto import twin_of
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.algorithms.twin import TwinModule
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.models.base import CenterModule
from lightning_fed.types import RoundContext
from lightning_fed.validation import check_number

__all__ = ["APFL", "MixtureModule"]


class MixtureModule(TwinModule):
    """Global copy ``w``, local model ``v`` and mixing weight ``alpha``; the forward is ``vbar``'s.

    Args:
        base: The user's model (becomes ``w``; ``v`` is its twin).
        alpha: Initial mixing weight in ``[0, 1]``.
    """

    def __init__(self, base: CenterModule, alpha: float) -> None:
        super().__init__(base, "APFL")
        self.alpha = torch.nn.Parameter(torch.tensor(float(alpha), dtype=torch.float64))

    def weight(self) -> Tensor:
        """``clip(alpha, 0, 1)`` in value, with ``alpha``'s gradient (straight through)."""
        return self.alpha + (self.alpha.clamp(0.0, 1.0) - self.alpha).detach()

    def mixture(self, x: Tensor, detach_global: bool) -> Tensor:
        """The base model's forward at ``vbar = a v + (1 - a) w`` (``w`` detached when asked)."""
        a = self.weight()
        mixed = {}
        for n, _ in self.personal_model.named_parameters():
            v = functools.reduce(getattr, n.split("."), self.personal_model)
            w = functools.reduce(getattr, n.split("."), self.global_model)
            mixed[n] = a * v + (1 - a) * (w.detach() if detach_global else w)
        return torch.func.functional_call(self.personal_model, mixed, (x,))

    def forward(self, x: Tensor) -> Tensor:
        return self.mixture(x, detach_global=False)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """``F(w; B) + F(vbar; B)`` with ``w`` detached in ``vbar``; logs both losses and ``alpha``."""
        x, y = batch
        shared = self.mean_loss(self.global_model, x, y)
        mixed = self.global_model.loss_rows(self.mixture(x, detach_global=True), y).mean()
        self.log("loss_global", shared)
        self.log("loss_mixture", mixed)
        self.log("alpha", self.weight().detach())
        return shared + mixed


class APFL(FedAvg):
    """FedAvg on the global copies, plus a local model and a learned mixing weight per center.

    Args:
        alpha: Initial mixing weight ``alpha_i^0`` of every center, in ``[0, 1]`` (default 0.5, the
            middle; 0 starts from the global model, 1 from the local one).
        personal_layers: Head layers of the global copy kept local (as :class:`FedAvg`).
        server_optimizer: The server's step on the global copies (as :class:`FedAvg`).
    """

    def __init__(
        self, alpha: float = 0.5, personal_layers: int = 0, server_optimizer: ServerOptimizer | None = None
    ) -> None:
        super().__init__(personal_layers, server_optimizer=server_optimizer)
        self.alpha = check_number("algorithm.alpha", alpha, 0.0, strict=False)
        if self.alpha > 1.0:
            raise ValueError(f"algorithm.alpha must be in [0, 1], got {alpha}")
        self._alpha_mean = float("nan")

    def model_for(self, module: CenterModule) -> CenterModule:
        return MixtureModule(module, self.alpha)

    def local_names(self, module: CenterModule) -> tuple[str, ...]:
        return (*twin_of(module, "APFL").personal_names(), "alpha")

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """``v^0 = w^0``, then FedAvg's setup over the global copy."""
        twin: TwinModule = twin_of(module, "APFL")
        twin.start_personal_from_global()
        super().setup(data, module, seed)

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        self._alpha_mean = float(params["alpha"].clamp(0.0, 1.0).double().mean())
        return super().aggregate(ctx, params, wire)

    def round_stats(self) -> dict[str, float]:
        """``alpha_mean``: the centers' mean mixing weight ``clip(alpha_i, 0, 1)`` after local training."""
        return {"alpha_mean": self._alpha_mean}
