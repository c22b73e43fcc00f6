"""Aggregation rules expressed as mixing matrices over stacked parameters, and the server optimizers.

Server optimizers (``algorithm.init_args.server_optimizer``): on the star
:class:`ServerAverage` (default), :class:`ServerMomentum` (FedAvgM) and the FedOpt rules
:class:`FedAdam`, :class:`FedYogi`, :class:`FedAdagrad` (Reddi et al. 2021), on a class of
:class:`ServerOptimizer`; for ABPS, with every center as its own server, :class:`CenterServerAverage`
(default) and :class:`CenterServerMomentum`, on :class:`CenterServerOptimizer`.
"""

from lightning_fed.aggregation.center_optimizer import (
    CenterServerAverage,
    CenterServerMomentum,
    CenterServerOptimizer,
)
from lightning_fed.aggregation.fedopt import FedAdagrad, FedAdam, FedYogi
from lightning_fed.aggregation.mixing import mix, mix_received, renormalize, sample_weights, weighted_average
from lightning_fed.aggregation.server_optimizer import (
    PseudoGradientStep,
    ServerAverage,
    ServerMomentum,
    ServerOptimizer,
)

__all__ = [
    "CenterServerAverage",
    "CenterServerMomentum",
    "CenterServerOptimizer",
    "FedAdagrad",
    "FedAdam",
    "FedYogi",
    "PseudoGradientStep",
    "ServerAverage",
    "ServerMomentum",
    "ServerOptimizer",
    "mix",
    "mix_received",
    "renormalize",
    "sample_weights",
    "weighted_average",
]
