"""Damage of a one-center, one-round scaled-payload attack under the old and the new norm defence.

FedAvg and ABPS (``configs/fedavg.yaml``, ``configs/abps.yaml``, the config's rounds, ``--seed``
11) are run clean and with one center (default: the largest, by training rows) sending ``X`` times
its honest message in one round (``faults.corrupt = {round: {center: {scale: X}}}``, default round
5, ``X`` in 4, 10, 100, 1000; 4 is below the new threshold, to show what an attack that passes
does), each under

* the old defence: :class:`~lightning_fed.comm.wire.Wire` with ``max_norm_ratio=1e3`` (the
  reference is unchanged: the receiver's own shared-parameter norm, the server's median upload norm);
* the new default: ``Wire()`` (``max_norm_ratio`` = :data:`~lightning_fed.comm.wire.MAX_NORM_RATIO`).

Printed: one row per (method, attack) with the final mean test AUROC and the rejected payloads
under each defence, the seconds taken and the load average.

Run: ``python benchmarks/attacks.py [--configs configs/fedavg.yaml configs/abps.yaml] [--seed 11]
[--round 5] [--center C] [--scales 4 10 100 1000] [--no-clean]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from norm_spread import build_federation

from lightning_fed.comm import FaultInjection
from lightning_fed.comm.wire import MAX_NORM_RATIO

#: The defences compared: name -> Wire keyword arguments.
DEFENCES = {"old": {"max_norm_ratio": 1e3}, "new": {}}


def largest_center(config: str, seed: int) -> int:
    """The center with the most training rows in ``config``'s federation (built, not trained)."""
    fed = build_federation(config, 1, {}, (f"--seed={seed}",))
    return int(fed.data.n_train.argmax())


def run(config: str, seed: int, faults: FaultInjection | None, defence: dict) -> tuple[float, int]:
    """Final mean test AUROC and rejected payloads of one run."""
    fed = build_federation(config, 10**6, {"faults": faults, **defence}, (f"--seed={seed}",))
    summary = fed.fit()
    return float(summary["test_auroc_mean"]), int(summary["rejected_payloads"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["configs/fedavg.yaml", "configs/abps.yaml"])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--round", type=int, default=5)
    parser.add_argument("--center", type=int, default=None, help="attacker (default: the largest center)")
    parser.add_argument("--scales", type=float, nargs="+", default=[4.0, 10.0, 100.0, 1000.0])
    parser.add_argument("--no-clean", action="store_true", help="leave out the clean runs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    center = args.center if args.center is not None else largest_center(args.configs[0], args.seed)
    print(
        f"seed {args.seed}; attacker: center {center}, round {args.round}; "
        f"old defence max_norm_ratio 1e3, new {MAX_NORM_RATIO:g}",
        flush=True,
    )
    attacks = ({} if args.no_clean else {"clean": None}) | {
        f"scale {x:g}": FaultInjection(corrupt={args.round: {center: {"scale": x}}}) for x in args.scales
    }
    print(f"| {'method':8s} | {'attack':10s} | AUROC old | rejected old | AUROC new | rejected new | s |")
    print("|" + "|".join("---" for _ in range(7)) + "|", flush=True)
    for config in args.configs:
        method = Path(config).stem
        for attack, faults in attacks.items():
            t0 = time.perf_counter()
            (auc_old, rej_old), (auc_new, rej_new) = (
                run(config, args.seed, faults, defence) for defence in DEFENCES.values()
            )
            print(
                f"| {method:8s} | {attack:10s} | {auc_old:.4f} | {rej_old:>12d} | {auc_new:.4f} | "
                f"{rej_new:>12d} | {time.perf_counter() - t0:.0f} |",
                flush=True,
            )
    print(f"{time.perf_counter() - start:.0f} s in all; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
