"""Save the federation state (``checkpoint.pt``) atomically, every N rounds and at the end.

A checkpoint holds ``federation.state_dict()`` (parameters, optimizer states, algorithm state such
as ABPS posteriors and momentum buffers, the ledger, the round index) and the state of every
stateful observer (early stopping), so ``lightning-fed fit --resume RUN_DIR`` continues exactly
where the last checkpoint left off: every random draw derives from (seed, purpose, round), so
no generator state needs saving. It also holds the run's config fingerprint and the fingerprinted
config (:mod:`lightning_fed.runfolder.fingerprint`), so a resume or a re-test with another config is
refused naming the keys that differ, and the fingerprint of the data it was trained on
(:func:`~lightning_fed.data.fingerprint.data_fingerprint`), so a resume or a re-test on data that
changed since (an edited table) is refused too.

Checkpoints are read with ``torch.load(weights_only=True)``
(:func:`~lightning_fed.runfolder.state.read_checkpoint`): everything saved is tensors and plain
containers, and a crafted file that would run code on unpickling is refused.

Under DDP the state is gathered on every rank (``federation.state_dict()`` is a collective there:
the engine gathers every shard's optimizer state), and only rank 0 writes the file, in the
one-process layout, so a checkpoint resumes with any number of processes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_fed.callbacks.base import Callback
from lightning_fed.data.fingerprint import data_fingerprint
from lightning_fed.io import save_torch
from lightning_fed.runfolder import config_fingerprint, fingerprinted
from lightning_fed.runfolder.state import read_checkpoint
from lightning_fed.types import RoundResult
from lightning_fed.validation import first_line

__all__ = ["Checkpoint"]


class Checkpoint(Callback):
    """Write the federation's and the observers' state to ``path``.

    Args:
        path: Target file.
        every: Also save every ``every`` rounds (0: only at the end).
        stateful: Observers whose ``state_dict`` is saved too (restored in the same order).
        config: The run's resolved config (nested); its fingerprint is saved with the state.
    """

    def __init__(
        self,
        path: str | Path,
        every: int = 0,
        stateful: Sequence[Any] = (),
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if every < 0:
            raise ValueError(f"output.checkpoint_every must be >= 0, got {every}")
        self.path, self.every = Path(path), int(every)
        self.stateful = [cb for cb in stateful if hasattr(cb, "state_dict")]
        self.config = None if config is None else fingerprinted(config)
        self.fingerprint = None if config is None else config_fingerprint(config)

    def _save(self, federation: Any) -> None:
        state = {
            "federation": federation.state_dict(),
            "callbacks": [cb.state_dict() for cb in self.stateful],
            "fingerprint": self.fingerprint,
            "config": self.config,
            "data_fingerprint": data_fingerprint(federation.data),
            # torch's thread count when the data were built (some sources round differently at
            # another count): what a resume or a re-test rebuilds the data at
            "data_threads": getattr(federation, "data_threads", None),
        }
        if federation.fabric.is_global_zero:
            save_torch(self.path, state)

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        if self.every and (result.round + 1) % self.every == 0:
            self._save(federation)

    def on_fit_end(self, federation: Any, summary: dict[str, Any]) -> None:
        self._save(federation)

    def restore(self, federation: Any, state: dict[str, Any] | None = None) -> int:
        """Load ``path`` into ``federation`` and the stateful observers; returns the round reached.

        Args:
            federation: The federation built from the run's config, its data built at the
                checkpoint's ``data_threads`` (:func:`lightning_fed.commands.common.build_federation`).
            state: The checkpoint as :func:`read_checkpoint` read it already (None: read ``path``).

        Raises:
            ValueError: One line naming the file, if it is truncated, corrupt, unsafe, foreign, or
                holds state that does not fit this federation (another model or number of centers).
        """
        state = read_checkpoint(self.path) if state is None else state
        saved, built = state.get("data_fingerprint"), data_fingerprint(federation.data)
        if saved is None:
            print(
                f"lightning-fed: warning: {self.path} has no data fingerprint (an older run): cannot check "
                "that the data is the data it was trained on",
                file=sys.stderr,
            )
        elif saved != built:
            why = _data_mismatch(state, federation, saved, built)
            raise ValueError(f"checkpoint {self.path} was trained on other data ({why}")
        callbacks = state.get("callbacks", [])
        if len(callbacks) != len(self.stateful):
            raise ValueError(
                f"checkpoint {self.path} holds {len(callbacks)} observer states, this run has "
                f"{len(self.stateful)} stateful callbacks: resume with the run's own config"
            )
        try:
            federation.load_state_dict(state["federation"])
            for cb, cb_state in zip(self.stateful, callbacks, strict=True):
                cb.load_state_dict(cb_state)
        except (KeyError, RuntimeError, ValueError, TypeError, IndexError) as err:
            raise ValueError(
                f"checkpoint {self.path} does not fit this federation ({first_line(err)}): it was written "
                "by another config"
            ) from None
        return federation.round


def _data_mismatch(state: Mapping[str, Any], federation: Any, saved: str, built: str) -> str:
    """Why the data fingerprints differ, and the fix (the rest of the refusal's one line)."""
    threads = getattr(federation, "data_threads", None)
    if state.get("data_threads") is None and threads is not None:
        return (
            f"data fingerprint {saved}, the data built now at {threads} torch thread(s) {built}): the "
            "source's files changed since the fit, or the fit built them at another thread count (this "
            "checkpoint predates recording it; some sources round differently per count): restore the "
            "files, or call torch.set_num_threads(N) with the fit's count (its machine's cores) before "
            "loading, or start a new run"
        )
    return (
        f"data fingerprint {saved}, the data built now {built}): the source's files or their contents "
        "changed since the fit; restore them, or start a new run"
    )
