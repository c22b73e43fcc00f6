"""The end-of-run line of ``fit`` and ``test``: a multi-class run has no pooled AUROC (NaN by
definition, :func:`lightning_fed.evaluation.score`), so the line gives its accuracy instead of
``pooled nan``."""

from __future__ import annotations

from lightning_fed.commands.common import pooled_text


def test_a_binary_run_prints_its_pooled_auroc() -> None:
    assert pooled_text({"test_auroc_pooled": 0.81234, "test_accuracy_mean": 0.7}) == "pooled 0.8123"


def test_a_run_without_a_pooled_auroc_prints_its_accuracy_not_nan() -> None:
    text = pooled_text({"test_auroc_pooled": float("nan"), "test_accuracy_mean": 0.82362})
    assert text == "pooled n/a, accuracy 0.8236"
