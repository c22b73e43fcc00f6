"""Argument checks that name the offending setting (raised before any work starts)."""

from __future__ import annotations

import math
import numbers

__all__ = ["check_int", "check_number"]


def check_int(name: str, value: object, low: int) -> int:
    """``value`` as an int, or ``ValueError`` naming ``name`` unless it is an integer ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def check_number(name: str, value: object, low: float, *, strict: bool) -> float:
    """``value`` as a finite float ``> low`` (``strict``) or ``>= low``, else ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or (v <= low if strict else v < low):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {low}, got {value}")
    return v
