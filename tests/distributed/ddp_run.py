"""Run FedAvg and ABPS for a few rounds on a tiny federation; save what every rank saw.

Used by ``test_ddp.py`` in two ways: imported, :func:`run_all` gives the one-process reference;
run as ``python -m tests.distributed.ddp_run OUT_DIR N`` it launches ``N`` CPU processes with Fabric
DDP (gloo) and each rank saves its results to ``OUT_DIR/rank{r}.pt``; a third argument ``cuda`` runs
one process per GPU instead (NCCL).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import ABPS, FedAvg
from lightning_fed.callbacks import Callback
from lightning_fed.comm import BFloat16Hook, Wire
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

#: 67 centers of very different sizes: uneven shards on 2 processes, and more than one chunk of 64
#: models in every evaluation, so the ranks split the predictions too.
SIZES = ([40, 7, 130, 3, 64, 90, 18] * 10)[:67]
ROUNDS = 3


class Record(Callback):
    """Per-round metrics and the partner sets the algorithm chose."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, Any]] = []

    def on_round_end(self, federation: Any, result: Any) -> None:
        self.rounds.append(
            {
                "train_loss": result.train_loss.clone(),
                "val_auroc": result.val_auroc.clone(),
                "test_auroc": result.test_auroc.clone(),
                "bytes_per_center": result.bytes_per_center.clone(),
                "partners": [list(p) for p in getattr(federation.algorithm, "last_partners", [])],
            }
        )


#: Each run: its algorithm, wire hook (None: identity) and extra trainer settings. ``fedavg_sampled``
#: trains 20 of the 67 centers a round (client sampling: each rank trains its shard's sampled ones).
RUNS: dict[str, tuple[type, type | None, dict[str, Any]]] = {
    "fedavg": (FedAvg, None, {}),
    "abps": (ABPS, BFloat16Hook, {}),
    "fedavg_sampled": (FedAvg, None, {"centers_per_round": 20}),
}


def run_one(fabric: Fabric, name: str) -> dict[str, Any]:
    """One federation of :data:`RUNS`, ``ROUNDS`` rounds."""
    record = Record()
    fabric._callbacks = [record]
    algorithm, hook, extra = RUNS[name]
    fed = Federation(
        make_federation(SIZES),
        MortalityMLP(hidden=(16, 8), dropout=0.2),
        algorithm(),
        TrainerConfig(rounds=ROUNDS, local_epochs=2, batch_size=16, **extra),
        fabric=fabric,
        seed=7,
        wire=Wire(hook=None if hook is None else hook()),
    )
    summary = fed.fit()
    return {
        "summary": {k: v for k, v in summary.items() if k != "wall_seconds"},
        "rounds": record.rounds,
        "params": {n: t.cpu() for n, t in fed.engine.get_params().items()},
        "ledger": fed.wire.ledger.table(),
        "state": fed.state_dict(),
        "collective_seconds": fed.collective_seconds,
    }


def run_all(fabric: Fabric) -> dict[str, dict[str, Any]]:
    """Every run of :data:`RUNS` with the same Fabric."""
    return {name: run_one(fabric, name) for name in RUNS}


def main(out: Path, processes: int, accelerator: str = "cpu") -> None:
    torch.set_num_threads(1)
    fabric = Fabric(accelerator=accelerator, strategy="ddp", devices=processes)
    fabric.launch()
    results = run_all(fabric)
    results["world_size"] = fabric.world_size
    torch.save(results, out / f"rank{fabric.global_rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:4])
