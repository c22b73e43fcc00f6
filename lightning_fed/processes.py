"""How a ``lightning-fed`` process ends, and the run processes a sweep starts.

- :func:`fail`: a usage or config error is one line on stderr and exit code 2.
- :func:`signals_as_interrupts`: SIGTERM interrupts a command the way Ctrl-C does; the exit code
  follows the signal (:func:`interrupt_code`: 128 + signum, 130 for Ctrl-C).
- :func:`die_with_sweep`: a run process started by ``sweep`` ends when its sweep does.
- :class:`RunProcesses`: the sweep's run processes in flight, each in its own process group, so a
  stopped sweep can end them all (SIGTERM, then SIGKILL).

Everything here imports only the standard library (``lightning-fed --help`` stays fast).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["PARENT_ENV", "RunProcesses", "die_with_sweep", "fail", "interrupt_code", "signals_as_interrupts"]

#: Environment variable telling a run process its sweep's pid (it then dies with the sweep).
PARENT_ENV = "LIGHTNING_FED_PARENT_PID"

#: The exit code of the signal that interrupted the command (130 = SIGINT, 143 = SIGTERM).
_SIGNAL_EXIT: dict[str, int] = {}


def fail(message: str) -> NoReturn:
    """End the command with ``lightning-fed: error: MESSAGE`` on stderr and exit code 2."""
    print(f"lightning-fed: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def interrupt_code() -> int:
    """The exit code of an interrupted command: 128 + the signal's number (130 when none was caught)."""
    return _SIGNAL_EXIT.get("code", 130)


@contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """SIGTERM interrupts a command the way Ctrl-C does (so ``finally`` blocks release the run folder
    lock and remove half-written temporaries); the exit code follows the signal (128 + signum)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: Any) -> None:
        _SIGNAL_EXIT["code"] = 128 + signum
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    _SIGNAL_EXIT.clear()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def die_with_sweep() -> None:
    """In a run process started by ``sweep``: ask Linux for SIGTERM when the sweep dies (even by
    SIGKILL), and stop at once if it is already gone, so no fit outlives its sweep."""
    parent = os.environ.get(PARENT_ENV)
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:
        print("lightning-fed: the sweep that started this run has ended; not starting", file=sys.stderr)
        raise SystemExit(143)


class RunProcesses:
    """The run processes in flight, each in its own process group, so the sweep can end them all."""

    def __init__(self) -> None:
        self.running: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.stopping = False

    def run(self, args: Sequence[str], log_path: Path, fits_at_once: int) -> int:
        """Run ``args`` (a ``lightning-fed`` command) to completion, output to ``log_path``.

        The process is told that ``fits_at_once`` commands run at once (``LIGHTNING_FED_FITS_AT_ONCE``),
        so ``trainer.threads: auto`` takes its share of the cores (:mod:`lightning_fed.threads`):
        several 2-thread OpenMP processes on 2 cores wait on each other and run many times slower
        than the same runs with one thread each. A user's ``OMP_NUM_THREADS`` passes through unchanged.
        """
        from lightning_fed.threads import FITS_AT_ONCE_ENV

        env = {**os.environ, PARENT_ENV: str(os.getpid()), FITS_AT_ONCE_ENV: str(fits_at_once)}
        with open(log_path, "w") as log:
            with self.lock:
                if self.stopping:
                    return -signal.SIGTERM
                proc = subprocess.Popen(
                    list(args), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
                self.running.add(proc)
            try:
                return proc.wait()
            finally:
                with self.lock:
                    self.running.discard(proc)

    def terminate(self, grace: float = 15.0) -> None:
        """SIGTERM every running process group, then SIGKILL what is left after ``grace`` seconds."""
        with self.lock:
            self.stopping = True
            procs = list(self.running)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, sig)
            deadline = time.monotonic() + grace
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.1)
