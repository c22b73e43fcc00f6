"""The built-in synthetic federations beyond 246 centers (sub-centers), and that the data up to 246
centers and the default federation are the same bit for bit as before.

Sub-centers by hand: a unit with ``m > 41`` centers puts center ``i`` in window ``floor(41 i / m)``,
so its windows hold ``floor(m / 41)`` or ``ceil(m / 41)`` centers, numbered ``#1``, ``#2``, ...
(zero-padded to the widest). 920 centers: 920 // 6 = 153 per unit, the two largest units (MICU 0.22,
Medical/Surgical ICU 0.18) one more, 154 = 3 * 41 + 31 (31 windows of 4, 10 of 3) and
153 = 3 * 41 + 30. 3,680 centers: 613 per unit, 614 for those two; 614 = 14 * 41 + 40.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import numpy as np
import pytest

from lightning_fed.data import FedProxSynthetic, TeacherICU
from lightning_fed.data.center import FederatedData, PooledTable
from lightning_fed.data.synthetic_layout import (
    CARE_UNITS,
    WINDOW_STARTS,
    center_layout,
    check_layout,
    site_labels,
    sub_center_index,
)

# ----------------------------------------------------------------------------- bit for bit as before


def _table_digest(table: PooledTable) -> str:
    """SHA-256 (16 hex digits) of every array, the site labels, the names and the attributes."""
    digest = hashlib.sha256()
    for array in (table.x, table.y, table.year, table.continuous):
        array = np.ascontiguousarray(array)
        digest.update(str((array.dtype.str, array.shape)).encode())
        digest.update(array.tobytes())
    digest.update("\n".join(map(str, table.site.tolist())).encode())
    digest.update(json.dumps([table.feature_names, table.charlson_columns], sort_keys=True).encode())
    digest.update(json.dumps({k: dict(v) for k, v in table.attributes.items()}, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def _federation_digest(federation: FederatedData) -> str:
    digest = hashlib.sha256()
    for center in federation.centers:
        digest.update(center.name.encode())
        for name in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test", "metadata"):
            digest.update(getattr(center, name).numpy().tobytes())
    return digest.hexdigest()[:16]


#: Digests of the tables the generators made before sub-centers and the vectorized categorical draw
#: (recorded with that code, numpy 2.4, x86-64); the same code must keep making the same bytes. numpy's
#: transcendental functions dispatch on the CPU's SIMD level, and their last bits differ between
#: levels (measured: an AVX2-only AMD EPYC gives other digests than the AVX-512 machine they were
#: recorded on, and NPY_DISABLE_CPU_FEATURES=X86_V3 a third), so each level has its own recording
#: (the AVX2 ones made on 2026-12-03 by the unchanged generators).
RECORDED = [
    (TeacherICU, {}, 0, {"avx512": "99e1bc9e666e394d", "avx2": "6ca6454e2baabbb8"}),
    (TeacherICU, {}, 11, {"avx512": "2422ca90b9a8cf04", "avx2": "45c0298f03a11758"}),
    (
        TeacherICU,
        {"num_centers": 1, "num_stays": 200},
        3,
        {"avx512": "4c6f7c6c8df62d59", "avx2": "1b111b3f40227941"},
    ),
    (
        TeacherICU,
        {"num_centers": 7, "num_stays": 700},
        3,
        {"avx512": "6568c46a83379039", "avx2": "51abc054a1884a87"},
    ),
    (
        TeacherICU,
        {"num_centers": 60, "num_stays": 12000},
        3,
        {"avx512": "6827afc872596775", "avx2": "4fdd2563537d0269"},
    ),
    (
        TeacherICU,
        {"num_centers": 246, "num_stays": 12300},
        3,
        {"avx512": "38059a686d8bfb83", "avx2": "f931634e8fc78248"},
    ),
    (
        TeacherICU,
        {"num_centers": 24, "num_stays": 4000, "nonlinearity": 0.0, "unit_nonlinearity": 0.0, "drift": 0.0},
        5,
        {"avx512": "86c84b7a4771148c", "avx2": "0f0573e3d8c1bb8c"},
    ),
    (FedProxSynthetic, {}, 0, {"avx512": "7e6dec4480c3e08e", "avx2": "dc0f55338e9e144e"}),
    (
        FedProxSynthetic,
        {"num_centers": 24, "num_stays": 4000, "level": "unit"},
        1,
        {"avx512": "8b29e539f21ca6c9", "avx2": "8857e632576c1b21"},
    ),
    (
        FedProxSynthetic,
        {"num_centers": 246, "num_stays": 12300, "alpha": 0.5, "beta": 0.25},
        2,
        {"avx512": "c2c18d937494f6b1", "avx2": "2870f674bcc902c5"},
    ),
]


def _simd_level() -> str | None:
    """``"avx512"`` or ``"avx2"``: the SIMD level numpy dispatches to here (None: neither, e.g. ARM)."""
    from numpy._core._multiarray_umath import __cpu_features__ as features

    if features.get("AVX512F") and features.get("AVX512_SKX"):
        return "avx512"
    return "avx2" if features.get("AVX2") and features.get("FMA3") else None


@pytest.mark.parametrize(("source", "kwargs", "seed", "expected"), RECORDED)
def test_tables_up_to_246_centers_hash_as_before(
    source: type, kwargs: dict, seed: int, expected: dict[str, str]
) -> None:
    level = _simd_level()
    if level is None:
        pytest.skip("the digests are recorded for x86-64 numpy at the AVX2 and AVX-512 levels only")
    assert _table_digest(source(**kwargs).table(seed)) == expected[level]


def test_the_default_federation_builds_as_before() -> None:
    """TeacherICU's default 230 centers, built (splits, standardization, descriptors), seed 0."""
    assert _federation_digest(TeacherICU().build(0)) == "63ae91e0267ffcb7"


# ----------------------------------------------------------------------------- the layout by hand


def test_up_to_246_centers_every_unit_window_holds_one_center() -> None:
    unit_c, window_c = center_layout(246)
    assert len(set(zip(unit_c.tolist(), window_c.tolist(), strict=True))) == 246
    assert not sub_center_index(unit_c, window_c).any()
    labels, _ = site_labels(unit_c, window_c)
    assert not any("#" in label for label in labels)


def test_247_centers_put_two_sub_centers_in_micu_first_window() -> None:
    """247 = 6 * 41 + 1: MICU (largest share) gets 42 centers, centers 0 and 1 (41 * 1 // 42 = 0) in
    its first window; every label is numbered then, width 1."""
    unit_c, window_c = center_layout(247)
    micu = CARE_UNITS.index("MICU")
    assert Counter(unit_c.tolist())[micu] == 42
    labels, starts = site_labels(unit_c, window_c)
    doubled = [label for label in labels.tolist() if label.endswith("#2")]
    assert doubled == ["MICU 2110-2111 #2"]
    assert "MICU 2110-2111 #1" in labels.tolist() and "CVICU 2150-2151 #1" in labels.tolist()
    assert len(set(labels.tolist())) == 247
    assert starts[labels.tolist().index("MICU 2110-2111 #2")] == WINDOW_STARTS[0]


@pytest.mark.parametrize(
    ("num_centers", "per_unit", "per_window", "width"),
    [(920, (153, 154), (3, 4), 1), (3680, (613, 614), (14, 15), 2)],
)
def test_sub_center_layout_by_hand(
    num_centers: int, per_unit: tuple[int, int], per_window: tuple[int, int], width: int
) -> None:
    unit_c, window_c = center_layout(num_centers)
    counts = Counter(unit_c.tolist())
    larger = {CARE_UNITS.index("MICU"), CARE_UNITS.index("Medical/Surgical ICU")}
    assert {u: counts[u] for u in range(6)} == {u: per_unit[u in larger] for u in range(6)}
    slots = Counter(zip(unit_c.tolist(), window_c.tolist(), strict=True))
    assert len(slots) == 6 * 41 and set(slots.values()) == set(per_window)
    fuller = per_unit[1] - 41 * per_window[0]  # windows of a larger unit holding ceil(m / 41)
    assert sum(1 for (u, _), n in slots.items() if u in larger and n == per_window[1]) == 2 * fuller
    sub = sub_center_index(unit_c, window_c)
    for (u, w), n in slots.items():
        assert sorted(sub[(unit_c == u) & (window_c == w)].tolist()) == list(range(n))
    labels, _ = site_labels(unit_c, window_c)
    assert len(set(labels.tolist())) == num_centers
    assert labels[0] == f"{CARE_UNITS[0]} 2110-2111 #{1:0{width}d}"
    for u in range(6):  # zero-padded numbers: within a unit, sorted labels are window, then sub-center
        mine = labels[unit_c == u].tolist()
        assert mine == sorted(mine)


def test_beyond_246_centers_still_need_enough_stays() -> None:
    with pytest.raises(ValueError, match=r"num_stays must be >= num_centers \* min_stays = 36800"):
        check_layout(920, 30000, 40, 1.0)
    assert check_layout(920, 71000, 40, 1.0) == (920, 71000, 40, 1.0)
    with pytest.raises(ValueError, match="num_centers"):
        TeacherICU(num_centers=0)


# ----------------------------------------------------------------------------- they build


@pytest.mark.parametrize("source", [TeacherICU, FedProxSynthetic], ids=["teacher", "fedprox"])
@pytest.mark.parametrize(("num_centers", "num_stays"), [(920, 71_000), (3680, 184_000)])
def test_large_federations_build(source: type, num_centers: int, num_stays: int) -> None:
    """Sizes add up to ``num_stays``, every center has >= ``min_stays`` rows, the descriptors are
    finite, sites are unique and every center keeps its unit (4 builds, about 6 CPU seconds)."""
    generator = source(num_centers=num_centers, num_stays=num_stays)
    federation = generator.build(7)
    assert federation.num_centers == num_centers and not federation.dropped_centers
    sizes = np.array([len(c.y_train) + len(c.y_val) + len(c.y_test) for c in federation.centers])
    assert sizes.sum() == num_stays and sizes.min() >= generator.min_stays
    metadata = federation.metadata()
    assert metadata.shape == (num_centers, 15) and bool(metadata.isfinite().all())
    names = [c.name for c in federation.centers]
    assert len(set(names)) == num_centers and names == sorted(names)
    assert {c.attributes["care_unit"] for c in federation.centers} == set(CARE_UNITS)
    for center in federation.centers[:: num_centers // 7]:
        assert center.name.startswith(center.attributes["care_unit"] + " ")
        assert bool(center.x_train.isfinite().all())
