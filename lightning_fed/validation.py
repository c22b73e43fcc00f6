"""Argument checks that name the offending setting (raised before any work starts)."""

from __future__ import annotations

import math
import numbers

__all__ = ["check_int", "check_number", "first_line"]


def check_int(name: str, value: object, low: int) -> int:
    """``value`` as an int, or ``ValueError`` naming ``name`` unless it is an integer ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def first_line(err: BaseException, limit: int | None = 160) -> str:
    """The first line of ``err``'s message (its type name when the message is empty), cut to
    ``limit`` characters: what a one-line error quotes of an exception raised by a library."""
    lines = str(err).strip().splitlines()
    return (lines[0] if lines else type(err).__name__)[:limit]


def check_number(name: str, value: object, low: float, *, strict: bool) -> float:
    """``value`` as a finite float ``> low`` (``strict``) or ``>= low``, else ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or (v <= low if strict else v < low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low}, got {value}")
    return v
