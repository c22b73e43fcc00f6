"""Two CPU processes (Fabric DDP over gloo) give the one-process results, bit for bit.

Fabric's ``strategy="ddp"`` re-runs the launching script in each child, so the multi-process side
runs in a subprocess (``python -m tests.distributed.ddp_run``); the one-process reference runs here.
Both pin torch to one intra-op thread per process (the subprocess launcher does so for 2 processes
on 2 cores, and tests/conftest.py here).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.cli import main
from tests.distributed.ddp_run import ROUNDS, SIZES, run_all

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    for key in [k for k in env if k.startswith(("SLURM_", "TORCHELASTIC_"))] + ["LOCAL_RANK", "WORLD_SIZE"]:
        env.pop(key, None)
    return env


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("ddp")
    cmd = [sys.executable, "-m", "tests.distributed.ddp_run", str(out), "2"]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


@pytest.fixture(scope="module")
def single() -> dict[str, Any]:
    return run_all(Fabric(accelerator="cpu", devices=1))


def _nan_equal(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with NaN floats replaced by a marker, so that NaN equals NaN (a multi-class run's
    pooled AUROC is NaN on every process)."""
    return {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in summary.items()}


@pytest.mark.parametrize(
    "method", ["fedavg", "abps", "fedavg_sampled", "fedavg_bf16", "dfedavgm_bf16", "edgedrm_bf16"]
)
def test_two_processes_equal_one_process(
    ranks: list[dict[str, Any]], single: dict[str, Any], method: str
) -> None:
    """FedAvg (identity wire), ABPS (bf16 wire, dropout 0.2) and FedAvg with 20 centers sampled a
    round on 67 centers: shards of 33 and 34 centers (balanced by training steps), 3 rounds; each
    rank trains its shard's sampled centers only; evaluation and Shapley predictions are split
    across the ranks too; and on a bf16 wire with the trained rows crossing in bf16, FedAvg (20
    sampled), DFedAvgM (a clipping NormBound) and EdgeDRM (stage II from the exact rows). Per-center
    metrics every round, the byte ledger, the partner sets, the final parameters and the checkpoint
    state are identical to one process, on both ranks."""
    ref = single[method]
    assert ranks[0]["world_size"] == 2
    for rank in ranks:
        got = rank[method]
        assert _nan_equal(got["summary"]) == _nan_equal(ref["summary"])
        assert len(got["rounds"]) == len(ref["rounds"]) == ROUNDS
        for mine, theirs in zip(got["rounds"], ref["rounds"], strict=True):
            assert mine["partners"] == theirs["partners"]
            for key in ("train_loss", "val_auroc", "test_auroc", "bytes_per_center"):
                # equal values, NaN where the reference is NaN (a center not sampled has no loss)
                torch.testing.assert_close(mine[key], theirs[key], rtol=0, atol=0, equal_nan=True, msg=key)
        for key, column in ref["ledger"].items():
            assert torch.equal(got["ledger"][key], column), key
        for name, p in ref["params"].items():
            assert torch.equal(got["params"][name], p), name
        engine = got["state"]["engine"]
        for name, t in ref["state"]["engine"]["optimizer"].items():
            assert torch.equal(engine["optimizer"][name].cpu(), t.cpu()), name
        assert got["collective_seconds"] > 0
    assert single["abps"]["rounds"][-1]["partners"] != [[] for _ in SIZES]  # ABPS did exchange
    assert single["fedavg"]["collective_seconds"] == 0.0


def test_bf16_wire_exchanges_bf16_rows(ranks: list[dict[str, Any]], single: dict[str, Any]) -> None:
    """Issue 28: with ``comm: BFloat16Hook`` the trained rows cross between the processes in bfloat16
    (the wire's dtype: lossless for the messages, and each process keeps its own shard exact): half
    the bytes of the same run on a float32 wire (the logits, the rows that complete a prediction
    chunk, the per-receiver norms and the final state cross in their own dtypes). The results are
    the one-process results bit for bit (:func:`test_two_processes_equal_one_process`). ABPS, whose
    Shapley credits read every receiver's model, still exchanges float32 rows and says why."""
    for rank in ranks:
        for method in ("fedavg_bf16", "dfedavgm_bf16", "edgedrm_bf16"):
            assert "bfloat16" in rank[method]["gather_note"], rank[method]["gather_note"]
            assert set(rank[method]["sent"]["rows"]) == {"torch.bfloat16"}, rank[method]["sent"]
        assert set(rank["fedavg_sampled"]["sent"]["rows"]) == {"torch.float32"}
        # 2 bytes per parameter instead of 4 (plus the bit-cast losses and flags: 262 x 2 vs 260 x 4)
        bf16 = rank["fedavg_bf16"]["sent"]["rows"]["torch.bfloat16"]
        fp32 = rank["fedavg_sampled"]["sent"]["rows"]["torch.float32"]
        assert 0.5 < bf16 / fp32 < 0.52, (bf16, fp32)
        assert set(rank["abps"]["sent"]["rows"]) == {"torch.float32"}
        assert "not audited" in rank["abps"]["gather_note"], rank["abps"]["gather_note"]
    assert single["fedavg_bf16"]["sent"] == {}  # one process: nothing crosses


def test_merge_takes_each_value_from_its_owner(ranks: list[dict[str, Any]]) -> None:
    """Every process offers its rank for centers 5, -1 (the server's id), 60, 0, 40; the merge
    returns the shard owner's value (67 centers: rank 0 trains 0-32, rank 1 33-66, as the shards
    balanced by steps give) and keeps the local value where no process owns the id."""
    for r, rank in enumerate(ranks):
        bounds_of = rank["dfedavgm_bf16"]["merge_check"]
        assert bounds_of == [0.0, float(r), 1.0, 0.0, 1.0], bounds_of


def test_cli_fit_on_two_processes_equals_one(tmp_path: Path) -> None:
    """The issue's command: ``lightning-fed fit --config configs/abps.yaml --fabric.strategy=ddp
    --fabric.devices=2`` (here on CPU, shrunk to 7 centers and 2 rounds), started plainly (Fabric
    starts the second process) and through ``fabric run`` (which starts both): each writes its run
    folder once, with the same rounds.parquet and summary as the one-process run."""
    common = [
        "fit",
        "--config",
        str(ROOT / "configs" / "abps.yaml"),
        "--data.init_args.num_centers=7",
        "--data.init_args.num_stays=1400",
        "--model.init_args.hidden=[16, 8]",
        "--trainer.rounds=2",
        "--comm.class_path=lightning_fed.comm.BFloat16Hook",
        "--logger.enabled=false",
        "--output.progress_bar=false",
        f"--output.root={tmp_path}",
    ]
    ddp = [*common, "--fabric.strategy=ddp", "--fabric.devices=2", "--fabric.accelerator=cpu"]
    launches = {
        "plain": [sys.executable, "-m", "lightning_fed.cli", *ddp, "--output.name=plain"],
        "fabric_run": [
            *(sys.executable, "-m", "lightning.fabric.cli"),  # `fabric run`
            *("--accelerator=cpu", "--strategy=ddp", "--devices=2", str(ROOT / "cli.py")),
            *ddp,
            "--output.name=fabric_run",
        ],
    }
    for name, cmd in launches.items():
        done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stderr[-3000:]}"
    main([*common, "--output.name=one", "--fabric.accelerator=cpu"])
    names = ["one", *launches]
    frames = [
        pl.read_parquet(tmp_path / name / "rounds.parquet").drop(pl.selectors.starts_with("seconds_"))
        for name in names
    ]
    summaries = [json.loads((tmp_path / name / "summary.json").read_text()) for name in names]
    for s in summaries:
        s.pop("wall_seconds"), s.pop("run_dir")
    for frame, summary in zip(frames[1:], summaries[1:], strict=True):
        assert frame.equals(frames[0])
        assert summary == summaries[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
