"""``benchmarks/peers/flower_fedavg.py``: its Flower client trains like lightning-fed's engine, it
prints an install hint without flwr, and (with flwr installed) a tiny side-by-side run passes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.peers import flower_fedavg as bench
from lightning_fed.algorithms import FedAvg
from lightning_fed.engine import PackedEngine
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "peers" / "flower_fedavg.py"
HAS_FLWR = all(importlib.util.find_spec(name) is not None for name in ("flwr", "ray"))


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_client_loop_matches_the_packed_engine() -> None:
    """The Flower client's plain PyTorch loop, on lightning-fed's batches and dropout streams, gives
    every center the packed engine's model to float32 rounding (two rounds, Adam state kept), from
    the initial model ``Federation`` builds; another center's dropout stream is far off."""
    data = make_federation([300, 129, 40, 7], num_features=6)
    train = [(c.x_train, c.y_train) for c in data.centers]
    module = bench._initial_model(data.num_features, 0.2, seed=0)
    fed = Federation(data, MortalityMLP(dropout=0.2), FedAvg(), TrainerConfig(rounds=1), seed=0)
    assert all(torch.equal(p, fed.module.get_parameter(n)) for n, p in module.named_parameters())

    engine = PackedEngine()
    engine.setup(module, train, batch_size=bench.BATCH_SIZE, epochs=bench.LOCAL_EPOCHS, seed=0)
    for r in range(2):
        engine.train_round(r)
    packed = engine.get_params()

    def client(c: int, stream: int) -> dict[str, torch.Tensor]:
        model = MortalityMLP(in_features=data.num_features, dropout=0.2)
        model.load_state_dict(module.state_dict())
        opt = model.configure_optimizers()
        for r in range(2):
            bench.local_train(model, opt, *train[c], seed=0, round_idx=r, center=stream)
        return bench._params(model)

    for c in range(len(train)):
        assert _max_diff(client(c, c), {k: v[c] for k, v in packed.items()}) < 1e-5
    assert _max_diff(client(0, 1), {k: v[0] for k, v in packed.items()}) > 1e-3


def test_without_flwr_it_prints_the_install_hint() -> None:
    code = (
        "import runpy, sys; sys.modules['flwr'] = None; sys.argv = ['flower_fedavg.py']; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == bench.INSTALL_HINT
    assert 'pip install "lightning-fed[peers]"' in done.stderr


@pytest.mark.skipif(not HAS_FLWR, reason='flwr is not installed (pip install "lightning-fed[peers]")')
def test_tiny_side_by_side_run(tmp_path: Path) -> None:
    """3 centers, 2 rounds, both frameworks: round 1 agrees within the bounds, round 2 too (so the
    Adam state survives between Flower rounds), every number is reported."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(SCRIPT), "--centers", "3", "--stays", "300", "--rounds", "2"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(
        [*cmd, "--json", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    check = result["round1_check"]
    assert check["passed"] and check["init_identical"]
    assert check["local_max_abs_diff"] < check["local_bound"] == 1e-4
    assert check["server_worst_diff_over_bound"] <= 1.0
    assert check["last_round_max_abs_diff"] < 1e-4
    for framework in ("lightning-fed", "flower"):
        numbers = result[framework]
        assert len(numbers["round_seconds"]) == 2 and min(numbers["round_seconds"]) > 0
        assert numbers["startup_seconds"] > 0 and numbers["total_seconds"] > numbers["startup_seconds"]
        assert numbers["peak_rss_mib"] > 0
    assert result["flower"]["peak_processes"] > 1  # Ray's processes are counted
    assert result["lightning-fed"]["test_auroc"] == pytest.approx(result["flower"]["test_auroc"], abs=1e-6)
    assert set(result["ratios"]) >= {"per_round", "startup", "total", "peak_memory"}
    assert len(result["load"]["start"]) == len(result["load"]["end"]) == 3
    assert "target lightning-fed >= 10x Flower" in done.stdout
