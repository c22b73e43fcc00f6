"""Aliases kept for one release: the image partitions moved to :mod:`lightning_fed.data.partition`.

``lightning_fed.data.images_partition.Shards`` / ``DirichletLabels`` / ``BalancedSizes`` /
``label_shards`` are :mod:`lightning_fed.data.partition`'s (one partitioner protocol for tables and
images, ``assign(pool, seed) -> [(name, rows), ...]``); ``subsample`` and ``client_split`` are
:mod:`lightning_fed.data.center`'s. ``LabelPartition`` names the one protocol,
:class:`~lightning_fed.data.partition.Partitioner`. Configs that name
``lightning_fed.data.images_partition.<Class>`` keep working; new code imports from
``lightning_fed.data``.
"""

from lightning_fed.data.center import client_split, subsample
from lightning_fed.data.partition import BalancedSizes, DirichletLabels, Shards, label_shards
from lightning_fed.data.partition import Partitioner as LabelPartition

__all__ = [
    "BalancedSizes",
    "DirichletLabels",
    "LabelPartition",
    "Shards",
    "client_split",
    "label_shards",
    "subsample",
]
