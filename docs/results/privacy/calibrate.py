"""Noise multipliers that hit a target epsilon for the privacy-utility table (docs/results/privacy).

Sample level (DP-SGD): the run's ``privacy/epsilon`` is the largest over the centers, which for a
fixed ``sigma`` is reached by the center with the highest sampling rate ``q_c = min(1, B / n_c)``
(ties: the most steps); the bisection runs on the centers with the ``k`` smallest ``n_c`` (the
largest ``q_c``). Client level (DP-FedAvg): one event per round at ``q = K / C``.

    python docs/results/privacy/calibrate.py sample 40 20000 10   # centers, stays, rounds
    python docs/results/privacy/calibrate.py client 230 71000 50 23
"""

from __future__ import annotations

import math
import sys

from lightning_fed.data import SyntheticICU
from lightning_fed.dp.accountant import RdpLedger
from lightning_fed.engine.schedule import steps_per_round

TARGETS = (1.0, 3.0, 8.0)
DELTA, BATCH, EPOCHS = 1e-5, 128, 2


def epsilon(sigma: float, rates: list[float], steps: list[int]) -> float:
    ledger = RdpLedger(sigma, DELTA, len(rates))
    ledger.record(rates, steps)
    return max(ledger.epsilons())


def solve(target: float, rates: list[float], steps: list[int]) -> float:
    lo, hi = 0.3, 100.0
    for _ in range(14):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if epsilon(mid, rates, steps) > target else (lo, mid)
    return hi


def main() -> None:
    level, centers, stays, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if level == "client":
        per_round = int(sys.argv[5])
        rates, steps = [per_round / centers], [rounds]
    else:
        data = SyntheticICU(num_centers=centers, num_stays=stays).build(0)
        sizes = sorted(c.n_train for c in data.centers)[:3]
        rates = [min(1.0, BATCH / n) for n in sizes]
        steps = [rounds * steps_per_round(n, BATCH, EPOCHS) for n in sizes]
        print("smallest centers' rows:", sizes)
    for target in TARGETS:
        sigma = solve(target, rates, steps)
        reached = epsilon(sigma, rates, steps)
        print(f"epsilon {target:g}: noise_multiplier {sigma:.3f} (epsilon {reached:.3f})")


if __name__ == "__main__":
    main()
