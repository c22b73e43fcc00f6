"""The clients' trained models as referral experts: one encoder pass gives ``z`` and the logits.

A router needs, at every hop, client ``c``'s representation of the queries now at ``c`` (for the
incident scores) and ``c``'s prediction (for the prediction rules). :class:`Experts` runs the model
template's ``encode`` with client ``c``'s stacked parameters (``torch.func.functional_call``) and
applies ``c``'s linear head to the same ``z``, so both come from one encoder pass.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["Experts"]


class _Encode(nn.Module):
    """Lets ``functional_call`` run the template's ``encode`` with one client's parameters."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: Tensor) -> Tensor:
        return self.module.encode(x)


class Experts:
    """The clients' trained models: ``experts(c, x) -> (z, logits)`` with one encoder pass.

    The model contract: ``encode(x) -> z [n, d]`` and a linear head ``head.weight [K, d]``,
    ``head.bias [K]`` with ``forward(x) = head(encode(x))``; the logits are computed from ``z``.

    Args:
        module: The model template.
        params: Stacked per-client parameters ``{name: [C, ...]}``.
        batch_size: Rows per encoder call.
        device: Where to compute (default: the parameters' device).
    """

    def __init__(
        self,
        module: nn.Module,
        params: dict[str, Tensor],
        batch_size: int = 1024,
        device: torch.device | None = None,
    ) -> None:
        if "head.weight" not in params or "head.bias" not in params:
            raise ValueError("referral needs a linear head named head.weight / head.bias in the model params")
        if batch_size < 1:
            raise ValueError(f"refer batch_size must be >= 1, got {batch_size}")
        self.device = device if device is not None else params["head.weight"].device
        self.params = {n: p.to(self.device) for n, p in params.items()}
        self.wrapper = _Encode(module).to(self.device)
        self.batch_size = int(batch_size)

    @property
    def num_clients(self) -> int:
        return int(self.params["head.weight"].shape[0])

    @torch.no_grad()
    def encode(self, client: int, x: Tensor) -> Tensor:
        """Client ``client``'s representations ``[n, d]`` of ``x``."""
        own = {f"module.{n}": p[client] for n, p in self.params.items()}
        was_training = self.wrapper.module.training
        self.wrapper.eval()  # frozen inference (dropout off); the template's mode is restored below
        try:
            chunks = [
                torch.func.functional_call(self.wrapper, own, (x[i : i + self.batch_size].to(self.device),))
                for i in range(0, x.shape[0], self.batch_size)
            ]
        finally:
            self.wrapper.train(was_training)
        return torch.cat(chunks) if chunks else x.new_zeros(0, self.params["head.weight"].shape[2])

    @torch.no_grad()
    def __call__(self, client: int, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encode(client, x)
        w, b = self.params["head.weight"][client], self.params["head.bias"][client]
        return z, F.linear(z.to(w.dtype), w, b)
