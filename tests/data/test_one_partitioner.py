"""One partitioner protocol for tables and images, one builder, and the old names as aliases."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from lightning_fed.data import (
    IID,
    BalancedSizes,
    CenterData,
    Digits,
    Dirichlet,
    DirichletLabels,
    LabelPool,
    Natural,
    Partitioner,
    Shards,
)
from lightning_fed.data import images_partition as old
from lightning_fed.data.center import federate
from tests.data.test_partition import _table


def _digest(groups: list[tuple[str, np.ndarray]], names: bool = True) -> str:
    m = hashlib.sha256()
    for name, rows in groups:
        rows = np.asarray(rows, dtype=np.int64)
        if names:
            m.update(name.encode())
        m.update(np.int64(len(rows)).tobytes())
        m.update(rows.tobytes())
    return m.hexdigest()[:16]


LABELS = np.random.default_rng(7).integers(0, 10, 3000)


@pytest.mark.parametrize(
    ("partition", "centers", "seed", "digest"),
    [
        (Shards(5), 8, 2025, "884328491a541c47"),
        (Shards(), 32, 2026, "fa35299d5bd5b6d4"),
        (DirichletLabels(0.3), 8, 2025, "ea879efb4f5eaaf0"),
        (BalancedSizes([100] * 4 + [400] * 2), 6, 2027, "5f8e6ffde1b4734e"),
    ],
)
def test_image_partitions_are_those_of_earlier_releases(
    partition: Partitioner, centers: int, seed: int, digest: str
) -> None:
    """Digests of the groups the image partitions of the starting commit dealt (names aside)."""
    assert _digest(partition.assign(LabelPool(LABELS, 10, centers), seed), names=False) == digest


@pytest.mark.parametrize(
    ("partition", "seed", "digest"),
    [
        (Dirichlet(6, alpha=0.5), 3, "5ea10791cdb71966"),
        (IID(7), 1, "a2877a5cb38e2fa8"),
        (Natural(), 0, "39761f4fa4a70169"),
    ],
)
def test_table_partitions_are_those_of_earlier_releases(
    partition: Partitioner, seed: int, digest: str
) -> None:
    assert _digest(partition.assign(_table(), seed)) == digest


def test_dirichlet_labels_is_the_dirichlet_loop_on_its_own_stream() -> None:
    pool = LabelPool(LABELS, 10, 8)
    labels = DirichletLabels(alpha=0.3, min_size=10).assign(pool, 5)
    same = Dirichlet(alpha=0.3, min_size=10)
    same.stream = DirichletLabels.stream
    assert [r.tolist() for _, r in labels] == [r.tolist() for _, r in same.assign(pool, 5)]
    assert isinstance(labels[0][1], np.ndarray) and labels[0][0] == "dirichlet-000"


def test_every_partitioner_works_on_tables_and_images() -> None:
    table = _table(n=1200)
    for partition in (Shards(per_client=2, num_centers=4), IID(4), Dirichlet(4, min_size=5)):
        groups = partition.assign(table, 0)
        rows = np.concatenate([r for _, r in groups])
        assert len(groups) == 4 and len(np.unique(rows)) == len(rows)
    digits = Digits(num_clients=4, partition=IID(), transforms=False).build(0)
    assert [c.name for c in digits.centers] == [f"client-{k}" for k in range(4)]
    assert sum(c.n_train + len(c.y_val) + len(c.y_test) for c in digits.centers) == 1797


def test_center_count_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="num_centers=3 but the data source asks for 4"):
        IID(3).assign(LabelPool(LABELS, 10, 4), 0)
    with pytest.raises(ValueError, match="set num_centers"):
        Shards(5).assign(_table(), 0)
    with pytest.raises(ValueError, match="no natural centers"):
        Natural().assign(LabelPool(LABELS, 10, 4), 0)
    with pytest.raises(ValueError, match=r"data\.num_clients=4"):
        BalancedSizes([10, 10]).assign(LabelPool(LABELS, 10, 4), 0)


def test_old_module_names_are_aliases() -> None:
    assert (old.Shards, old.DirichletLabels, old.BalancedSizes) == (Shards, DirichletLabels, BalancedSizes)
    assert old.LabelPartition is Partitioner
    assert repr(DirichletLabels()) == "DirichletLabels(alpha=0.3, min_size=10)"


def _center(k: int, name: str, rows: np.ndarray) -> CenterData:
    x = torch.tensor(rows, dtype=torch.float32)[:, None]
    y = torch.zeros(len(rows))
    return CenterData(f"{name}/{k}", x, y, x, y, x, y, torch.zeros(1, dtype=torch.float64))


def test_federate_builds_the_centers_in_order_with_their_group_index() -> None:
    fed = federate(
        [(0, "a", np.arange(3)), (2, "c", np.arange(3, 5))], _center, feature_names=["f"], dropped=["b"]
    )
    assert [c.name for c in fed.centers] == ["a/0", "c/2"] and fed.dropped_centers == ("b",)
    assert fed.feature_names == ("f",) and fed.num_classes == 2 and fed.centers[1].n_train == 2
