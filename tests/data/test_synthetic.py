"""The built-in synthetic ICU federation: schema, sizes, rates, splits, determinism, usefulness."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from lightning_fed.data.center import stratified_split
from lightning_fed.data.partition import IID, Dirichlet, Natural
from lightning_fed.data.synthetic import (
    CARE_UNITS,
    CHARLSON_COLUMNS,
    FEATURE_NAMES,
    UNIT_BASE_RATES,
    WINDOW_STARTS,
    SyntheticICU,
)
from lightning_fed.seeding import numpy_rng

SMALL = {"num_centers": 24, "num_stays": 4000}
VITALS = ("heart_rate", "sbp", "dbp", "mbp", "resp_rate", "spo2", "temperature")
ONE_HOT_GROUPS = {"gender": 2, "race": 6, "admission_type": 6, "admission_location": 7, "insurance": 5}


@pytest.fixture(scope="module")
def default_table():
    return SyntheticICU().table(0)


@pytest.fixture(scope="module")
def default_federation():
    return SyntheticICU().build(0)


@pytest.fixture(scope="module")
def small_table():
    return SyntheticICU(**SMALL).table(0)


def _col(table, name: str) -> np.ndarray:
    return table.x[:, table.feature_names.index(name)]


# ----------------------------------------------------------------------------- schema


def test_schema_names_and_continuous_mask(small_table) -> None:
    t = small_table
    assert t.feature_names == FEATURE_NAMES
    assert len(t.feature_names) == 60 and len(set(t.feature_names)) == 60
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", n) for n in t.feature_names)
    for name in ("age", "gender_F", "gender_M", "race_WHITE", "race_UNKNOWN", "admission_type_EW_EMER"):
        assert name in t.feature_names
    for name in ("admission_type_SURGICAL_SAME_DAY_ADMISSION", "admission_location_WALK_IN_SELF_REFERRAL"):
        assert name in t.feature_names
    assert "insurance_No_charge" in t.feature_names
    expected_continuous = {"age"} | {f"{v}_{s}" for v in VITALS for s in ("mean", "min", "max")}
    assert {n for n, c in zip(t.feature_names, t.continuous, strict=True) if c} == expected_continuous
    assert t.continuous.sum() == 22
    assert t.charlson_columns == CHARLSON_COLUMNS and len(CHARLSON_COLUMNS) == 12
    assert all(c.startswith("charlson_") for c in CHARLSON_COLUMNS)


def test_schema_raw_units_are_plausible(small_table) -> None:
    t = small_table
    age = _col(t, "age")
    assert age.min() >= 18 and age.max() <= 95 and 50 < age.mean() < 75
    for vital in VITALS:
        lo, mid, hi = (_col(t, f"{vital}_{s}") for s in ("min", "mean", "max"))
        assert np.all(lo <= mid) and np.all(mid <= hi), vital
    assert _col(t, "spo2_max").max() <= 100 and _col(t, "spo2_min").min() > 40
    assert 80 < _col(t, "heart_rate_mean").mean() < 95
    assert 105 < _col(t, "sbp_mean").mean() < 135
    assert 55 < _col(t, "dbp_mean").mean() < 70
    assert 70 < _col(t, "mbp_mean").mean() < 90
    assert 15 < _col(t, "resp_rate_mean").mean() < 25
    assert 95 < _col(t, "spo2_mean").mean() <= 100
    assert 36.0 < _col(t, "temperature_mean").mean() < 38.0
    assert _col(t, "temperature_min").min() >= 32 and _col(t, "temperature_max").max() <= 42


def test_one_hot_groups_and_flags(small_table) -> None:
    t = small_table
    for group, k in ONE_HOT_GROUPS.items():
        cols = [j for j, n in enumerate(t.feature_names) if n.startswith(group + "_")]
        assert len(cols) == k, group
        block = t.x[:, cols]
        assert np.isin(block, (0.0, 1.0)).all()
        assert np.array_equal(block.sum(axis=1), np.ones(len(block))), group
        assert (block.mean(axis=0) > 0).all(), f"every {group} category occurs"
    flags = t.x[:, [t.feature_names.index(c) for c in CHARLSON_COLUMNS]]
    assert np.isin(flags, (0.0, 1.0)).all()
    assert (flags.mean(axis=0) > 0.005).all() and (flags.mean(axis=0) < 0.6).all()
    assert np.isin(t.y, (0, 1)).all()


def test_sites_attributes_and_years(small_table) -> None:
    t = small_table
    sites = sorted(set(t.site.tolist()))
    assert len(sites) == 24 and set(t.attributes) == set(sites)
    for site in sites:
        attrs = t.attributes[site]
        unit, start = attrs["care_unit"], attrs["window_start"]
        assert unit in CARE_UNITS and start in WINDOW_STARTS
        assert site == f"{unit} {start}-{start + 1}"
        assert 0 < attrs["base_rate"] < 0.5
        years = t.year[t.site == site]
        assert years.min() >= start and years.max() <= start + 1
    per_unit = [sum(t.attributes[s]["care_unit"] == u for s in sites) for u in CARE_UNITS]
    assert per_unit == [4] * 6


# ----------------------------------------------------------------------------- default federation


def test_default_sizes_and_unit_mortality(default_table) -> None:
    t = default_table
    sites, counts = np.unique(t.site, return_counts=True)
    assert len(sites) == 230
    assert abs(len(t.y) - 71000) <= 0.02 * 71000
    assert counts.min() >= 30
    assert counts.max() / np.median(counts) > 5, "heavy-tailed center sizes"
    assert (counts <= 200).sum() >= 100 and 1 <= (counts >= 1000).sum() <= 40
    units = np.array([t.attributes[s]["care_unit"] for s in t.site])
    for unit, rate in UNIT_BASE_RATES.items():
        assert abs(t.y[units == unit].mean() - rate) < 0.015, unit
    assert t.year.min() >= 2110 and t.year.max() <= 2191


def test_default_build_splits_standardization_and_metadata(default_table, default_federation) -> None:
    t, fed = default_table, default_federation
    assert fed.num_centers == 230 and fed.num_features == 60
    cont = torch.from_numpy(t.continuous)
    groups = Natural().assign(t, 0)
    charlson_idx = [t.feature_names.index(c) for c in t.charlson_columns]
    for k, ((name, rows), center) in enumerate(zip(groups, fed.centers, strict=True)):
        assert center.name == name and center.attributes == dict(t.attributes[name])
        n = len(rows)
        n_tr, n_va, n_te = len(center.y_train), len(center.y_val), len(center.y_test)
        assert n_tr + n_va + n_te == n
        assert abs(n_tr - 0.8 * n) <= 2 and abs(n_va - 0.1 * n) <= 2 and abs(n_te - 0.1 * n) <= 2
        # stratified: each split's positives follow the rounded class cuts
        pos = int(t.y[rows].sum())
        assert abs(center.y_train.sum().item() - 0.8 * pos) <= 1
        # continuous train columns standardized on this center's train split
        x_tr = center.x_train[:, cont].double()
        std = x_tr.std(dim=0, unbiased=False)
        assert torch.allclose(x_tr.mean(dim=0), torch.zeros_like(std), atol=1e-5)
        assert torch.all(((std - 1).abs() < 1e-4) | (std < 1e-6)), "unit std (or a constant column)"
        # metadata = [pos rate, log n_train, mean year / 2030, 12 Charlson prevalences] of train
        tr = rows[stratified_split(t.y[rows], (0.8, 0.1, 0.1), numpy_rng(0, "split", k))[0]]
        expected = np.concatenate(
            [
                [t.y[tr].mean(), math.log(len(tr)), t.year[tr].mean() / 2030.0],
                t.x[tr][:, charlson_idx].mean(axis=0),
            ]
        )
        assert center.metadata.dtype == torch.float64 and center.metadata.shape == (15,)
        np.testing.assert_allclose(center.metadata.numpy(), expected, rtol=0, atol=1e-12)
    # most centers can evaluate AUROC on their test split
    both = sum(int(0 < c.y_test.sum() < len(c.y_test)) for c in fed.centers)
    assert both >= 0.75 * fed.num_centers


def test_default_build_is_fast() -> None:
    import time

    gen = SyntheticICU()
    start = time.perf_counter()
    gen.build(1)
    assert time.perf_counter() - start < 3.0


# ----------------------------------------------------------------------------- determinism


def _same(a, b) -> bool:
    if a.num_centers != b.num_centers:
        return False
    fields = ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test", "metadata")
    return all(
        ca.name == cb.name and all(torch.equal(getattr(ca, f), getattr(cb, f)) for f in fields)
        for ca, cb in zip(a.centers, b.centers, strict=True)
    )


def test_same_seed_identical_other_seed_different() -> None:
    a = SyntheticICU(**SMALL).build(7)
    b = SyntheticICU(**SMALL).build(7)
    c = SyntheticICU(**SMALL).build(8)
    assert _same(a, b)
    assert not _same(a, c)


def test_seed_attribute_overrides_run_seed() -> None:
    fixed = SyntheticICU(**SMALL, seed=5)
    assert _same(fixed.build(0), fixed.build(123))
    assert _same(fixed.build(0), SyntheticICU(**SMALL).build(5))
    assert np.array_equal(fixed.table(1).x, SyntheticICU(**SMALL).table(5).x)


def test_partitioner_is_used() -> None:
    fed = SyntheticICU(**SMALL, partitioner=IID(5)).build(0)
    assert [c.name for c in fed.centers] == [f"iid-{k:03d}" for k in range(5)]
    assert sum(len(c.y_train) + len(c.y_val) + len(c.y_test) for c in fed.centers) == SMALL["num_stays"]
    fed = SyntheticICU(**SMALL, partitioner=Dirichlet(6, alpha=1.0)).build(0)
    assert fed.num_centers == 6


@pytest.mark.parametrize("num_centers", [1, 5, 7, 246])
def test_any_number_of_centers(num_centers: int) -> None:
    t = SyntheticICU(num_centers=num_centers, num_stays=num_centers * 50).table(0)
    assert len(set(t.site.tolist())) == num_centers
    assert len(t.y) == num_centers * 50


# ----------------------------------------------------------------------------- collaboration
# That collaboration helps is checked with the real engines (Centralized > FedAvg > Local-only)
# in tests/test_federation.py::test_collaboration_helps_on_synthetic_icu.


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"num_centers": 0}, "num_centers"),
        ({"num_centers": 247, "num_stays": 9000}, "num_stays"),  # beyond 246: sub-centers, enough stays
        ({"num_centers": 2.0}, "num_centers"),
        ({"num_stays": 100}, "num_stays"),
        ({"alpha": -0.1}, "alpha"),
        ({"beta": float("inf")}, "beta"),
        ({"drift": -1}, "drift"),
        ({"size_tail": 0}, "size_tail"),
        ({"signal": 0}, "signal"),
        ({"nonlinearity": -1.0}, "nonlinearity"),
        ({"feature_shift": -0.5}, "feature_shift"),
        ({"concept_shift": -0.5}, "concept_shift"),
        ({"unit_nonlinearity": -0.5}, "unit_nonlinearity"),
        ({"min_stays": 5}, "min_stays"),
        ({"partitioner": "natural"}, "partitioner"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs: dict, arg: str) -> None:
    with pytest.raises(ValueError, match=arg):
        SyntheticICU(**kwargs)
