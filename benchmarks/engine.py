"""Seconds per round of local training at 230 centers: packed vs sequential vs Trainer-per-center.

Measured side by side in one run on the default synthetic ICU federation (230 centers, ~57k
training rows, MortalityMLP, Adam, batch 128, 2 local epochs):

* packed      ``PackedEngine.train_round`` (all centers at once, prefix schedule);
* sequential  ``SequentialEngine.train_round`` (a loop over centers with torch.optim.Adam);
* trainer     one ``lightning.pytorch.Trainer.fit`` per center per round (what most Lightning
              integrations do), timed over every center for one round.

Run: ``python benchmarks/engine.py [--rounds 3] [--full-run]``. ``--full-run`` also times the whole
50-round 230-center FedAvg run (training, aggregation and evaluation) through ``Federation.fit``.
Targets on 2 CPU cores: packed >= 3x sequential, >= 15x Trainer-per-center; full run < 90 s.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
import warnings

import torch


def _time_engine(engine, module, train, rounds: int) -> float:
    engine.setup(module, train, batch_size=128, epochs=2, seed=0)
    engine.train_round(0)  # warm-up (allocations, first-call overheads)
    times = []
    for r in range(1, rounds + 1):
        t = time.perf_counter()
        engine.train_round(r)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _time_trainer_per_center(module, train) -> float:
    import copy

    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    models = [copy.deepcopy(module) for _ in train]
    start = time.perf_counter()
    for model, (x, y) in zip(models, train, strict=True):
        trainer = pl.Trainer(
            max_epochs=2,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True))
    return time.perf_counter() - start


def _full_run() -> float:
    from lightning.fabric import Fabric

    from lightning_fed.algorithms import FedAvg
    from lightning_fed.data import SyntheticICU
    from lightning_fed.federation import Federation
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig

    start = time.perf_counter()
    data = SyntheticICU().build(0)
    fed = Federation(
        data, MortalityMLP(), FedAvg(), TrainerConfig(rounds=50), Fabric(accelerator="cpu", devices=1)
    )
    summary = fed.fit()
    seconds = time.perf_counter() - start
    auroc = summary["test_auroc_mean"]
    print(f"full run: 50 rounds x 230 centers FedAvg in {seconds:.1f} s (test AUROC {auroc:.4f})")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per engine (median reported)")
    parser.add_argument("--full-run", action="store_true", help="also time the full 50-round FedAvg run")
    args = parser.parse_args()

    from lightning_fed.data import SyntheticICU
    from lightning_fed.engine import PackedEngine, SequentialEngine
    from lightning_fed.models import MortalityMLP

    data = SyntheticICU().build(0)
    train = [(c.x_train, c.y_train) for c in data.centers]
    torch.manual_seed(0)
    module = MortalityMLP(in_features=data.num_features)
    print(
        f"{data.num_centers} centers, {sum(len(y) for _, y in train)} training rows, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    packed = _time_engine(PackedEngine(), module, train, args.rounds)
    print(f"packed      {packed:8.3f} s/round")
    sequential = _time_engine(SequentialEngine(), module, train, args.rounds)
    print(f"sequential  {sequential:8.3f} s/round")
    trainer = _time_trainer_per_center(module, train)
    print(f"trainer     {trainer:8.3f} s/round (one Trainer.fit per center)")
    print(f"ratio sequential / packed = {sequential / packed:.1f}x (target >= 3x)")
    print(f"ratio trainer / packed    = {trainer / packed:.1f}x (target >= 15x)")
    if args.full_run:
        _full_run()


if __name__ == "__main__":
    main()
