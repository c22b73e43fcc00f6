"""Data sources, partitioners and per-center data.

Every partitioner lives in :mod:`lightning_fed.data.partition` (one protocol for tables and images);
``lightning_fed.data.images_partition`` and its names stay as aliases for one release.
"""

from lightning_fed.data.augment import Augment, RandomResizedCrop
from lightning_fed.data.base import DataSource
from lightning_fed.data.center import CenterData, FederatedData, PooledTable, build_federation
from lightning_fed.data.charlson import charlson_flags
from lightning_fed.data.eicu import EICU
from lightning_fed.data.fedprox_synthetic import FedProxSynthetic
from lightning_fed.data.images import CIFAR, Digits, FashionMNIST, ImageSource
from lightning_fed.data.images_isic import ISIC2019
from lightning_fed.data.mimic import MimicIV
from lightning_fed.data.partition import (
    IID,
    BalancedSizes,
    Dirichlet,
    DirichletLabels,
    LabelPool,
    Natural,
    Partitioner,
    Shards,
)
from lightning_fed.data.synthetic import SyntheticICU, TeacherICU
from lightning_fed.data.tabular import Tabular

__all__ = [
    "CIFAR",
    "EICU",
    "IID",
    "ISIC2019",
    "Augment",
    "BalancedSizes",
    "CenterData",
    "DataSource",
    "Digits",
    "Dirichlet",
    "DirichletLabels",
    "FashionMNIST",
    "FedProxSynthetic",
    "FederatedData",
    "ImageSource",
    "LabelPool",
    "MimicIV",
    "Natural",
    "Partitioner",
    "PooledTable",
    "RandomResizedCrop",
    "Shards",
    "SyntheticICU",
    "Tabular",
    "TeacherICU",
    "build_federation",
    "charlson_flags",
]
