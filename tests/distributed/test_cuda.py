"""The GPU path: stacked parameters, dropout streams and collectives on CUDA devices.

Skipped without CUDA; written to run unchanged on a GPU node (``pytest tests/distributed``). On GPUs
cuBLAS may pick kernels by batch size, so shards are compared with the whole federation to float
rounding; the partner sets and the byte ledger (discrete decisions) must still be identical.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import FedAvg
from lightning_fed.config import FabricConfig
from lightning_fed.engine.packed import CenterStreams
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation
from tests.distributed.ddp_run import run_all

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ROOT = Path(__file__).resolve().parents[2]


def test_auto_accelerator_takes_a_gpu_when_there_is_one() -> None:
    fabric = FabricConfig(accelerator="auto", devices=1).fabric([], [])
    assert fabric.device.type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_bf16_mixed_precision_trains_float32_parameters() -> None:
    """precision=bf16-mixed autocasts local training (autograd path); stored parameters stay float32
    and land within bf16 rounding of the float32 run after one round."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = {}
    for precision in ("32-true", "bf16-mixed"):
        fed = Federation(
            make_federation([40, 60, 30]),
            MortalityMLP(hidden=(16, 8), dropout=0.0),
            FedAvg(),
            TrainerConfig(rounds=1, local_epochs=1, batch_size=16),
            fabric=Fabric(accelerator=device, devices=1, precision=precision),
            seed=1,
        )
        fed.fit()
        out[precision] = fed.engine.get_params()
    assert all(p.dtype == torch.float32 and p.device.type == device for p in out["bf16-mixed"].values())
    diff = max(float((out["32-true"][n] - out["bf16-mixed"][n]).abs().max()) for n in out["32-true"])
    assert 0 < diff < 1e-2


@cuda
def test_stacked_parameters_and_streams_live_on_the_gpu() -> None:
    fed = Federation(
        make_federation([40, 7, 130, 3]),
        MortalityMLP(hidden=(16, 8), dropout=0.2),
        FedAvg(),
        TrainerConfig(rounds=2, batch_size=16),
        fabric=Fabric(accelerator="cuda", devices=1),
    )
    summary = fed.fit()
    assert all(p.device.type == "cuda" for p in fed.engine.get_params().values())
    assert fed.engine.flat.device.type == "cuda"
    assert 0.0 <= summary["test_auroc_mean"] <= 1.0
    words = CenterStreams(0, 0, [3, 1], torch.device("cuda")).words(2, 8)
    assert words.device.type == "cuda" and not torch.equal(words[0], words[1])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_two_gpus_equal_one_gpu(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "tests.distributed.ddp_run", str(tmp_path), "2", "cuda"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    single = run_all(Fabric(accelerator="cuda", devices=1))
    for r in range(2):
        got = torch.load(tmp_path / f"rank{r}.pt", weights_only=False)
        for method, ref in single.items():
            assert [x["partners"] for x in got[method]["rounds"]] == [x["partners"] for x in ref["rounds"]]
            for key, column in ref["ledger"].items():
                assert torch.equal(got[method]["ledger"][key], column)
            for name, p in ref["params"].items():
                torch.testing.assert_close(got[method]["params"][name], p, rtol=0, atol=1e-5)
