"""The ABPS paper's mortality MLP (Sec. 6.3): input -> 128 -> 64 -> 1, ReLU, dropout 0.2.

Trained with BCE on logits and Adam (lr 1e-3, weight decay 1e-5). :meth:`MortalityMLP.packed_forward`
runs ``k`` centers at once with batched matrix multiplies (``baddbmm``), which measured faster on
CPU than ``vmap`` over ``functional_call`` (PERFORMANCE_NOTES.md); dropout masks are drawn per center
from the engine's seeded generator, so centers get independent masks.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lightning_fed.models.base import CenterModule

__all__ = ["MortalityMLP"]


class MortalityMLP(CenterModule):
    """Two-hidden-layer MLP for binary mortality prediction.

    Args:
        in_features: Input width; ``None`` takes it from the data when the federation starts.
        hidden: Hidden widths (paper: 128, 64).
        dropout: Dropout probability after each hidden ReLU (paper: 0.2).
        lr: Adam learning rate (paper: 1e-3).
        weight_decay: Adam L2 weight decay (paper: 1e-5).
    """

    def __init__(
        self,
        in_features: int | None = None,
        hidden: Sequence[int] = (128, 64),
        dropout: float = 0.2,
        lr: float = 1e-3,
        weight_decay: float = 1e-5,
    ) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {dropout}")
        if lr <= 0:
            raise ValueError(f"model.lr must be > 0, got {lr}")
        if weight_decay < 0:
            raise ValueError(f"model.weight_decay must be >= 0, got {weight_decay}")
        if not hidden or any(int(h) < 1 for h in hidden):
            raise ValueError(f"model.hidden must be a non-empty list of positive widths, got {list(hidden)}")
        self.save_hyperparameters()
        self.hidden = tuple(int(h) for h in hidden)
        self.dropout = float(dropout)
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.layers = nn.ModuleList()
        self.in_features: int | None = None
        if in_features is not None:
            self.set_num_features(in_features)

    def set_num_features(self, num_features: int) -> None:
        """Build the layers for ``num_features`` inputs (error if built for another width)."""
        if self.in_features is not None:
            if self.in_features != num_features:
                raise ValueError(
                    f"model.in_features={self.in_features} but the data has {num_features} features: "
                    "remove model.in_features or set it to the data's width"
                )
            return
        if num_features < 1:
            raise ValueError(f"model.in_features must be >= 1, got {num_features}")
        self.in_features = int(num_features)
        widths = [self.in_features, *self.hidden, 1]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        """Parameters of the last ``layers`` Linear layers (1: output layer; 2: last two)."""
        if not 1 <= layers <= len(self.layers):
            raise ValueError(f"head layers must be in [1, {len(self.layers)}], got {layers}")
        first = len(self.layers) - layers
        return tuple(f"layers.{i}.{p}" for i in range(first, len(self.layers)) for p in ("weight", "bias"))

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[n]`` for inputs ``[n, F]``."""
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = nn.functional.dropout(torch.relu(x), self.dropout, self.training)
        return x.squeeze(-1)

    def packed_forward(
        self, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | None
    ) -> Tensor:
        """Logits ``[k, B]`` for ``k`` stacked parameter sets and inputs ``[k, B, F]``.

        Layer l computes ``h <- b_l + h W_l^T`` per center with one ``baddbmm``; when ``generator``
        is given, each hidden activation is multiplied by an independent Bernoulli(1 - p) mask / (1 - p).
        """
        h = x
        last = len(self.layers) - 1
        for i in range(len(self.layers)):
            w, b = params[f"layers.{i}.weight"], params[f"layers.{i}.bias"]
            h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            if i < last:
                h = torch.relu(h)
                if generator is not None and self.dropout > 0:
                    keep = torch.empty_like(h).bernoulli_(1.0 - self.dropout, generator=generator)
                    h = h * keep.mul_(1.0 / (1.0 - self.dropout))
        return h.squeeze(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam with the paper's learning rate and weight decay."""
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
