"""Settings that make no sense are refused in one line before any work (issue 32 item 5): on main
``wire.max_norm_ratio=1e-9`` gave a silent local-only run (every upload rejected) and ``tau_acc=2``
one where nobody accepts once the exploration bonus is spent, both with exit 0."""

from __future__ import annotations

import math

import pytest

from lightning_fed.comm.wire import Wire
from lightning_fed.selection.abps import BayesianSelector


@pytest.mark.parametrize("ratio", [1e-9, 0.5, math.nan])
def test_a_norm_ratio_below_one_is_refused(ratio: float) -> None:
    with pytest.raises(ValueError, match=r"wire\.max_norm_ratio must be >= 1") as err:
        Wire(max_norm_ratio=ratio)
    assert "\n" not in str(err.value)
    assert Wire(max_norm_ratio=1.0).max_norm_ratio == 1.0 and Wire(max_norm_ratio=math.inf)


@pytest.mark.parametrize("tau", [2.0, -0.1, math.nan])
def test_tau_acc_outside_the_credit_scale_is_refused(tau: float) -> None:
    with pytest.raises(ValueError, match=r"tau_acc must be in \[0, 1\]") as err:
        BayesianSelector(tau_acc=tau)
    assert "\n" not in str(err.value)
    assert BayesianSelector(tau_acc=1.0).tau_acc == 1.0
