r"""The bytes of what a learned ABPS selector shares besides models: features and observations.

Eq. 7's Beta-UCB learns about peer ``j`` only from center ``i``'s own Shapley observations, so
nothing but models crosses the wire. The learners of issue 30 read more:

* a policy on pair features (:class:`~lightning_fed.selection.abps.regression.PairRegression`)
  reads every center's public features (metadata descriptor entries and declared attributes);
* a policy or acceptance rule that pools over observers (``PairRegression(pool)`` or
  ``(peer_effect)``, :class:`~lightning_fed.selection.abps.policy.ScaledUCB`'s federation-wide noise
  scale, :class:`~lightning_fed.selection.abps.rest.PosteriorExceedance` and its subclasses' pooled
  within-pair noise and model posterior) reads every center's observations.

In a deployment those travel through the same directory that receives the goal filter's
descriptors (:data:`~lightning_fed.comm.ledger.SERVER` on the ledger). What is booked, per center:

* **features**, once, in round 0: an upload of :math:`8 d + 4 a` bytes (``d`` descriptor entries in
  float64, the precision the policy uses; ``a`` declared attributes as int32 codes) and a download
  of the other ``C - 1`` centers' records. They are registration data, booked for every center
  whatever its availability in round 0;
* **observations**, every round with a pooling learner: each observer ``i`` posts its round's
  :math:`n_i` observations, :data:`RECORD_BYTES` each (the peer's id as int32 and the clipped credit
  as float64: from these records every pooled statistic of the learners above is recomputed
  exactly), and every center available this round downloads the others' posts,
  :math:`12 (N - n_k)` bytes with :math:`N = \sum_i n_i`. A center unavailable this round
  downloads nothing; catching up on the posts it missed is not booked (an under-count under faults
  or client sampling, none without them).

These bytes go to the ledger directly, not through the wire's hook and checks: the learners use the
exact float64 values, so a bf16 hook would not describe what they read, and results are the same
as without booking. Numbers: at 230 centers with ``kappa = 3`` a round has about 690 observations,
8.3 kB posted and 1.9 MB downloaded, against about 44 MB of MortalityMLP models.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.comm.ledger import SERVER, Ledger

__all__ = ["RECORD_BYTES", "book_features", "book_observations"]

#: Bytes of one posted observation: the peer's id (int32) and the clipped credit (float64).
RECORD_BYTES = 12


def book_features(ledger: Ledger, round_idx: int, num_centers: int, record_bytes: int) -> None:
    """Every center uploads its public-feature record and downloads the other ``C - 1`` records.

    Args:
        ledger: The run's byte ledger.
        round_idx: The round booked to (0).
        num_centers: ``C``.
        record_bytes: One center's record (``8 d + 4 a``; nothing is booked when 0).
    """
    if record_bytes <= 0:
        return
    centers = torch.arange(num_centers)
    server = torch.full_like(centers, SERVER)
    ledger.record(round_idx, centers, server, record_bytes)
    ledger.record(round_idx, server, centers, record_bytes * (num_centers - 1))


def book_observations(ledger: Ledger, round_idx: int, observers: Tensor, available: Tensor) -> None:
    """Observers post their round's observations; every available center downloads the others'.

    Args:
        ledger: The run's byte ledger.
        round_idx: The round.
        observers: The observing center of every observation this round ``[N]`` (``i`` of the
            selector's ``observe``).
        available: Bool ``[C]``, the centers taking part this round (they download).
    """
    observers = observers.reshape(-1).to("cpu", torch.int64)
    if not observers.numel():
        return
    counts = torch.bincount(observers, minlength=len(available))
    posters = torch.nonzero(counts).reshape(-1)
    ledger.record(round_idx, posters, torch.full_like(posters, SERVER), counts[posters] * RECORD_BYTES)
    readers = torch.nonzero(available.to("cpu")).reshape(-1)
    sizes = (observers.numel() - counts[readers]) * RECORD_BYTES
    keep = sizes > 0
    readers, sizes = readers[keep], sizes[keep]
    ledger.record(round_idx, torch.full_like(readers, SERVER), readers, sizes)
