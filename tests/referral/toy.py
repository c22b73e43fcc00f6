"""Stand-ins for the referral tests: a tiny encoder + linear head model and small federations."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightning_fed.data.center import CenterData, FederatedData
from lightning_fed.models.base import CenterModule


class ToyModule(CenterModule):
    """``encode(x) = P x`` (projection, no bias), ``forward = head(encode(x))``, cross-entropy loss."""

    def __init__(self, num_features: int = 2, dim: int = 2, num_classes: int = 2) -> None:
        super().__init__()
        self.proj = nn.Linear(num_features, dim, bias=False)
        self.head = nn.Linear(dim, num_classes)
        #: Encoder calls (the referral tests count them).
        self.encode_calls = 0

    def encode(self, x: Tensor) -> Tensor:
        self.encode_calls += 1
        return self.proj(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.encode(x))

    def loss_rows(self, logits: Tensor, y: Tensor) -> Tensor:
        flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1).long(), reduction="none")
        return flat.reshape(y.shape)

    def set_num_features(self, num_features: int) -> None:
        if num_features != self.proj.in_features:
            raise ValueError("ToyModule: wrong input width")

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        return ("head.weight", "head.bias")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def identity_params(module: ToyModule, num_clients: int, head_scale: float = 0.0) -> dict[str, Tensor]:
    """Stacked params with an identity encoder for every client and a given head (all equal)."""
    d = module.proj.out_features
    params = {
        "proj.weight": torch.eye(d).expand(num_clients, d, d).clone(),
        "head.weight": head_scale * torch.ones(num_clients, *module.head.weight.shape),
        "head.bias": torch.zeros(num_clients, *module.head.bias.shape),
    }
    return params


def make_data(
    xs: list[Tensor], ys: list[Tensor], test: list[tuple[Tensor, Tensor]] | None = None
) -> FederatedData:
    """A federation whose train splits are ``(xs[u], ys[u])`` (test = train unless given)."""
    centers = []
    for u, (x, y) in enumerate(zip(xs, ys, strict=True)):
        xt, yt = test[u] if test is not None else (x, y)
        centers.append(
            CenterData(
                name=f"c{u}",
                x_train=x.float(),
                y_train=y.float(),
                x_val=xt.float(),
                y_val=yt.float(),
                x_test=xt.float(),
                y_test=yt.float(),
                metadata=torch.zeros(3, dtype=torch.float64),
            )
        )
    names = tuple(f"f{k}" for k in range(xs[0].shape[1]))
    return FederatedData(tuple(centers), names)
