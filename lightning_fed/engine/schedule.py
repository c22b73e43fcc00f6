"""The seeded batch order shared by every engine.

In round ``r`` center ``c`` runs ``E`` local epochs; epoch ``e`` visits a permutation of its
training rows drawn from the generator ``(seed, "batches", r, c)`` (epochs draw in turn from that
one generator), cut into batches of ``B`` rows, the last one short. Both engines consume exactly
these index lists, so they see identical batches in identical order.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = ["center_batches", "steps_per_round"]


def steps_per_round(n_train: int, batch_size: int, epochs: int) -> int:
    """Optimizer steps one center takes in a round: ``epochs * ceil(n_train / batch_size)``."""
    return epochs * math.ceil(n_train / batch_size)


def center_batches(
    n_train: int, batch_size: int, epochs: int, seed: int, round_idx: int, center: int
) -> Tensor:
    """Row indices of every batch of one center in one round, padded with -1.

    Returns:
        int64 tensor ``[steps, batch_size]``; the last batch of each epoch is padded with -1.
    """
    gen = torch_generator(seed, "batches", round_idx, center)
    per_epoch = math.ceil(n_train / batch_size)
    out = torch.full((epochs * per_epoch, batch_size), -1, dtype=torch.int64)
    flat = out.view(epochs, per_epoch * batch_size)
    for e in range(epochs):
        flat[e, :n_train] = torch.randperm(n_train, generator=gen)
    return out
