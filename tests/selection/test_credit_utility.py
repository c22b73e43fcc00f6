"""The Shapley utility choices (issue 30): ``log_likelihood`` and ``brier`` against hand computations.

Two centers, one feature, a linear logit ``z = w x``; ``theta_0 = 0``, ``theta_1 = 2``, equal training
sizes, so the coalition ``{0, 1}`` is ``w = 1``. Center 0 validates on ``x = (1, -1)``, ``y = (1, 0)``;
center 1 on ``x = (1, 2)``, ``y = (1, 1)`` (a single class: no AUROC). The federation's own
:meth:`Federation.val_utility` evaluates them (on a stand-in with the attributes it reads).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from lightning_fed.federation import Federation
from lightning_fed.metrics import batched_brier, batched_likelihood
from lightning_fed.selection.abps import ShapleyCredit
from lightning_fed.types import RoundContext


def _sig(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def _context() -> RoundContext:
    val = SimpleNamespace(
        x=torch.tensor([[[1.0], [-1.0]], [[1.0], [2.0]]]),
        y=torch.tensor([[1.0, 0.0], [1.0, 1.0]]),
        mask=torch.ones(2, 2, dtype=torch.bool),
    )
    engine = SimpleNamespace(predict=lambda p, x: (p["w"][:, None, :] * x).sum(-1))
    fed = SimpleNamespace(val=val, engine=engine)
    return RoundContext(
        round=0, seed=0, val_utility=lambda p, c, **kw: Federation.val_utility(fed, p, c, **kw)
    )


def _credit(utility: str) -> dict[tuple[int, int], float]:
    own = {"w": torch.tensor([[0.0], [2.0]])}
    edges = (torch.tensor([1, 0]), torch.tensor([0, 1]))  # 1 -> 0 and 0 -> 1
    received = {"w": own["w"][edges[0]]}
    i, j, phi = ShapleyCredit(utility=utility)(
        _context(), [[1], [0]], own, received, edges, torch.ones(2), {}
    )
    return {(int(a), int(b)): float(v) for a, b, v in zip(i, j, phi, strict=True)}


def test_likelihood_metric_is_the_geometric_mean_probability_of_the_true_label() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)], [5.0, 0.0]], dtype=torch.float64)
    y = torch.tensor([[1, 0], [1, 0]])
    mask = torch.tensor([[True, True], [False, False]])
    got = batched_likelihood(logits, y, mask)
    assert float(got[0]) == pytest.approx(math.sqrt(0.5 * 0.25), abs=1e-15)  # p(true) = 0.5, 1 - 0.75
    assert math.isnan(float(got[1]))  # no rows: no utility
    assert float(batched_brier(logits, y, mask)[0]) == pytest.approx(1 - (0.25 + 0.75**2) / 2, abs=1e-15)


def test_auroc_credit_skips_the_single_class_center() -> None:
    assert _credit("auroc") == {(0, 1): pytest.approx(0.5)}  # ties (0.5) -> perfect order (1.0)


def test_log_likelihood_credit_against_a_hand_computation() -> None:
    got = _credit("log_likelihood")
    # center 0: U(theta_0) = 0.5 (logit 0); U({1}) = exp(mean(log s(1), log s(1))) = s(1)
    assert got[(0, 1)] == pytest.approx(_sig(1.0) - 0.5, abs=1e-7)
    # center 1 (one class) observes too: U(theta_1) on logits (2, 4), U({0}) on logits (1, 2)
    own = math.sqrt(_sig(2.0) * _sig(4.0))
    mixed = math.sqrt(_sig(1.0) * _sig(2.0))
    assert got[(1, 0)] == pytest.approx(mixed - own, abs=1e-7)


def test_brier_credit_against_a_hand_computation() -> None:
    got = _credit("brier")
    assert got[(0, 1)] == pytest.approx((1 - (1 - _sig(1.0)) ** 2) - 0.75, abs=1e-7)


def test_bad_utility_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.init_args\.shapley\.init_args\.utility must be one of"):
        ShapleyCredit(utility="accuracy")
