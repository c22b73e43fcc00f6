"""``benchmarks/gpu_check.py --cpu-only`` at its smallest settings: every step's row, CUDA skipped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

ROOT = Path(__file__).resolve().parents[2]
CHECKS = {
    "1": ["pytest tests/distributed/test_cuda.py"],
    "2": ["packed == sequential (float64)"],
    "3": ["FedAvg (configs/fedavg.yaml)", "ABPS-X (configs/abps_x.yaml)"],
    "4": ["bf16-mixed vs 32-true (FedAvg)"],
    "5": ["DDP 2 processes == 1 (ABPS-X)"],
    "6": ["EdgeDRM + ResNet18GN (random images)"],
}


def test_cpu_only_table_has_every_step(tmp_path: Path) -> None:
    """12 synthetic centers, 2 rounds, ResNet width 8: about a minute on 2 cores. Every step has its
    row, the cuda column says skipped, no cpu cell failed, the packed engine equals the sequential one
    to 1e-10 and the two DDP processes equal one process bit for bit."""
    out = tmp_path / "table.md"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--cpu-only"]
    cmd += ["--centers", "12", "--rounds", "2", "--width", "8", "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in out.read_text().splitlines()
        if re.match(r"\| \d ", line)
    ]
    assert {(step, check) for step, check, *_ in rows} == {
        (step, check) for step, checks in CHECKS.items() for check in checks
    }
    assert all(cuda == "skipped: --cpu-only" for _, _, cuda, _, _ in rows)
    cpu = {check: cell for _, check, _, cell, _ in rows}
    assert not any(cell.startswith("FAILED") for cell in cpu.values()), cpu
    diff = re.fullmatch(r"max abs diff (\S+)", cpu["packed == sequential (float64)"])
    assert diff is not None and float(diff.group(1)) < 1e-10
    assert cpu["DDP 2 processes == 1 (ABPS-X)"].startswith("bit-identical")
    assert re.match(r"\d+ passed, 0 failed, \d+ skipped", cpu["pytest tests/distributed/test_cuda.py"])
    assert done.stdout.count("| step | check |") == 1  # one table
