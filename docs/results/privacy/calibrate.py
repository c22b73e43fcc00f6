"""Noise multipliers that hit a target epsilon for the privacy-utility table (docs/results/privacy).

Sample level (DP-SGD): the run's ``privacy/epsilon`` is the largest over the centers; which center
reaches it depends on both its rate ``q_c = min(1, B / n_c)`` and its steps ``T_c`` (a center just
above the batch size has ``q_c`` near 1 and twice the steps of one below it), so the script ranks
every center at a first ``sigma``, bisects on the three highest and checks the answer on all of them.
Client level (DP-FedAvg): one event per round at ``q = K / C``.

    python docs/results/privacy/calibrate.py sample 40 20000 5   # centers, stays, rounds
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
        pairs = sorted(
            {
                (min(1.0, BATCH / c.n_train), rounds * steps_per_round(c.n_train, BATCH, EPOCHS))
                for c in data.centers
            }
        )
        ledger = RdpLedger(5.0, DELTA, len(pairs))
        ledger.record([q for q, _ in pairs], [t for _, t in pairs])
        ranked = sorted(zip(ledger.epsilons(), pairs, strict=True), reverse=True)[:3]
        rates, steps = [q for _, (q, _) in ranked], [t for _, (_, t) in ranked]
        all_rates, all_steps = [q for q, _ in pairs], [t for _, t in pairs]
        print("highest-epsilon centers (q, steps):", [p for _, p in ranked])
    for target in TARGETS:
        sigma = solve(target, rates, steps)
        reached = epsilon(sigma, rates, steps)
        if level != "client":
            reached = epsilon(sigma, all_rates, all_steps)  # the largest over every center
        print(f"epsilon {target:g}: noise_multiplier {sigma:.3f} (epsilon {reached:.3f})")


if __name__ == "__main__":
    main()
