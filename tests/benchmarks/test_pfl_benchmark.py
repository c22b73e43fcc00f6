"""The pfl-research FedAvg benchmark (``benchmarks/peers/pfl_fedavg.py``).

Without pfl: the round-1 check accepts pfl's float32 FedAvg of the same local models and rejects the
mistakes it exists to catch (unweighted mean, a center left out, a local model a step off), and the
script prints its install hint. With pfl (this interpreter, or the one ``LIGHTNING_FED_PFL_PYTHON``
names): the whole script on 3 centers for 2 rounds passes its check and both sides report the same
test AUROC.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.peers import pfl_fedavg as bench

ROOT = Path(__file__).resolve().parents[2]
LR = 1e-3


def _pfl_python() -> str | None:
    """An interpreter that has pfl: ``LIGHTNING_FED_PFL_PYTHON``, else this one if it has it."""
    named = os.environ.get("LIGHTNING_FED_PFL_PYTHON")
    if named:
        return named
    return sys.executable if importlib.util.find_spec("pfl") is not None else None


def _pfl_average(init: torch.Tensor, local: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """pfl's FedAvg in float32, operation by operation: ``d_j = theta_j - theta_0``, ``d_j *= n_j``
    (``WeightByDatapoints``), summed in cohort order, ``*= 1 / sum n`` (``average``), then
    ``theta_0 + avg`` (the central SGD step with lr 1 on the negated update)."""
    acc = None
    for j in range(local.shape[0]):
        d = (local[j] - init) * float(n[j])
        acc = d if acc is None else acc + d
    return init + acc * float(1.0 / float(n.sum()))


def _write(
    out: Path, init: torch.Tensor, lf_local: torch.Tensor, pfl_local: torch.Tensor, pfl_avg, n
) -> None:
    """The two workers' files for one parameter ``w`` (lightning-fed: float64 sum, one rounding)."""
    w = (n.double() / n.double().sum()).view(-1, 1)
    lf_avg = (w * lf_local.double()).sum(0).float()
    lf = {"init": {"w": init}, "local": {"w": lf_local}, "round1": {"w": lf_avg}, "last": {"w": lf_avg}}
    peer = {"init": {"w": init}, "local": {"w": pfl_local}, "round1": {"w": pfl_avg}, "last": {"w": pfl_avg}}
    torch.save(lf, out / "lightning.pt")
    torch.save({**peer, "n_train": n}, out / "pfl.pt")


@pytest.fixture
def federation() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round 1 of 40 uneven centers: initial model, lightning-fed's local models (each 20 Adam-sized
    steps of +-lr per coordinate away), pfl's (rounding-level noise on top), training rows."""
    gen = torch.Generator().manual_seed(0)
    init = torch.randn(500, generator=gen) * 0.1
    steps = torch.randint(-20, 21, (40, 500), generator=gen).float() * LR
    lf_local = init + steps
    pfl_local = lf_local + torch.randn(40, 500, generator=gen) * 1e-7
    n = torch.randint(10, 600, (40,), generator=gen)
    return init, lf_local, pfl_local, n


def test_check_accepts_pfls_float32_fedavg(tmp_path: Path, federation) -> None:
    """pfl's own float32 arithmetic on local models 1e-7 apart stays inside the bound."""
    init, lf_local, pfl_local, n = federation
    _write(tmp_path, init, lf_local, pfl_local, _pfl_average(init, pfl_local, n), n)
    check = bench.compare(tmp_path, lr=LR)
    assert check["init_identical"] and check["local_max_abs_diff"] < 1e-6
    assert check["passed"], check
    assert check["server_worst_diff_over_bound"] <= 1.0


@pytest.mark.parametrize("mistake", ["unweighted", "center_left_out", "local_step_off"])
def test_check_rejects_a_wrong_aggregation_or_training(tmp_path: Path, federation, mistake: str) -> None:
    """What the check is for: the unweighted mean, the smallest center dropped (its weight renormalized
    away), or one center's model a whole Adam step (lr) off on one coordinate each fail."""
    init, lf_local, pfl_local, n = federation
    if mistake == "unweighted":
        avg = _pfl_average(init, pfl_local, torch.ones_like(n))
    elif mistake == "center_left_out":
        keep = torch.arange(len(n)) != int(n.argmin())
        avg = _pfl_average(init, pfl_local[keep], n[keep])
    else:
        pfl_local = pfl_local.clone()
        pfl_local[3, 7] += LR
        avg = _pfl_average(init, pfl_local, n)
    _write(tmp_path, init, lf_local, pfl_local, avg, n)
    assert not bench.compare(tmp_path, lr=LR)["passed"]


def test_without_pfl_prints_the_install_hint() -> None:
    """An interpreter without pfl: one line naming the install command, exit status 1."""
    probe = subprocess.run([sys.executable, "-c", "import pfl"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("pfl is installed in this interpreter")
    done = subprocess.run(
        [sys.executable, "benchmarks/peers/pfl_fedavg.py", "--pfl-python", sys.executable],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 1
    assert "pip install" in done.stderr and "pfl" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.cli
def test_script_on_a_tiny_federation(tmp_path: Path) -> None:
    """3 centers, 2 rounds through both frameworks: the round-1 check passes and both report the
    same mean test AUROC after each round (their models differ only by float32 rounding)."""
    python = _pfl_python()
    if python is None:
        pytest.skip("pfl is not installed (set LIGHTNING_FED_PFL_PYTHON to an interpreter that has it)")
    out = tmp_path / "pfl.json"
    cmd = [sys.executable, "benchmarks/peers/pfl_fedavg.py", "--pfl-python", python]
    cmd += ["--centers", "3", "--stays", "300", "--rounds", "2", "--threads", "1", "--json", str(out)]
    done = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["round1_check"]["passed"] and result["round1_check"]["init_identical"]
    lf, peer = result["lightning-fed"], result["pfl"]
    assert len(lf["round_start"]) == len(peer["round_start"]) == 2
    assert lf["test_auroc"] == pytest.approx(peer["test_auroc"], abs=1e-6)
    assert "load average" in done.stdout and "pfl / lf" in done.stdout
