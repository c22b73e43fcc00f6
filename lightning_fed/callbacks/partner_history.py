"""Record, round by round, what partner selection decided and believed (for plots and notebooks).

:class:`PartnerHistory` keeps, after every round, the partner sets ``P_i`` (as an undirected edge
list), the isolation rate (share of centers that rested) and the posterior means
``E[phi_ij] = alpha_ij / (alpha_ij + beta_ij)`` of every center about every peer (ABPS Sec. 4.2).
It works with any algorithm that exposes ``last_partners`` (and ``selector.posterior`` for the
means); with ``lightning-fed fit`` it writes ``partner_history.pt`` to the run folder at the end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lightning_fed.callbacks.base import Callback
from lightning_fed.io import save_torch
from lightning_fed.types import RoundResult

__all__ = ["PartnerHistory"]


class PartnerHistory(Callback):
    """Per-round partner graph, isolation rate and posterior means.

    Args:
        posterior: Also keep the ``[C, C]`` posterior-mean matrix each round (float32; for large
            federations this is ``4 C^2`` bytes per round).
        filename: File written in the run folder at the end (None: keep in memory only).
    """

    def __init__(self, posterior: bool = True, filename: str | None = "partner_history.pt") -> None:
        self.posterior = bool(posterior)
        self.filename = filename
        self.run_dir: Path | None = None
        self.rounds: list[int] = []
        self.edges: list[Tensor] = []
        self.isolation: list[float] = []
        self.means: list[Tensor] = []

    def setup_run_dir(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)

    def on_fit_start(self, federation: Any) -> None:
        if not hasattr(federation.algorithm, "last_partners"):
            raise ValueError(
                f"callbacks: PartnerHistory needs an algorithm that selects partners (e.g. ABPS); "
                f"{type(federation.algorithm).__name__} has none: remove the callback"
            )

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        partners: list[list[int]] = federation.algorithm.last_partners
        pairs = sorted({(min(i, j), max(i, j)) for i, ps in enumerate(partners) for j in ps})
        self.rounds.append(result.round)
        self.edges.append(torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2))
        self.isolation.append(sum(1 for p in partners if not p) / max(1, len(partners)))
        selector = getattr(federation.algorithm, "selector", None)
        if self.posterior and selector is not None and hasattr(selector, "posterior"):
            self.means.append(selector.posterior.mean().to(torch.float32).clone())

    def history(self) -> dict[str, Any]:
        """Everything recorded: ``rounds``, ``edges`` (list of ``[E_r, 2]``), ``isolation``, ``means``."""
        return {"rounds": self.rounds, "edges": self.edges, "isolation": self.isolation, "means": self.means}

    def on_fit_end(self, federation: Any, summary: dict[str, Any]) -> None:
        if self.run_dir is not None and self.filename and federation.fabric.is_global_zero:
            save_torch(self.run_dir / self.filename, self.history())

    def state_dict(self) -> dict[str, Any]:
        return self.history()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds, self.edges = list(state["rounds"]), list(state["edges"])
        self.isolation, self.means = list(state["isolation"]), list(state["means"])
