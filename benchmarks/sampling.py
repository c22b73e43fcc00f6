"""Client sampling's local training: only the sampled centers against every center and a restore.

With ``trainer.centers_per_round: K`` a round's sampled centers train and the others take no part
(:mod:`lightning_fed.comm.sampling`). The engine trains the participants alone
(:attr:`Engine.participants <lightning_fed.engine.base.Engine.participants>`: an engine over them,
their rows written back); before it, every center trained and the others were put back
(:meth:`Engine.keep_rows <lightning_fed.engine.base.Engine.keep_rows>`), which is the reference here.
Both are timed side by side in one process on the same federation and the same round-start state
(alternating, so a load change hits both), and their parameters and optimizer states after the
round are checked to be the same bits.

Prints, per ``K``, the median seconds of a round's local training over ``--rounds`` rounds and
``--repeats`` repeats for both, their ratio, and the one-minute load average before and after.

Run: ``python benchmarks/sampling.py [--config configs/fedavg.yaml] [--per-round 23 0.5]
[--rounds 5] [--repeats 3] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from norm_spread import build_federation


def _same(a: object, b: object) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


def time_rounds(config: str, per_round: float, rounds: int) -> tuple[list[float], list[float], bool]:
    """Seconds of each round's local training, participants only and every center + restore, and
    whether they agreed to the bit in every round."""
    value = int(per_round) if float(per_round).is_integer() and per_round >= 1 else per_round
    fed = build_federation(config, rounds, {}, (f"--trainer.centers_per_round={value}",))
    engine, algorithm = fed.engine, fed.algorithm
    alone, everyone, same = [], [], True
    for r in range(rounds):
        sampled = fed.participants(r)
        start = copy.deepcopy(engine.state_dict())
        t0 = time.perf_counter()
        before = copy.deepcopy(engine.state_dict())
        algorithm.train_round(engine, r)
        engine.keep_rows(before, ~sampled)
        everyone.append(time.perf_counter() - t0)
        reference = copy.deepcopy(engine.state_dict())
        engine.load_state_dict(start)
        t0 = time.perf_counter()
        engine.participants = sampled
        try:
            algorithm.train_round(engine, r)
        finally:
            engine.participants = None
        alone.append(time.perf_counter() - t0)
        same &= _same(engine.state_dict(), reference)
    return alone, everyone, same


def main() -> None:
    """Parse the arguments and print the side-by-side table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/fedavg.yaml")
    parser.add_argument("--per-round", type=float, nargs="+", default=[23, 0.5])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"load average before: {os.getloadavg()[0]:.2f}; {args.threads} torch thread(s); {args.config}")
    print("| centers_per_round | sampled only (s/round) | every center + restore | ratio | same bits |")
    print("|---|---|---|---|---|")
    for k in args.per_round:
        alone, everyone, same = [], [], True
        for _ in range(args.repeats):
            a, e, s = time_rounds(args.config, k, args.rounds)
            alone.append(statistics.median(a))
            everyone.append(statistics.median(e))
            same &= s
        ma, me = statistics.median(alone), statistics.median(everyone)
        spread = f" (repeats {min(e / a for a, e in zip(alone, everyone, strict=True)):.1f}-" + (
            f"{max(e / a for a, e in zip(alone, everyone, strict=True)):.1f}x)"
        )
        print(f"| {k:g} | {ma:.3f} | {me:.3f} | {me / ma:.1f}x{spread} | {'yes' if same else 'NO'} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
