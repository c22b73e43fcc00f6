"""The observer-callback base class: no-op hooks that subclasses override.

Callbacks are passed to Fabric and called through ``fabric.call`` (see
:mod:`lightning_fed.federation` for the hook order). Config files add them under ``callbacks:``
by ``class_path``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from lightning_fed.types import ObserverNeeds, RoundResult

__all__ = ["Callback", "FinalFileWriter"]


class Callback:
    """Base class of observers; every hook is optional.

    Attributes:
        needs_val_every_round: Whether this observer reads the validation AUROC every round
            (declared to the federation by :meth:`declare_needs`).
    """

    needs_val_every_round: ClassVar[bool] = False

    def declare_needs(self, needs: ObserverNeeds) -> None:
        """When the federation is built: declare what this observer needs of the round loop
        (default: validation every round when :attr:`needs_val_every_round`)."""
        needs.val_every_round = needs.val_every_round or self.needs_val_every_round

    def setup_run_dir(self, run_dir: Path) -> None:
        """Told the run folder by ``lightning-fed fit`` before training (for callbacks that write there)."""

    def check_data(self, data: Any) -> None:
        """When the federation is built, before any training: raise a one-line ``ValueError`` if this
        observer cannot work with ``data`` (a :class:`~lightning_fed.data.center.FederatedData`)."""

    def on_fit_start(self, federation: Any) -> None:
        """Before the first round (also after a resume)."""

    def on_round_start(self, federation: Any, round_idx: int) -> None:
        """Before local training of round ``round_idx``."""

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        """After evaluation of a round; may set ``federation.should_stop``."""

    def on_finish_log(self, federation: Any, scalars: dict[str, float]) -> None:
        """Progress of the algorithm's final stage (e.g. EdgeDRM stage II), once per epoch of it."""

    def on_train_end(self, federation: Any) -> None:
        """After the last round, before the summary (e.g. restore the best parameters)."""

    def on_fit_end(self, federation: Any, summary: dict[str, Any]) -> None:
        """With the final summary (write outputs, close bars)."""


class FinalFileWriter(Callback):
    """Write one file from the finished federation, on rank 0 only, when the fit ends.

    Subclasses name what they write in :meth:`write` (``centers.parquet``, ``predictions.parquet``).

    Args:
        path: Target file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def write(self, path: Path, federation: Any) -> None:
        """Write ``path`` from ``federation`` (atomically)."""
        raise NotImplementedError

    def on_fit_end(self, federation: Any, summary: dict[str, Any]) -> None:
        if federation.fabric.is_global_zero:
            self.write(self.path, federation)
