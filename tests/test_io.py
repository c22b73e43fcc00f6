"""``write_json`` writes strict JSON: NaN and +-Inf become null, at any depth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lightning_fed.io import write_json


def _strict(text: str) -> object:
    """``json.loads`` that refuses the ``NaN`` / ``Infinity`` extensions Python writes by default."""

    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_nan_and_inf_are_written_as_null_at_any_depth(tmp_path: Path) -> None:
    summary = {
        "test_auroc_mean": math.nan,
        "bytes_vs_fedavg": math.inf,
        "nested": {"low": -math.inf, "values": [1.5, math.nan, {"deep": math.nan}], "pair": (math.nan, 2)},
        "rounds": 3,
        "ok": 0.25,
        "flag": True,
        "name": "run",
        "none": None,
    }
    path = write_json(tmp_path / "summary.json", summary)
    back = _strict(path.read_text())
    assert back == {
        "test_auroc_mean": None,
        "bytes_vs_fedavg": None,
        "nested": {"low": None, "values": [1.5, None, {"deep": None}], "pair": [None, 2]},
        "rounds": 3,
        "ok": 0.25,
        "flag": True,
        "name": "run",
        "none": None,
    }


def test_other_objects_still_go_through_str(tmp_path: Path) -> None:
    back = _strict(write_json(tmp_path / "x.json", {"path": Path("/a/b")}).read_text())
    assert back == {"path": "/a/b"}


def test_a_report_reads_null_as_missing(tmp_path: Path) -> None:
    from lightning_fed.reporting.table import collect_runs

    run = tmp_path / "fedavg-seed1"
    write_json(
        run / "summary.json",
        {"method": "FedAvg", "seed": 1, "test_auroc_mean": math.nan, "bytes_vs_fedavg": 1.0, "rounds": 2},
    )
    rows = collect_runs(tmp_path)
    assert rows["test_auroc_mean"].to_list() == [None]


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_numpy_floats_are_cleaned_too(tmp_path: Path, value: float) -> None:
    import numpy as np

    back = _strict(
        write_json(tmp_path / "n.json", {"v": np.float32(value), "w": np.float64(value)}).read_text()
    )
    assert back == {"v": None, "w": None}
