"""Validation-AUROC early stopping that keeps the best parameters (ABPS Sec. 6.4, ABPS-X).

After each round the mean validation AUROC across centers (centers with an undefined AUROC left
out) is compared with the best so far; after ``patience`` rounds without an improvement larger
than ``min_delta`` the run stops. At the end every center's parameters are restored to the best
round's (bytes already sent stay on the ledger: they were spent).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from lightning_fed.callbacks.base import Callback
from lightning_fed.metrics import summarize
from lightning_fed.types import RoundResult

__all__ = ["EarlyStopping"]


class EarlyStopping(Callback):
    """Stop when mean validation AUROC stops improving; restore the best parameters.

    Args:
        patience: Rounds without improvement before stopping (paper: 10).
        min_delta: Smallest increase that counts as an improvement.
        restore_best: Restore the parameters of the best round at the end.
    """

    def __init__(self, patience: int = 10, min_delta: float = 0.0, restore_best: bool = True) -> None:
        if patience < 1:
            raise ValueError(f"early_stopping.patience must be >= 1, got {patience}")
        if min_delta < 0:
            raise ValueError(f"early_stopping.min_delta must be >= 0, got {min_delta}")
        self.patience, self.min_delta, self.restore_best = int(patience), float(min_delta), restore_best
        self.best, self.best_round, self.wait = -math.inf, -1, 0
        self._best_state: dict[str, Any] | None = None

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        score = summarize(result.val_auroc).mean
        if not math.isnan(score) and score > self.best + self.min_delta:
            self.best, self.best_round, self.wait = score, result.round, 0
            if self.restore_best:
                self._best_state = copy.deepcopy(federation.engine.state_dict())
            return
        self.wait += 1
        if self.wait >= self.patience:
            federation.should_stop = True

    def on_train_end(self, federation: Any) -> None:
        if self.restore_best and self._best_state is not None:
            federation.engine.load_state_dict(self._best_state)
        federation.summary_extras.update(best_round=self.best_round, best_val_auroc=self.best)

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_round": self.best_round,
            "wait": self.wait,
            "best_state": self._best_state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_round, self.wait = state["best"], state["best_round"], state["wait"]
        self._best_state = state["best_state"]
