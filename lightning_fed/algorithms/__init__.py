"""Federated methods: one small class per method."""

from lightning_fed.algorithms.abps import ABPS
from lightning_fed.algorithms.base import Algorithm
from lightning_fed.algorithms.centralized import Centralized
from lightning_fed.algorithms.fedavg import FedAvg
from lightning_fed.algorithms.local import LocalOnly

__all__ = ["ABPS", "Algorithm", "Centralized", "FedAvg", "LocalOnly"]
