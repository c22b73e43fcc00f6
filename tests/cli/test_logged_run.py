"""A W&B-logged tiny fit in a fresh interpreter: no deprecation warning about ``anonymous``, and the
per-center bandwidth table lands in the offline run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One logged fit (W&B prints a once-per-process warning, so it needs its own process)."""
    root = tmp_path_factory.mktemp("wb")
    env = dict(os.environ, WANDB_MODE="offline", PYTHONWARNINGS="always", OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "lightning_fed.cli",
        "fit",
        "--config",
        str(ROOT / "configs" / "quickstart.yaml"),
        "--trainer.rounds=1",
        "--data.init_args.num_centers=6",
        "--data.init_args.num_stays=900",
        f"--output.root={root}",
        "--output.name=run",
        "--output.progress_bar=false",
        "--logger.enabled=true",
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return root / "run", done.stdout + done.stderr


def test_logged_run_prints_no_anonymous_deprecation(logged_run: tuple[Path, str]) -> None:
    run, output = logged_run
    assert list((run / "wandb").glob("offline-run-*")), "the run was not logged"
    assert "anonymous" not in output.lower(), output


def test_logged_run_holds_the_bandwidth_table(logged_run: tuple[Path, str]) -> None:
    run, _ = logged_run
    tables = list((run / "wandb").rglob("*.table.json"))
    assert tables and any("bytes_per_center" in t.name for t in tables), tables
