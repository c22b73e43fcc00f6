"""How many intra-op threads a fit's torch uses: its share of the cores, and no more than its work pays.

``trainer.threads`` (default ``"auto"``) decides. An integer is used as given. ``"auto"`` is, in order:

1. **The user's setting wins.** ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` in the environment (torch
   read it at import) keeps torch's thread count, and the printed line says so.
2. **A share of the cores.** ``cores // fits`` threads at most, at least 1: ``cores`` is what this
   process may run on (its CPU affinity, capped by a cgroup CPU quota: :func:`available_cores`; not
   ``os.cpu_count()``, the machine's total), ``fits`` the number of fits running at once on the
   machine (``sweep`` with ``processes: P`` tells each of its run processes ``P`` through
   :data:`FITS_AT_ONCE_ENV`) times the processes of this fit on one node (Fabric's ``devices``).
   Two fits of 2 threads each on 2 cores wait on each other's OpenMP barriers and run many times
   slower than the same fits with one thread each (``benchmarks/threads.py``, "busy" rows).
3. **No more threads than the work pays.** A thread only pays for itself when a training step has
   enough arithmetic to split: with ``W`` the FLOP of one optimizer step
   (:meth:`Engine.step_flops <lightning_fed.engine.base.Engine.step_flops>`: ``6 P B m``, ``P`` the
   weights in matmuls, ``B`` the batch rows, ``m`` the models the engine steps at once; the packed
   engine's mean number of active centers), ``auto`` uses ``max(1, floor(W / GRAIN_FLOP))`` threads
   (:data:`GRAIN_FLOP`). A tiny federation (4 hospitals: ``W`` ~ 2e7) gets one thread; the
   230-center synthetic ICU federation (``W`` ~ 3.3e8) gets every core of its share.

The thread count changes no result of the built-in models on the measured machine (the packed
engine's parameters after a round agree bit for bit at 1 and 2 threads), so ``trainer.threads`` is
not fingerprinted (:data:`lightning_fed.runfolder.fingerprint.SAFE_TO_CHANGE`), as
``OMP_NUM_THREADS`` never was. Data is another matter: the Fashion-MNIST colour transforms give a
few pixels another last bit at 1 and at 2 threads (seed 2025, 5-SPC: one pixel of client 0's
training and one of its test images), so data is always built at the thread count torch had when
the process started (:func:`process_threads`; a fit applies its own count only after building). A
run re-tested, resumed or referred to on a machine whose torch starts with another count can
therefore meet its data fingerprint's one-line refusal: start it with the fit's ``OMP_NUM_THREADS``.

Imports only the standard library at module level (torch inside :func:`apply_threads`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FITS_AT_ONCE_ENV",
    "GRAIN_FLOP",
    "USER_THREAD_ENV",
    "ThreadChoice",
    "apply_threads",
    "available_cores",
    "check_threads",
    "choose_threads",
    "process_threads",
]

#: Environment variable a ``sweep`` sets in each run process: how many fits it runs at once.
FITS_AT_ONCE_ENV = "LIGHTNING_FED_FITS_AT_ONCE"

#: Environment variables through which a user fixes torch's threads (torch reads them at import).
USER_THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

#: FLOP of one optimizer step per thread that ``auto`` asks before it adds a thread. Measured with
#: ``benchmarks/threads.py`` on the 2-core machine: a step of ~2e7 FLOP (4 centers) and of ~1.3e8
#: (30 centers) ran slower at 2 threads than at 1; the 230-center round (~3.3e8 a step) ran faster
#: at 2 threads on an idle machine.
GRAIN_FLOP = 1.5e8

#: Where a cgroup v2 CPU quota is read (``"max 100000"``: none; ``"150000 100000"``: 1.5 CPUs).
_CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


@dataclass(frozen=True)
class ThreadChoice:
    """The thread count chosen and why, in words (``fit`` prints ``threads: {threads} ({reason})``)."""

    threads: int
    reason: str
    #: Whether :func:`apply_threads` sets torch's count (False: the user's environment decided).
    set_by_us: bool = True

    def describe(self) -> str:
        """The line ``fit`` prints."""
        return f"threads: {self.threads} ({self.reason})"


def available_cores(cgroup_cpu_max: Path = _CGROUP_CPU_MAX) -> int:
    """The cores this process may run on: its CPU affinity, capped by a cgroup v2 CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    try:
        quota, period = cgroup_cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def check_threads(value: object) -> int | str:
    """``trainer.threads`` checked: ``"auto"`` or an integer >= 1, else one line naming the key."""
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"trainer.threads must be 'auto' (chosen from the cores, the fits at once and the work) or "
            f"an integer >= 1, got {value!r}"
        )
    return int(value)


def _fits_at_once(env: Mapping[str, str]) -> int:
    raw = env.get(FITS_AT_ONCE_ENV, "1")
    try:
        return max(1, int(raw))
    except ValueError:
        raise ValueError(f"{FITS_AT_ONCE_ENV}={raw!r} must be an integer >= 1 (unset it)") from None


def choose_threads(
    setting: int | str,
    step_flops: float,
    *,
    processes: int = 1,
    env: Mapping[str, str] | None = None,
    cores: int | None = None,
) -> ThreadChoice:
    """The intra-op thread count for a fit (module docstring: the user's setting, a share of the
    cores, no more than the work pays).

    Args:
        setting: ``trainer.threads``: ``"auto"`` or an integer >= 1 (used as given).
        step_flops: FLOP of one optimizer step of the engine (``6 P B m``).
        processes: This fit's processes on one node (Fabric DDP ranks sharing the machine).
        env: The environment (default ``os.environ``).
        cores: The cores available (default :func:`available_cores`).
    """
    setting = check_threads(setting)
    env = os.environ if env is None else env
    if setting != "auto":
        return ThreadChoice(int(setting), "trainer.threads")
    for name in USER_THREAD_ENV:
        if env.get(name, "").strip():
            import torch

            return ThreadChoice(torch.get_num_threads(), f"{name}={env[name]} in the environment", False)
    cores = available_cores() if cores is None else cores
    fits = _fits_at_once(env) * max(1, processes)
    share = max(1, cores // fits)
    paid = max(1, int(step_flops // GRAIN_FLOP))
    threads = min(share, paid)
    at_once = f", {fits} processes at once" if fits > 1 else ""
    why = f"auto: {cores} cores{at_once} -> {share} each; a step of {step_flops:.1e} FLOP pays for {paid}"
    return ThreadChoice(threads, why)


#: Torch's thread count before the first :func:`apply_threads` of this process changed it (None:
#: never changed); :func:`process_threads` builds data at it.
_PROCESS_THREADS: int | None = None


def apply_threads(choice: ThreadChoice) -> ThreadChoice:
    """Set torch's intra-op threads to ``choice.threads`` (unless the environment chose them)."""
    if choice.set_by_us:
        import torch

        global _PROCESS_THREADS
        if _PROCESS_THREADS is None:
            _PROCESS_THREADS = torch.get_num_threads()
        torch.set_num_threads(choice.threads)
    return choice


@contextmanager
def process_threads(threads: int | None = None) -> Iterator[None]:
    """Run the block at ``threads`` torch threads, or (None) at the count torch had before any fit
    of this process changed it.

    Data sources are built at that count: a ``fit`` builds its data before :func:`apply_threads`
    runs, and some builds depend on the thread count in their last bits (the Fashion-MNIST colour
    transforms' elementwise ``pow`` rounds the elements at a thread's chunk boundary through another
    code path), so a process that builds a second run after a fit set its threads (``refer``
    loading its ``--baselines``, a notebook) would build other data than that run's fit did, and the
    data fingerprint refuses it. A run folder's checkpoint records the count its fit built the data
    at (``data_threads``); ``refer``, ``test --run-dir`` and ``fit --resume`` pass it as
    ``threads``, so a process with another count (another machine) rebuilds the same data. With
    ``threads`` None, outside this process's first fit it is a no-op.
    """
    import torch

    before = torch.get_num_threads()
    wanted = _PROCESS_THREADS if threads is None else threads
    if wanted is None or before == wanted:
        yield
        return
    torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(before)
