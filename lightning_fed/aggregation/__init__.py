"""Aggregation rules expressed as mixing matrices over stacked parameters, and the server optimizers.

Server optimizers (``algorithm.init_args.server_optimizer``): on the star
:class:`ServerAverage` (default), :class:`ServerMomentum` (FedAvgM) and the FedOpt rules
:class:`FedAdam`, :class:`FedYogi`, :class:`FedAdagrad` (Reddi et al. 2021), on a class of
:class:`ServerOptimizer`; for ABPS, with every center as its own server, :class:`CenterServerAverage`
(default) and :class:`CenterServerMomentum`, on :class:`CenterServerOptimizer`.

Aggregators (``algorithm.init_args.aggregator``, :mod:`~lightning_fed.aggregation.robust`): how the
FedAvg server or a receiving peer (ABPS, DeceFL, DFedAvgM) combines the models it accepted:
:class:`WeightedMean` (default), :class:`CoordinateMedian`, :class:`TrimmedMean`, :class:`Krum`,
:class:`CenteredClipping`, on :class:`Aggregator`.
"""

from lightning_fed.aggregation.center_optimizer import (
    CenterServerAverage,
    CenterServerMomentum,
    CenterServerOptimizer,
)
from lightning_fed.aggregation.fedopt import FedAdagrad, FedAdam, FedYogi
from lightning_fed.aggregation.mixing import mix, mix_received, renormalize, sample_weights, weighted_average
from lightning_fed.aggregation.robust import (
    Aggregator,
    CenteredClipping,
    CoordinateMedian,
    Krum,
    TrimmedMean,
    WeightedMean,
)
from lightning_fed.aggregation.server_optimizer import (
    PseudoGradientStep,
    ServerAverage,
    ServerMomentum,
    ServerOptimizer,
)

__all__ = [
    "Aggregator",
    "CenterServerAverage",
    "CenterServerMomentum",
    "CenterServerOptimizer",
    "CenteredClipping",
    "CoordinateMedian",
    "FedAdagrad",
    "FedAdam",
    "FedYogi",
    "Krum",
    "PseudoGradientStep",
    "ServerAverage",
    "ServerMomentum",
    "ServerOptimizer",
    "TrimmedMean",
    "WeightedMean",
    "mix",
    "mix_received",
    "renormalize",
    "sample_weights",
    "weighted_average",
]
