"""The MIMIC-IV loader on the open demo (skipped when ../shared/data is absent)."""

from __future__ import annotations

import gzip
import logging
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from lightning_fed.data.charlson import CHARLSON_COLUMNS
from lightning_fed.data.mimic import CARE_UNIT_NAMES, DEFAULT_CARE_UNITS, MimicIV

ROOT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "mimic-iv-demo-2.2"
needs_data = pytest.mark.skipif(
    not (ROOT / "icu" / "icustays.csv.gz").is_file(),
    reason=f"MIMIC-IV demo not found at {ROOT} (shared data folder absent)",
)


def test_arguments_checked():
    with pytest.raises(ValueError, match="max_age"):
        MimicIV("x", min_age=50, max_age=40)
    with pytest.raises(ValueError, match="window_years"):
        MimicIV("x", window_years=0)
    with pytest.raises(ValueError, match="care_units"):
        MimicIV("x", care_units="MICU")
    assert set(CARE_UNIT_NAMES.values()) == set(DEFAULT_CARE_UNITS)


def test_wrong_root_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        MimicIV(str(tmp_path / "nowhere")).build(0)
    with pytest.raises(FileNotFoundError, match=r"hosp/patients\.csv\.gz.*icu/icustays\.csv\.gz"):
        MimicIV(str(tmp_path)).build(0)


@needs_data
def test_demo_cohort(caplog):
    source = MimicIV(str(ROOT))
    stays = source.stays()
    assert stays.height == 140  # every ICU stay, before the unit and age filters
    with caplog.at_level(logging.WARNING, logger="lightning_fed.data.mimic"):
        table = source.table()
    assert "chartevents" in caplog.text
    assert len(table.y) == 135  # the six care units; every demo age lies in [18, 95]
    ages = table.x[:, table.feature_names.index("age")]
    assert ages.min() >= 18 and ages.max() <= 95
    kept = stays.filter(pl.col("care_unit").is_in(list(DEFAULT_CARE_UNITS)))
    np.testing.assert_array_equal(table.y, kept["label"].to_numpy())  # hospital_expire_flag
    assert int(table.y.sum()) == 19
    for site in np.unique(table.site):
        unit, years = site.rsplit(" ", 1)
        start, end = (int(v) for v in years.split("-"))
        assert unit in DEFAULT_CARE_UNITS and end == start + 1 and (start - 2110) % 2 == 0
    assert table.charlson_columns == CHARLSON_COLUMNS
    vitals = [j for j, n in enumerate(table.feature_names) if n.startswith("heart_rate_")]
    assert np.isnan(table.x[:, vitals]).all()  # no chartevents in the demo


@needs_data
def test_demo_age_filter_and_federation():
    narrow = MimicIV(str(ROOT), min_age=60, max_age=80).table()
    assert 0 < len(narrow.y) < 135
    fed = MimicIV(str(ROOT), window_years=100, min_center_size=20).build(0)
    assert [c.name for c in fed.centers] == [
        "CVICU 2110-2209",
        "MICU 2110-2209",
        "Medical/Surgical ICU 2110-2209",
        "SICU 2110-2209",
    ]
    assert set(fed.dropped_centers) == {"CCU 2110-2209", "TSICU 2110-2209"}
    assert "heart_rate_mean_missing" in fed.feature_names
    for c in fed.centers:
        assert not torch.isnan(c.x_train).any()


def _demo_copy(tmp_path: Path) -> Path:
    root = tmp_path / "mimic"
    for sub in ("hosp", "icu"):
        (root / sub).mkdir(parents=True)
        for name in ("patients", "admissions", "diagnoses_icd", "icustays"):
            src = ROOT / sub / f"{name}.csv.gz"
            if src.is_file():
                (root / sub / src.name).symlink_to(src.resolve())
    return root


@needs_data
def test_chartevents_vitals_hand_computed(tmp_path):
    root = _demo_copy(tmp_path)
    stays = MimicIV(str(root)).stays().filter(pl.col("care_unit") == "MICU")
    stay, intime = stays["stay_id"][0], stays["intime"][0]
    other = stays["stay_id"][1]

    def at(hours: float) -> str:
        return (intime + timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")

    events = [  # (stay, hours after intime, itemid, valuenum)
        (stay, 1, 220045, 80.0),
        (stay, 2, 220045, 100.0),
        (stay, 23.5, 220045, 90.0),
        (stay, 25, 220045, 200.0),  # after the 24 h window
        (stay, -1, 220045, 50.0),  # before intime
        (stay, 1, 223761, 98.6),  # Fahrenheit -> 37.0 C
        (stay, 3, 223762, 38.0),
        (stay, 1, 220050, 120.0),  # arterial systolic
        (stay, 2, 220179, 100.0),  # non-invasive systolic
        (stay, 4, 220179, 999.0),  # out of range
        (stay, 5, 220277, 101.0),  # SpO2 out of range
        (stay, 6, 220277, 95.0),
        (stay, 7, 220046, 5.0),  # not a vital item
        (other, 30, 220045, 70.0),  # outside the other stay's window
    ]
    lines = [
        "subject_id,hadm_id,stay_id,caregiver_id,charttime,storetime,itemid,value,valuenum,valueuom,warning"
    ]
    for s, h, item, v in events:
        lines.append(f"1,2,{s},3,{at(h)},{at(h)},{item},{v},{v},unit,0")
    with gzip.open(root / "icu" / "chartevents.csv.gz", "wt") as fh:
        fh.write("\n".join(lines) + "\n")

    table = MimicIV(str(root)).table()
    ids = MimicIV(str(root)).stays().filter(pl.col("care_unit").is_in(list(DEFAULT_CARE_UNITS)))["stay_id"]
    row = table.x[ids.to_list().index(stay)]
    col = {n: j for j, n in enumerate(table.feature_names)}
    assert row[col["heart_rate_mean"]] == pytest.approx(90.0)
    assert row[col["heart_rate_min"]] == pytest.approx(80.0)
    assert row[col["heart_rate_max"]] == pytest.approx(100.0)
    assert row[col["temperature_mean"]] == pytest.approx(37.5)
    assert row[col["temperature_min"]] == pytest.approx(37.0)
    assert row[col["temperature_max"]] == pytest.approx(38.0)
    assert row[col["sbp_mean"]] == pytest.approx(110.0)
    assert row[col["sbp_max"]] == pytest.approx(120.0)
    assert row[col["spo2_min"]] == pytest.approx(95.0) and row[col["spo2_max"]] == pytest.approx(95.0)
    assert np.isnan(row[col["dbp_mean"]]) and np.isnan(row[col["resp_rate_max"]])
    assert np.isnan(table.x[ids.to_list().index(other), col["heart_rate_mean"]])


@needs_data
def test_parquet_cache_reused(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = MimicIV(str(ROOT), cache_dir=str(cache)).table()
    files = list(cache.glob("*.parquet"))
    assert len(files) == 1 and not list(cache.glob(".*.tmp"))

    def boom(self):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(MimicIV, "stays", boom)
    second = MimicIV(str(ROOT), cache_dir=str(cache)).table()
    np.testing.assert_array_equal(np.nan_to_num(first.x, nan=-1), np.nan_to_num(second.x, nan=-1))
    assert first.feature_names == second.feature_names and (first.site == second.site).all()
    assert MimicIV(str(ROOT), cache_dir=str(cache), min_age=30)._cache_file() != files[0]  # other key


@needs_data
def test_demo_charlson_flags_agree_with_hand_checked_admissions():
    """Admissions looked up by hand in the demo's hosp/diagnoses_icd: 24181354 has ICD-9 4280 (CHF),
    24540843 ICD-10 I5023 (CHF), 20755971 ICD-9 5715 (chronic liver disease), 22342963 ICD-10 E119
    (diabetes), 28829452 ICD-10 C3490 (lung cancer: malignancy)."""
    from lightning_fed.data.charlson import charlson_flags

    expected = {
        24181354: "charlson_chf",
        24540843: "charlson_chf",
        20755971: "charlson_liver",
        22342963: "charlson_diabetes",
        28829452: "charlson_malignancy",
    }
    codes = pl.read_csv(ROOT / "hosp" / "diagnoses_icd.csv.gz", infer_schema_length=0).filter(
        pl.col("hadm_id").cast(pl.Int64).is_in(list(expected))
    )
    flags = charlson_flags(codes.with_columns(pl.col("hadm_id").cast(pl.Int64)))
    for hadm, column in expected.items():
        row = flags.filter(pl.col("hadm_id") == hadm)
        assert row.height == 1 and row[column].item() == 1, (hadm, column)
