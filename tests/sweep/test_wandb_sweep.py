"""The shipped W&B sweep files are :mod:`lightning_fed.wandb_sweep`'s output for the grids they mirror."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lightning_fed.wandb_sweep import main, render, wandb_sweep_spec

ROOT = Path(__file__).resolve().parents[2]
WANDB_FILES = sorted((ROOT / "configs" / "sweeps").glob("wandb_*.yaml"))


def _grid_of(wandb_file: Path) -> str:
    match = re.search(r"^# GENERATED from (\S+)", wandb_file.read_text(), re.MULTILINE)
    assert match, f"{wandb_file.name} does not name the grid it is generated from"
    return match.group(1)


@pytest.mark.parametrize("wandb_file", WANDB_FILES, ids=[f.stem for f in WANDB_FILES])
def test_shipped_wandb_sweep_is_generated_from_its_grid(wandb_file: Path, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    grid = _grid_of(wandb_file)
    out = str(wandb_file.relative_to(ROOT))
    assert wandb_file.read_text() == render(grid, out), (
        f"regenerate: python -m lightning_fed.wandb_sweep {grid} --out {out}"
    )
    spec, source = yaml.safe_load(wandb_file.read_text()), yaml.safe_load((ROOT / grid).read_text())
    assert spec["parameters"]["config"]["values"] == source["configs"]
    assert spec["parameters"]["seed"]["values"] == source["seeds"]


def test_table1_wandb_sweep_lists_all_26_configs() -> None:
    spec = yaml.safe_load((ROOT / "configs" / "sweeps" / "wandb_table1.yaml").read_text())
    values = spec["parameters"]["config"]["values"]
    assert len(values) == len(set(values)) == 26
    assert {"configs/abps_scaled.yaml", "configs/centralized_es.yaml", "configs/fedavg_x_last.yaml"} <= set(
        values
    )


def test_layered_grids_are_refused_in_one_line(tmp_path: Path, capsys) -> None:
    with pytest.raises(ValueError, match="layered grids"):
        wandb_sweep_spec({"grids": [[{"a": "a.yaml"}]], "seeds": [0]})
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [1]\n")
    with pytest.raises(SystemExit, match="lists no configs"):
        main([str(bad)])


def test_main_prints_the_spec(tmp_path: Path, capsys) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text("configs: [configs/fedavg.yaml]\nseeds: [1, 2]\n")
    main([str(grid)])
    spec = yaml.safe_load(capsys.readouterr().out)
    assert spec["parameters"] == {"config": {"values": ["configs/fedavg.yaml"]}, "seed": {"values": [1, 2]}}


def test_folds_become_the_fold_parameters() -> None:
    spec = wandb_sweep_spec({"configs": ["configs/fedavg.yaml"], "seeds": [0], "folds": 3})
    assert spec["parameters"]["data.split.folds"] == {"value": 3}
    assert spec["parameters"]["data.split.fold"] == {"values": [0, 1, 2]}
    assert "data.split.fold" not in wandb_sweep_spec({"configs": ["configs/fedavg.yaml"]})["parameters"]
