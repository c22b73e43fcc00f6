"""Wall time of a 50-round ABPS run on the default 230-center federation, split by phase.

Prints the total and the seconds spent in local training, partner matching, Shapley credit
(coalition models and their batched evaluation), the rest of aggregation (exchange + mixing) and
evaluation, summed over rounds, next to a FedAvg run of the same length for reference.
Target on 2 CPU cores: the ABPS run, Shapley included, in under 2 minutes.

Run: ``python benchmarks/abps.py [--rounds 50]``.
"""

from __future__ import annotations

import argparse
import time

from lightning.fabric import Fabric

from lightning_fed.algorithms import ABPS, FedAvg
from lightning_fed.callbacks import Callback
from lightning_fed.data import SyntheticICU
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig

PHASES = ("seconds_train", "seconds_matching", "seconds_shapley", "seconds_aggregate", "seconds_eval")


class PhaseTimes(Callback):
    """Sum the per-round timing statistics."""

    def __init__(self) -> None:
        self.totals = dict.fromkeys(PHASES, 0.0)

    def on_round_end(self, federation, result) -> None:
        for key in PHASES:
            self.totals[key] += result.stats.get(key, 0.0)


def run(algorithm, rounds: int) -> tuple[float, dict[str, float], dict]:
    data = SyntheticICU().build(0)
    timer = PhaseTimes()
    start = time.perf_counter()
    fed = Federation(
        data,
        MortalityMLP(),
        algorithm,
        TrainerConfig(rounds=rounds),
        Fabric(accelerator="cpu", callbacks=[timer]),
    )
    summary = fed.fit()
    return time.perf_counter() - start, timer.totals, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    for name, algorithm in (("abps", ABPS()), ("fedavg", FedAvg())):
        total, phases, summary = run(algorithm, args.rounds)
        split = ", ".join(f"{k.removeprefix('seconds_')} {v:.1f} s" for k, v in phases.items())
        print(
            f"{name:7s} {args.rounds} rounds x 230 centers: {total:.1f} s ({split}); "
            f"test AUROC {summary['test_auroc_mean']:.4f}, bytes vs FedAvg {summary['bytes_vs_fedavg']:.3f}"
        )


if __name__ == "__main__":
    main()
