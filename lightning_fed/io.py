"""Atomic file writes: an interrupted run never leaves a half-written output.

Each writer writes to a temporary file in the destination folder and ``os.replace``-s it over the
target, which is atomic on POSIX file systems. A write that fails (a full disk, a folder that became
read-only) removes its temporary file, leaves the previous target as it was, and raises
:class:`OutputWriteError`, whose message is the one line the CLI prints (``lightning-fed: error:
cannot write PATH: No space left on device; ...``) instead of a traceback.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["OutputWriteError", "atomic_path", "save_torch", "write_json", "write_text"]


class OutputWriteError(OSError):
    """An output file that could not be written; the message is the one line to show."""

    def __init__(self, target: Path, reason: str) -> None:
        super().__init__(
            f"cannot write {target}: {reason}; the previous {target.name} (if any) is intact: free space "
            f"on that disk or make {target.parent} writable, then run the command again (an interrupted "
            f"fit: lightning-fed fit --resume {target.parent})"
        )
        self.target = target


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success rename it over ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write(target: str | Path, writer: Callable[[Path], Any]) -> Path:
    """Write ``target`` atomically through ``writer(tmp)``.

    Raises:
        OutputWriteError: When the file system refuses the write (``OSError``, e.g. ``ENOSPC``).
    """
    try:
        with atomic_path(target) as tmp:
            writer(tmp)
    except OutputWriteError:
        raise
    except OSError as err:
        raise OutputWriteError(Path(target), err.strerror or str(err)) from err
    return Path(target)


def write_text(target: str | Path, text: str) -> Path:
    """Write ``text`` atomically."""
    return _write(target, lambda p: p.write_text(text))


def _strict(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, +-Inf) replaced by None, in dicts, lists and tuples at
    any depth; numpy scalars become Python numbers (JSON knows neither NaN nor numpy)."""
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_strict(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        value = float(obj)
        return value if math.isfinite(value) else None
    return obj


def write_json(target: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented, strict JSON atomically.

    NaN and +-Inf (an undefined AUROC, say) are written as ``null``, at any depth, so every JSON
    reader accepts the file (Python's default would write the non-standard ``NaN``); objects JSON
    has no type for go through ``str``.
    """
    text = json.dumps(_strict(obj), indent=2, sort_keys=True, default=str, allow_nan=False)
    return write_text(target, text + "\n")


def save_torch(target: str | Path, obj: Any) -> Path:
    """``torch.save`` atomically.

    Raises:
        OutputWriteError: Also when torch's zip writer reports a failed write (it raises a
            ``RuntimeError`` "PytorchStreamWriter failed writing file ...", e.g. on a full disk).
    """
    import torch

    def save(path: Path) -> None:
        try:
            torch.save(obj, path)
        except RuntimeError as err:
            if "PytorchStreamWriter" not in str(err):
                raise
            raise OutputWriteError(Path(target), "the write failed (is the disk full?)") from err

    return _write(target, save)
