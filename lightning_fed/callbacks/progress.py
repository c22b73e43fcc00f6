"""A tqdm progress bar over rounds: round, mean validation AUROC and accuracy, cumulative MB sent."""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm.auto import tqdm

from lightning_fed.callbacks.base import Callback
from lightning_fed.metrics import summarize
from lightning_fed.types import RoundResult

__all__ = ["ProgressBar"]


class ProgressBar(Callback):
    """Show per-round progress (round, mean validation AUROC, cumulative MB, algorithm statistics).

    Under DDP only rank 0 shows the bar. On a round that did not evaluate validation
    (``trainer.eval_every > 1``) the bar keeps the last validation values shown.

    Args:
        enabled: Turn the bar off (e.g. in sweeps that log to W&B only).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.bar: tqdm | None = None
        self._last_refresh = 0.0
        self._val_auroc: str | None = None
        self._val_acc: str | None = None

    def on_fit_start(self, federation: Any) -> None:
        if self.enabled and federation.fabric.is_global_zero:
            self.bar = tqdm(
                total=federation.trainer.rounds,
                initial=federation.round,
                desc="rounds",
                unit="round",
                file=sys.stdout,
                dynamic_ncols=True,
            )

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        if self.bar is None:
            return
        if result.val_auroc is not None:  # else keep the last values shown
            self._val_auroc = f"{summarize(result.val_auroc).mean:.4f}"
            acc = result.val_accuracy
            self._val_acc = None if acc is None else f"{summarize(acc).mean:.4f}"
        postfix = {} if self._val_auroc is None else {"val_auroc": self._val_auroc}
        postfix["MB"] = f"{result.bytes_cumulative / 1e6:.1f}"
        if self._val_acc is not None:
            postfix["val_acc"] = self._val_acc
        postfix.update({k: f"{v:.3g}" for k, v in result.stats.items() if not k.startswith("seconds")})
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(1)

    def on_finish_log(self, federation: Any, scalars: dict[str, float]) -> None:
        if self.bar is None:
            return
        now = time.monotonic()
        if now - self._last_refresh >= 1.0:  # a final stage may log hundreds of epochs a second
            self.bar.set_description("final stage")
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in scalars.items()}, refresh=True)
            self._last_refresh = now

    def on_fit_end(self, federation: Any, summary: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
