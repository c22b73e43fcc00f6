"""Every test row at every entry client (EdgeDRM App. D.3, ISIC2019): layout and the pooled BA."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.metrics.balanced_accuracy import balanced_accuracy
from lightning_fed.referral.panel import EveryEntry, config_queries, every_entry_queries
from tests.referral.toy import make_data


def _data():
    """Client 0 tests rows with labels (0, 1), client 1 one row with label 1 (inputs tag the row)."""
    xs = [torch.tensor([[1.0], [2.0]]), torch.tensor([[3.0]])]
    ys = [torch.tensor([0, 1]), torch.tensor([1])]
    return make_data(xs, ys)


def test_layout_rows_entries_and_sources() -> None:
    q = every_entry_queries(_data())
    assert q.label == "every entry"
    assert q.x[:, 0].tolist() == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    assert q.y.tolist() == [0, 0, 1, 1, 1, 1]
    assert q.entry.tolist() == [0, 1, 0, 1, 0, 1]
    assert q.source.tolist() == [0, 0, 0, 0, 1, 1]


def test_table_balanced_accuracy_is_the_papers_pooled_ba() -> None:
    """BA = 1/K sum_k 1/(C |T_k|) sum_{x in T_k} sum_s 1{y_hat(x, s) = y}, K = 2, C = 2. Predictions
    per (row, entry): row 1 (class 0) right at both entries; row 2 (class 1) right at entry 0 only;
    row 3 (class 1) wrong at both. Class 0: 2 / 2; class 1: 1 / 4; BA = (1 + 0.25) / 2 = 0.625."""
    q = every_entry_queries(_data())
    pred = torch.tensor([0, 0, 1, 0, 0, 0])
    assert float(balanced_accuracy(pred, q.y, num_classes=2)) == pytest.approx(0.625)
    right = {(i, s): int(pred[2 * i + s] == q.y[2 * i]) for i in range(3) for s in range(2)}
    classes = {0: [0], 1: [1, 2]}
    ba = (
        sum(sum(right[i, s] for i in rows for s in range(2)) / (2 * len(rows)) for rows in classes.values())
        / 2
    )
    assert ba == pytest.approx(0.625)


def test_the_config_asks_for_every_entry(tmp_path) -> None:
    (tmp_path / "config.yaml").write_text(
        "callbacks:\n  - class_path: lightning_fed.referral.panel.EveryEntry\n"
    )
    mode = config_queries(tmp_path)
    assert isinstance(mode, EveryEntry) and mode.queries(_data(), 0).entry.tolist() == [0, 1, 0, 1, 0, 1]
