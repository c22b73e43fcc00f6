"""The seeded batch order shared by every engine.

In round ``r`` center ``c`` runs ``E`` local epochs; epoch ``e`` visits a permutation of its
training rows drawn from the generator ``(seed, "batches", r, c)`` (epochs draw in turn from that
one generator), cut into batches of ``B`` rows, the last one short. With a fixed number of local
updates ``S`` per round (``trainer.local_steps``, e.g. the EdgeDRM paper's "ten local updates per
round", App. D.1) the center runs the first ``S`` batches of as many such epochs as needed, whatever
its data size. Both engines consume exactly these index lists, so they see identical batches in
identical order.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = ["MAX_SCHEDULE_ENTRIES", "center_batches", "check_schedule", "steps_per_round"]


def steps_per_round(n_train: int, batch_size: int, epochs: int, steps: int | None = None) -> int:
    """Optimizer steps one center takes in a round: ``steps`` when fixed, else
    ``epochs * ceil(n_train / batch_size)`` (0 for a center without training rows)."""
    if n_train == 0:
        return 0
    return int(steps) if steps is not None else epochs * math.ceil(n_train / batch_size)


#: Most entries one center's round schedule (``[steps, batch_size]`` int64, :func:`center_batches`) may
#: hold: 2^28 entries are 2 GiB, more than any sensible setting needs (230 centers at the paper's
#: setting hold at most a few thousand each).
MAX_SCHEDULE_ENTRIES = 2**28


def check_schedule(sizes: list[int], batch_size: int, epochs: int, steps: int | None = None) -> None:
    """Refuse, in one line naming the settings, a round whose batch schedule cannot be built.

    The schedule of the largest center is ``steps_per_round(n) x batch_size`` int64 entries
    (:func:`center_batches`); past :data:`MAX_SCHEDULE_ENTRIES` the allocation would fail with a
    traceback (``trainer.batch_size=1e12``) or the round would never end (``trainer.local_epochs=1e9``).

    Raises:
        ValueError: ``trainer.batch_size`` / ``trainer.local_epochs`` / ``trainer.local_steps`` too large.
    """
    if not sizes:
        return
    n = max(int(x) for x in sizes)
    total = steps_per_round(n, batch_size, epochs, steps)
    width = min(batch_size, MAX_SCHEDULE_ENTRIES + 1)
    if width > MAX_SCHEDULE_ENTRIES or total * width > MAX_SCHEDULE_ENTRIES:
        knob = "trainer.local_steps" if steps is not None else "trainer.local_epochs"
        raise ValueError(
            f"trainer.batch_size={batch_size} with {knob}={steps if steps is not None else epochs} gives the "
            f"largest center ({n} training rows) {total} batches of {batch_size} rows per round, more than "
            f"{MAX_SCHEDULE_ENTRIES} scheduled rows: lower them (a batch_size above {n} trains full-batch)"
        )


def center_batches(
    n_train: int,
    batch_size: int,
    epochs: int,
    seed: int,
    round_idx: int,
    center: int,
    steps: int | None = None,
) -> Tensor:
    """Row indices of every batch of one center in one round, padded with -1.

    Args:
        steps: A fixed number of batches (local updates) instead of ``epochs`` full epochs; they are
            the first ``steps`` batches of ``ceil(steps / batches per epoch)`` seeded epochs.

    Returns:
        int64 tensor ``[steps, batch_size]``; the last batch of each epoch is padded with -1.
    """
    gen = torch_generator(seed, "batches", round_idx, center)
    per_epoch = math.ceil(n_train / batch_size)
    total = steps_per_round(n_train, batch_size, epochs, steps)
    drawn = math.ceil(total / per_epoch) if per_epoch else 0
    out = torch.full((drawn * per_epoch, batch_size), -1, dtype=torch.int64)
    flat = out.view(drawn, per_epoch * batch_size)
    for e in range(drawn):
        flat[e, :n_train] = torch.randperm(n_train, generator=gen)
    return out[:total]
