"""Fitting every fold of a few methods from the CLI, shared by the end-to-end fold tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from lightning_fed.cli import main


def fit_folds(root: Path, tiny: Sequence[str], methods: Mapping[str, str], folds: int, seed: int) -> None:
    """``fit`` each method (label -> algorithm class name) on each of ``folds`` folds at ``seed``, run
    folders ``<label>-seed<seed>-fold<i>`` under ``root`` labelled ``<label>``."""
    for label, cls in methods.items():
        for fold in range(folds):
            main(
                [
                    "fit",
                    *tiny,
                    f"--algorithm=lightning_fed.algorithms.{cls}",
                    f"--seed={seed}",
                    f"--data.split.folds={folds}",
                    f"--data.split.fold={fold}",
                    f"--output.root={root}",
                    f"--output.name={label}-seed{seed}-fold{fold}",
                    f"--output.label={label}",
                ]
            )
