"""The eICU-CRD loader on the open demo (skipped when ../shared/data is absent)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from lightning_fed.data.charlson import CHARLSON_COLUMNS
from lightning_fed.data.eicu import EICU, REQUIRED_FILES, icd_version_of

ROOT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "eicu-crd-demo-2.0.1"
needs_data = pytest.mark.skipif(
    not (ROOT / "patient.csv.gz").is_file(),
    reason=f"eICU demo not found at {ROOT} (shared data folder absent)",
)


@pytest.fixture(scope="module")
def source() -> EICU:
    return EICU(str(ROOT))


@pytest.fixture(scope="module")
def table(source):
    return source.table()


def test_icd_version_by_shape():
    codes = pl.Series(["428.0", "I50.9", "V45.81", "E849.0", "E11.9", "", None, "038.9"])
    out = pl.select(icd_version_of(pl.lit(codes))).to_series().to_list()
    assert out == [9, 10, 9, 9, 10, None, None, 9]


def test_arguments_checked():
    with pytest.raises(ValueError, match="center"):
        EICU("x", center="ward")
    with pytest.raises(ValueError, match="min_center_size"):
        EICU("x", min_center_size=-1)


def test_wrong_root_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        EICU(str(tmp_path / "nowhere")).build(0)
    (tmp_path / "patient.csv.gz").write_bytes(b"")
    with pytest.raises(
        FileNotFoundError, match=r"diagnosis\.csv\.gz.*" + REQUIRED_FILES[0].replace(".", r"\.")
    ):
        EICU(str(tmp_path)).build(0)


@needs_data
def test_cohort_counts(table):
    assert len(table.y) == 2492
    assert int(table.y.sum()) == 212
    assert table.y.mean() == pytest.approx(0.085, abs=5e-4)
    assert len(np.unique(table.site)) == 186
    assert set(np.unique(table.year)) == {2014.0, 2015.0}
    age = table.x[:, table.feature_names.index("age")]
    assert np.nanmax(age) == 90.0
    assert table.charlson_columns == CHARLSON_COLUMNS


@needs_data
def test_charlson_hand_checked(source):
    flags = source.charlson()
    rows = {
        r["patientunitstayid"]: r
        for r in flags.filter(pl.col("patientunitstayid").is_in([346380, 3115660])).to_dicts()
    }

    def on(stay: int) -> set[str]:
        return {c for c in CHARLSON_COLUMNS if rows[stay][c]}

    # 346380: diagnosis "491.20, J44.9" (COPD); past history COPD moderate + prostate cancer
    assert on(346380) == {"charlson_copd", "charlson_malignancy"}
    # 3115660: "410.90, I21.3" (MI), "428.0, I50.9" (CHF), "162.9, C34.90" (lung cancer); past history CHF, MI
    assert on(3115660) == {"charlson_mi", "charlson_chf", "charlson_malignancy"}


@needs_data
def test_build_default_min_size_and_determinism(source):
    fed = source.build(0)
    assert fed.num_centers == 11 and len(fed.dropped_centers) == 175
    assert all(c.name.startswith("hospital ") for c in fed.centers)
    assert sum(c.n_train + len(c.y_val) + len(c.y_test) for c in fed.centers) >= 11 * 20
    assert any(name.endswith("_missing") for name in fed.feature_names)
    for c in fed.centers:
        assert not torch.isnan(c.x_train).any() and not torch.isnan(c.x_test).any()
        assert c.metadata.shape == (15,)
    again = source.build(0)
    for a, b in zip(fed.centers, again.centers, strict=True):
        assert a.name == b.name
        assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)


@needs_data
def test_hospital_unit_centers():
    table = EICU(str(ROOT), center="hospital_unit").table()
    assert len(np.unique(table.site)) > 186
    assert all(len(s.split(" ")) >= 3 for s in np.unique(table.site))
