"""Keep freed memory for reuse in a ``fit`` process (glibc), so rounds do not fault fresh pages in.

Why (issue 33, measured): every round allocates tensors of hundreds of MB afresh: the round-start
anchors, ``get_params`` copies, the messages ``[E, D]``, the mixed and new parameters. glibc's
``malloc`` serves each block above its ``mmap`` threshold (at most 32 MiB) as a new mapping and
unmaps it on ``free``, so every 4 KiB page of the next round's block faults on first touch again
(about 1-2 us a page, kernel zeroing included). At 3,680 centers (FedAvg, passes of 460, 1 thread)
that is about 750,000 page faults a round. With ``mmap`` off (``M_MMAP_MAX = 0``) and the heap's
top not trimmed below :data:`TRIM_THRESHOLD`, a freed block stays in the heap and a later request
that fits reuses its pages. Through glibc's environment variables (``MALLOC_MMAP_MAX_=0``, trim
64 GB) the 3,680-center FedAvg round went from ~750,000 page faults to 16 by the third round. How
much is reused depends on the heap's layout: a loop of two or three 64 MiB blocks still faults a
third to all of its pages each time, the round-after-round pattern of a fit reuses most.
``benchmarks/scale_centers.py --keep-freed-memory`` against glibc's defaults (3,680 centers, 2
threads, ``NormBound``, passes of 460, 2 runs each, load 0.5-1.8): FedAvg training 4.70 / 5.10 ->
4.59 / 3.97 s a round, FedAvg aggregation 1.08 / 1.09 -> 0.58 / 0.52 s, ABPS aggregation
4.71 / 4.37 -> 4.05 / 3.20 s; peak RSS FedAvg 3,582 / 3,596 -> 3,893 / 3,921 MB (+9 %), ABPS
4,392 / 4,338 -> 4,592 / 4,578 MB (+5 %): freed blocks are kept, and a heap cannot return a hole in
its middle to the system.

What it changes: only where memory comes from. No value of a run depends on it.

Who applies it: ``lightning-fed fit`` (and so ``sweep``'s fits), once, before the first round, and
prints the line :meth:`AllocatorChoice.describe` returns. The Python API does not touch the allocator of
a user's process; call :func:`keep_freed_memory` there to opt in.

The user's setting wins: with any of :data:`USER_MALLOC_ENV` in the environment (glibc read it at
start), nothing is changed. ``MALLOC_MMAP_MAX_=65536`` (glibc's default) keeps the defaults.

Imports only the standard library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["TRIM_THRESHOLD", "USER_MALLOC_ENV", "AllocatorChoice", "keep_freed_memory", "return_free_memory"]

#: glibc's ``mallopt`` parameter numbers (``malloc.h``).
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4

#: Free bytes at the heap's top kept before glibc returns them to the system (``mallopt``'s
#: argument is an ``int``: 2 GiB - 1 is its largest value).
TRIM_THRESHOLD = 2**31 - 1

#: glibc's environment tunables of the same knobs: set by the user, they win.
USER_MALLOC_ENV = ("MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


class AllocatorChoice:
    """What :func:`keep_freed_memory` did, and the line a fit prints.

    Args:
        applied: Whether ``mmap`` was turned off and trimming raised.
        reason: Why not, when not applied (empty when applied).
    """

    def __init__(self, applied: bool, reason: str = "") -> None:
        self.applied, self.reason = applied, reason

    def describe(self) -> str:
        """One line for the fit's start."""
        if self.applied:
            return (
                "memory: freed blocks kept for reuse (glibc mmap off, heap trimmed above 2 GiB): rounds "
                "reuse pages instead of faulting new ones in; set MALLOC_MMAP_MAX_=65536 to keep "
                "glibc's defaults"
            )
        return f"memory: allocator left as it is ({self.reason})"


def _libc() -> ctypes.CDLL | None:
    """The C library when it is glibc on Linux, else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def keep_freed_memory(environ: os._Environ[str] | dict[str, str] | None = None) -> AllocatorChoice:
    """Turn glibc's ``mmap`` for large blocks off and raise its trim threshold (module docstring).

    Args:
        environ: The environment to read the user's settings from (default ``os.environ``).

    Returns:
        What was done; :meth:`AllocatorChoice.describe` is the fit's line.
    """
    env = os.environ if environ is None else environ
    mine = [name for name in USER_MALLOC_ENV if name in env]
    if mine:
        return AllocatorChoice(False, f"{mine[0]} is set in the environment")
    libc = _libc()
    if libc is None:
        return AllocatorChoice(False, "not glibc on Linux")
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) and mallopt(M_MMAP_MAX, 0)):
        return AllocatorChoice(False, "glibc refused mallopt")
    return AllocatorChoice(True)


def return_free_memory() -> bool:
    """Give the heap's free pages back to the system now (glibc ``malloc_trim(0)``); True where it ran.

    For a moment that frees many small blocks at once, such as
    :func:`~lightning_fed.data.train_rows.pack_train_rows` dropping every center's own copy of its
    training rows (blocks below glibc's ``mmap`` threshold live in the heap, and a hole in its
    middle stays resident until trimmed: +0.2 GB at 3,680 synthetic centers, issue 33). It changes
    no setting and no value, only which free pages stay mapped.
    """
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    libc.malloc_trim(0)
    return True
