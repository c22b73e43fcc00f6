"""The one reader of the run tree: frozen run records, the setting computed once, its legacy fallback."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.reporting import settings
from lightning_fed.reporting.runs import RunRecord, as_records, read_runs
from tests.reporting.edgedrm_config import rr4_dir03_config


def _run(root: Path, name: str, summary: dict, config: str | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(summary))
    if config is not None:
        (run / "config.yaml").write_text(config)
    return run


def test_records_are_frozen_and_sorted_by_path(tmp_path: Path) -> None:
    _run(tmp_path / "b", "edgedrm-seed2", {"label": "edgedrm", "seed": 2, "method": "EdgeDRM"})
    _run(tmp_path / "a", "fedavg-seed1", {"seed": 1, "method": "FedAvg"})
    records = read_runs(tmp_path)
    assert [(r.label, r.seed, r.algorithm, r.name) for r in records] == [
        ("fedavg", 1, "fedavg", "fedavg-seed1"),  # no recorded label: the folder name less its seed
        ("edgedrm", 2, "edgedrm", "edgedrm-seed2"),
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        records[0].label = "other"  # type: ignore[misc]
    assert records[0].config == {} and records[0].referral is None and records[0].rounds is None


def test_recorded_setting_wins_and_is_computed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = {"data": "FashionMNIST", "partition": "Dir-0.3", "graph": "RR4-fixed"}
    _run(tmp_path, "run", {"seed": 3, "setting": recorded}, rr4_dir03_config(seed=3, lam=0.9, clients=16))
    calls = []
    real = settings.setting_of

    def counting(config: dict, summary: dict) -> dict:
        calls.append(1)
        return real(config, summary)

    monkeypatch.setattr("lightning_fed.reporting.runs.setting_of", counting)
    (record,) = read_runs(tmp_path)
    first = record.setting
    assert first is record.setting and len(calls) == 1  # cached on the record
    assert dict(first) == {
        "dataset": "FashionMNIST",
        "partition": "Dir-0.3",
        "clients": 16,
        "graph": "RR4-fixed",  # the summary's key, not re-parsed from the config
        "seed": 3,
    }


def test_older_runs_fall_back_to_the_config_parser(tmp_path: Path) -> None:
    """A summary without ``setting`` (written before runs recorded it): the keys come from the config."""
    _run(tmp_path, "old", {"seed": 5}, rr4_dir03_config(seed=5, lam=0.5))
    (record,) = read_runs(tmp_path)
    assert dict(record.setting) == {
        "dataset": "FashionMNIST",
        "partition": "Dir-0.3",
        "clients": 8,
        "graph": "RR4",
        "seed": 5,
    }
    assert record.lam == 0.5


def test_router_keys_default_to_labels_for_older_referral_tables(tmp_path: Path) -> None:
    run = _run(tmp_path, "run", {"seed": 1}, rr4_dir03_config(seed=1, lam=0.9))
    pl.DataFrame(
        {"router": ["EdgeDRM"], "prediction_rule": ["weighted history"], "accuracy": [0.5]}
    ).write_csv(run / "referral.csv")
    (record,) = read_runs(tmp_path)
    assert record.referral is not None and "router_key" not in record.referral.columns  # as written
    assert record.routers is not None and record.routers["router_key"].to_list() == ["EdgeDRM"]


def test_as_records_takes_records_or_a_root(tmp_path: Path) -> None:
    assert as_records(tmp_path / "missing") == [] and as_records(tmp_path) == []
    _run(tmp_path, "r", {"seed": 1})
    records = read_runs(tmp_path)
    assert as_records(records) is records
    assert [r.path for r in as_records(tmp_path)] == [r.path for r in records]
    assert isinstance(records[0], RunRecord)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no run directories"):
        read_runs(tmp_path / "empty")
    with pytest.raises(ValueError, match="not a directory"):
        read_runs(tmp_path / "missing")
