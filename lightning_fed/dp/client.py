r"""Client-level DP-FedAvg's server step (McMahan et al. 2018, "Learning differentially private
recurrent language models", Algorithm 1 with the flat clip and the fixed-denominator estimator).

Every participating center ``j`` sends its model ``theta_j`` trained from the server's model
``x_t``; its update ``Delta_j = theta_j - x_t`` is clipped to L2 norm ``S`` (over all shared
tensors at once), the clipped updates are summed **unweighted** (``w_j = 1``, which bounds one
center's influence on the sum by ``S``: weights by rows, as in plain FedAvg, would not), Gaussian
noise ``N(0, sigma^2 S^2 I)`` is added and the sum divided by a fixed denominator ``W``:

.. math::

    x_{t+1} = x_t + \frac{1}{W}\Big(\sum_j \Delta_j \min\big(1, S / \|\Delta_j\|_2\big)
        + \mathcal N(0, \sigma^2 S^2 I)\Big)

``W`` is the round's expected participant count (the paper's ``q W``): the centers sampled this
round (``trainer.centers_per_round``, every reachable center without it), not the count of
uploads that arrived, so the sensitivity of the average stays ``S / W``. The noise is drawn from
``(seed, "dp-server", round)`` in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = ["clipped_noisy_mean"]


def clipped_noisy_mean(
    uploaded: dict[str, Tensor],
    reference: dict[str, Tensor],
    clip: float,
    noise_multiplier: float,
    denominator: int,
    seed: int,
    round_idx: int,
) -> dict[str, Tensor]:
    """The server's new model ``{name: [1, ...]}`` (module docstring) in the uploads' dtype.

    Args:
        uploaded: The accepted uploads ``{name: [m, ...]}``.
        reference: The model ``x_t`` they trained from ``{name: [1, ...]}``.
        clip: ``S``.
        noise_multiplier: ``sigma``.
        denominator: ``W >= 1``.
        seed: The run seed.
        round_idx: The round (keys the noise).
    """
    names = list(uploaded)
    deltas = [
        uploaded[n].to(torch.float64) - reference[n].to(uploaded[n].device, torch.float64) for n in names
    ]
    m = deltas[0].shape[0]
    flat = torch.cat([d.reshape(m, -1) for d in deltas], dim=1)
    factor = (clip / flat.norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
    total = (flat * factor.unsqueeze(1)).sum(0)
    noise = torch.randn(
        total.shape[0], generator=torch_generator(seed, "dp-server", round_idx), dtype=torch.float64
    )
    step = (total + noise_multiplier * clip * noise.to(total.device)) / float(denominator)
    out, lo = {}, 0
    for n in names:
        size = reference[n][0].numel()
        ref = reference[n].to(uploaded[n].device, torch.float64)
        out[n] = (ref + step[lo : lo + size].view(ref.shape)).to(uploaded[n].dtype)
        lo += size
    return out
