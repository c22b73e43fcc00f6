"""A W&B-logged tiny fit in a fresh interpreter: no deprecation warning about ``anonymous``, the
per-center bandwidth table lands in the offline run, the run is grouped by label with job type fit,
its keys are sectioned over ``round`` and its finals are in the run summary; ``test`` on it logs a
job of type test in the same group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.wandb_records import OfflineRun, read_offline_run

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
        "--metrics=[torchmetrics.classification.BinaryAveragePrecision]",
    ]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return root / "run", done.stdout + done.stderr


def _runs(run: Path) -> dict[str, OfflineRun]:
    runs = [read_offline_run(folder) for folder in sorted((run / "wandb").glob("offline-run-*"))]
    return {r.job_type: r for r in runs}


def test_logged_run_prints_no_anonymous_deprecation(logged_run: tuple[Path, str]) -> None:
    run, output = logged_run
    assert list((run / "wandb").glob("offline-run-*")), "the run was not logged"
    assert "anonymous" not in output.lower(), output


def test_logged_run_holds_the_bandwidth_table(logged_run: tuple[Path, str]) -> None:
    run, _ = logged_run
    tables = list((run / "wandb").rglob("*.table.json"))
    assert tables and any("bytes_per_center" in t.name for t in tables), tables


def test_logged_run_is_grouped_sectioned_over_round_with_finals_in_the_summary(
    logged_run: tuple[Path, str],
) -> None:
    fit = _runs(logged_run[0])["fit"]
    assert (fit.group, fit.name) == ("quickstart", "run")
    assert fit.step_metrics.get("*") == "round"
    rows = [row for row in fit.history if "train/loss_mean" in row]
    assert [row["round"] for row in rows] == [0]
    keys = {k for row in fit.history for k in row if not k.startswith("_")}
    sections = {"round", "train", "val", "test", "comm", "time", "selection", "bandwidth"}
    assert {k.split("/")[0] for k in keys} <= sections, keys
    assert {
        "val/auroc_mean",
        "test/auroc_mean",
        "comm/mb_cumulative",
        "test/binary_average_precision_mean",
    } <= keys
    assert not any(k.startswith("final/") for k in keys)  # finals are not one-point charts
    assert fit.summary["final/test_auroc_mean"] == pytest.approx(
        json.loads((logged_run[0] / "summary.json").read_text())["test_auroc_mean"]
    )
    assert "final/test_binary_average_precision_defined" in fit.summary


def test_test_on_a_logged_run_logs_a_test_job_in_its_group(logged_run: tuple[Path, str]) -> None:
    run = logged_run[0]
    env = dict(os.environ, WANDB_MODE="offline", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lightning_fed.cli", "test", "--run-dir", str(run)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    test = _runs(run)["test"]
    assert (test.group, test.name) == ("quickstart", "run-test")
    tested = json.loads((run / "test.json").read_text())
    assert test.summary["final/test_auroc_mean"] == pytest.approx(tested["test_auroc_mean"])
