"""Charlson flags from ICD-9-CM / ICD-10 codes (Quan et al. 2005)."""

from __future__ import annotations

import polars as pl
import pytest

from lightning_fed.data.charlson import CHARLSON_COLUMNS, charlson_categories, charlson_flags
from lightning_fed.data.synthetic import CHARLSON_COLUMNS as SYNTHETIC_COLUMNS


def test_columns_match_synthetic_schema():
    assert CHARLSON_COLUMNS == SYNTHETIC_COLUMNS


@pytest.mark.parametrize(
    ("code", "version", "expected"),
    [
        ("4280", 9, {"charlson_chf"}),
        ("428.0", 9, {"charlson_chf"}),
        ("I21.4", 10, {"charlson_mi"}),
        ("I214", 10, {"charlson_mi"}),
        ("E119", 10, {"charlson_diabetes"}),
        ("250.02", 9, {"charlson_diabetes"}),
        ("C787", 10, {"charlson_malignancy"}),
        ("197.7", 9, {"charlson_malignancy"}),
        ("C83.3", 10, {"charlson_malignancy"}),  # lymphoma counts (Quan's any malignancy)
        ("204.00", 9, {"charlson_malignancy"}),  # leukemia
        ("C44.9", 10, set()),  # skin, non-melanoma: excluded
        ("J44.9", 10, {"charlson_copd"}),
        ("496", 9, {"charlson_copd"}),
        ("N18.6", 10, {"charlson_renal"}),
        ("585.6", 9, {"charlson_renal"}),
        ("K70.30", 10, {"charlson_liver"}),
        ("572.2", 9, {"charlson_liver"}),
        ("I63.9", 10, {"charlson_cvd"}),
        ("G30.9", 10, {"charlson_dementia"}),
        ("M06.9", 10, {"charlson_rheum"}),
        ("K25.4", 10, {"charlson_pud"}),
        ("I70.0", 10, {"charlson_pvd"}),
        ("I10", 10, set()),
        ("401.9", 9, set()),
        ("404.93", 9, {"charlson_chf", "charlson_renal"}),
        ("4289", 10, set()),  # an ICD-9 code read as ICD-10 matches nothing
    ],
)
def test_single_codes(code, version, expected):
    assert charlson_categories(code, version) == expected


def test_flags_table():
    codes = pl.DataFrame(
        {
            "hadm_id": [1, 1, 2, 2, 3],
            "icd_code": ["4280", "I214", "E119", "C787", "Z0000"],
            "icd_version": [9, 10, 10, 10, 10],
        }
    )
    out = charlson_flags(codes)
    assert out.columns == ["hadm_id", *CHARLSON_COLUMNS]
    assert out["hadm_id"].to_list() == [1, 2, 3]
    rows = {r["hadm_id"]: {k for k, v in r.items() if k != "hadm_id" and v} for r in out.to_dicts()}
    assert rows == {
        1: {"charlson_chf", "charlson_mi"},
        2: {"charlson_diabetes", "charlson_malignancy"},
        3: set(),
    }


def test_bad_version_and_column():
    with pytest.raises(ValueError, match="icd_version"):
        charlson_categories("I21", 8)
    with pytest.raises(ValueError, match="code_column"):
        charlson_flags(pl.DataFrame({"hadm_id": [1], "icd_version": [9]}))
