"""Federated methods: one small class per method."""

from lightning_fed.algorithms.abps import ABPS
from lightning_fed.algorithms.base import Algorithm
from lightning_fed.algorithms.bnn_fl import AverageVariance, BNNFedAvg, MixtureMoments, VarianceRule
from lightning_fed.algorithms.centralized import Centralized
from lightning_fed.algorithms.decefl import DeceFL
from lightning_fed.algorithms.defta import DeFTA
from lightning_fed.algorithms.dfedavgm import DFedAvgM
from lightning_fed.algorithms.edgedrm import EdgeDRM
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.algorithms.local import LocalOnly
from lightning_fed.algorithms.wpfed import WPFed

__all__ = ["ABPS", "Algorithm", "Centralized", "FedAvg", "LocalOnly"]
__all__ += ["DeFTA", "DeceFL", "WPFed"]
__all__ += ["DFedAvgM", "EdgeDRM"]

from lightning_fed.algorithms.feddyn import FedDyn  # noqa: E402
from lightning_fed.algorithms.fedprox import FedProx  # noqa: E402
from lightning_fed.algorithms.moon import MOON  # noqa: E402

__all__ += ["MOON", "FedDyn", "FedProx"]
__all__ += ["AverageVariance", "BNNFedAvg", "MixtureMoments", "VarianceRule"]

from lightning_fed.algorithms.fedspd import FedSPD  # noqa: E402

__all__ += ["FedSPD"]

from lightning_fed.algorithms.dispfl import DisPFL  # noqa: E402
from lightning_fed.algorithms.masks import ERK, LayerDensity, Uniform  # noqa: E402

__all__ += ["ERK", "DisPFL", "LayerDensity", "Uniform"]

from lightning_fed.algorithms.feddrm import FedDRM  # noqa: E402

__all__ += ["FedDRM"]

from lightning_fed.algorithms.scaffold import SCAFFOLD  # noqa: E402

__all__ += ["SCAFFOLD"]

from lightning_fed.algorithms.ditto import Ditto  # noqa: E402

__all__ += ["Ditto"]

from lightning_fed.algorithms.apfl import APFL  # noqa: E402

__all__ += ["APFL"]

from lightning_fed.algorithms.fedbn import FedBN  # noqa: E402

__all__ += ["FedBN"]

from lightning_fed.algorithms.fedrep import FedRep  # noqa: E402

__all__ += ["FedRep"]
