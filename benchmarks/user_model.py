"""A user's own LightningModule for ``benchmarks/engine.py``: the MortalityMLP's widths with LayerNorm.

A plain ``lightning.LightningModule`` (no lightning_fed base class), as a researcher would write
it: ``60 -> 128 -> 64 -> 1`` with LayerNorm after each hidden layer, ReLU, dropout 0.2, BCE in
``training_step`` and Adam (1e-3, L2 1e-5) in ``configure_optimizers``. The federation trains it
through the generic packed path (``training_step`` under ``torch.vmap(functional_call)``).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import Tensor, nn


class LayerNormMLP(L.LightningModule):
    """``in -> 128 -> 64 -> 1`` with LayerNorm, ReLU and dropout after each hidden layer."""

    def __init__(
        self, in_features: int = 60, hidden: tuple[int, ...] = (128, 64), dropout: float = 0.2
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.LayerNorm(h), nn.ReLU(), nn.Dropout(dropout)]
            width = h
        self.net = nn.Sequential(*layers, nn.Linear(width, 1))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        loss = nn.functional.binary_cross_entropy_with_logits(self(x), y)
        self.log("bce", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-3, weight_decay=1e-5)
