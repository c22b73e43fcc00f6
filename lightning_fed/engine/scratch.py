"""Buffers the packed engine uses only inside a round, kept between rounds and shared by passes.

A round of :class:`~lightning_fed.engine.packed.PackedEngine` over ``k`` centers and ``D`` parameters
needs, besides the parameters and optimizer state it keeps (``[C, D]`` each), scratch whose size
grows with the number of centers it trains at once: the flat gradient ``[k, D]``, the round-start
snapshot of parameters and optimizer state (what a diverged center is rolled back to, ``(1 + S)
k D`` for ``S`` state tensors), the prefetched dropout words (``sum_s k_s`` rows of ``w`` words),
the model's activation workspace (``packed_loss_grad``), the optimizer's temporaries and the
gathered batch inputs. None of it outlives a round: a fresh allocation every round costs page faults
(measured ~25 % of a packed round), so it is kept, and the engines of consecutive passes
(:class:`~lightning_fed.engine.passes.PassEngine`) share one :class:`RoundScratch`, so it is sized by
the largest pass, not by all centers. The pass engine, run to bound memory, releases it after each
round (:meth:`RoundScratch.release`: it is not held through the aggregation; the next round's first
pass makes it again, once a round instead of once a step).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["RoundScratch"]


class RoundScratch:
    """Named reusable buffers, grown when a larger one is asked for and otherwise reused as they are.

    Contents are whatever the last user left (callers overwrite what they read), except that a
    buffer made by :meth:`take` with ``zero=True`` starts at 0.
    """

    def __init__(self) -> None:
        #: The engine's own buffers (gradient, snapshot, dropout words, gathered batches), by name.
        self.buffers: dict[str, Tensor] = {}
        #: The model's ``packed_loss_grad`` workspace (its own names).
        self.workspace: dict[str, Tensor] = {}
        #: The stacked optimizer's temporaries (``StackedAdam.buffers``).
        self.optimizer: dict[str, Tensor] = {}

    def take(self, name: str, shape: tuple[int, ...], like: Tensor, *, zero: bool = False) -> Tensor:
        """A ``shape`` view of buffer ``name`` with ``like``'s dtype and device (grown if too small)."""
        n = math.prod(shape)
        buf = self.buffers.get(name)
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            make = torch.zeros if zero else torch.empty
            buf = self.buffers[name] = make(n, dtype=like.dtype, device=like.device)
        return buf[:n].view(shape)

    def release(self, keep: tuple[str, ...] = ("grad",)) -> None:
        """Drop every buffer but those named in ``keep`` (ones an engine holds views of, such as the
        flat gradient), emptying the workspace and optimizer dicts in place (their users hold them).

        :class:`~lightning_fed.engine.passes.PassEngine` calls it after a round's passes, so the
        scratch does not sit beside the aggregation's tensors (issue 33: at 3,680 centers in passes
        of 460 the dropout words, activation workspace, snapshot and temporaries are ~0.3 GB); the
        next round makes them again. Contents are never read before they are written (class
        docstring), so no value depends on it.
        """
        self.buffers = {n: b for n, b in self.buffers.items() if n in keep}
        self.workspace.clear()
        self.optimizer.clear()

    def nbytes(self) -> int:
        """Bytes held in all buffers."""
        every = [*self.buffers.values(), *self.workspace.values(), *self.optimizer.values()]
        return sum(t.numel() * t.element_size() for t in every)
