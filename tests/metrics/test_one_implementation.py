"""Each metric has one implementation, the one evaluation uses; no torchmetrics class is kept unused."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import torch
import torchmetrics

import lightning_fed.metrics as metrics


def test_the_metrics_package_defines_no_torchmetrics_classes() -> None:
    """Evaluation scores all centers at once with the batched functions; a per-center Metric class
    beside them would be a second, unused implementation of the same number."""
    found = []
    for info in pkgutil.iter_modules(metrics.__path__):
        module = importlib.import_module(f"{metrics.__name__}.{info.name}")
        found += [
            f"{module.__name__}.{name}"
            for name, obj in vars(module).items()
            if inspect.isclass(obj)
            and issubclass(obj, torchmetrics.Metric)
            and obj.__module__ == module.__name__
        ]
    assert found == []


def test_referral_and_evaluation_balanced_accuracy_are_one_function() -> None:
    """The functional form (referral tables) is the batched form (evaluation) on one row."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 25, 3, generator=gen)
    y = torch.randint(0, 3, (4, 25), generator=gen)
    mask = torch.rand(4, 25, generator=gen) < 0.8
    batched = metrics.batched_balanced_accuracy(logits, y.float(), mask, 3)
    for c in range(4):
        one = metrics.balanced_accuracy(logits[c][mask[c]].argmax(-1), y[c][mask[c]], 3)
        assert one.dtype == batched.dtype and float(one) == float(batched[c])
