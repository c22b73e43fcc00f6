"""Client sampling: which centers take part in a round (``trainer.centers_per_round``).

In round ``t`` the sampler draws ``K_t`` of the centers the fault plan leaves reachable, ``A_t``
(:meth:`FaultInjection.available <lightning_fed.comm.faults.FaultInjection.available>`; every center
without one), uniformly without replacement, from a generator seeded by ``(seed, "sampling", t)``
(docs/architecture.md, decision 6): the draw depends on the seed, the round and ``A_t`` only, so it
is the same in both engines, in every process of a distributed run and after a resume. With
``k = centers_per_round`` and ``C`` centers:

* an integer ``k >= 1`` is a count: ``K_t = min(k, |A_t|)``;
* a float ``k`` in ``(0, 1]`` is a fraction of the federation: ``K_t = min(max(1, round(k C)), |A_t|)``
  (McMahan et al. 2017's ``m = max(C k, 1)``; ``1.0`` is every reachable center, ``1`` one center).

An unavailable center is never sampled, and a non-sampled center takes no part in the round: it
does not train (the federation sets the engine's :attr:`participants
<lightning_fed.engine.base.Engine.participants>` to the sampled centers, which train alone and to
the same values as in a round of every center; the others' parameters, optimizer states and
scheduler counts are not touched and their round is not computed), and it sends and receives
nothing, because every method asks :meth:`Wire.available <lightning_fed.comm.wire.Wire.available>`,
which returns the sampled centers.

Aggregation weights (FedAvg and its star variants): the server averages the sampled uploads with
``n_k / sum_{j in S_t} n_j``, the ratio estimator of the federation's average
``sum_k (n_k / n) theta_k`` (McMahan et al.'s practice). Over the uniform draw each center is in
``S_t`` with probability ``pi = K_t / |A_t|``; the Horvitz-Thompson weights ``n_k / (pi n_A)``
(``n_A`` the reachable centers' rows) give the unbiased estimator, ``E[sum_{k in S_t} n_k theta_k /
(pi n_A)] = sum_{k in A_t} (n_k / n_A) theta_k``, but they do not sum to 1 (Li et al. 2020, "On the
convergence of FedAvg on non-IID data", scheme II, which rescales by ``C / K``). The renormalized
weights are exactly unbiased when the centers have equal ``n_k`` (the weights are then ``1/K``,
and the sample mean of a uniform draw is unbiased) and otherwise carry a bias of order ``1/K``;
they are the weights of FedAvg run over the sampled centers alone, which is what the tests check.
"""

from __future__ import annotations

import numbers

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = ["CenterSampler", "check_centers_per_round"]


def check_centers_per_round(value: object) -> int | float | None:
    """``trainer.centers_per_round`` checked: None, an integer ``>= 1`` or a float in ``(0, 1]``.

    Raises:
        ValueError: One line naming ``trainer.centers_per_round`` and what it accepts.
    """
    if value is None:
        return None
    what = "an integer count >= 1 or a fraction in (0, 1] (null: every center every round)"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"trainer.centers_per_round must be {what}, got {value!r}")
    if isinstance(value, numbers.Integral):
        if value < 1:
            raise ValueError(f"trainer.centers_per_round must be {what}, got {value}")
        return int(value)
    v = float(value)
    if not 0.0 < v <= 1.0:
        raise ValueError(f"trainer.centers_per_round must be {what}, got {value}")
    return v


class CenterSampler:
    """Draws the centers of each round (module docstring).

    Args:
        centers_per_round: A count (int ``>= 1``) or a fraction of the federation (float in ``(0, 1]``).
        seed: The run seed.
    """

    def __init__(self, centers_per_round: int | float, seed: int) -> None:
        checked = check_centers_per_round(centers_per_round)
        if checked is None:
            raise ValueError("trainer.centers_per_round: a sampler needs a count or a fraction")
        self.centers_per_round, self.seed = checked, int(seed)

    def count(self, num_centers: int, reachable: int) -> int:
        """``K_t``: how many of the ``reachable`` centers a round samples."""
        k = self.centers_per_round
        wanted = k if isinstance(k, int) else max(1, round(k * num_centers))
        return min(int(wanted), int(reachable))

    def draw(self, round_idx: int, reachable: Tensor) -> Tensor:
        """Bool ``[C]``: the sampled centers of ``round_idx`` among the ``reachable`` ones (bool ``[C]``)."""
        pool = torch.nonzero(reachable.cpu()).reshape(-1)
        k = self.count(len(reachable), len(pool))
        gen = torch_generator(self.seed, "sampling", round_idx)
        chosen = pool[torch.randperm(len(pool), generator=gen)[:k]]
        out = torch.zeros(len(reachable), dtype=torch.bool)
        out[chosen] = True
        return out
