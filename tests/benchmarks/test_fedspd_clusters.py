"""The FedSPD stage diagnostic's scores (``benchmarks/fedspd_clusters.py``), by hand.

Three clients; client ``c``'s model predicts class ``c`` for every row (constant logits). Their test
labels are ``(0, 0, 1)``, ``(1, 1)`` and ``(2, 0, 2, 2)``. Own accuracy: ``2/3``, ``1`` and ``3/4``,
mean ``29/36``. Entry accuracy pools every ordered pair ``(i, j != i)``: model 0 is right on none of
client 1's rows and on one of client 2's, model 1 on one of client 0's, model 2 on none of the
others'; 2 right out of ``(2 + 4) + (3 + 4) + (3 + 2) = 18`` rows, ``1/9``.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from benchmarks.fedspd_clusters import own_and_entry
from lightning_fed.evaluation import EvalSet


class ConstantEngine:
    """Center ``c``'s model returns the logits ``params["w"][c]`` for every row."""

    def predict(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        w = params["w"]
        return w[:, None, :].expand(w.shape[0], x.shape[1], w.shape[1])


def test_own_and_entry_accuracy_by_hand() -> None:
    labels = [[0, 0, 1], [1, 1], [2, 0, 2, 2]]
    split = EvalSet.from_splits(
        [(torch.zeros(len(y), 1), torch.tensor(y, dtype=torch.float32)) for y in labels]
    )
    params = {"w": torch.eye(3) * 5.0}
    own, entry = own_and_entry(ConstantEngine(), params, split)
    assert own == pytest.approx(29 / 36, abs=1e-7)
    assert entry == pytest.approx(1 / 9, abs=1e-12)
