"""Ditto (Li, Hu, Beirami and Smith, ICML 2021): a personal model per center, proximal to the global one.

Every center ``i`` keeps two models: its copy ``w_i`` of the global model, which FedAvg trains and
averages (:class:`~lightning_fed.algorithms.fedavg.FedAvg`, server optimizer and faults included),
and a personal model ``v_i`` that never leaves the center. In round ``t`` the center receives
``w^t`` (its global copy at the start of the round) and, on every local batch ``B`` of the round,
steps both (Algorithm 1 of the paper, with the personal solver run for the same local steps as
the global one)::

    w_i <- w_i - eta grad F_i(w_i; B)                              (FedAvg's local step)
    v_i <- v_i - eta ( grad F_i(v_i; B) + lambda (v_i - w^t) )    (the personal objective
                                                                    h_i(v) = F_i(v) + lambda/2 ||v - w^t||^2)

where ``eta`` is the model's optimizer (Adam moments per parameter, as for any model). Then only
``w_i`` is uploaded and averaged; ``v_i`` stays. Every evaluation (validation, test, the summary)
uses the personal model ``v_i``, the paper's reported model.

Limits of the objective: ``lambda = 0`` trains ``v_i`` on the center's own data alone, which is
Local-only (tested equal, bit for bit); ``lambda -> infinity`` pins ``v_i`` to the received ``w^t``,
which is FedAvg's model (tested within a stated tolerance).

How it is built: :class:`DittoModule` (a :class:`~lightning_fed.algorithms.twin.TwinModule`) holds
both copies of the user's model; its ``training_step`` is ``F_i(v_i; B) + F_i(w_i; B)`` (the two
terms touch disjoint parameters, so one backward gives both gradients above) and
:class:`DittoTerm` adds ``lambda/2 ||v_i - w^t||^2`` through the engines' local-term path, with
``w^t`` read from the round-start parameters of the global copy. Both copies see the same batches
in the same order (the round's seeded batch order of the center). Bytes on the wire are FedAvg's:
only the global copy is shared. Choices: the paper's personal step count ``s`` equals the local
steps of the global model (the trainer's schedule), and ``w^t`` is the global copy at the start of
the round (a center the server could not reach keeps its previous one).
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.aggregation.robust import Aggregator
from lightning_fed.aggregation.server_optimizer import ServerOptimizer
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.algorithms.twin import GLOBAL, PERSONAL, TwinModule
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.objective import LocalTerm, TermBatch, squared_distance
from lightning_fed.models.base import CenterModule
from lightning_fed.validation import check_number

__all__ = ["Ditto", "DittoModule", "DittoTerm"]


class DittoModule(TwinModule):
    """Global copy ``w`` and personal model ``v``; the forward (every evaluation) is ``v``'s."""

    def forward(self, x: Tensor) -> Tensor:
        return self.personal_model(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """``F(v; B) + F(w; B)``, the personal loss first (its dropout draws come first, as Local-only's);
        logs both as ``loss_personal`` and ``loss_global``."""
        x, y = batch
        personal = self.mean_loss(self.personal_model, x, y)
        shared = self.mean_loss(self.global_model, x, y)
        self.log("loss_personal", personal)
        self.log("loss_global", shared)
        return personal + shared


class DittoTerm(LocalTerm):
    """``(lambda / 2) ||v - w^t||^2``: the personal model against the global copy at round start.

    Args:
        lam: Proximal weight ``lambda``.
        names: The personal copy's parameter names (``personal_model.<n>``), each paired with the
            global copy's ``global_model.<n>``.
    """

    def __init__(self, lam: float, names: tuple[str, ...]) -> None:
        self.lam, self.names = float(lam), tuple(names)

    def loss(self, batch: TermBatch) -> Tensor:
        anchor = {n: batch.start[GLOBAL + n[len(PERSONAL) :]] for n in self.names}
        return 0.5 * self.lam * squared_distance(batch.params, anchor, self.names)


class Ditto(FedAvg):
    """FedAvg on the global copies, plus a personal model per center with proximal weight ``lam``.

    Args:
        lam: ``lambda`` of the personal objective (the paper tunes it in {0.01, 0.1, 1, 2};
            default 0.1). 0 is Local-only for the personal models.
        personal_layers: Head layers of the global copy kept local (as :class:`FedAvg`; 0 shares
            the whole global copy).
        server_optimizer: The server's step on the global copies (as :class:`FedAvg`).
        aggregator: How the server combines the global copies (as :class:`FedAvg`; default the
            weighted mean).
    """

    def __init__(
        self,
        lam: float = 0.1,
        personal_layers: int = 0,
        server_optimizer: ServerOptimizer | None = None,
        aggregator: Aggregator | None = None,
    ) -> None:
        super().__init__(personal_layers, server_optimizer=server_optimizer, aggregator=aggregator)
        self.lam = check_number("algorithm.lam", lam, 0.0, strict=False)

    def model_for(self, module: CenterModule) -> CenterModule:
        return DittoModule(module, "Ditto")

    def local_names(self, module: CenterModule) -> tuple[str, ...]:
        return twin_of(module, "Ditto").personal_names()

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        """``v^0 = w^0``, then FedAvg's setup over the global copy."""
        self.personal_names = twin_of(module, "Ditto").personal_names()
        module.start_personal_from_global()
        super().setup(data, module, seed)

    def local_term(self) -> LocalTerm | None:
        """:class:`DittoTerm` (None for ``lam = 0``: the personal objective is the local loss alone)."""
        return DittoTerm(self.lam, self.personal_names) if self.lam else None


def twin_of(module: CenterModule, method: str) -> TwinModule:
    """``module`` as the method's twin, or a one-line error (it was not built by ``model_for``).

    Raises:
        TypeError: If ``module`` is not a :class:`TwinModule`.
    """
    if not isinstance(module, TwinModule):
        raise TypeError(
            f"algorithm {method} needs the model built by {method}.model_for(model) (a global and a personal "
            f"copy), got {type(module).__name__}; run it through Federation, which builds it"
        )
    return module
