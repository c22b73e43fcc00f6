"""What a center that did not train receives: one row of a mixing matrix over the trained centers.

A held-out center (``evaluation.holdout_centers``, :mod:`lightning_fed.holdout`) joins after training.
Its model is a weighted average of the trained centers' final models, ``theta_new = sum_j w_j
theta_j`` with ``w >= 0``, ``sum_j w_j = 1`` (docs/architecture.md, decision 2: aggregation is a
mixing matrix, here one row per newcomer). Each algorithm says which row
(:meth:`Algorithm.newcomer_weights <lightning_fed.algorithms.base.Algorithm.newcomer_weights>`):

* :func:`size_weights`: every trained center by its training rows, ``w_j = n_j / sum_k n_k`` (the
  star methods: FedAvg's global model, since after aggregation every center holds it);
* :func:`nearest_peer_weights`: the ``k`` trained centers whose metadata descriptors are most
  similar to the newcomer's, by cosine similarity (ABPS Eq. 3, the homogeneity goal), each by its
  training rows (the peer methods: a newcomer has no partner history, so it receives from the
  peers that look like it, as ABPS's filter would admit them).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["nearest_peer_weights", "size_weights"]


def size_weights(n_train: Tensor, newcomers: int) -> Tensor:
    """``[H, C]``: every row ``n_j / sum_k n_k`` (float64).

    Args:
        n_train: Training rows of the ``C`` trained centers ``[C]``.
        newcomers: ``H``, the number of rows.
    """
    n = n_train.to(torch.float64)
    return (n / n.sum()).expand(newcomers, -1).clone()


def nearest_peer_weights(metadata: Tensor, n_train: Tensor, newcomer_metadata: Tensor, peers: int) -> Tensor:
    """``[H, C]``: newcomer ``h`` averages its ``k = min(peers, C)`` nearest trained centers.

    Nearness is the cosine similarity of descriptors, ``cos(v_h, v_j)`` (ABPS Eq. 3, homogeneity);
    ties go to the lower center id (stable sort). Row ``h`` is ``n_j / sum_{k in N_h} n_k`` on its
    neighbours ``N_h`` and 0 elsewhere.

    Args:
        metadata: Descriptors of the trained centers ``[C, d]``.
        n_train: Their training rows ``[C]``.
        newcomer_metadata: Descriptors of the newcomers ``[H, d]`` (computed on their own train split).
        peers: ``k >= 1``.

    Raises:
        ValueError: If ``peers < 1`` or the descriptor widths differ.
    """
    if peers < 1:
        raise ValueError(f"evaluation.holdout_peers must be >= 1, got {peers}")
    if metadata.dim() != 2 or newcomer_metadata.dim() != 2 or metadata.shape[1] != newcomer_metadata.shape[1]:
        raise ValueError(
            f"descriptors must be [C, d] and [H, d] of one width, got {list(metadata.shape)} and "
            f"{list(newcomer_metadata.shape)}"
        )
    v = torch.nn.functional.normalize(metadata.to(torch.float64), dim=1)
    u = torch.nn.functional.normalize(newcomer_metadata.to(torch.float64), dim=1)
    similarity = u @ v.T  # [H, C]
    k = min(int(peers), metadata.shape[0])
    order = torch.sort(-similarity, dim=1, stable=True).indices[:, :k]
    weights = torch.zeros_like(similarity)
    weights.scatter_(1, order, n_train.to(torch.float64)[order])
    return weights / weights.sum(1, keepdim=True)
