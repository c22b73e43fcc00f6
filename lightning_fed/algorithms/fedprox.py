"""FedProx (Li et al., MLSys 2020): FedAvg with a proximal term in every local objective.

Center ``i`` minimizes, in round ``t``, ``h_i(w) = F_i(w) + (mu / 2) ||w - w^t||^2`` where ``w^t``
is the model it received at the start of the round (the server's average), so each local gradient
step follows ``grad F_i(w) + mu (w - w^t)``; aggregation is FedAvg's (:class:`FedAvg`).

Choice left open by the paper: with personal (head) layers only the shared layers have a global
model, so the proximal term covers the shared parameters only. ``mu = 0`` is exactly FedAvg.
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.aggregation.robust import Aggregator
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.engine.objective import LocalTerm, TermBatch, squared_distance
from lightning_fed.validation import check_number

__all__ = ["FedProx", "ProximalTerm"]


class ProximalTerm(LocalTerm):
    """``(mu / 2) ||w - w_start||^2`` over the named (shared) parameters.

    Args:
        mu: Proximal weight.
        names: Parameter names the term covers.
    """

    def __init__(self, mu: float, names: tuple[str, ...]) -> None:
        self.mu, self.names = float(mu), tuple(names)

    def loss(self, batch: TermBatch) -> Tensor:
        return 0.5 * self.mu * squared_distance(batch.params, batch.start, self.names)


class FedProx(FedAvg):
    """FedAvg whose local objective adds ``(mu / 2) ||w - w^t||^2``.

    Args:
        mu: Proximal weight (the FedProx paper tunes it in {0.001, 0.01, 0.1, 1}; default 0.01).
        personal_layers: Head layers kept local.
        momentum: Server-side EMA momentum (as :class:`FedAvg`).
        aggregator: How the server combines the uploads (as :class:`FedAvg`; default the weighted mean).
    """

    def __init__(
        self,
        mu: float = 0.01,
        personal_layers: int = 0,
        momentum: float = 0.0,
        aggregator: Aggregator | None = None,
    ) -> None:
        super().__init__(personal_layers, momentum, aggregator=aggregator)
        self.mu = check_number("algorithm.mu", mu, 0.0, strict=False)

    def local_term(self) -> LocalTerm:
        return ProximalTerm(self.mu, self.shared_names)
