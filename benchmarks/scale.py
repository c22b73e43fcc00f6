"""Seconds per round on 1 and 2 processes (Fabric DDP on CPU), and the time spent in collectives.

Runs the same federation (default: the synthetic ICU federation of ``configs/abps.yaml``, 230
centers, MortalityMLP, 2 local epochs, batch 128) once per process count, each in its own
``python benchmarks/scale.py --worker`` launch; every process gets ``--threads`` intra-op threads
(default 1: on a small shared machine more threads than free cores oversubscribe OpenMP and run
several times slower, which would hide the scaling). Per run it prints the median over the timed rounds
(the first round is a warm-up and is left out) of:

* ``round``        wall seconds of a round (local training + aggregation + evaluation);
* ``train``        local training, including the all_gather that follows it;
* ``aggregate``    the algorithm's exchange and mixing (ABPS: matching + Shapley), on every rank;
* ``eval``         validation and test AUROC of every center, on every rank;
* ``collectives``  the part of ``train`` spent inside ``fabric.all_gather``;
* ``speedup``      one-process round time over this run's round time.

``--masks`` also times, in this process, the dropout masks of one training round of the same
federation: one shared generator for all centers (the engine's former code) against one stream per
center (:class:`~lightning_fed.engine.packed.CenterStreams`, what DDP equality needs), mask calls of
exactly the shapes the packed engine makes (k active centers x batch x hidden width, per step/layer).

Run: ``python benchmarks/scale.py [--algorithm abps|fedavg] [--centers 230] [--rounds 4] [--threads 1]
[--masks]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

KEYS = ("seconds_train", "seconds_aggregate", "seconds_eval", "seconds_collectives")

#: The checkout this file belongs to: its ``lightning_fed`` is the one measured (workers inherit it).
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _federation_parts(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    from lightning_fed.algorithms import ABPS, FedAvg
    from lightning_fed.data import SyntheticICU
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig

    data = SyntheticICU(num_centers=args.centers, num_stays=args.stays).build(0)
    algorithm = ABPS() if args.algorithm == "abps" else FedAvg()
    trainer = TrainerConfig(rounds=args.rounds, local_epochs=2, batch_size=128)
    return data, MortalityMLP(), algorithm, trainer


def worker(args: argparse.Namespace) -> None:
    """One launch: ``args.processes`` ranks train the federation; rank 0 prints one JSON line."""
    import logging
    import warnings

    from lightning.fabric import Fabric

    from lightning_fed.callbacks import Callback
    from lightning_fed.federation import Federation

    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")

    class Times(Callback):
        def __init__(self) -> None:
            self.rounds: list[dict[str, float]] = []

        def on_round_end(self, federation: Any, result: Any) -> None:
            self.rounds.append({"seconds": result.seconds, **{k: result.stats[k] for k in KEYS}})

    times = Times()
    strategy = "ddp" if args.processes > 1 else "auto"
    fabric = Fabric(accelerator="cpu", strategy=strategy, devices=args.processes, callbacks=[times])
    fabric.launch()
    data, module, algorithm, trainer = _federation_parts(args)
    federation = Federation(data, module, algorithm, trainer, fabric=fabric, seed=0)
    summary = federation.fit()  # under DDP evaluation is a collective: every rank runs it
    if fabric.is_global_zero:
        timed = times.rounds[1:] or times.rounds
        out = {k: statistics.median(r[k] for r in timed) for k in ("seconds", *KEYS)}
        out.update(processes=args.processes, threads=int(os.environ.get("OMP_NUM_THREADS", "0")))
        out["test_auroc_mean"] = summary["test_auroc_mean"]
        print("RESULT " + json.dumps(out), flush=True)


def run_launch(args: argparse.Namespace, processes: int) -> dict[str, Any]:
    """``processes`` ranks in a fresh launch, ``args.threads`` threads each."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=path)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", f"--processes={processes}"]
    cmd += [f"--algorithm={args.algorithm}", f"--centers={args.centers}", f"--stays={args.stays}"]
    cmd += [f"--rounds={args.rounds}"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{processes}-process run failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def time_masks(args: argparse.Namespace) -> None:
    """Dropout masks of one round of the federation: one shared generator vs one stream per center."""
    import torch

    from lightning_fed.engine import PackedEngine
    from lightning_fed.engine.packed import CenterStreams
    from lightning_fed.models.mlp import dropout_mask
    from lightning_fed.seeding import torch_generator

    data, module, _, trainer = _federation_parts(args)
    module.set_num_features(data.num_features)
    engine = PackedEngine()
    train = [(c.x_train, c.y_train) for c in data.centers]
    engine.setup(module, train, batch_size=trainer.batch_size, epochs=trainer.local_epochs, seed=0)
    shapes = [(k, trainer.batch_size, h) for k in engine.active for h in module.hidden]
    ids = engine.center_ids[engine.order].tolist()

    def shared(r: int) -> None:
        gen = torch_generator(0, "dropout", r)
        for shape in shapes:
            dropout_mask(torch.empty(shape), module.dropout, gen)

    def per_center(r: int) -> None:
        streams = CenterStreams(0, r, ids, torch.device("cpu"))
        for shape in shapes:
            dropout_mask(torch.empty(shape), module.dropout, streams)

    def packed_round(r: int) -> None:
        engine.train_round(r)

    results: dict[str, list[float]] = {"shared generator": [], "per-center streams": [], "packed round": []}
    for r in range(5):  # interleaved, so machine load hits both alike
        for name, fn in zip(results, (shared, per_center, packed_round), strict=True):
            start = time.perf_counter()
            fn(r)
            results[name].append(time.perf_counter() - start)
    calls = len(shapes)
    print(f"\ndropout masks of one round ({calls} mask calls, {torch.get_num_threads()} threads):")
    for name, values in results.items():
        print(f"  {name:<20} {statistics.median(values[1:]):.3f} s")
    extra = statistics.median(results["per-center streams"][1:]) - statistics.median(
        results["shared generator"][1:]
    )
    print(f"  per-center streams cost {extra:+.3f} s per round over one shared generator")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", choices=("abps", "fedavg"), default="abps")
    parser.add_argument("--centers", type=int, default=230)
    parser.add_argument("--stays", type=int, default=71000)
    parser.add_argument("--rounds", type=int, default=4, help="rounds per run (the first is a warm-up)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    parser.add_argument("--masks", action="store_true", help="also time old vs new dropout-mask code")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    cores = os.cpu_count() or 1
    print(f"{args.algorithm}, {args.centers} centers, {cores} cores, median of rounds 2..{args.rounds}")
    header = f"{'processes':>9} {'threads':>7} {'round':>7} {'train':>7} {'aggregate':>9} {'eval':>6}"
    print(header + f" {'collectives':>11} {'speedup':>7} {'test AUROC':>10}")
    base = None
    for processes in (1, 2):
        r = run_launch(args, processes)
        base = base if base is not None else r["seconds"]
        print(
            f"{processes:>9} {r['threads']:>7} {r['seconds']:>7.3f} {r['seconds_train']:>7.3f} "
            f"{r['seconds_aggregate']:>9.3f} {r['seconds_eval']:>6.3f} {r['seconds_collectives']:>11.3f} "
            f"{base / r['seconds']:>7.2f} {r['test_auroc_mean']:>10.4f}"
        )
    if args.masks:
        import torch

        torch.set_num_threads(args.threads)
        time_masks(args)


if __name__ == "__main__":
    main()
