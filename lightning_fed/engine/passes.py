"""Bounded passes: the packed engine's centers trained in consecutive passes of at most ``P`` centers.

One :class:`~lightning_fed.engine.packed.PackedEngine` pass over all ``C`` centers holds, besides
what any engine keeps (parameters and optimizer state, ``(1 + S) C D`` numbers for ``S`` state
tensors, and the training rows), round scratch that grows with ``C``
(:mod:`lightning_fed.engine.scratch`): the flat gradient ``C D``, the round-start snapshot ``(1 + S)
C D``, the prefetched dropout words ``sum_s k_s w`` and the activation workspace ``~ C B H``. At
3,680 centers that scratch was 2.7 GB of a 6.2 GB peak (issue 33). :class:`PassEngine`
(``trainer.max_centers_per_pass: P``) owns one packed engine per pass, each over at most ``P``
centers, trains them one after the other and shares one :class:`~lightning_fed.engine.scratch.RoundScratch`
between them, so the scratch is sized by ``P``: ``(2 + S) P D + sum_{s} k^{(1)}_s w + ...`` for
the largest pass instead of all ``C`` centers, and released after each round's passes
(:meth:`~lightning_fed.engine.scratch.RoundScratch.release`), so it is not resident while the
aggregation runs.

**Same bits as one pass.** A packed engine keys every draw of a center by its global center id
(batch order ``(seed, "batches", round, c)``, dropout ``(seed, "dropout", round, c)``, augmentation,
DP-SGD noise) and never mixes centers (per-center losses, gradients, optimizer steps and rollback),
so a center trains to the same bits whichever centers it is packed with: the property
:class:`~lightning_fed.distributed.ShardedEngine` relies on for one shard per process. The passes
are consecutive runs of the one-pass engine's order (centers sorted by their steps per round,
descending, ties in center order), so every pass is itself sorted and has the prefix schedule's
compact steps. The exception is a module whose random ops draw from torch's global generator (its
own ``training_step`` with dropout, dropout under the ``vmap`` fallback of a module without
``packed_forward``, or under DP-SGD's vmapped per-row gradients): those draws depend on the
centers packed together, so a pass draws other masks than one pass does (alike in distribution,
not the same bits), as a shard does. The built-in models draw from per-center streams.

**Interface.** Outside a round the engine is one engine over all ``C`` models: :meth:`get_params`,
:meth:`set_params`, :meth:`state_dict` (the one-pass layout, so checkpoints move between pass
bounds), :meth:`set_mask`, :meth:`set_phase`, :attr:`last_diverged`, :attr:`last_logged` and
:meth:`flip_labels` split or join the passes' rows by center; the learning-rate schedule, optimizer
resets, local terms, DP-SGD and augmentation are each pass's, keyed as in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fed.engine.base import Engine, TrainSet, check_mask
from lightning_fed.engine.packed import PackedEngine
from lightning_fed.engine.schedule import steps_per_round
from lightning_fed.engine.scratch import RoundScratch

__all__ = ["PassEngine", "check_max_centers_per_pass"]


def check_max_centers_per_pass(value: object, engine: Engine | None = None) -> int | None:
    """``trainer.max_centers_per_pass`` checked: None or an integer ``>= 1``, set only with the packed
    engine (``engine``, when given).

    Raises:
        ValueError: One line naming ``trainer.max_centers_per_pass`` and what it accepts.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            "trainer.max_centers_per_pass must be an integer >= 1 (the most centers the packed engine "
            f"trains at once) or null (all centers in one pass), got {value!r}"
        )
    if engine is not None and not isinstance(engine, PackedEngine):
        raise ValueError(
            f"trainer.max_centers_per_pass bounds the passes of lightning_fed.engine.PackedEngine; "
            f"trainer.engine {type(engine).__name__} has none (remove trainer.max_centers_per_pass or use "
            "PackedEngine)"
        )
    return int(value)


def _rows(tree: Any, index: Tensor) -> Any:
    """``tree`` (nested dicts of tensors with one row per model) restricted to the rows ``index``."""
    if isinstance(tree, dict):
        return {k: _rows(v, index) for k, v in tree.items()}
    return tree.index_select(0, index.to(tree.device))


def _join(parts: Sequence[Any], indices: Sequence[Tensor], num_models: int) -> Any:
    """The trees ``parts`` (pass ``i``'s rows are models ``indices[i]``) as one of ``num_models`` rows."""
    first = parts[0]
    if isinstance(first, dict):
        return {k: _join([p[k] for p in parts], indices, num_models) for k in first}
    out = first.new_empty(num_models, *first.shape[1:])
    for part, index in zip(parts, indices, strict=True):
        out.index_copy_(0, index.to(out.device), part)
    return out


class PassEngine(Engine):
    """Train the centers in consecutive passes of at most ``max_centers`` centers, as one pass would.

    Args:
        template: The engine of one pass (a fresh :class:`PackedEngine`; each pass gets a new one of
            its type).
        max_centers: The most centers a pass trains (``trainer.max_centers_per_pass``).

    Raises:
        ValueError: One line, for a bad ``max_centers`` or an engine other than the packed one.
    """

    def __init__(self, template: Engine, max_centers: int) -> None:
        checked = check_max_centers_per_pass(max_centers, template)
        if checked is None:
            raise ValueError("trainer.max_centers_per_pass: a pass engine needs a bound (an integer >= 1)")
        self.template, self.max_centers = template, checked
        #: One packed engine per pass (after :meth:`setup`).
        self.passes: list[PackedEngine] = []
        #: Bool ``[C]``: models whose last round diverged and was rolled back (every pass's).
        self.last_diverged: Tensor | None = None
        #: ``training_step`` calls of the last round, all passes together.
        self.training_step_calls = 0

    def _build(self, train: Sequence[TrainSet], dtype: torch.dtype) -> None:
        steps = [steps_per_round(len(y), self.batch_size, self.epochs, self.local_steps) for _, y in train]
        # The one-pass engine's order (stable: ties keep model order), cut into runs of max_centers.
        order = torch.argsort(torch.tensor(steps, dtype=torch.int64), descending=True, stable=True)
        #: Models of each pass (indices into this engine's models), in pass order.
        self.indices = list(torch.split(order, self.max_centers))
        self.scratch = RoundScratch()
        self.passes = []
        for index in self.indices:
            engine = type(self.template)()
            engine.scratch = self.scratch
            self.setup_inner(engine, [train[int(m)] for m in index], dtype, self.center_ids[index].tolist())
            self.passes.append(engine)
        first = self.passes[0]
        self.logged_names = first.logged_names
        n = len(self.passes)
        self.training_path = (
            f"{first.training_path} in {n} pass{'es' if n != 1 else ''} of <= {self.max_centers} centers"
        )

    def _join(self, parts: Sequence[Any]) -> Any:
        return _join(parts, self.indices, self.num_models)

    def train_round(self, round_idx: int) -> Tensor:
        """Each pass's round, one after the other; losses (and flags, logs) joined by model. With
        :attr:`participants` set, each pass trains its own participants only."""
        rows = self._participant_mask()
        for engine, index in zip(self.passes, self.indices, strict=True):
            engine.participants = None if rows is None else rows.index_select(0, index.to(rows.device))
        try:
            losses = [engine.train_round(round_idx) for engine in self.passes]
        finally:
            for engine in self.passes:
                engine.participants = None
            self.scratch.release()  # not held through the aggregation (RoundScratch.release)
        self.last_diverged = self._join([e.last_diverged for e in self.passes])
        logged = [e.last_logged for e in self.passes]
        self.last_logged = None if any(x is None for x in logged) else self._join(logged)
        self.training_step_calls = sum(e.training_step_calls for e in self.passes)
        return self._join(losses)

    def models_per_step(self) -> float:
        """The mean number of centers a step trains, over the steps of every pass."""
        active = [k for e in self.passes for k in e.active]
        return sum(active) / max(1, len(active))

    def flip_labels(self, centers: set[int]) -> None:
        """Each pass flips the labels of those of ``centers`` it holds."""
        for engine in self.passes:
            engine.flip_labels(centers)

    def set_phase(self, epochs: int | None = None, frozen: tuple[str, ...] = ()) -> None:
        """See :meth:`Engine.set_phase <lightning_fed.engine.base.Engine.set_phase>`: every pass trains
        the phase."""
        self.epochs = self._phase_epochs(epochs, frozen, list(self.passes[0].spans))
        for engine in self.passes:
            engine.set_phase(epochs, frozen)

    def get_params(self) -> dict[str, Tensor]:
        return self._join([e.get_params() for e in self.passes])

    def set_params(self, params: dict[str, Tensor]) -> None:
        for engine, index in zip(self.passes, self.indices, strict=True):
            engine.set_params(_rows(params, index))

    def set_mask(self, mask: dict[str, Tensor] | None) -> None:
        """See :meth:`Engine.set_mask <lightning_fed.engine.base.Engine.set_mask>`: each pass masks its
        rows."""
        if mask is not None:
            check_mask(mask, self.passes[0].shapes, self.num_models)
        for engine, index in zip(self.passes, self.indices, strict=True):
            engine.set_mask(None if mask is None else _rows(mask, index))
        self.mask = None if mask is None else {n: m.detach().clone() for n, m in mask.items()}

    def state_dict(self) -> dict[str, Any]:
        """The one-pass engine's layout: every model's parameters, optimizer state (and scheduler
        counts, mask), so a checkpoint resumes under any pass bound."""
        states = [e.state_dict() for e in self.passes]
        out = {key: self._join([s[key] for s in states]) for key in states[0] if key != "mask"}
        if self.mask is not None:
            out["mask"] = {n: m.clone() for n, m in self.mask.items()}
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mask = state.get("mask")
        for engine, index in zip(self.passes, self.indices, strict=True):
            engine.load_state_dict({key: _rows(value, index) for key, value in state.items()})
        self.mask = None if mask is None else {n: m.detach().clone() for n, m in mask.items()}
