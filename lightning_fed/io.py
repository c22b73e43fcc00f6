"""Atomic file writes: an interrupted run never leaves a half-written output.

Each writer writes to a temporary file in the destination folder and ``os.replace``-s it over the
target, which is atomic on POSIX file systems.
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

__all__ = ["atomic_path", "save_torch", "write_json", "write_text"]


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
    with atomic_path(target) as tmp:
        writer(tmp)
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
    """``torch.save`` atomically."""
    import torch

    return _write(target, lambda p: torch.save(obj, p))
