"""Local vs pooled models on FedProxSynthetic: the orderings table of its module docstring.

Per level and seed, logistic regressions per center / on all centers / per care unit and a pooled
MLP under the pooled standardization, scored by test AUROC on the centers whose splits hold both
classes (:mod:`lightning_fed.data.fedprox_synthetic`, "Orderings"). Needs scikit-learn (the ``dev``
extra); about 12 s per (level, seed) on one core.

Run: ``OMP_NUM_THREADS=1 python benchmarks/fedprox_orderings.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor

from lightning_fed.data import FedProxSynthetic
from lightning_fed.data.center import CenterData, FederatedData, pooled_standardization
from lightning_fed.data.fedprox_synthetic import LEVELS


def _orderings_row(data: FederatedData, level: str, seed: int) -> dict[str, float | int | str]:
    """One row of :func:`measure_orderings` for one built federation."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.neural_network import MLPClassifier

    def stack(centers: Sequence[CenterData]) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.concatenate([c.x_train.numpy() for c in centers]),
            np.concatenate([c.y_train.numpy() for c in centers]),
        )

    def both(y: Tensor) -> bool:
        return 0 < float(y.sum()) < len(y)

    def auroc(c: CenterData, score: np.ndarray | None) -> float:
        # No model (a unit without both classes in its train splits): a constant score.
        return 0.5 if score is None else float(roc_auc_score(c.y_test.numpy(), score))

    centers = data.centers
    scored = [k for k, c in enumerate(centers) if both(c.y_train) and both(c.y_test)]
    pooled = LogisticRegression(C=1.0, max_iter=2000).fit(*stack(centers))
    per_unit: dict[str, LogisticRegression] = {}
    for unit in sorted({c.attributes["care_unit"] for c in centers}):
        x_u, y_u = stack([c for c in centers if c.attributes["care_unit"] == unit])
        if 0 < y_u.sum() < len(y_u):
            per_unit[unit] = LogisticRegression(C=1.0, max_iter=2000).fit(x_u, y_u)
    central = pooled_standardization(data).centers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPClassifier((64,), max_iter=100, random_state=seed).fit(*stack(central))

    local, pool, unit_pool, mlp_auroc = [], [], [], []
    for k in scored:
        c = centers[k]
        x_te = c.x_test.numpy()
        own = LogisticRegression(C=1.0, max_iter=2000).fit(c.x_train.numpy(), c.y_train.numpy())
        unit_model = per_unit.get(c.attributes["care_unit"])
        local.append(auroc(c, own.decision_function(x_te)))
        pool.append(auroc(c, pooled.decision_function(x_te)))
        unit_pool.append(auroc(c, None if unit_model is None else unit_model.decision_function(x_te)))
        mlp_auroc.append(auroc(central[k], mlp.predict_proba(central[k].x_test.numpy())[:, 1]))
    rates = np.array([c.attributes["base_rate"] for c in centers])

    def mean(values: list[float]) -> float:
        return float(np.mean(values)) if values else float("nan")

    return {
        "level": level,
        "seed": seed,
        "scored": len(scored),
        "mid": int(((rates > 0.05) & (rates < 0.95)).sum()),
        "local": mean(local),
        "pooled": mean(pool),
        "unit_pooled": mean(unit_pool),
        "centralized_mlp": mean(mlp_auroc),
    }


def measure_orderings(
    seeds: Sequence[int] = (0, 1, 2), levels: Sequence[str] = LEVELS, **kwargs: Any
) -> list[dict[str, float | int | str]]:
    """Local vs pooled models on :meth:`FedProxSynthetic.build` (the numbers of the module's Orderings).

    Per level and seed: one ``LogisticRegression(C=1)`` per center on its train split (Local), one
    on every center's train split (Pooled), one per care unit on its centers' train splits
    (Unit-pooled), all on the per-center standardized features ``build`` gives (what FedAvg and
    Local see); and one ``MLPClassifier((64,), max_iter=100)`` on every center's train split under
    the pooled standardization (Centralized-MLP, what the Centralized baseline sees,
    :func:`~lightning_fed.data.center.pooled_standardization`). Each is scored by its test AUROC on
    the centers whose train and test splits hold both classes, then averaged over those centers.
    Needs scikit-learn (the ``dev`` extra); about 12 s per (level, seed) on one core.

    Args:
        seeds: Data seeds.
        levels: Levels to measure.
        **kwargs: Further :class:`FedProxSynthetic` arguments.

    Returns:
        One row per (level, seed): ``level``, ``seed``, ``scored`` (centers scored), ``mid`` (centers
        with ``0.05 < base_rate < 0.95``), ``local``, ``pooled``, ``unit_pooled``,
        ``centralized_mlp``.
    """
    return [
        _orderings_row(FedProxSynthetic(level=level, **kwargs).build(seed), level, seed)
        for level in levels
        for seed in seeds
    ]


def print_orderings() -> None:
    """Print :func:`measure_orderings` with its defaults, one line per (level, seed)."""
    for row in measure_orderings():
        print(
            f"level={row['level']:<6} seed={row['seed']} scored={row['scored']:>3} mid={row['mid']:>3} "
            f"local={row['local']:.3f} pooled={row['pooled']:.3f} unit_pooled={row['unit_pooled']:.3f} "
            f"centralized_mlp={row['centralized_mlp']:.3f}"
        )


if __name__ == "__main__":
    print_orderings()
