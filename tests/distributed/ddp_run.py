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

from lightning_fed.algorithms import ABPS, DFedAvgM, EdgeDRM, FedAvg
from lightning_fed.callbacks import Callback
from lightning_fed.comm import BFloat16Hook, NormBound, Wire
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation
from tests.referral.toy import ToyModule

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


#: Each run: its algorithm, wire hook (None: identity), extra trainer settings and the wire's NormBound
#: settings (None: none). ``fedavg_sampled`` trains 20 of the 67 centers a round (client sampling: each rank
#: trains its shard's sampled ones); ``fedavg_bf16`` is the same run on a bfloat16 wire. It and
#: ``dfedavgm_bf16`` (with a NormBound) exchange the trained rows in bfloat16 (methods audited to need
#: only each receiver's own rows); ABPS's rows cross in float32.
RUNS: dict[str, tuple[type, type | None, dict[str, Any], dict[str, Any] | None]] = {
    "fedavg": (FedAvg, None, {}, None),
    "abps": (ABPS, BFloat16Hook, {}, None),
    "fedavg_sampled": (FedAvg, None, {"centers_per_round": 20}, None),
    "fedavg_bf16": (FedAvg, BFloat16Hook, {"centers_per_round": 20}, None),
    # a tight clipping bound: most messages are clipped by a factor of the round's median update,
    # which every process must compute from the owners' update norms to get the same bits
    "dfedavgm_bf16": (DFedAvgM, BFloat16Hook, {}, {"max_update_ratio": 1.05, "mode": "clip"}),
    # stage I on bf16 rows, then stage II (encoder consensus and heads) from the exact rows
    "edgedrm_bf16": (EdgeDRM, BFloat16Hook, {}, None),
}

#: Runs whose model or method settings are not the defaults (EdgeDRM refits a ``head``).
MODELS = {"edgedrm_bf16": lambda: ToyModule(num_features=6, dim=4)}
ALGORITHM_ARGS: dict[str, dict[str, Any]] = {"edgedrm_bf16": {"stage2_epochs": 3, "consensus_steps": 1}}


def run_one(fabric: Fabric, name: str) -> dict[str, Any]:
    """One federation of :data:`RUNS`, ``ROUNDS`` rounds."""
    record = Record()
    fabric._callbacks = [record]
    algorithm, hook, extra, bound = RUNS[name]
    fed = Federation(
        make_federation(SIZES),
        MODELS.get(name, lambda: MortalityMLP(hidden=(16, 8), dropout=0.2))(),
        algorithm(**ALGORITHM_ARGS.get(name, {})),
        TrainerConfig(rounds=ROUNDS, local_epochs=2, batch_size=16, **extra),
        fabric=fabric,
        seed=7,
        wire=Wire(
            hook=None if hook is None else hook(), norm_bound=None if bound is None else NormBound(**bound)
        ),
    )
    summary = fed.fit()
    timer = getattr(fed.engine, "timer", None)
    return {
        "summary": {k: v for k, v in summary.items() if k != "wall_seconds"},
        "rounds": record.rounds,
        "params": {n: t.cpu() for n, t in fed.engine.get_params().items()},
        "ledger": fed.wire.ledger.table(),
        "state": fed.state_dict(),
        "collective_seconds": fed.collective_seconds,
        # bytes this process contributed to collectives, by dtype (none in one process)
        "sent": {} if timer is None else {what: dict(book) for what, book in timer.sent.items()},
        "gather_note": getattr(fed.engine, "gather_note", ""),
        "merge_check": _merge_check(fed),
    }


def _merge_check(fed: Federation) -> list[int] | None:
    """Each process offers its rank for every center; the merge must return each center's owner."""
    engine = fed.engine
    if not hasattr(engine, "merge_by_owner"):
        return None
    centers = torch.tensor([5, -1, 60, 0, 40])
    return engine.merge_by_owner(torch.full((5,), float(fed.fabric.global_rank)), centers).tolist()


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
