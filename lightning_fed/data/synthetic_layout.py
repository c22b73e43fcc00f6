r"""The ICU-shaped layout shared by the built-in synthetic federations.

Both :class:`~lightning_fed.data.synthetic.TeacherICU` and
:class:`~lightning_fed.data.fedprox_synthetic.FedProxSynthetic` lay their centers out the same way;
this module is that layout, so the two agree on sites, sizes and years for the same arguments.

Centers
    A center is a care unit ``u`` (:data:`CARE_UNITS`) times a 2-year window ``t`` of the shifted
    admission years 2110-2191 (:data:`WINDOW_STARTS`, 41 windows per unit), labelled
    ``"<unit> <start>-<start + 1>"``. The ``C`` centers are dealt near-equally to the units (the
    units with the largest :data:`UNIT_SHARES` get the remainder) and each unit's centers are
    spread evenly over its 41 windows (:func:`center_layout`).

Sub-centers (more than :data:`MAX_CENTERS` = 246 centers)
    Up to 246 centers every (unit, window) holds at most one center, as above. Beyond, a unit's
    ``m > 41`` centers are dealt to its windows in order, ``floor(m / 41)`` or ``ceil(m / 41)``
    per window (center ``i`` of the unit in window ``floor(41 i / m)``): the centers sharing a
    (unit, window) are its sub-centers, separate sites of the same unit and period (920 centers:
    3-4 per window; 3,680: 14-15). Their labels gain the 1-based sub-center number, zero-padded to
    the widest, ``"<unit> <start>-<start + 1> #<j>"`` (``"MICU 2130-2131 #03"``), so that within a
    unit sorted labels (the :class:`~lightning_fed.data.partition.Natural` center order) follow
    window, then sub-center. Nothing else changes: sizes, years and the generators' center-level
    draws are per center, so sub-centers share their unit and their window's drift, each with its
    own center-level noise (and, in FedProx Synthetic at ``level="center"``, its own device draws).

Sizes
    Heavy-tailed, as in FedProx's power-law device sizes: with :math:`L_k \sim
    \mathrm{Lomax}(\text{size\_tail})` capped at :data:`SIZE_CAP`,

    .. math:: n_k = n_{\min} + (N - C\, n_{\min}) \frac{s_{u(k)} L_k}{\sum_j s_{u(j)} L_j}

    (:math:`s_u` the unit's share of stays), rounded by largest remainder so that
    :math:`\sum_k n_k = N` (:func:`center_sizes`).

Years
    Each row's admission year is its center's window start plus 0 or 1, equally likely
    (:func:`row_years`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lightning_fed.validation import check_int, check_number

__all__ = [
    "CARE_UNITS",
    "MAX_CENTERS",
    "SIZE_CAP",
    "UNIT_SHARES",
    "WINDOW_STARTS",
    "center_layout",
    "center_sizes",
    "check_layout",
    "largest_remainder",
    "row_years",
    "site_attributes",
    "site_labels",
    "sub_center_index",
]

#: Care units, in the order used for stream keys and attributes.
CARE_UNITS: tuple[str, ...] = ("CVICU", "CCU", "MICU", "Medical/Surgical ICU", "SICU", "TSICU")
#: Share of stays per care unit (approximately MIMIC-IV's first care units).
UNIT_SHARES: dict[str, float] = {
    "CVICU": 0.17,
    "CCU": 0.12,
    "MICU": 0.22,
    "Medical/Surgical ICU": 0.18,
    "SICU": 0.16,
    "TSICU": 0.15,
}
#: First years of the 2-year windows over the shifted years 2110-2191 (41 windows).
WINDOW_STARTS: tuple[int, ...] = tuple(range(2110, 2191, 2))
#: Most centers a layout holds with one center per (care unit, window), ``6 * 41 = 246``; larger
#: layouts put several sub-centers in a (care unit, window) (module docstring).
MAX_CENTERS = len(CARE_UNITS) * len(WINDOW_STARTS)
#: Cap on the Lomax size weights (keeps the largest centers at a few thousand stays).
SIZE_CAP = 30.0


def check_layout(
    num_centers: object, num_stays: object, min_stays: object, size_tail: object
) -> tuple[int, int, int, float]:
    """Validate the layout arguments every ICU-shaped synthetic source takes.

    Args:
        num_centers: Number of centers (>= 1): one per (care unit, window) up to
            :data:`MAX_CENTERS`, sub-centers beyond (module docstring).
        num_stays: Total rows, at least ``num_centers * min_stays``.
        min_stays: Fewest rows per center (>= 10).
        size_tail: Lomax shape of the sizes (> 0).

    Returns:
        ``(num_centers, num_stays, min_stays, size_tail)`` as int, int, int, float.

    Raises:
        ValueError: Naming the first argument out of range.
    """
    centers = check_int("num_centers", num_centers, 1)
    fewest = check_int("min_stays", min_stays, 10)
    stays = check_int("num_stays", num_stays, 1)
    if stays < centers * fewest:
        raise ValueError(
            f"num_stays must be >= num_centers * min_stays = {centers * fewest}, got {num_stays}"
        )
    tail = check_number("size_tail", size_tail, 0.0, strict=True)
    return centers, stays, fewest, tail


def largest_remainder(total: int, weights: np.ndarray) -> np.ndarray:
    r"""Integer counts summing to ``total``, proportional to ``weights`` (largest-remainder rounding).

    With :math:`e_k = T w_k / \sum_j w_j`, each count is :math:`\lfloor e_k \rfloor` plus one for
    the :math:`T - \sum_k \lfloor e_k \rfloor` largest fractional parts (ties by position).
    """
    exact = total * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return counts


def center_layout(num_centers: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit index and window index of each center (deterministic, seed-free).

    ``num_centers // 6`` centers per unit, one more for the ``num_centers % 6`` units with the
    largest shares; a unit with ``m <= 41`` centers takes windows ``round(linspace(0, 40, m))``
    (the middle window when ``m = 1``), one center each; a unit with ``m > 41`` centers (only when
    ``num_centers > 246``) puts its center ``i`` in window ``floor(41 i / m)``, so every window
    holds ``floor(m / 41)`` or ``ceil(m / 41)`` sub-centers (:func:`sub_center_index`). Centers
    are ordered by unit, then window (then sub-center).

    Returns:
        ``(unit_c, window_c)``, int arrays of length ``num_centers``.
    """
    by_share = sorted(range(len(CARE_UNITS)), key=lambda u: -UNIT_SHARES[CARE_UNITS[u]])
    per_unit = np.full(len(CARE_UNITS), num_centers // len(CARE_UNITS))
    per_unit[by_share[: num_centers % len(CARE_UNITS)]] += 1
    units: list[int] = []
    windows: list[int] = []
    last = len(WINDOW_STARTS) - 1
    for u, m in enumerate(per_unit):
        if m == 0:
            continue
        if m > len(WINDOW_STARTS):  # sub-centers: several centers per window
            idx = (np.arange(m) * len(WINDOW_STARTS) // m).tolist()
        else:
            idx = [last // 2] if m == 1 else np.round(np.linspace(0, last, m)).astype(int).tolist()
        units += [u] * int(m)
        windows += idx
    return np.asarray(units), np.asarray(windows)


def center_sizes(
    rng: np.random.Generator, unit_c: np.ndarray, size_tail: float, min_stays: int, num_stays: int
) -> np.ndarray:
    """Heavy-tailed center sizes summing to ``num_stays`` (see the module docstring).

    Args:
        rng: Draws the ``len(unit_c)`` Lomax weights (one ``rng.pareto`` call).
        unit_c: Unit index of each center.
        size_tail: Lomax shape (> 0); smaller = heavier tail.
        min_stays: Rows every center gets before the weighted share.
        num_stays: Total rows (>= ``len(unit_c) * min_stays``).

    Returns:
        int64 sizes ``[C]``, each >= ``min_stays``, summing to ``num_stays``.
    """
    n_centers = len(unit_c)
    size_w = np.minimum(rng.pareto(size_tail, n_centers), SIZE_CAP)
    size_w = size_w * np.array([UNIT_SHARES[CARE_UNITS[u]] for u in unit_c])
    if size_w.sum() <= 0:
        size_w = np.ones(n_centers)
    return min_stays + largest_remainder(num_stays - n_centers * min_stays, size_w)


def sub_center_index(unit_c: np.ndarray, window_c: np.ndarray) -> np.ndarray:
    """0-based rank of each center among the centers sharing its (unit, window), in center order.

    All zeros when no (unit, window) holds two centers (every layout of at most 246 centers).
    """
    key = np.asarray(unit_c, dtype=np.int64) * len(WINDOW_STARTS) + np.asarray(window_c, dtype=np.int64)
    order = np.argsort(key, kind="stable")
    ranked = key[order]
    first = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]]))
    group_start = np.repeat(first, np.diff(np.concatenate([first, [len(key)]])))
    rank = np.empty(len(key), dtype=np.int64)
    rank[order] = np.arange(len(key)) - group_start
    return rank


def site_labels(unit_c: np.ndarray, window_c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Site label and window start year of each center.

    The label is ``"<unit> <start>-<start + 1>"``; when some (unit, window) holds several centers
    (more than 246 centers) every label gains its 1-based sub-center number, zero-padded to the
    widest: ``"<unit> <start>-<start + 1> #<j>"``.
    """
    starts = np.asarray(WINDOW_STARTS)[window_c]
    labels = [f"{CARE_UNITS[u]} {s}-{s + 1}" for u, s in zip(unit_c, starts, strict=True)]
    sub = sub_center_index(unit_c, window_c)
    if len(sub) and sub.max() > 0:
        width = len(str(int(sub.max()) + 1))
        labels = [f"{label} #{j + 1:0{width}d}" for label, j in zip(labels, sub.tolist(), strict=True)]
    return np.array(labels), starts


def row_years(rng: np.random.Generator, starts: np.ndarray, site_c: np.ndarray) -> np.ndarray:
    """Admission year of each row: its center's window start plus 0 or 1 (int64 ``[N]``)."""
    return (starts[site_c] + rng.integers(0, 2, len(site_c))).astype(np.int64)


def site_attributes(
    labels: Sequence[str], unit_c: np.ndarray, starts: np.ndarray, base_rate: np.ndarray
) -> dict[str, Mapping[str, Any]]:
    """Per-site ``care_unit``, ``window_start`` and ``base_rate`` (the center's expected positive rate)."""
    return {
        str(labels[k]): {
            "care_unit": CARE_UNITS[unit_c[k]],
            "window_start": int(starts[k]),
            "base_rate": float(base_rate[k]),
        }
        for k in range(len(labels))
    }
