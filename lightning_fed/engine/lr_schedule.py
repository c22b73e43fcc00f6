"""Round-indexed learning-rate schedules (the ``trainer.lr_schedule`` config key).

A schedule is a pure function of the round: at the start of round ``round_idx`` (0-based, as
everywhere in the code) every engine sets every center's learning rate to

    lr_r = base_lr * factor(round_idx)

where ``base_lr`` is the learning rate of the optimizer the module's ``configure_optimizers``
returns (e.g. ``model.lr``). The rate is constant within a round. Because nothing but the round
index enters, the packed, sequential and sharded engines (one shard of the centers per process)
apply the same rate to every center, and a resumed run needs no saved schedule state.

Papers index rounds from 1: their round ``r`` is ``round_idx + 1`` here. The EdgeDRM paper's cosine
schedule (App. D.2.1, "Fixed budget and learning-rate schedule", and D.3.2) is

    eta_r = eta_0 / 2 * (1 + cos(pi (r - 1) / H)),   r = 1, 2, ...

written there as ``0.005 {1 + cos(pi (r - 1) / H_lr)}`` with ``eta_0 = 0.01`` and ``H_lr = 800``:
:class:`Cosine` with ``horizon = H`` and the module's ``lr = eta_0``. A run "stopping at round 50"
with a 600-round horizon is ``trainer.rounds = 50``, ``horizon = 600``: the run simply ends before
the rate reaches its floor.
"""

from __future__ import annotations

import math
import operator
from abc import ABC, abstractmethod

__all__ = ["Constant", "Cosine", "LRSchedule", "Step"]

_KEY = "trainer.lr_schedule.init_args"


def _positive_int(field: str, value: object, fix: str) -> int:
    """``value`` as an int >= 1 (ints and numpy integers; not bools, floats or strings)."""
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        number = 0
    if isinstance(value, bool) or number < 1:
        raise ValueError(f"{_KEY}.{field} must be an integer >= 1 ({fix}), got {value!r}")
    return int(number)


def _number(field: str, value: object, lo: float, hi: float | None, fix: str, lo_open: bool = False) -> float:
    """``value`` as a finite float in ``[lo, hi]`` (``(lo, hi]`` when ``lo_open``)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    ok = (
        not isinstance(value, bool)
        and math.isfinite(number)
        and (number > lo if lo_open else number >= lo)
        and (hi is None or number <= hi)
    )
    if not ok:
        raise ValueError(f"{_KEY}.{field} must be {fix}, got {value!r}")
    return number


class LRSchedule(ABC):
    """A learning-rate factor per round: the engines train round ``round_idx`` with
    ``base_lr * factor(round_idx)``."""

    @abstractmethod
    def factor(self, round_idx: int) -> float:
        """The multiplier of the base learning rate in round ``round_idx`` (0-based: the paper's
        round ``r = round_idx + 1``)."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class Constant(LRSchedule):
    """The base learning rate every round (``factor = 1``): the default, as before schedules existed."""

    def factor(self, round_idx: int) -> float:
        return 1.0


class Cosine(LRSchedule):
    """Cosine annealing over ``horizon`` rounds (EdgeDRM paper, App. D.2.1 and D.3.2).

    With ``m = min_factor`` and the 0-based round ``t = round_idx`` (paper ``r = t + 1``):

        factor(t) = m + (1 - m) * (1 + cos(pi * t / H)) / 2     for t <= H,
        factor(t) = m                                          for t > H,

    so ``base_lr * factor`` is the paper's ``eta_r = eta_0 / 2 (1 + cos(pi (r - 1) / H))`` when
    ``m = 0``: factor 1 in the first round (``r = 1``), 1/2 at ``r = H/2 + 1``, ``m`` at
    ``r = H + 1``; past the horizon the rate stays at the floor instead of rising again.

    There is no stop round: ``trainer.rounds`` is where the run stops. The paper's "horizon 600,
    stopping at round 50" is ``horizon=600`` with ``trainer.rounds=50`` (the first 50 rates of the
    600-round curve).

    Args:
        horizon: ``H``, the rounds over which the rate decays from ``base_lr`` to its floor
            (paper: 800 in stage I, 600 in stage II); may exceed ``trainer.rounds``.
        min_factor: ``m``, the floor as a fraction of the base rate, in ``[0, 1]`` (paper: 0).

    Raises:
        ValueError: One line naming ``trainer.lr_schedule.init_args.<field>``, if ``horizon`` is not
            an integer >= 1 or ``min_factor`` is outside ``[0, 1]``.
    """

    def __init__(self, horizon: int, min_factor: float = 0.0) -> None:
        self.horizon = _positive_int("horizon", horizon, "the rounds over which the rate decays, e.g. 800")
        self.min_factor = _number("min_factor", min_factor, 0.0, 1.0, "in [0, 1] (0: decay to zero)")

    def factor(self, round_idx: int) -> float:
        t = min(int(round_idx), self.horizon)
        return self.min_factor + (1.0 - self.min_factor) * (1.0 + math.cos(math.pi * t / self.horizon)) / 2.0


class Step(LRSchedule):
    """Step decay: the rate is multiplied by ``gamma`` every ``every`` rounds.

        factor(round_idx) = gamma ** (round_idx // every)

    (torch's ``StepLR`` stepped once per round): rounds ``0 .. every-1`` train at the base rate,
    rounds ``every .. 2 every - 1`` at ``gamma`` times it, and so on.

    Args:
        every: Rounds between decays (>= 1).
        gamma: Multiplier per decay (> 0; below 1 decays).

    Raises:
        ValueError: One line naming ``trainer.lr_schedule.init_args.<field>``, if ``every`` is not
            an integer >= 1 or ``gamma`` is not a finite number > 0.
    """

    def __init__(self, every: int, gamma: float = 0.1) -> None:
        self.every = _positive_int("every", every, "the rounds between decays, e.g. 10")
        self.gamma = _number("gamma", gamma, 0.0, None, "a finite number > 0, e.g. 0.1", lo_open=True)

    def factor(self, round_idx: int) -> float:
        return self.gamma ** (int(round_idx) // self.every)
