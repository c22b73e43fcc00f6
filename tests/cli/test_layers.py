"""The EdgeDRM benchmark's layer files (configs/edgedrm_bench/) run end to end as one fit each: data,
partition, method at the CPU budget and graph, layered with repeated ``--config``, on 60 images per
client for 2 rounds of 2 local updates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lightning_fed.cli import main

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "configs" / "edgedrm_bench"
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.parametrize("method", ["edgedrm", "dispfl", "fedspd", "local"])
def test_layered_method_runs(tmp_path: Path, method: str) -> None:
    if not FASHION_MNIST.is_dir():
        pytest.skip(f"{FASHION_MNIST} is absent (Debian package dataset-fashion-mnist)")
    layers = [BENCH / "data" / "fmnist_cpu.yaml", BENCH / "partitions" / "dir03.yaml"]
    layers.append(BENCH / "methods" / f"{method}_cpu.yaml")
    layers += [] if method == "local" else [BENCH / "graphs" / "cycle.yaml"]
    tiny = ["--data.init_args.max_per_client=60", "--trainer.rounds=2", "--trainer.local_steps=2"]
    tiny += ["--algorithm.init_args.stage2_epochs=3"] if method == "edgedrm" else []
    main(
        [
            "fit",
            *(arg for layer in layers for arg in ("--config", str(layer))),
            *tiny,
            "--seed=2025",
            "--logger.enabled=false",
            "--output.progress_bar=false",
            f"--output.root={tmp_path}",
            "--output.name=run",
        ]
    )
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert summary["rounds"] == 2 and summary["num_centers"] == 8
    # The saved config is the merged stack: the partition layer and the graph layer both landed.
    assert config["data"]["init_args"]["partition"]["class_path"].endswith("DirichletLabels")
    assert config["trainer"]["local_steps"] == 2
    if method != "local":
        assert config["algorithm"]["init_args"]["topology"]["class_path"].endswith("Cycle")
