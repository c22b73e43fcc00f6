"""``metrics:``: torchmetrics classes per center, against torchmetrics called by hand on each center's
split, the NaN rule, bad entries refused in one line before training; and the built-in batched
AUROC / balanced accuracy against torchmetrics on two-class centers."""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch
from torchmetrics.classification import (
    BinaryAUROC,
    BinaryAveragePrecision,
    BinaryCalibrationError,
    BinaryF1Score,
    MulticlassAUROC,
    MulticlassAveragePrecision,
    MulticlassRecall,
)

from lightning_fed.algorithms import FedAvg
from lightning_fed.federation import Federation
from lightning_fed.metrics import batched_auroc, batched_balanced_accuracy, batched_macro_auroc
from lightning_fed.metrics.torchmetrics_per_center import PerCenterMetrics, metric_name, resolve_metrics
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation


def _padded(sizes: list[int], classes: int = 2, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random logits ``[C, n]`` (or ``[C, n, K]``), labels and mask; every center has every class."""
    gen = torch.Generator().manual_seed(seed)
    n = max(sizes)
    shape = (len(sizes), n) if classes == 2 else (len(sizes), n, classes)
    logits = torch.randn(*shape, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (len(sizes), n), generator=gen).float()
    mask = torch.zeros(len(sizes), n, dtype=torch.bool)
    for c, k in enumerate(sizes):
        mask[c, :k] = True
        y[c, :classes] = torch.arange(classes).float()
    return logits, y, mask


def test_builtin_auroc_and_balanced_accuracy_match_torchmetrics_on_two_class_centers() -> None:
    logits, y, mask = _padded([30, 7, 120, 3, 55])
    auroc = batched_auroc(logits, y, mask)
    balanced = batched_balanced_accuracy(logits, y, mask, 2)
    for c in range(logits.shape[0]):
        p, t = logits[c][mask[c]], y[c][mask[c]].long()
        assert float(auroc[c]) == pytest.approx(float(BinaryAUROC()(p, t)), abs=1e-6)
        recall = MulticlassRecall(num_classes=2, average="macro")((p > 0).long(), t)
        assert float(balanced[c]) == pytest.approx(float(recall), abs=1e-6)


def test_builtin_macro_auroc_matches_torchmetrics_where_every_class_occurs() -> None:
    logits, y, mask = _padded([40, 12, 90], classes=4)
    macro = batched_macro_auroc(logits.float(), y, mask)
    for c in range(logits.shape[0]):
        p, t = logits[c][mask[c]].float(), y[c][mask[c]].long()
        expected = MulticlassAUROC(num_classes=4, average="macro")(p.softmax(-1), t)
        assert float(macro[c]) == pytest.approx(float(expected), abs=1e-6)


def test_new_metrics_per_center_equal_torchmetrics_by_hand() -> None:
    logits, y, mask = _padded([30, 7, 120, 3, 55], seed=1)
    metrics = resolve_metrics(
        [
            "torchmetrics.classification.BinaryAveragePrecision",
            {"class_path": "torchmetrics.classification.BinaryCalibrationError", "init_args": {"n_bins": 5}},
        ]
    )
    out = metrics.evaluate(logits, y, mask)
    assert list(out) == ["binary_average_precision", "binary_calibration_error"]
    for c in range(logits.shape[0]):
        p, t = torch.sigmoid(logits[c][mask[c]]), y[c][mask[c]].long()
        assert float(out["binary_average_precision"][c]) == pytest.approx(
            float(BinaryAveragePrecision()(p, t))
        )
        ece = BinaryCalibrationError(n_bins=5)(p, t)
        assert float(out["binary_calibration_error"][c]) == pytest.approx(float(ece))


def test_multiclass_metric_per_center_equals_torchmetrics_by_hand() -> None:
    logits, y, mask = _padded([40, 12, 90], classes=3, seed=2)
    metrics = PerCenterMetrics([MulticlassAveragePrecision(num_classes=3)])
    metrics.check(3)
    out = metrics.evaluate(logits.float(), y, mask)["multiclass_average_precision"]
    for c in range(logits.shape[0]):
        p, t = logits[c][mask[c]].float().softmax(-1), y[c][mask[c]].long()
        assert float(out[c]) == pytest.approx(float(MulticlassAveragePrecision(num_classes=3)(p, t)))


def test_nan_where_the_split_cannot_define_the_metric() -> None:
    """Single-class split: AP (torchmetrics warns and returns 0) is NaN; calibration error and F1
    (defined, or by convention, without a warning) keep torchmetrics' value; no rows: NaN for all."""
    logits, y, mask = _padded([20, 20, 20], seed=3)
    y[1] = 0.0  # center 1: one class
    mask[2] = False  # center 2: no rows
    metrics = PerCenterMetrics([BinaryAveragePrecision(), BinaryCalibrationError(), BinaryF1Score()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = metrics.evaluate(logits, y, mask)
    assert not [str(w.message) for w in caught]  # recorded, not shown
    ap, ece, f1 = out["binary_average_precision"], out["binary_calibration_error"], out["binary_f1_score"]
    assert not math.isnan(ap[0]) and math.isnan(ap[1]) and math.isnan(ap[2])
    p1, t1 = torch.sigmoid(logits[1]), y[1].long()
    assert float(ece[1]) == pytest.approx(float(BinaryCalibrationError()(p1, t1)))
    assert float(f1[1]) == float(BinaryF1Score()(p1, t1)) == 0.0
    assert math.isnan(ece[2]) and math.isnan(f1[2])


def test_names_are_snake_case_and_never_collide() -> None:
    from torchmetrics import AUROC

    metrics = PerCenterMetrics(
        [BinaryCalibrationError(), BinaryCalibrationError(norm="max"), AUROC(task="binary")]
    )
    assert metrics.names == ["binary_calibration_error", "binary_calibration_error_2", "binary_auroc"]
    assert metric_name(BinaryAUROC()) == "binary_auroc"

    class Auroc(BinaryAUROC):
        pass

    assert PerCenterMetrics([Auroc()]).names == ["auroc_2"]  # 'auroc' is the built-in's


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("torch.nn.Linear", "metrics[0]: torch.nn.Linear is not a torchmetrics.Metric"),
        ("torchmetrics.classification.NoSuch", "metrics[0]: cannot import"),
        (
            {"class_path": "torchmetrics.classification.BinaryAUROC", "init_args": {"bogus": 1}},
            "bad init_args",
        ),
        ({"class_path": "torchmetrics.classification.BinaryAUROC", "extra": 1}, "unknown key"),
        (3, "metrics[0]: 3 is not a torchmetrics class"),
    ],
)
def test_bad_entries_are_one_line_naming_the_entry(spec, words) -> None:
    with pytest.raises(ValueError) as info:
        resolve_metrics([spec])
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("metric", "classes", "words"),
    [
        ("torchmetrics.classification.BinaryAveragePrecision", 10, "Multiclass* metric with num_classes=10"),
        (
            {"class_path": "torchmetrics.classification.MulticlassAUROC", "init_args": {"num_classes": 3}},
            2,
            "Binary*",
        ),
        (
            {"class_path": "torchmetrics.classification.MulticlassAUROC", "init_args": {"num_classes": 3}},
            10,
            "wrong task",
        ),
        (
            {"class_path": "torchmetrics.classification.MultilabelAUROC", "init_args": {"num_labels": 2}},
            2,
            "wrong task",
        ),
        ("torchmetrics.classification.BinaryStatScores", 2, "returns more than one number"),
    ],
)
def test_wrong_task_is_refused_by_the_check(metric, classes, words) -> None:
    metrics = resolve_metrics([metric])
    with pytest.raises(ValueError) as info:
        metrics.check(classes)
    assert info.value.args[0].startswith("metrics[0] (") and words in str(info.value)
    assert "\n" not in str(info.value)


def _federation(metrics, rounds: int = 2) -> Federation:
    data = make_federation([40, 30, 60, 25], seed=4)
    # center 3's test split: one class (AP undefined there)
    c3 = data.centers[3]
    data = dataclasses.replace(
        data, centers=(*data.centers[:3], dataclasses.replace(c3, y_test=torch.zeros_like(c3.y_test)))
    )
    return Federation(
        data,
        MortalityMLP(hidden=(8,)),
        FedAvg(),
        TrainerConfig(rounds=rounds, batch_size=16),
        metrics=metrics,
    )


def test_federation_summary_and_rounds_hold_the_metrics_per_center() -> None:
    fed = _federation(["torchmetrics.classification.BinaryAveragePrecision", BinaryCalibrationError()])
    rounds = []
    fed.fabric._callbacks.append(type("R", (), {"on_round_end": lambda self, f, r: rounds.append(r)})())
    summary = fed.fit()
    logits = fed.engine.predict(fed.center_params(), fed.test.x).float()
    hand_ap, hand_ece = [], []
    for c in range(4):
        rows = fed.test.mask[c]
        p, t = torch.sigmoid(logits[c][rows]), fed.test.y[c][rows].long()
        hand_ap.append(float(BinaryAveragePrecision()(p, t)) if c != 3 else math.nan)
        hand_ece.append(float(BinaryCalibrationError()(p, t)))
    defined = [v for v in hand_ap if not math.isnan(v)]
    assert summary["metrics"] == ["binary_average_precision", "binary_calibration_error"]
    assert summary["test_binary_average_precision_mean"] == pytest.approx(sum(defined) / 3)
    assert summary["test_binary_average_precision_defined"] == 3
    assert summary["test_binary_calibration_error_mean"] == pytest.approx(sum(hand_ece) / 4)
    assert summary["test_binary_calibration_error_defined"] == 4
    assert {"val_binary_average_precision_mean", "val_binary_calibration_error_std"} <= set(summary)
    last = rounds[-1].test_metrics["binary_average_precision"]
    assert math.isnan(last[3]) and last[:3].tolist() == pytest.approx(hand_ap[:3])
    scalars = Federation._round_scalars(rounds[-1])
    assert scalars["test_binary_average_precision_mean"] == pytest.approx(sum(defined) / 3)


def test_federation_without_metrics_keeps_its_summary_keys() -> None:
    summary = _federation(None, rounds=1).fit()
    assert "metrics" not in summary and not any("precision" in k for k in summary)


def test_a_wrong_task_fails_at_construction_before_training() -> None:
    with pytest.raises(ValueError, match=r"metrics\[0\].*Binary\*"):
        _federation(
            [
                {
                    "class_path": "torchmetrics.classification.MulticlassAccuracy",
                    "init_args": {"num_classes": 2},
                }
            ]
        )
