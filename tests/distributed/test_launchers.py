"""The same ``fabric`` settings join processes started by srun (SLURM) or torchrun.

Fabric reads the launcher from the environment: under ``srun`` it finds ``SLURM_*`` variables (and
then starts no processes itself), under ``torchrun`` the ``TORCHELASTIC_*``/``RANK`` variables.
Here the variables of rank 1 of a 2-task job are set by hand and Fabric is built, not launched.
"""

from __future__ import annotations

import pytest
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

from lightning_fed.config import FabricConfig

SLURM_RANK1 = {
    "SLURM_NTASKS": "2",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_JOB_NUM_NODES": "1",
    "SLURM_NNODES": "1",
    "SLURM_NODEID": "0",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "lightning-fed",
    "SLURM_NODELIST": "node001",
}

TORCHRUN_RANK1 = {
    "TORCHELASTIC_RUN_ID": "abc",
    "RANK": "1",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29511",
}


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [*SLURM_RANK1, *TORCHRUN_RANK1, "SLURM_JOB_NAME"]:
        monkeypatch.delenv(key, raising=False)


def test_slurm_environment_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    for key, value in SLURM_RANK1.items():
        monkeypatch.setenv(key, value)
    fabric = FabricConfig(accelerator="cpu", strategy="ddp", devices=2).fabric([], [])
    env = fabric.strategy.cluster_environment
    assert isinstance(env, SLURMEnvironment)
    assert (fabric.world_size, fabric.global_rank, fabric.local_rank, fabric.node_rank) == (2, 1, 1, 0)
    assert env.creates_processes_externally  # srun started the processes: launching only joins them
    assert env.main_address == "node001"


def test_torchrun_environment_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    for key, value in TORCHRUN_RANK1.items():
        monkeypatch.setenv(key, value)
    fabric = FabricConfig(accelerator="cpu", strategy="ddp", devices=2).fabric([], [])
    env = fabric.strategy.cluster_environment
    assert isinstance(env, TorchElasticEnvironment)
    assert (fabric.world_size, fabric.global_rank, fabric.local_rank) == (2, 1, 1)
    assert env.creates_processes_externally


def test_fabric_settings_are_validated() -> None:
    with pytest.raises(ValueError, match=r"fabric\.strategy must be one of"):
        FabricConfig(strategy="fsdp")
    with pytest.raises(ValueError, match=r"fabric\.devices must be >= 1"):
        FabricConfig(devices=0)
    with pytest.raises(ValueError, match=r"fabric\.num_nodes must be >= 1"):
        FabricConfig(num_nodes=0)
    with pytest.raises(ValueError, match=r"fabric\.precision must be one of"):
        FabricConfig(precision="8-bit")
    cfg = FabricConfig(accelerator="cpu", strategy="ddp", devices=3, num_nodes=2, precision="bf16-mixed")
    assert (cfg.devices, cfg.num_nodes, cfg.precision) == (3, 2, "bf16-mixed")
