"""The printed comparison both peer benchmarks share (``flower_fedavg.py``, ``pfl_fedavg.py``).

Each script measures lightning-fed and one peer framework in their own processes and checks their
round-1 models against each other; this prints the part of the report that is the same for every
peer: the versions and the load average, the agreement check, and the side-by-side table with the
peer / lightning-fed ratio of every row.
"""

from __future__ import annotations

import os
import platform
from typing import Any

__all__ = ["print_side_by_side"]

#: Rows of the table: label, key in each framework's result, format.
ROWS = [
    ("seconds per round", "seconds_per_round", "{:.3f}"),
    ("start-up seconds", "startup_seconds", "{:.2f}"),
    ("total seconds", "total_seconds", "{:.2f}"),
    ("peak memory (MiB RSS)", "peak_rss_mib", "{:.0f}"),
    ("CPU seconds per round", "cpu_seconds_per_round", "{:.3f}"),
    ("CPU seconds, whole run", "total_cpu_seconds", "{:.2f}"),
]


def print_side_by_side(
    lf: dict[str, Any],
    peer: dict[str, Any],
    name: str,
    check: dict[str, Any],
    load: dict[str, Any],
    rounds: int,
) -> None:
    """Print versions, load, the round-1 check and the table of ``lf`` against ``peer``.

    Args:
        lf: lightning-fed's measured run (the worker's result dict).
        peer: The peer framework's measured run (same keys).
        name: The peer's name in the header (``Flower``, ``pfl``).
        check: The round-1 agreement check (``compare`` of either script).
        load: ``{"start": (1, 5, 15 min), "end": (...)}`` load averages around the run.
        rounds: Rounds of the run (the last-round model difference is named by it).
    """
    versions = {**lf["versions"], **peer["versions"]}
    print(
        f"versions: {', '.join(f'{k} {v}' for k, v in versions.items())}, python {platform.python_version()}"
    )
    print(
        f"load average (1/5/15 min): start {' '.join(f'{x:.2f}' for x in load['start'])}, "
        f"end {' '.join(f'{x:.2f}' for x in load['end'])}; {os.cpu_count()} CPUs"
    )
    print(
        f"round 1: initial models {'bit-identical' if check['init_identical'] else 'DIFFERENT'}; "
        f"local models max |diff| {check['local_max_abs_diff']:.2e} (bound {check['local_bound']:.0e}); "
        f"server models max |diff| {check['server_max_abs_diff']:.2e} (elementwise bound, largest "
        f"{check['server_bound_max']:.2e}; worst diff/bound {check['server_worst_diff_over_bound']:.3f}) "
        f"-> {'PASS' if check['passed'] else 'FAIL'}"
    )
    print(f"after round {rounds}: server models max |diff| {check['last_round_max_abs_diff']:.2e}")
    ratio_head = f"{name} / lf"
    print(f"{'':24s} {'lightning-fed':>14s} {name:>14s} {ratio_head:>12s}")
    for label, key, fmt in ROWS:
        a, b = lf[key], peer[key]
        ratio = f"{b / a:.1f}x" if a > 0 else "n/a"
        print(f"{label:24s} {fmt.format(a):>14s} {fmt.format(b):>14s} {ratio:>12s}")
