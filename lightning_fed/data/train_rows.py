"""Every center's training rows in one tensor, each center's ``x_train`` a view of its own block.

Why (issue 33): the packed engine gathers each batch by row index from one ``[N + 1, ...]`` tensor
(every center's training rows, then one zero row that padded batch slots point at,
:meth:`~lightning_fed.engine.packed.PackedEngine._gather`). Built from per-center tensors, that
tensor is a second copy of the training data: 191 MB at 3,680 synthetic centers of 309 stays. When
the centers' rows already are consecutive blocks of one tensor that ends in a zero row, the engine
reads them where they are (:func:`~lightning_fed.engine.rows.rows_in_place`);
:func:`pack_train_rows` makes that layout when a federation is built
(:func:`~lightning_fed.data.center.federate`). The values are the same, and so is every number a run
computes; only where the rows live changes. A user who edits a center's ``x_train`` in place after
the federation is built edits what the engine trains on (as with any tensor it reads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightning_fed.data.center import CenterData

__all__ = ["pack_train_rows"]


def pack_train_rows(centers: Sequence[CenterData]) -> tuple[CenterData, ...]:
    """``centers`` with their ``x_train`` copied into one ``[N + 1, ...]`` tensor (the last row 0),
    each center's ``x_train`` the view of its block, in center order.

    Centers whose training rows differ in dtype, device or row shape are returned as they are (the
    engine then copies the rows, as it always did).
    """
    xs = [c.x_train for c in centers]
    if not xs or xs[0].dim() < 2:
        return tuple(centers)
    first = xs[0]
    if any(x.dtype != first.dtype or x.device != first.device or x.shape[1:] != first.shape[1:] for x in xs):
        return tuple(centers)
    total = sum(len(x) for x in xs)
    packed = first.new_empty((total + 1, *first.shape[1:]))
    packed[total].zero_()
    out = []
    start = 0
    for center in centers:
        n = len(center.x_train)
        block = packed[start : start + n]
        block.copy_(center.x_train)
        out.append(dataclasses.replace(center, x_train=block))
        start += n
    return tuple(out)
