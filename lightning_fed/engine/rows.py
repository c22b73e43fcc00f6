"""The packed engine's training rows read in place when the data already lays them out for it.

The packed engine gathers each batch by row index from one ``[R, ...]`` tensor of every model's
training rows plus a zero row that padded batch slots point at. :func:`rows_in_place` finds that
tensor when the models' rows are row-contiguous views of one storage ending in a zero row, the
layout :func:`~lightning_fed.data.train_rows.pack_train_rows` gives every federation (issue 33: the
copy it saves is 191 MB at 3,680 synthetic centers); otherwise the engine copies the rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["rows_in_place"]


def rows_in_place(
    xs: Sequence[Tensor], dtype: torch.dtype, device: torch.device
) -> tuple[Tensor, Tensor, int] | None:
    """The training rows ``xs`` (one tensor per model, in the engine's order) read in place.

    Returns:
        ``(rows, offsets, pad_row)``: ``rows`` the whole tensor the ``xs`` are views of (``[R, ...]``),
        ``offsets[i]`` the row where ``xs[i]`` starts in it and ``pad_row`` its last row, which is 0
        and no model's; None when that layout does not hold (the ``xs`` are not row-contiguous views
        of one storage of ``dtype`` on ``device`` ending in a zero row, or two models' rows overlap:
        each model's labels live at its rows), and the engine copies them.
    """
    if not xs or xs[0].dim() < 2:
        return None
    first = xs[0]
    row = math.prod(first.shape[1:])
    storage = first.untyped_storage()
    for x in xs:
        if (
            x.dtype != dtype
            or x.device != device
            or x.shape[1:] != first.shape[1:]
            or not x.is_contiguous()
            or x.untyped_storage().data_ptr() != storage.data_ptr()
            or x.storage_offset() % max(row, 1)
        ):
            return None
    total = storage.nbytes() // (first.element_size() * max(row, 1))
    if row == 0 or total < 1:
        return None
    shape = (total, *first.shape[1:])
    strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))  # row-major
    rows = first.as_strided(shape, strides, 0)
    offsets = torch.tensor([x.storage_offset() // row for x in xs], dtype=torch.int64)
    pad_row = total - 1
    ends = offsets + torch.tensor([len(x) for x in xs], dtype=torch.int64)
    if bool((ends > pad_row).any()) or bool(rows[pad_row].any()):
        return None
    # Each row one model's: models sharing rows (two models of one center) keep their own labels.
    by_start = torch.argsort(offsets)
    if bool((ends[by_start][:-1] > offsets[by_start][1:]).any()):
        return None
    return rows, offsets, pad_row
