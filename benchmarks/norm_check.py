"""The update bound's norm test on one round of peer messages: chunked updates against materialized
anchors.

``NormBound`` (the ``fit`` default) checks message ``e`` against its receiver's round-start model
``a_e``: it needs ``||m_e||``, ``||m_e - a_e||`` and ``||a_e||``. Materializing ``a_e`` for every
message copies ``E x |W|`` numbers and their difference as many again (at 3,680 centers and
``kappa = 3``: 11,040 messages of the 64.5 KB MLP, 0.7 GB each), and norms every anchor once per
message. :meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>` instead subtracts each chunk's
own anchor rows (``message_norms(received, minus=(start, owner))``) and norms every center's
round-start model once a round. This script times both on the same synthetic round, side by side
(alternating, ``--repeats`` times), checks that their verdicts and norms are the same bits, and
prints the peak RSS each adds (``VmHWM`` reset before each call; Linux).

Run: ``python benchmarks/norm_check.py [--centers 920 3680] [--kappa 3] [--repeats 3] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from lightning_fed.comm import NormBound, Wire
from lightning_fed.comm.wire import message_norms
from lightning_fed.models import MortalityMLP

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_centers import hwm_mb, reset_hwm


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def materialized(
    bound: NormBound, start: dict[str, torch.Tensor], got: dict[str, torch.Tensor], owner: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The verdict with every anchor copied out (how the wire computed it before): ``(ok, update)``."""
    anchors = {n: start[n].index_select(0, owner) for n in got}
    update = message_norms({n: got[n] - anchors[n] for n in got})
    ok, _ = bound.verdict("centers", 0, message_norms(got), update, message_norms(anchors))
    return ok, update


def measure(centers: int, kappa: int, repeats: int) -> dict[str, float]:
    """Seconds (medians) and added peak MB of both ways on one synthetic round of ``centers``."""
    g = torch.Generator().manual_seed(0)
    shapes = {n: p.shape for n, p in MortalityMLP(in_features=44).named_parameters()}
    start = {n: torch.randn(centers, *s, generator=g) for n, s in shapes.items()}
    src = torch.randint(0, centers, (kappa * centers,), generator=g)
    dst = (src + torch.randint(1, centers, (kappa * centers,), generator=g)) % centers
    got = {n: t.index_select(0, src) for n, t in start.items()}  # a peer sends its round-start model
    times: dict[str, list[float]] = {"materialized": [], "chunked": []}
    peaks: dict[str, list[float]] = {"materialized": [], "chunked": []}
    same = True
    for _ in range(repeats):
        wire = Wire(norm_bound=NormBound())
        wire.start_round(0, start)
        base = _rss_mb()
        reset_hwm()
        t0 = time.perf_counter()
        want, _ = materialized(NormBound(), start, got, dst)
        times["materialized"].append(time.perf_counter() - t0)
        peaks["materialized"].append((hwm_mb() or float("nan")) - base)
        base = _rss_mb()
        reset_hwm()
        t0 = time.perf_counter()
        ok = wire.accept(got, None, 0, src=src, dst=dst)
        times["chunked"].append(time.perf_counter() - t0)
        peaks["chunked"].append((hwm_mb() or float("nan")) - base)
        same &= torch.equal(ok, want)
    out = {f"{k}_s": statistics.median(v) for k, v in times.items()}
    out.update({f"{k}_mb": statistics.median(v) for k, v in peaks.items()})
    out["same"] = float(same)
    return out


def main() -> None:
    """Parse the arguments and print the side-by-side table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--centers", type=int, nargs="+", default=[920, 3680])
    parser.add_argument("--kappa", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    print(f"load average before: {load:.2f}; {args.threads} torch thread(s); kappa {args.kappa}")
    print("| centers | messages | materialized s | chunked s | ratio | added peak MB (mat. / chunk) | same |")
    print("|---|---|---|---|---|---|---|")
    for c in args.centers:
        r = measure(c, args.kappa, args.repeats)
        print(
            f"| {c} | {args.kappa * c} | {r['materialized_s']:.3f} | {r['chunked_s']:.3f} | "
            f"{r['materialized_s'] / r['chunked_s']:.1f}x | "
            f"{r['materialized_mb']:.0f} / {r['chunked_mb']:.0f} | "
            f"{'yes' if r['same'] else 'NO'} |"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
