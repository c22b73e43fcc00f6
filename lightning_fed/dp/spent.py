"""The privacy a run has spent so far, at each level of ``trainer.dp`` (:mod:`lightning_fed.dp.config`).

**Sample level** (DP-SGD). Each center is its own mechanism on its own rows; center ``c`` with
``n_c`` training rows and batch size ``B`` takes ``T_c`` steps per round, each accounted as a
Poisson-sampled Gaussian step at rate ``q_c = min(1, B / n_c)``. The engines draw fixed-size
batches by shuffling (every row once per epoch), not Poisson samples; the accountant's epsilon is
the Poisson one, the common practice of Opacus and TF Privacy, and an approximation (shuffling has
no matching RDP bound; a center with ``n_c <= B`` gets ``q_c = 1``, no amplification at all). The
run's ``privacy/epsilon`` is the largest over the centers (every center's guarantee holds at it);
``privacy/epsilon_median`` is the median center's. A center that is not sampled in a round
(``trainer.centers_per_round``) takes no step and spends nothing then; the sampling of centers
is not counted as further amplification.

**Client level** (DP-FedAvg). The federation is one mechanism on the set of centers: each round is
one sampled Gaussian step at rate ``q = K / C`` (``K`` participants of ``C`` centers; 1 without
client sampling), as in McMahan et al. 2018 (Sec. 3), whose accountant assumes each center is in a
round independently with probability ``q`` while the sampler draws exactly ``K`` (the same
approximation as above). ``privacy/epsilon`` protects a whole center's data.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from lightning_fed.dp.accountant import RdpLedger
from lightning_fed.dp.config import DPConfig

__all__ = ["PrivacySpent"]


class PrivacySpent:
    """Accumulates the steps of a run and reports ``epsilon`` at ``trainer.dp.delta``.

    Args:
        dp: The ``trainer.dp`` settings.
        sizes: Training rows of each model (sample level) or of each center (client level).
        batch_size: ``B`` (sample level).
    """

    def __init__(self, dp: DPConfig, sizes: Sequence[int], batch_size: int) -> None:
        self.dp = dp
        self.num_centers = len(sizes)
        models = len(sizes) if dp.level == "sample" else 1
        self.ledger = RdpLedger(dp.noise_multiplier, dp.delta, models)
        self.rates = [min(1.0, batch_size / max(1, int(n))) for n in sizes]

    def record_sample(self, steps: Sequence[int]) -> None:
        """One round of DP-SGD: model ``m`` took ``steps[m]`` noisy steps (0: it did not train)."""
        self.ledger.record(self.rates, steps)

    def record_client(self, participants: int) -> None:
        """One round of DP-FedAvg with ``participants`` of the centers (0: no aggregate, nothing spent)."""
        if participants:
            self.ledger.record([participants / self.num_centers], [1])

    def epsilons(self) -> list[float]:
        """Every model's ``epsilon`` so far (one entry at the client level)."""
        return self.ledger.epsilons()

    def round_stats(self) -> dict[str, float]:
        """``privacy/epsilon``: the largest epsilon so far (module docstring)."""
        return {"privacy/epsilon": max(self.epsilons())}

    def summary(self) -> dict[str, Any]:
        """The summary's ``privacy/*`` entries: epsilon (largest; median center at the sample level),
        the stated delta and the mechanism's settings."""
        eps = self.epsilons()
        out: dict[str, Any] = {
            "privacy/level": self.dp.level,
            "privacy/epsilon": max(eps),
            "privacy/delta": self.dp.delta,
            "privacy/noise_multiplier": self.dp.noise_multiplier,
            "privacy/max_grad_norm": self.dp.max_grad_norm,
            "privacy/accountant": "dp-accounting RDP, Poisson-sampled Gaussian",
        }
        if self.dp.level == "sample":
            out["privacy/epsilon_median"] = statistics.median(eps)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The steps so far (a resumed run continues the composition)."""
        return self.ledger.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.ledger.load_state_dict(state)
