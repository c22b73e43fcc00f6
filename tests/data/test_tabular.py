"""Tabular: a federation from a CSV / parquet file the test writes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from lightning_fed.data.tabular import Tabular


def _frame(n: int = 60) -> pl.DataFrame:
    rng = np.random.default_rng(0)
    hr = rng.normal(85, 12, n)
    hr[::7] = np.nan
    return pl.DataFrame(
        {
            "hospital": np.where(np.arange(n) < 40, "A", "B"),
            "unit": np.where(np.arange(n) % 2 == 0, "MICU", "SICU"),
            "year": 2014 + (np.arange(n) % 4),
            "age": rng.integers(20, 90, n).astype(float),
            "hr": hr,
            "sex": np.where(rng.random(n) < 0.5, "F", "M"),
            "charlson_chf": (rng.random(n) < 0.3).astype(int),
            "died": np.tile([0, 0, 0, 1], n // 4),
        }
    )


@pytest.fixture
def csv(tmp_path):
    path = tmp_path / "cohort.csv"
    _frame().write_csv(path)
    return path


def test_basic_federation(csv):
    source = Tabular(
        str(csv), label="died", center="hospital", categorical=["sex", "unit"], time="year", min_center_size=0
    )
    table = source.table()
    assert table.feature_names == (
        "unit_MICU",
        "unit_SICU",
        "age",
        "hr",
        "sex_F",
        "sex_M",
        "charlson_chf",
    )
    assert [n for n, c in zip(table.feature_names, table.continuous, strict=True) if c] == ["age", "hr"]
    assert table.charlson_columns == ("charlson_chf",)
    assert sorted(set(table.site)) == ["A", "B"]
    np.testing.assert_array_equal(table.year, 2014 + (np.arange(60) % 4))
    fed = source.build(0)
    assert [c.name for c in fed.centers] == ["A", "B"]
    assert fed.feature_names[-1] == "hr_missing"
    assert all(not torch.isnan(c.x_train).any() for c in fed.centers)
    assert fed.centers[0].n_train + len(fed.centers[0].y_val) + len(fed.centers[0].y_test) == 40
    again = source.build(0)
    assert torch.equal(fed.centers[1].x_train, again.centers[1].x_train)


def test_multi_column_centers_windows_and_parquet(tmp_path):
    path = tmp_path / "cohort.parquet"
    _frame().write_parquet(path)
    source = Tabular(
        str(path),
        label="died",
        center=["hospital", "unit"],
        features=["age", "hr"],
        time="year",
        window=2,
        min_center_size=8,
    )
    table = source.table()
    assert table.feature_names == ("age", "hr")
    assert sorted(set(table.site)) == [
        "A MICU 2014-2015", "A MICU 2016-2017", "A SICU 2014-2015", "A SICU 2016-2017",
        "B MICU 2014-2015", "B MICU 2016-2017", "B SICU 2014-2015", "B SICU 2016-2017",
    ]  # fmt: skip
    fed = source.build(0)
    # hospital A: 10 rows per (unit, window), kept; B: 5 rows each, dropped
    assert [c.name[0] for c in fed.centers] == ["A"] * 4
    assert len(fed.dropped_centers) == 4 and all(name.startswith("B") for name in fed.dropped_centers)


def test_errors(csv, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.csv"):
        Tabular(str(tmp_path / "missing.csv"), label="died", center="hospital").build(0)
    with pytest.raises(ValueError, match="path"):
        Tabular(str(tmp_path / "x.txt"), label="died", center="hospital")
    with pytest.raises(ValueError, match="window needs a time"):
        Tabular(str(csv), label="died", center="hospital", window=2)
    with pytest.raises(ValueError, match="'ward'"):
        Tabular(str(csv), label="died", center="ward").table()
    with pytest.raises(ValueError, match="'sex' is not numeric"):
        Tabular(str(csv), label="died", center="hospital", categorical=["unit"]).table()
    with pytest.raises(ValueError, match="label column 'age' must be 0/1"):
        Tabular(str(csv), label="age", center="hospital", categorical=["sex", "unit"]).table()
    with pytest.raises(ValueError, match="single class"):
        pl.DataFrame({"h": ["A"] * 10, "x": np.arange(10.0), "y": [0] * 10}).write_csv(tmp_path / "one.csv")
        Tabular(str(tmp_path / "one.csv"), label="y", center="h", min_center_size=0).build(0)


def _write(path, text: str):
    path.write_text(text)
    return str(path)


def _rows(center: str, n: int, start: int = 0) -> list[str]:
    return [f"{center},{20 + (start + i) % 50},{(start + i) % 2}" for i in range(n)]


def test_null_center_ids_are_dropped_with_a_warning_not_merged(tmp_path, caplog):
    """Center ids "", "NA", "NaN" and "?" are missing: those 4 rows are dropped (one warning naming the
    count), never pooled into a center called "unknown"; a real center named "unknown" stays itself."""
    import logging

    rows = ["h,age,y", *_rows("A", 6), *_rows("unknown", 4), ",30,0", "NA,31,1", "NaN,32,0", "?,33,1"]
    path = _write(tmp_path / "nulls.csv", "\n".join(rows) + "\n")
    with caplog.at_level(logging.WARNING, logger="lightning_fed.data.tabular"):
        table = Tabular(path, label="y", center="h", min_center_size=0).table()
    assert sorted(set(table.site)) == ["A", "unknown"]
    assert list(table.site).count("unknown") == 4 and len(table.site) == 10
    assert "dropped 4 rows without a center id" in caplog.text


def test_multi_column_center_with_a_null_part_is_dropped(tmp_path, caplog):
    import logging

    rows = ["h,unit,age,y", *[f"A,MICU,{20 + i},{i % 2}" for i in range(4)], "A,,40,1", "NA,SICU,41,0"]
    path = _write(tmp_path / "multi.csv", "\n".join(rows) + "\n")
    with caplog.at_level(logging.WARNING, logger="lightning_fed.data.tabular"):
        table = Tabular(path, label="y", center=["h", "unit"], min_center_size=0).table()
    assert sorted(set(table.site)) == ["A MICU"] and len(table.site) == 4
    assert "dropped 2 rows without a center id" in caplog.text


def test_null_values_option(tmp_path):
    rows = ["h,age,y", *_rows("A", 4), "A,-,1", "A,?,0", "B,25,1", "B,.,0", "B,30,1", "B,31,0"]
    path = _write(tmp_path / "markers.csv", "\n".join(rows) + "\n")
    # "-" and "." are not default markers: the error names null_values as well as categorical
    with pytest.raises(ValueError, match=r"'age' is not numeric.*\['-', '\.'\].*null_values.*categorical"):
        Tabular(path, label="y", center="h", min_center_size=0).table()
    table = Tabular(path, label="y", center="h", min_center_size=0, null_values=["-", ".", "?"]).table()
    assert int(np.isnan(table.x[:, 0]).sum()) == 3
    assert "null_values" in repr(Tabular(path, label="y", center="h"))
    # a real text column is only told to go to categorical
    rows = ["h,sex,y", "A,F,0", "A,M,1", "A,?,0"]
    text = _write(tmp_path / "text.csv", "\n".join(rows) + "\n")
    with pytest.raises(ValueError, match="'sex' is not numeric") as err:
        Tabular(text, label="y", center="h", min_center_size=0).table()
    assert "null_values" not in str(err.value)


@pytest.mark.parametrize("bad", ["?", [1, "?"], ("NA", None), 3])
def test_null_values_must_be_a_list_of_strings(csv, bad):
    with pytest.raises(ValueError, match=r"^data\.init_args\.null_values must be a list of strings") as err:
        Tabular(str(csv), label="died", center="hospital", null_values=bad)
    assert "\n" not in str(err.value)


def test_a_column_named_twice_is_refused(tmp_path):
    """On main polars kept the first ``age`` and renamed the second ``age_duplicated_0``, which then
    entered the features silently; a ``.csv.gz`` header is checked too."""
    import gzip

    text = "hospital,age,age,died\nA,50,51,0\nA,60,61,1\nB,70,71,0\nB,40,41,1\n"
    path = tmp_path / "dup.csv"
    path.write_text(text)
    packed = tmp_path / "dup.csv.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    for source in (path, packed):
        with pytest.raises(ValueError, match=r"column 'age' appears 2 times in the header") as err:
            Tabular(str(source), label="died", center="hospital", min_center_size=0).table()
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("categorical", [[], ["hr"]])
def test_a_feature_missing_in_every_row_is_refused(tmp_path, categorical):
    """On main an all-NaN column was imputed to a constant plus an always-on indicator, silently."""
    frame = _frame().with_columns(pl.lit(None, dtype=pl.Float64).alias("hr"))
    path = tmp_path / "cohort.csv"
    frame.write_csv(path)
    source = Tabular(
        str(path),
        label="died",
        center="hospital",
        categorical=["sex", "unit", *categorical],
        min_center_size=0,
    )
    with pytest.raises(ValueError, match=r"feature 'hr' is missing in every labelled row") as err:
        source.table()
    assert "\n" not in str(err.value)
    # NaN spelled out in a parquet file is missing as well; a column with one value left passes.
    frame.with_columns(pl.lit(float("nan")).alias("hr")).write_parquet(tmp_path / "cohort.parquet")
    with pytest.raises(ValueError, match=r"feature 'hr' is missing"):
        Tabular(
            str(tmp_path / "cohort.parquet"),
            label="died",
            center="hospital",
            categorical=["sex", "unit"],
            min_center_size=0,
        ).table()
    kept = frame.with_columns(pl.Series("hr", [85.0] + [None] * (frame.height - 1)))
    kept.write_csv(path)
    kept_source = Tabular(
        str(path), label="died", center="hospital", categorical=["sex", "unit"], min_center_size=0
    )
    assert "hr" in kept_source.table().feature_names
