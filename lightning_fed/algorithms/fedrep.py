"""FedRep (Collins, Hassani, Mokhtari and Shakkottai, ICML 2021): a shared representation, local heads.

The model splits into a body (the representation ``phi``, shared) and a head (``h_i``, the last
``personal_layers`` layers, local). In round ``t`` center ``i`` receives the body ``phi^t`` and
(Algorithm 1 of the paper) first trains its head with the body fixed, then the body with the new
head fixed::

    head epochs (head_epochs):   h_i   <- h_i   - eta grad_h   F_i(h_i, phi^t; B)      (phi fixed)
    body epochs (the trainer's): phi_i <- phi_i - eta grad_phi F_i(h_i^{new}, phi_i; B)  (h_i fixed)

and uploads only ``phi_i``; the server averages the bodies (FedAvg's weights, server optimizer and
faults, :class:`~lightning_fed.algorithms.fedavg.FedAvg`) and sends ``phi^{t+1}``. Every evaluation
uses ``(h_i, phi^{t+1})``. The bytes per round are FedAvg's for the body alone.

The two phases are two calls of the engine's local training, each with the other part frozen
(:meth:`Engine.set_phase <lightning_fed.engine.base.Engine.set_phase>`: a frozen tensor keeps its
value and optimizer state, the model's step count counts both phases). Choices: the body trains for
the trainer's local schedule (``trainer.local_epochs``, the same as FedAvg's), the head for
``head_epochs`` epochs before it (the paper uses 10 head epochs and 1 body epoch; the default 1 keeps
the round's compute near FedAvg's); both phases walk the round's seeded batch order of the center
(so the head's first epoch and the body's first epoch visit the rows in the same order); with
``trainer.local_steps`` both phases take that many steps. The reported training loss is the body
phase's.
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.aggregation.robust import Aggregator
from lightning_fed.aggregation.server_optimizer import ServerOptimizer
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.data.center import FederatedData
from lightning_fed.engine.base import Engine
from lightning_fed.models.base import CenterModule
from lightning_fed.validation import check_int

__all__ = ["FedRep"]


class FedRep(FedAvg):
    """Head epochs (body frozen), then body epochs (head frozen); only the body is shared.

    Args:
        head_epochs: Local epochs of the head phase per round (paper: 10; default 1).
        personal_layers: Head layers (>= 1; default 1, the classifier layer).
        server_optimizer: The server's step on the bodies (as :class:`FedAvg`).
        aggregator: How the server combines the bodies (as :class:`FedAvg`; default the weighted mean).

    Raises:
        ValueError: If ``personal_layers`` < 1 (FedRep without a head is FedAvg) or ``head_epochs`` < 1.
    """

    def __init__(
        self,
        head_epochs: int = 1,
        personal_layers: int = 1,
        server_optimizer: ServerOptimizer | None = None,
        aggregator: Aggregator | None = None,
    ) -> None:
        super().__init__(personal_layers, server_optimizer=server_optimizer, aggregator=aggregator)
        if self.personal_layers < 1:
            raise ValueError(
                "algorithm.personal_layers must be >= 1 for FedRep (the head it trains first and keeps "
                "local); with 0 use FedAvg"
            )
        self.head_epochs = check_int("algorithm.head_epochs", head_epochs, 1)

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        self.head = tuple(n for n, _ in module.named_parameters() if n not in self.shared_names)

    def train_round(self, engine: Engine, round_idx: int) -> Tensor:
        """The head phase, then the body phase; returns the body phase's mean losses."""
        engine.set_phase(self.head_epochs, frozen=self.shared_names)
        engine.train_round(round_idx)
        engine.set_phase(None, frozen=self.head)
        try:
            return engine.train_round(round_idx)
        finally:
            engine.set_phase()
