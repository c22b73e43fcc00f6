"""Small models and contexts shared by the algorithm tests whose updates are written by hand."""

from __future__ import annotations

import torch
from torch import nn

from lightning_fed.models import CenterModule
from lightning_fed.types import RoundContext


class LogReg(CenterModule):
    """``logit = x w + b`` trained by plain SGD (so one step is easy to write by hand)."""

    def __init__(self, in_features: int = 1, lr: float = 0.5) -> None:
        super().__init__()
        self.lr = lr
        self.linear = nn.Linear(in_features, 1)

    def set_num_features(self, num_features: int) -> None:
        assert num_features == self.linear.in_features

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        return ("linear.weight", "linear.bias")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def round_ctx(r: int = 0) -> RoundContext:
    """A round context whose validation utility is 0.5 for every center (utilities unused)."""
    return RoundContext(round=r, seed=0, val_utility=lambda p, c: torch.full((len(c),), 0.5))
