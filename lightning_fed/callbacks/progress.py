"""A tqdm progress bar over rounds: round, mean validation AUROC, cumulative MB sent, and the fault
counters of the round only when they are nonzero (the full per-round record is ``rounds.parquet``)."""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm.auto import tqdm

from lightning_fed.callbacks.base import Callback
from lightning_fed.metrics import summarize
from lightning_fed.types import RoundResult

__all__ = ["COUNTERS", "ProgressBar"]

#: The round counters the bar shows when nonzero: (postfix name, ``RoundResult.stats`` key, scale by the
#: number of centers). ``rej``: payloads the wire rejected (faults, norm defence); ``div``: centers whose
#: local step diverged and were rolled back; ``rest``: centers that exchanged nothing (ABPS's isolation
#: rate times the number of centers). Every other statistic stays in ``rounds.parquet``.
COUNTERS: tuple[tuple[str, str, bool], ...] = (
    ("rej", "rejected_payloads", False),
    ("div", "diverged_centers", False),
    ("rest", "isolation_rate", True),
)


class ProgressBar(Callback):
    """Show per-round progress: round, mean validation AUROC, cumulative MB, nonzero :data:`COUNTERS`.

    A quiet round reads ``rounds: 12/100 [..., val_auroc=0.8123, MB=4.2]``; a round with a rejected
    payload adds ``rej=1``. Under DDP only rank 0 shows the bar. On a round that did not evaluate
    validation (``trainer.eval_every > 1``) the bar keeps the last value shown.

    Args:
        enabled: Turn the bar off (e.g. in sweeps that log to W&B only).
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.bar: tqdm | None = None
        self._last_refresh = 0.0
        self._val_auroc: str | None = None
        self._centers = 0

    def on_fit_start(self, federation: Any) -> None:
        if self.enabled and federation.fabric.is_global_zero:
            self._centers = federation.data.num_centers
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
        self.bar.set_postfix(self.postfix(result), refresh=False)
        self.bar.update(1)

    def postfix(self, result: RoundResult) -> dict[str, str]:
        """The bar's fields after ``result``: ``val_auroc`` (last evaluated), ``MB``, nonzero counters.

        Args:
            result: The round that just ended.

        Returns:
            Field name to formatted value, in display order.
        """
        if result.val_auroc is not None:  # else keep the last value shown
            self._val_auroc = f"{summarize(result.val_auroc).mean:.4f}"
        fields = {} if self._val_auroc is None else {"val_auroc": self._val_auroc}
        fields["MB"] = f"{result.bytes_cumulative / 1e6:.1f}"
        for name, key, per_center in COUNTERS:
            value = result.stats.get(key, 0)
            count = round(value * self._centers) if per_center else int(value)
            if count:
                fields[name] = str(count)
        return fields

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
