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
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["dp_sgd_epsilon", "require_dp_accounting"]


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
