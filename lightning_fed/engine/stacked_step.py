"""A module's own ``training_step`` over stacked centers: per-center losses and their gradients.

The packed engine's generic path (:mod:`lightning_fed.engine.training_step` says what is called
and when). At step ``s`` the ``k`` active centers are split into groups that share a row count
(and ``batch_idx`` when ``training_step`` reads it); each group is one call of
``torch.vmap(functional_call(TrainingStep))`` with ``randomness="different"`` on that group's
parameters ``[g, ...]`` and real rows ``[g, n, ...]``, in ascending order of the group key (the
order fixes which draws of the round's generator each group's dropout takes).

**Gradients.** Every group's parameters are their own autograd leaves (``index_select`` of the
stacked parameters, detached), one backward pass over all groups of the step gives each leaf's
gradient, and each is added into the zeroed ``[k, D]`` gradient at its centers' rows. This is the
gradient of ``sum_c loss_c`` with respect to the stacked parameters, computed as plain autograd
through one ``index_select`` per group would compute it (there every group's backward scattered
into a zero tensor of all ``k`` centers and the ``G`` such tensors were summed: ``G`` full-size
fills and adds per parameter and step, measured as 40 % of a round of a 230-center federation),
so results are bit-identical to it; the groups' gradients never overlap (a center is in one group).

**Per-call overhead.** The vmapped function is built once (``batch_idx`` a non-batched argument),
and a step's groups come from one ``unique`` over its keys.

**Dropout.** Random ops in ``training_step`` draw from torch's global generator, seeded per round
from ``(seed, "dropout-vmap", round)`` by the engine and consumed call by call (vmap's
``randomness="different"``): a center's masks depend on the groups it is called in, so an engine
over a shard of the centers (``center_ids``, one shard per DDP rank) draws other masks for them
than the whole federation does (distributed alike, not the same bits). The built-in models draw
from per-center streams and have no such dependence; ``torch.vmap`` offers no generator per
vmapped row that would give a user's module the same.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lightning_fed.engine.training_step import RoundLogs, TrainingStep

__all__ = ["StackedTrainingStep"]

#: ``step(params {name: [g, ...]}, x [g, n, ...], y [g, n], batch_idx) -> (losses [g], logged)``.
StepFn = Callable[[dict[str, Tensor], Tensor, Tensor, int], tuple[Tensor, dict[str, Tensor]]]


class StackedTrainingStep:
    """``training_step`` of ``k`` stacked centers, grouped by batch shape, with its gradient.

    Args:
        module: The per-center model (its ``training_step`` is the loss).
        batch_size: The engine's batch size (bounds a group key's row count).
        by_batch_idx: Whether centers must also share ``batch_idx`` to share a call
            (:func:`~lightning_fed.engine.training_step.reads_batch_idx`).
    """

    def __init__(self, module: torch.nn.Module, batch_size: int, by_batch_idx: bool) -> None:
        self.module = TrainingStep(module)
        self.batch_size = int(batch_size)
        self.by_batch_idx = bool(by_batch_idx)
        #: Why vmap cannot run the module's ``training_step`` (None: it can; see :meth:`probe`).
        self.unvmappable: str | None = None
        #: ``training_step`` calls (vmapped calls, or single-center calls of the loop) so far.
        self.calls = 0
        self._vmapped = torch.vmap(self._one, in_dims=(0, 0, 0, None), randomness="different")

    def _one(
        self, p: dict[str, Tensor], x: Tensor, y: Tensor, batch_idx: int
    ) -> tuple[Tensor, dict[str, Tensor]]:
        named = {f"m.{n}": t for n, t in p.items()}
        return torch.func.functional_call(self.module, named, ((x, y), batch_idx))

    def vmapped(
        self, params: dict[str, Tensor], xb: Tensor, yb: Tensor, batch_idx: int
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Losses ``[g]`` and logged values of ``g`` stacked centers on their batches ``[g, n, ...]``."""
        self.calls += 1
        return self._vmapped(params, xb, yb, batch_idx)

    def looped(
        self, params: dict[str, Tensor], xb: Tensor, yb: Tensor, batch_idx: int
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """:meth:`vmapped` one center at a time (for a ``training_step`` vmap cannot run)."""
        outs = []
        for i in range(xb.shape[0]):
            self.calls += 1
            named = {f"m.{n}": t[i] for n, t in params.items()}
            outs.append(torch.func.functional_call(self.module, named, ((xb[i], yb[i]), batch_idx)))
        logged = {name: torch.stack([out[1][name] for out in outs]) for name in outs[0][1]}
        return torch.stack([out[0] for out in outs]), logged

    def probe(self, params: dict[str, Tensor], xb: Tensor, yb: Tensor) -> tuple[str, ...]:
        """Learn whether ``vmap`` runs ``training_step`` on ``params [g, ...]`` and ``xb [g, n, ...]``
        (recorded in :attr:`unvmappable`, not raised) and return the names it logs.

        Raises:
            TypeError: The module's own error for a wrong return value (from ``loss_of``).
        """
        try:
            _, logged = self._vmapped(params, xb, yb, 0)
        except TypeError:  # a wrong return value: the user's error, raised as it is
            raise
        except Exception as err:  # vmap's limits (data-dependent control flow, in-place buffers)
            self.unvmappable = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
            _, logged = self.looped(params, xb, yb, 0)
        return tuple(sorted(logged))

    def loss_grad(
        self,
        params: dict[str, Tensor],
        xb: Tensor,
        yb: Tensor,
        rows: Tensor,
        batch_idx: Tensor,
        grad: Tensor,
        logs: RoundLogs,
        models: Tensor,
    ) -> Tensor:
        """Per-center losses ``[k]`` of one step; their gradient is written into ``grad``.

        Args:
            params: Current parameters ``{name: [k, ...]}`` (not differentiated: each group's
                rows are copied into fresh leaves).
            xb: Batch inputs ``[k, B, ...]`` (a center's padding is a suffix of its rows).
            yb: Batch labels ``[k, B]``.
            rows: Real rows of each center's batch ``[k]`` (int64, CPU).
            batch_idx: Each center's ``batch_idx`` ``[k]`` (int64, CPU).
            grad: The flat gradient ``[k, D]`` to fill: the parameters of ``params``, flattened,
                side by side in ``params``' order (the engine's flat layout).
            logs: Where the step's logged values go.
            models: Each stacked row's model index in ``logs`` ``[k]`` (int64, CPU).
        """
        k = xb.shape[0]
        key = batch_idx * (self.batch_size + 1) + rows if self.by_batch_idx else rows
        step: StepFn = self.looped if self.unvmappable is not None else self.vmapped
        at_all: list[Tensor] = []
        leaves: list[dict[str, Tensor]] = []
        losses: list[Tensor] = []
        for value in torch.unique(key).tolist():
            members = torch.nonzero(key == value).flatten()
            first = int(members[0])
            n, b = int(rows[first]), int(batch_idx[first])
            at = members.to(xb.device)
            group = {name: t.index_select(0, at).requires_grad_(True) for name, t in params.items()}
            loss, logged = step(group, xb[:, :n].index_select(0, at), yb[:, :n].index_select(0, at), b)
            at_all.append(at)
            leaves.append(group)
            losses.append(loss.to(yb.dtype))
            logs.add(models[members], logged, rows[members])
        total = torch.stack([loss.sum() for loss in losses]).sum()
        flat_leaves = [t for group in leaves for t in group.values()]
        grads = iter(torch.autograd.grad(total, flat_leaves, allow_unused=True))
        blocks = []  # each group's gradient [g, D], its parameters side by side as in ``grad``
        for group in leaves:
            parts = []
            for t in group.values():
                g = next(grads)
                parts.append((torch.zeros_like(t) if g is None else g).reshape(t.shape[0], -1))
            blocks.append(torch.cat(parts, dim=1))
        # The groups partition the k centers: every row of ``grad`` is written once.
        grad.index_copy_(0, torch.cat(at_all), torch.cat(blocks))
        per_center = xb.new_zeros(k, dtype=yb.dtype)
        for at, loss in zip(at_all, losses, strict=True):
            per_center.index_copy_(0, at, loss.detach())
        return per_center
