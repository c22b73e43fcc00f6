"""Seconds per packed round at 1 thread, at every core and at ``trainer.threads: auto``, idle and busy.

Two federations of the built-in synthetic ICU source (MortalityMLP, Adam, batch 128, 2 local
epochs): a small one (``--small``, default 4 centers / 1,200 stays: the tiny federation ``auto``
gives one thread) and a large one (``--large``, default 230 centers / 71,000 stays). Each is timed
twice: with the machine as it is ("idle" when nothing else runs) and with a second fit running
("busy": a child process training the large federation with every core in a loop, what a second
fit of a ``sweep`` without a share of the cores would do). Per setting the median of ``--rounds``
rounds after one warm-up round; the settings alternate round by round so a change in load hits all
alike. Every row prints the 1-minute load average: on a shared machine only ratios measured side
by side hold, and the lead reruns on an idle machine.

    OMP_NUM_THREADS= python benchmarks/threads.py --rounds 5

``OMP_NUM_THREADS`` must be unset for ``auto`` to choose (a set value wins, by design).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lightning_fed.algorithms import FedAvg  # noqa: E402
from lightning_fed.data import SyntheticICU  # noqa: E402
from lightning_fed.federation import Federation  # noqa: E402
from lightning_fed.models import MortalityMLP  # noqa: E402
from lightning_fed.threads import available_cores  # noqa: E402
from lightning_fed.types import TrainerConfig  # noqa: E402


def build(centers: int, stays: int) -> Federation:
    """A FedAvg federation whose ``trainer.threads`` is ``auto`` (its choice in ``.threads``)."""
    data = SyntheticICU(num_centers=centers, num_stays=stays).build(0)
    return Federation(data, MortalityMLP(), FedAvg(), TrainerConfig(rounds=1))


def time_settings(fed: Federation, settings: dict[str, int], rounds: int) -> dict[str, float]:
    """Median seconds of ``fed.engine.train_round`` per thread setting, alternating settings."""
    times: dict[str, list[float]] = {name: [] for name in settings}
    fed.engine.train_round(0)
    for r in range(rounds):
        for name, threads in settings.items():
            torch.set_num_threads(threads)
            start = time.perf_counter()
            fed.engine.train_round(r + 1)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def second_fit(centers: int, stays: int) -> subprocess.Popen:
    """A child training the large federation with every core, round after round, until killed."""
    code = (
        f"import sys, torch; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.threads import build; "
        f"fed = build({centers}, {stays}); torch.set_num_threads({available_cores()}); r = 0\n"
        "while True: fed.engine.train_round(r); r += 1"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per setting (median)")
    parser.add_argument("--small", type=int, nargs=2, default=[4, 1200], metavar=("CENTERS", "STAYS"))
    parser.add_argument("--large", type=int, nargs=2, default=[230, 71000], metavar=("CENTERS", "STAYS"))
    parser.add_argument("--no-busy", action="store_true", help="skip the rows with a second fit running")
    args = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS"):
        print(f"note: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} is set, so 'auto' keeps it")
    cores = available_cores()
    feds = {"small": build(*args.small), "large": build(*args.large)}
    print(f"{cores} cores; torch {torch.__version__}")
    print("| federation | machine | auto's choice | 1 thread s | all cores s | auto s | all/1 | load 1 min |")
    print("|---|---|---|---|---|---|---|---|")
    for machine in ("idle", "busy"):
        if machine == "busy" and args.no_busy:
            break
        other = second_fit(*args.large) if machine == "busy" else None
        try:
            if other is not None:
                time.sleep(8.0)  # let the second fit build its data and start training
            for name, fed in feds.items():
                auto = fed.threads.threads
                settings = {"one": 1, "all": cores, "auto": auto}
                med = time_settings(fed, settings, args.rounds)
                print(
                    f"| {name} ({fed.data.num_centers} centers) | {machine} | {fed.threads.describe()} | "
                    f"{med['one']:.3f} | {med['all']:.3f} | {med['auto']:.3f} | "
                    f"{med['all'] / med['one']:.2f} | {os.getloadavg()[0]:.2f} |",
                    flush=True,
                )
        finally:
            if other is not None:
                other.kill()
                other.wait()


if __name__ == "__main__":
    main()
