"""FedBN (Li, Jiang, Zhang, Kamp and Dou, ICLR 2021): normalization layers stay at every center.

FedAvg (:class:`~lightning_fed.algorithms.fedavg.FedAvg`) over every parameter except those of the
normalization layers: each center keeps its own affine parameters (scale ``gamma``, shift
``beta``) of every ``BatchNorm`` / ``InstanceNorm`` / ``GroupNorm`` / ``LayerNorm`` / ``RMSNorm``
layer, never uploads them and never receives an average of them (Algorithm 1 of the paper: the
server averages all layers but the BN layers). Normalization *statistics* (BatchNorm's running
mean and variance) are buffers, and lightning-fed exchanges parameters only, so they stay local
under every method; FedBN's change is that the affine parameters stay local too.

Which built-in models have normalization layers: :class:`~lightning_fed.models.SmallCNN` (a
GroupNorm after each of its three convolutions and a LayerNorm in the projection) and
:class:`~lightning_fed.models.ResNet18GN` (GroupNorm throughout, LayerNorm in the projection);
none has BatchNorm (EdgeDRM's models replace it by GroupNorm). The tabular
:class:`~lightning_fed.models.MortalityMLP` has none, so FedBN on it would be FedAvg: it is refused
with a one-line error. A user module with BatchNorm works through the sequential engine (the packed
engine's ``vmap`` cannot update BatchNorm's running statistics in place, a limit of any BatchNorm
model there); its parameters are found by the layer's class, not by its name.

The bytes per round are FedAvg's less the normalization parameters (``2 |W_shared|`` per center).
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_fed.aggregation.robust import Aggregator
from lightning_fed.aggregation.server_optimizer import ServerOptimizer
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.models.base import CenterModule

__all__ = ["NORM_LAYERS", "FedBN", "norm_parameter_names"]

#: The layer classes whose parameters FedBN keeps local (BatchNorm*d and InstanceNorm*d derive from
#: ``_NormBase``).
NORM_LAYERS: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._NormBase,
    nn.GroupNorm,
    nn.LayerNorm,
    *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()),
)


def norm_parameter_names(module: torch.nn.Module) -> tuple[str, ...]:
    """Names (as in ``module.named_parameters()``) of every parameter of a normalization layer."""
    names = []
    for prefix, layer in module.named_modules():
        if isinstance(layer, NORM_LAYERS):
            names += [f"{prefix}.{n}" if prefix else n for n, _ in layer.named_parameters(recurse=False)]
    return tuple(names)


class FedBN(FedAvg):
    """FedAvg whose normalization layers' parameters stay local (see the module docstring).

    Args:
        personal_layers: Head layers kept local as well (0: only the normalization layers).
        server_optimizer: The server's step on the shared parameters (as :class:`FedAvg`).
        aggregator: How the server combines the shared parameters (as :class:`FedAvg`; default the
            weighted mean).

    Raises:
        ValueError: At setup, if the model has no normalization layer with parameters.
    """

    def __init__(
        self,
        personal_layers: int = 0,
        server_optimizer: ServerOptimizer | None = None,
        aggregator: Aggregator | None = None,
    ) -> None:
        super().__init__(personal_layers, server_optimizer=server_optimizer, aggregator=aggregator)

    def local_names(self, module: CenterModule) -> tuple[str, ...]:
        names = norm_parameter_names(module)
        if not names:
            raise ValueError(
                f"algorithm FedBN: model {type(module).__name__} has no normalization layer with parameters "
                "(BatchNorm, GroupNorm, LayerNorm, ...), so FedBN would be FedAvg; use FedAvg or a model "
                "with normalization layers (SmallCNN, ResNet18GN)"
            )
        return names
