"""The summary keys of the held-out centers' figures (torch-free, so the report can read them).

``evaluation.holdout_centers`` (:mod:`lightning_fed.holdout`) writes one set of figures per
fine-tuning budget ``k`` under ``holdout/steps_<k>/<name>``; :mod:`lightning_fed.reporting.tables.holdout`
reads them back.
"""

from __future__ import annotations

__all__ = ["holdout_key"]


def holdout_key(steps: int, name: str) -> str:
    """The summary key of figure ``name`` after ``steps`` fine-tuning steps, e.g.
    ``holdout/steps_0/test_auroc_mean``."""
    return f"holdout/steps_{int(steps)}/{name}"
