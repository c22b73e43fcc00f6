"""The privacy spent by DP-SGD, from Google's ``dp-accounting`` (the optional extra ``privacy``).

One step of DP-SGD on a center is the sampled Gaussian mechanism: each row enters the batch with
probability ``q`` (Poisson sampling), the clipped per-sample gradients are summed and Gaussian noise
of standard deviation ``sigma C`` is added (``sigma`` the noise multiplier, ``C`` the clip norm;
Abadi et al. 2016). ``T`` steps compose; the RDP accountant (Mironov 2017; Mironov, Talwar & Zhang
2019 for the sampled Gaussian) converts the composition to ``(epsilon, delta)``. The accounting is
the library's, not written here: ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), T)``
into ``rdp.RdpAccountant``. Batches drawn by shuffling (what the engines do) are not Poisson
samples; reporting the Poisson epsilon for them is the common practice (Opacus, TF Privacy) and is
an approximation, said so here.

Across a run (:class:`RdpLedger`) a model's privacy loss composes over the steps it took:
``T`` steps at rate ``q`` are ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), T)``,
whose RDP the library computes as ``T`` times one step's (the RDP of a composition is the sum).
One step's RDP curve costs the library 0.2-0.5 s at the rates of a small center (fractional
orders), so the ledger asks the library for it once per rate (a one-step ``RdpAccountant``) and
multiplies it by ``T`` as the library does, then converts with the library's ``compute_epsilon``:
the same numbers as a fresh accountant composing the ``T`` steps (``tests/dp/test_accounting.py``).
The client level (DP-FedAvg) is the same with a center in place of a row: one event per round at
rate ``q = K / C`` (``K`` sampled of ``C`` centers; 1 without client sampling).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

__all__ = ["RdpLedger", "dp_sgd_epsilon", "require_dp_accounting"]


def require_dp_accounting() -> ModuleType:
    """The ``dp_accounting`` module, or a one-line ImportError naming the extra to install."""
    try:
        import dp_accounting
    except ImportError:
        raise ImportError(
            "differential privacy needs dp-accounting: pip install 'lightning-fed[privacy]'"
        ) from None
    return dp_accounting


def dp_sgd_epsilon(noise_multiplier: float, sampling_rate: float, steps: int, delta: float) -> float:
    """``epsilon`` at ``delta`` of ``steps`` sampled Gaussian steps (module docstring).

    Args:
        noise_multiplier: ``sigma`` (noise std over the clip norm); ``0`` means no privacy (inf).
        sampling_rate: ``q = batch size / rows`` in ``(0, 1]``.
        steps: ``T``, the optimizer steps taken so far (0: epsilon 0).
        delta: The stated ``delta`` in ``(0, 1)``.

    Raises:
        ValueError: One line naming the argument out of range.
    """
    if not 0.0 < sampling_rate <= 1.0:
        raise ValueError(f"DP sampling rate must be in (0, 1], got {sampling_rate}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"DP delta must be in (0, 1), got {delta}")
    if noise_multiplier < 0 or steps < 0:
        raise ValueError(f"DP noise multiplier and steps must be >= 0, got {noise_multiplier}, {steps}")
    if steps == 0:
        return 0.0
    if noise_multiplier == 0:
        return float("inf")
    lib = require_dp_accounting()
    event = lib.SelfComposedDpEvent(
        lib.PoissonSampledDpEvent(sampling_rate, lib.GaussianDpEvent(noise_multiplier)), int(steps)
    )
    accountant = lib.rdp.RdpAccountant()
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


@contextmanager
def _quiet_absl():
    """dp-accounting warns through absl for every fractional order it drops at large ``q``; the
    orders left still bound epsilon, so the warnings are kept off the console."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class RdpLedger:
    """The privacy spent by each of ``M`` models (centers, or the federation as one), in RDP.

    Args:
        noise_multiplier: ``sigma > 0`` of every step.
        delta: The stated ``delta``.
        num_models: ``M``.
    """

    def __init__(self, noise_multiplier: float, delta: float, num_models: int) -> None:
        self.lib = require_dp_accounting()
        self.noise_multiplier, self.delta = float(noise_multiplier), float(delta)
        #: Per model, the steps taken at each sampling rate ``{q: steps}``.
        self.steps: list[dict[float, int]] = [{} for _ in range(int(num_models))]
        self._one_step: dict[float, Any] = {}
        self._orders = None

    def record(self, rates: Sequence[float], steps: Sequence[int]) -> None:
        """Model ``m`` took ``steps[m]`` more steps at rate ``rates[m]`` (0 steps: it did not train)."""
        for m, (q, t) in enumerate(zip(rates, steps, strict=True)):
            if int(t) > 0:
                q = float(q)
                if not 0.0 < q <= 1.0:
                    raise ValueError(f"DP sampling rate must be in (0, 1], got {q}")
                self.steps[m][q] = self.steps[m].get(q, 0) + int(t)

    def _rdp_of_one_step(self, q: float) -> Any:
        """The library's RDP curve of one sampled Gaussian step at rate ``q`` (cached per rate)."""
        if q not in self._one_step:
            accountant = self.lib.rdp.RdpAccountant()
            step = self.lib.PoissonSampledDpEvent(q, self.lib.GaussianDpEvent(self.noise_multiplier))
            self._orders = accountant._orders  # the library keeps no public copy of either
            try:
                with _quiet_absl():
                    accountant.compose(step)
                self._one_step[q] = accountant._rdp.copy()
            except (ArithmeticError, ValueError):  # a sigma too small for the library's series
                self._one_step[q] = accountant._orders * float("inf")  # no privacy: epsilon inf
        return self._one_step[q]

    def epsilons(self) -> list[float]:
        """``epsilon`` at :attr:`delta` of every model so far (0 for a model that never trained)."""
        # The module require_dp_accounting returned (its rdp package imports this submodule).
        compute_epsilon = self.lib.rdp.rdp_privacy_accountant.compute_epsilon
        out = []
        for spent in self.steps:
            if not spent:
                out.append(0.0)
                continue
            rdp = sum(t * self._rdp_of_one_step(q) for q, t in sorted(spent.items()))
            out.append(float(compute_epsilon(self._orders, rdp, self.delta)[0]))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The steps per model and rate (a resumed run continues the composition)."""
        return {"steps": [dict(s) for s in self.steps]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.steps = [{float(q): int(t) for q, t in s.items()} for s in state["steps"]]
