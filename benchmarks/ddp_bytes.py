"""Bytes that cross between DDP processes per round, by what they carry and dtype (issue 28).

Runs one federation (``SyntheticICU``, ``--centers`` centers of about 40 stays, the default
``MortalityMLP``, ``--rounds`` rounds, evaluation every ``--eval-every`` rounds) for each method and
wire on ``--processes`` CPU processes (Fabric DDP over gloo) and on one process, and prints what
each process contributed to the collectives, per round:

* ``rows``: the trained rows after local training (with the bit-cast losses and flags);
* ``chunk rows``: the rows that complete another process's prediction chunk (evaluation);
* ``exact rows``: every center's full-precision rows, gathered when evaluation, a checkpoint or the
  final stage needs them after a round whose rows crossed in the wire's dtype;
* ``logits``: evaluation's (and ABPS's utility) predictions;
* ``owner values``: per-receiver norms taken from each receiver's process (the wire's checks);
* ``optimizer state``: a checkpoint's (not taken here).

One process exchanges nothing (every entry 0). Usage::

    python benchmarks/ddp_bytes.py --centers 230 --rounds 4 --processes 2

The multi-process run re-executes this script in each process (Fabric's launcher); rank 0 prints.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: ``name: (algorithm class name, wire hook class name or None)``.
RUNS = {
    "FedAvg, float32 wire": ("FedAvg", None),
    "FedAvg, bf16 wire": ("FedAvg", "BFloat16Hook"),
    "DFedAvgM, bf16 wire": ("DFedAvgM", "BFloat16Hook"),
    "ABPS, bf16 wire": ("ABPS", "BFloat16Hook"),
}


def worker(args: argparse.Namespace, out: Path) -> None:
    """One process of the run: every entry of :data:`RUNS`; rank 0 writes the byte books to ``out``."""
    import torch
    from lightning.fabric import Fabric

    from lightning_fed import algorithms, comm
    from lightning_fed.data import IID, SyntheticICU
    from lightning_fed.federation import Federation
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig

    torch.set_num_threads(1)
    strategy = "ddp" if args.processes > 1 else "auto"
    fabric = Fabric(accelerator="cpu", strategy=strategy, devices=args.processes)
    fabric.launch()
    data = SyntheticICU(num_centers=230, num_stays=args.centers * 40, partitioner=IID(args.centers)).build(0)
    books: dict[str, Any] = {}
    for name, (method, hook) in RUNS.items():
        wire = comm.Wire(hook=None if hook is None else getattr(comm, hook)())
        trainer = TrainerConfig(rounds=args.rounds, eval_every=args.eval_every, batch_size=32)
        algorithm = getattr(algorithms, method)()
        fed = Federation(data, MortalityMLP(), algorithm, trainer, fabric=fabric, seed=0, wire=wire)
        fed.fit()
        timer = getattr(fed.engine, "timer", None)
        books[name] = {
            "sent": {} if timer is None else timer.sent,
            "note": getattr(fed.engine, "gather_note", ""),
            "parameters": sum(p.numel() for p in fed.module.parameters()),
        }
    if fabric.global_rank == 0:
        out.write_text(json.dumps(books))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--centers", type=int, default=230)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--eval-every", type=int, default=1)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args, args.worker)
        return
    results = {}
    for processes in (1, args.processes):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "books.json"
            cmd = [sys.executable, __file__, "--centers", str(args.centers), "--rounds", str(args.rounds)]
            cmd += ["--eval-every", str(args.eval_every), "--processes", str(processes), "--worker", str(out)]
            env = dict(os.environ, OMP_NUM_THREADS="1")
            subprocess.run(cmd, check=True, env=env)
            results[processes] = json.loads(out.read_text())
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"{args.centers} centers, {args.rounds} rounds, evaluation every {args.eval_every}; load {load}")
    print(
        "MB each process contributes per round (exact rows: per run, the first gather and the final stage's)"
    )
    for processes, books in results.items():
        for name, book in books.items():
            parts, per_round = [], 0.0
            for what, by_dtype in book["sent"].items():
                for dtype, n in by_dtype.items():
                    once = what == "exact rows"
                    mb = n / 1e6 if once else n / args.rounds / 1e6
                    per_round += 0.0 if once else mb
                    parts.append(
                        f"{what} {dtype.removeprefix('torch.')} {mb:.3f}{' per run' if once else ''}"
                    )
            detail = ", ".join(parts) or "nothing"
            print(f"{processes} process(es) | {name}: {per_round:.3f} MB/round ({detail})")
            if book["note"]:
                print(f"    {book['note']}")


if __name__ == "__main__":
    main()
