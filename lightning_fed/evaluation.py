"""Per-center evaluation of stacked models on each center's own split.

Every center's split is laid into one padded tensor ``[C, n_max, F]`` with a row mask, once; each
evaluation is then one packed forward and one batched rank AUROC for all centers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_fed.engine.base import Engine
from lightning_fed.metrics import batched_auroc, pooled_auroc

__all__ = ["EvalSet", "Evaluation", "evaluate"]


@dataclass(frozen=True, eq=False)
class EvalSet:
    """Padded per-center split: ``x [C, n, F]``, ``y [C, n]``, ``mask [C, n]`` (True = real row)."""

    x: Tensor
    y: Tensor
    mask: Tensor

    @classmethod
    def from_splits(
        cls, splits: Sequence[tuple[Tensor, Tensor]], dtype: torch.dtype = torch.float32
    ) -> EvalSet:
        """Pad ``(x, y)`` per center to the longest split."""
        n_max = max(1, max(len(y) for _, y in splits))
        f = splits[0][0].shape[1]
        x = torch.zeros(len(splits), n_max, f, dtype=dtype)
        y = torch.zeros(len(splits), n_max)
        mask = torch.zeros(len(splits), n_max, dtype=torch.bool)
        for c, (xc, yc) in enumerate(splits):
            x[c, : len(yc)], y[c, : len(yc)], mask[c, : len(yc)] = xc, yc, True
        return cls(x, y, mask)


@dataclass(frozen=True, eq=False)
class Evaluation:
    """Per-center AUROC ``[C]`` (NaN when a split has one class) and the pooled AUROC over all rows."""

    auroc: Tensor
    pooled_auroc: float


def evaluate(engine: Engine, center_params: dict[str, Tensor], split: EvalSet) -> Evaluation:
    """Evaluate center ``c``'s model on center ``c``'s split, for every center at once."""
    logits = engine.predict(center_params, split.x).float().cpu()
    auroc = batched_auroc(logits, split.y, split.mask)
    return Evaluation(auroc=auroc, pooled_auroc=pooled_auroc(logits[split.mask], split.y[split.mask]))
