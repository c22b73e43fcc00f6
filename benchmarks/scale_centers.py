"""FedAvg, ABPS and DeceFL per round, and their peak memory, as the number of centers grows (issue 17).

Every configuration runs in its own ``python benchmarks/scale_centers.py --worker`` process, so each
peak RSS is that run's own. The federation is the synthetic ICU source dealt IID into ``C`` centers
of about ``--stays`` stays each (``SyntheticICU(num_centers=230, num_stays=C * stays,
partitioner=IID(C))``: the same per-center size at every scale), MortalityMLP, 2 local epochs, batch
128; FedAvg, ABPS with its defaults (``kappa = 3``, no filter, UCB) and, with ``--algorithms ...
decefl``, DeceFL with its defaults (gossip on a random 4-regular graph). Rows: one per ``C``.

How to read the table (times are medians over rounds 2..R, the first round being a warm-up):

* ``train``       seconds of local training per round (``seconds_train``);
* ``agg``         seconds of the algorithm's ``aggregate`` per round plus installing its result
  (``seconds_aggregate``): for ABPS matching + exchange + mixing + Shapley + posterior update;
* ``match``, ``shap``  the ABPS parts of ``agg`` spent in partner selection and in the Shapley
  credit (coalition models and their batched validation);
* ``setup``       seconds from the worker's start (after imports) to the start of round 1: building
  the data, the engine and the algorithm (for ABPS: its selector and candidate sets);
* ``peak``        the process's peak RSS in MB over the whole run (data, setup, every round);
* ``aggpk``       (ABPS) the peak RSS while aggregating, in MB: above the FedAvg run's ``peak`` it
  is what ABPS adds to the high-water mark;
* ``agg/FA.train``  ABPS ``agg`` over FedAvg ``train`` at the same ``C`` (issue 17's target:
  <= 1.5);
* ``DF ...``      DeceFL's ``train``, ``agg``, ``peak`` and ``aggpk`` (the peer methods' gossip:
  every center sends its model to its 4 neighbours and mixes what arrived).

``load`` is the 1-minute load average when each worker started and ended: a number above the core
count means other processes shared the CPU and the seconds are inflated (the RSS columns are not).
Peaks are read from ``VmHWM`` of ``/proc/self/status``; the aggregation peak resets it through
``/proc/self/clear_refs`` before each aggregation (Linux; elsewhere ``aggpk`` is blank and ``peak``
is ``ru_maxrss``).

``--norm-bound`` checks every message with ``NormBound`` (what ``lightning-fed fit`` does by
default; without it, the Python ``Wire()``'s ratio test).

``--max-centers-per-pass P`` trains every run in passes of at most ``P`` centers
(``trainer.max_centers_per_pass``, :mod:`lightning_fed.engine.passes`: the same bits, round scratch
sized by ``P``); without it, all centers in one pass.

Run: ``python benchmarks/scale_centers.py [--centers 230 920 3680] [--rounds 4] [--stays 309]
[--threads N] [--algorithms fedavg abps decefl] [--max-centers-per-pass P] [--norm-bound]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ALGORITHMS = ("fedavg", "abps", "decefl")
KEYS = ("seconds_train", "seconds_aggregate", "seconds_matching", "seconds_shapley")

#: The checkout this file belongs to: its ``lightning_fed`` is the one measured (workers inherit it).
REPO = Path(__file__).resolve().parents[1]


def hwm_mb() -> float | None:
    """Peak RSS since the last reset (``VmHWM``), MB; None where ``/proc`` has no such line."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def reset_hwm() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux ``clear_refs``); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


class _Peaks:
    """Running peak RSS of the whole run, and of the aggregation phases alone."""

    def __init__(self) -> None:
        self.total = 0.0
        self.aggregate: float | None = None
        self.can_reset = True

    def checkpoint(self) -> None:
        """Fold the peak since the last reset into the run's peak."""
        now = hwm_mb()
        if now is not None:
            self.total = max(self.total, now)

    def around(self, fn: Any) -> Any:
        """``fn`` wrapped so that its own peak is recorded in :attr:`aggregate`."""

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.checkpoint()
            self.can_reset = self.can_reset and reset_hwm()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.can_reset:
                    peak = hwm_mb() or 0.0
                    self.aggregate = max(self.aggregate or 0.0, peak)
                    self.total = max(self.total, peak)
                    reset_hwm()

        return wrapped


def worker(args: argparse.Namespace) -> None:
    """One run; prints one ``RESULT {json}`` line."""
    import logging
    import warnings

    import torch
    from lightning.fabric import Fabric

    from lightning_fed.algorithms import ABPS, DeceFL, FedAvg
    from lightning_fed.allocator import keep_freed_memory
    from lightning_fed.callbacks import Callback
    from lightning_fed.comm import NormBound, Wire
    from lightning_fed.data import IID, SyntheticICU
    from lightning_fed.federation import Federation
    from lightning_fed.models import MortalityMLP
    from lightning_fed.selection.abps.credit import ShapleyCredit
    from lightning_fed.types import TrainerConfig

    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    load_start = os.getloadavg()[0]
    peaks = _Peaks()
    start = time.perf_counter()

    class Times(Callback):
        def __init__(self) -> None:
            self.rounds: list[dict[str, float]] = []
            self.first_round_at: float | None = None

        def on_round_start(self, federation: Any, round_idx: int) -> None:
            if self.first_round_at is None:
                self.first_round_at = time.perf_counter()

        def on_round_end(self, federation: Any, result: Any) -> None:
            self.rounds.append({k: float(result.stats.get(k, 0.0)) for k in KEYS})

    times = Times()
    centers = args.centers[0]
    data = SyntheticICU(num_centers=230, num_stays=centers * args.stays, partitioner=IID(centers)).build(0)
    if args.shapley_chunk_mb is not None:
        ShapleyCredit.chunk_bytes = args.shapley_chunk_mb * 2**20
    if args.keep_freed_memory and not keep_freed_memory().applied:
        raise SystemExit("--keep-freed-memory: lightning_fed.allocator did not apply (see its docstring)")
    algorithm = {"abps": ABPS, "decefl": DeceFL, "fedavg": FedAvg}[args.algorithm]()
    trainer = TrainerConfig(
        rounds=args.rounds, local_epochs=2, batch_size=128, max_centers_per_pass=args.max_centers_per_pass
    )
    fabric = Fabric(accelerator="cpu", devices=1, callbacks=[times])
    wire = Wire(norm_bound=NormBound()) if args.norm_bound else None
    federation = Federation(data, MortalityMLP(), algorithm, trainer, fabric=fabric, seed=0, wire=wire)
    algorithm.aggregate = peaks.around(algorithm.aggregate)  # type: ignore[method-assign]
    summary = federation.fit()
    peaks.checkpoint()
    timed = times.rounds[1:] or times.rounds
    out: dict[str, Any] = {k: statistics.median(r[k] for r in timed) for k in KEYS}
    out["setup"] = (times.first_round_at or start) - start
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux
    out["peak_mb"] = peaks.total if peaks.total else max_rss
    out["aggregate_peak_mb"] = peaks.aggregate if peaks.can_reset else None
    out.update(algorithm=args.algorithm, centers=centers, threads=torch.get_num_threads())
    out.update(load_start=load_start, load_end=os.getloadavg()[0], test_auroc=summary["test_auroc_mean"])
    print("RESULT " + json.dumps(out), flush=True)


def run_worker(args: argparse.Namespace, algorithm: str, centers: int) -> dict[str, Any]:
    """One configuration in a fresh process with ``args.threads`` intra-op threads."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=path)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", f"--algorithm={algorithm}"]
    cmd += [f"--centers={centers}", f"--stays={args.stays}", f"--rounds={args.rounds}"]
    if args.max_centers_per_pass is not None:
        cmd.append(f"--max-centers-per-pass={args.max_centers_per_pass}")
    if args.norm_bound:
        cmd.append("--norm-bound")
    if args.shapley_chunk_mb is not None:
        cmd.append(f"--shapley-chunk-mb={args.shapley_chunk_mb}")
    if args.keep_freed_memory:
        cmd.append("--keep-freed-memory")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{algorithm} at {centers} centers failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def _fmt(value: float | None, width: int, digits: int = 2) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--centers", type=int, nargs="+", default=[230, 920, 3680])
    parser.add_argument("--rounds", type=int, default=4, help="rounds per run (the first is a warm-up)")
    parser.add_argument("--stays", type=int, default=309, help="stays per center (IID partition)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="intra-op threads")
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=["fedavg", "abps"])
    parser.add_argument(
        "--max-centers-per-pass",
        type=int,
        default=None,
        help="train in passes of at most this many centers (trainer.max_centers_per_pass); default one pass",
    )
    parser.add_argument(
        "--norm-bound", action="store_true", help="check messages with NormBound (the fit default)"
    )
    parser.add_argument(
        "--shapley-chunk-mb",
        type=int,
        default=None,
        help="ShapleyCredit.chunk_bytes in MiB (coalition parameters built at once); default the class's",
    )
    parser.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="glibc keeps freed blocks for reuse (lightning_fed.allocator, what `fit` does)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--algorithm", choices=ALGORITHMS, default="abps", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    per_pass = args.max_centers_per_pass
    chunks = "default" if args.shapley_chunk_mb is None else f"{args.shapley_chunk_mb} MiB"
    print(
        f"{os.cpu_count()} cores, {args.threads} threads, {args.stays} stays per center, "
        f"{'one pass' if per_pass is None else f'passes of <= {per_pass} centers'}, "
        f"{'NormBound' if args.norm_bound else 'ratio test'}, Shapley chunks {chunks}, "
        f"{'freed memory kept' if args.keep_freed_memory else 'glibc defaults'}, "
        f"median of rounds 2..{args.rounds}; "
        f"load average at start {os.getloadavg()[0]:.2f}"
    )
    header = (
        f"{'C':>5} | {'FA train':>8} {'FA agg':>7} {'FA peak':>8} {'FA setup':>8} | {'AB train':>8} "
        f"{'AB agg':>7} {'match':>6} {'shap':>6} {'AB peak':>8} {'aggpk':>7} {'AB setup':>8} | "
        f"{'agg/FA.train':>12} |"
        + (
            f" {'DF train':>8} {'DF agg':>7} {'DF peak':>8} {'aggpk':>7} |"
            if "decefl" in args.algorithms
            else ""
        )
        + " load"
    )
    print(header)
    print("-" * len(header))
    for centers in args.centers:
        res = {alg: run_worker(args, alg, centers) for alg in args.algorithms}
        fa, ab, df = res.get("fedavg"), res.get("abps"), res.get("decefl")
        cells = [f"{centers:>5} |"]
        if fa is not None:
            cells.append(
                f"{_fmt(fa['seconds_train'], 8)} {_fmt(fa['seconds_aggregate'], 7)} "
                f"{_fmt(fa['peak_mb'], 8, 0)} {_fmt(fa['setup'], 8, 1)} |"
            )
        else:
            cells.append(f"{'':>35} |")
        if ab is not None:
            cells.append(
                f"{_fmt(ab['seconds_train'], 8)} {_fmt(ab['seconds_aggregate'], 7)} "
                f"{_fmt(ab['seconds_matching'], 6)} {_fmt(ab['seconds_shapley'], 6)} "
                f"{_fmt(ab['peak_mb'], 8, 0)} {_fmt(ab['aggregate_peak_mb'], 7, 0)} "
                f"{_fmt(ab['setup'], 8, 1)} |"
            )
        else:
            cells.append(f"{'':>58} |")
        ratio = ab["seconds_aggregate"] / fa["seconds_train"] if fa and ab and fa["seconds_train"] else None
        loads = " ".join(f"{r['load_start']:.1f}->{r['load_end']:.1f}" for r in res.values())
        cells.append(f"{_fmt(ratio, 12)} |")
        if df is not None:
            cells.append(
                f"{_fmt(df['seconds_train'], 8)} {_fmt(df['seconds_aggregate'], 7)} "
                f"{_fmt(df['peak_mb'], 8, 0)} {_fmt(df['aggregate_peak_mb'], 7, 0)} |"
            )
        cells.append(loads)
        print(" ".join(cells), flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
