"""Validation-AUROC early stopping, reporting the best or the last round (ABPS Sec. 6.4, ABPS-X).

After each round ``r`` the score ``s_r`` is the mean validation AUROC across centers (centers with an
undefined AUROC left out). Round ``r`` improves when ``s_r > best + min_delta`` (``best`` starts at
``-inf``, so the first defined score improves); after ``patience`` rounds in a row without an
improvement the run stops, before ``trainer.rounds`` if that comes first:

    best_round = the last improving round,     stop after round r when r - best_round >= patience.

What the run reports (the final parameters, evaluated in ``summary.json``):

* ``restore_best=True`` (default): every center's parameters go back to the best round's (bytes
  already sent stay on the ledger: they were spent);
* ``restore_best=False``: the parameters of the last round run (the "last-round" reading of the same
  protocol, ``configs/*_last.yaml``); training is identical, only the reported model differs.

The summary gets ``best_round`` (-1 if no round had a defined score), ``best_val_auroc``,
``stopped_round`` (the index of the last round run, same 0-based indexing as ``best_round``),
``stopped_early`` (patience ran out before the round budget) and ``restored_best`` (the final
parameters are ``best_round``'s; False when ``restore_best=False`` or no round improved). The final
parameters are round ``best_round``'s if ``restored_best`` else round ``stopped_round``'s.

A run resumed from a checkpoint written after patience ran out stays stopped (no extra round).

It reads the validation AUROC every round, so it sets ``needs_val_every_round``: with it among the
callbacks the federation evaluates validation every round whatever ``trainer.eval_every`` (which
then thins out only the test evaluations; see :mod:`lightning_fed.federation`).
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar

from lightning_fed.callbacks.base import Callback
from lightning_fed.metrics import summarize
from lightning_fed.types import RoundResult

__all__ = ["EarlyStopping"]


class EarlyStopping(Callback):
    """Stop when mean validation AUROC stops improving; report the best (default) or the last round.

    Args:
        patience: Rounds without improvement before stopping (paper: 10).
        min_delta: Smallest increase that counts as an improvement.
        restore_best: Restore the parameters of the best round at the end (False: keep the last
            round's; nothing is copied during training then).

    Raises:
        ValueError: If ``patience < 1``, ``min_delta < 0`` or ``restore_best`` is not a bool.
    """

    #: Read by the federation: evaluate validation every round, whatever ``trainer.eval_every``.
    needs_val_every_round: ClassVar[bool] = True

    def __init__(self, patience: int = 10, min_delta: float = 0.0, restore_best: bool = True) -> None:
        if patience < 1:
            raise ValueError(f"early_stopping.patience must be >= 1, got {patience}")
        if min_delta < 0:
            raise ValueError(f"early_stopping.min_delta must be >= 0, got {min_delta}")
        if not isinstance(restore_best, bool):
            raise ValueError(f"early_stopping.restore_best must be true or false, got {restore_best!r}")
        self.patience, self.min_delta, self.restore_best = int(patience), float(min_delta), restore_best
        self.best, self.best_round, self.wait = -math.inf, -1, 0
        #: Index of the last round seen (-1 before the first).
        self.last_round = -1
        #: Whether patience ran out (the run was stopped by this callback).
        self.stopped = False
        self._best_state: dict[str, Any] | None = None

    def on_fit_start(self, federation: Any) -> None:
        if self.stopped:  # resumed after patience ran out: the run is over
            federation.should_stop = True

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        self.last_round = int(result.round)
        if result.val_auroc is None:  # not evaluated (cannot happen under a Federation: see above)
            raise ValueError(
                f"early stopping got no validation AUROC at round {result.round}: keep EarlyStopping "
                "among the federation's Fabric callbacks (it evaluates validation every round then)"
            )
        score = summarize(result.val_auroc).mean
        if not math.isnan(score) and score > self.best + self.min_delta:
            self.best, self.best_round, self.wait = score, result.round, 0
            if self.restore_best:
                self._best_state = copy.deepcopy(federation.engine.state_dict())
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped = True
            federation.should_stop = True

    def on_train_end(self, federation: Any) -> None:
        restored = self.restore_best and self._best_state is not None
        if restored:
            federation.engine.load_state_dict(self._best_state)
        federation.summary_extras.update(
            best_round=self.best_round,
            best_val_auroc=self.best,
            stopped_round=self.last_round,
            stopped_early=self.stopped,
            restored_best=restored,
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "best_round": self.best_round,
            "wait": self.wait,
            "best_state": self._best_state,
            "last_round": self.last_round,
            "stopped": self.stopped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.best_round, self.wait = state["best"], state["best_round"], state["wait"]
        self._best_state = state["best_state"]
        # Checkpoints written before these keys existed: the best round is the latest one known.
        self.last_round = int(state.get("last_round", self.best_round))
        self.stopped = bool(state.get("stopped", self.wait >= self.patience))
