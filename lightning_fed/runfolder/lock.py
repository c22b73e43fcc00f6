"""An advisory lock on a run folder, held for the whole life of the process that writes it.

``RunLock(run_dir)`` takes an exclusive ``flock`` on ``run_dir/.lock`` without waiting and writes the
holder's pid into it; a second writer (another ``fit`` on the same folder, a sweep started twice, a
fit left running by a killed sweep) fails at once with :class:`RunFolderBusyError` naming that pid. The
kernel releases the lock when the holder exits, however it exits (SIGKILL included), so a stale
lock file never blocks anyone: the file's presence means nothing, only the lock on it does.

The lock file is removed on release. Removing a lock file is racy in general (a waiter may hold an
open handle on the unlinked inode), so :meth:`RunLock.acquire` re-checks after locking that the
path still names the inode it locked, and retries otherwise.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

__all__ = ["LOCK_NAME", "RunFolderBusyError", "RunLock"]

#: The lock file inside a run folder.
LOCK_NAME = ".lock"


class RunFolderBusyError(RuntimeError):
    """Another live process holds the run folder's lock."""


class RunLock:
    """Exclusive, non-blocking advisory lock on ``run_dir`` (created if missing).

    Args:
        run_dir: The run folder.

    Example:
        >>> with RunLock(run_dir):  # doctest: +SKIP
        ...     train_and_write(run_dir)
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None

    @staticmethod
    def holder(run_dir: str | Path) -> str:
        """What the lock file says about its holder (``pid N on HOST``), or ``an unknown process``."""
        try:
            text = (Path(run_dir) / LOCK_NAME).read_text().strip()
        except OSError:
            text = ""
        return text or "an unknown process"

    @staticmethod
    def busy_message(run_dir: str | Path) -> str:
        """The one line naming the holder of ``run_dir``'s lock and what to do."""
        return (
            f"run folder {run_dir} is being written by {RunLock.holder(run_dir)}: wait for it to finish, "
            "stop it, or choose another output.name"
        )

    @staticmethod
    def check(run_dir: str | Path) -> None:
        """Raise :class:`RunFolderBusyError` when a live process holds ``run_dir``'s lock; create nothing.

        A probe (``fit`` calls it before its config parse, so a second fit on a busy folder is refused
        at once): it takes and drops the lock of an existing lock file. A writer that acquires in the
        same instant may see the folder busy; the probe is no substitute for :meth:`acquire`.
        """
        try:
            fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDWR)
        except OSError:
            return  # no lock file (or none we may open): nobody holds it, or acquire will say why
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunFolderBusyError(RunLock.busy_message(run_dir)) from None
        finally:
            os.close(fd)  # closing drops the probe's lock

    def acquire(self) -> RunLock:
        """Take the lock; raises :class:`RunFolderBusyError` (naming the holder) if a live process has it."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise RunFolderBusyError(self.busy_message(self.run_dir)) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the file we locked was removed by its last holder: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
