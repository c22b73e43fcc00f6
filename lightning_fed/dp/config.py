"""``trainer.dp``: differentially private training, at the level of a row or of a center.

Two mechanisms (docs/privacy.md, "Differential privacy of training"):

* ``level: sample`` -- DP-SGD at every center (Abadi et al. 2016, Algorithm 1): every optimizer
  step clips each row's gradient to L2 norm ``max_grad_norm`` and adds Gaussian noise of standard
  deviation ``noise_multiplier * max_grad_norm`` to their sum (:mod:`lightning_fed.dp.per_sample`).
  It protects one patient's row of one center's data.
* ``level: client`` -- DP-FedAvg (McMahan et al. 2018, Algorithm 1): every center's update of the
  round is clipped to L2 norm ``max_grad_norm`` and the server adds Gaussian noise of standard
  deviation ``noise_multiplier * max_grad_norm`` to their unweighted sum (:mod:`lightning_fed.dp.client`).
  It protects a whole center's data.

The privacy spent, ``epsilon`` at ``delta``, comes from Google's dp-accounting
(:mod:`lightning_fed.dp.accountant`).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from lightning_fed.validation import check_number

__all__ = ["DPConfig"]

LEVELS = ("sample", "client")


@dataclasses.dataclass(frozen=True)
class DPConfig:
    """The ``trainer.dp`` group.

    Args:
        level: ``"sample"`` (DP-SGD at every center) or ``"client"`` (DP-FedAvg: update clipping at
            the centers, noise at the server).
        noise_multiplier: ``sigma > 0``: the noise standard deviation over the clip norm.
        max_grad_norm: ``C > 0``: the clip norm of a row's gradient (sample) or of a center's
            round update (client).
        delta: The ``delta`` in ``(0, 1)`` at which ``epsilon`` is reported.

    Raises:
        ValueError: One line naming the ``trainer.dp`` field and what it accepts.
    """

    level: Literal["sample", "client"] = "sample"
    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0
    delta: float = 1e-5

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"trainer.dp.level must be 'sample' or 'client', got {self.level!r}")
        sigma = check_number("trainer.dp.noise_multiplier", self.noise_multiplier, 0.0, strict=True)
        clip = check_number("trainer.dp.max_grad_norm", self.max_grad_norm, 0.0, strict=True)
        delta = check_number("trainer.dp.delta", self.delta, 0.0, strict=True)
        if delta >= 1.0:
            raise ValueError(f"trainer.dp.delta must be in (0, 1) (e.g. 1e-5), got {self.delta}")
        object.__setattr__(self, "noise_multiplier", sigma)
        object.__setattr__(self, "max_grad_norm", clip)
        object.__setattr__(self, "delta", delta)
