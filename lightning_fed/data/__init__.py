"""Data sources, partitioners and per-center data."""

from lightning_fed.data.base import DataSource
from lightning_fed.data.center import CenterData, FederatedData, PooledTable, build_federation
from lightning_fed.data.partition import IID, Dirichlet, Natural, Partitioner
from lightning_fed.data.synthetic import SyntheticICU

__all__ = [
    "IID",
    "CenterData",
    "DataSource",
    "Dirichlet",
    "FederatedData",
    "Natural",
    "Partitioner",
    "PooledTable",
    "SyntheticICU",
    "build_federation",
]
