"""The packed engine: all centers trained at once on stacked parameters.

Centers are sorted by their number of optimizer steps in the round (descending) so that at global
step ``s`` exactly the first ``k_s`` centers still have a batch: each step works on the slice
``[0:k_s]`` of the stacked tensors and nothing is padded across centers (the prefix schedule of
PERFORMANCE_NOTES.md, 3-4x faster than masking). Within a step a center's short last batch is
padded and masked by rows, and its loss is the mean over its real rows, so its gradient is
exactly the one it would get alone. Each active center steps its own functional Adam/SGD
(:mod:`lightning_fed.engine.optim`); inactive centers do not step. Batch order comes from
:mod:`lightning_fed.engine.schedule`, shared with the sequential engine.

Every random draw of a center is keyed by its center id: its batch order by ``(seed, "batches",
round, center)`` and its dropout masks by its own stream ``(seed, "dropout", round, center)``
(:class:`CenterStreams`), consumed in step order. So a center trains to the same bits whichever
centers it is packed with: an engine over a shard of the centers (``center_ids``, one shard per
process under DDP, :mod:`lightning_fed.distributed`) reproduces those centers of the whole-federation
engine exactly. One generator per center costs one small ``randint`` call per active center and layer
per step; ``benchmarks/scale.py --masks`` measures it side by side with one shared generator.

Sparse methods (DisPFL) set a parameter mask (:meth:`PackedEngine.set_mask`): the flat gradient of
the active centers is zeroed outside it before each optimizer step, and parameters and optimizer
state outside it are zeroed when it is set (and parameters again after :meth:`~PackedEngine.set_params`).
Without a mask the step is unchanged.

Divergence is contained per center: a center whose loss turns non-finite in any step of the round
(or whose parameters end the round non-finite) gets its parameters and optimizer state restored to
their values before the round, so its remaining steps of the round have no effect; its reported
loss is NaN and :attr:`PackedEngine.last_diverged` marks it. Centers never mix inside the packed
computation (per-center losses, gradients and optimizer steps), so the others are unaffected.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor

from lightning_fed.engine.base import Engine, TrainSet, check_mask, packed_features, packed_logits
from lightning_fed.engine.objective import TermBatch
from lightning_fed.engine.optim import StackedOptimizer, stacked_optimizer_for
from lightning_fed.engine.schedule import center_batches, steps_per_round
from lightning_fed.seeding import derive_seed, torch_generator

__all__ = ["CenterStreams", "PackedEngine"]


class CenterStreams:
    """One round's dropout streams: stream ``p`` is center ``centers[p]``'s own generator.

    Row ``p`` of every draw comes from center ``centers[p]``'s generator, seeded by
    ``derive_seed(seed, "dropout", round, centers[p])``; the packed engine lists centers in its
    prefix order, so the first ``k`` rows are the ``k`` centers active at a step.

    Args:
        seed: The run seed.
        round_idx: The round.
        centers: Global center ids, in the order of the rows of the packed tensors.
        device: Where the draws are made.
    """

    def __init__(self, seed: int, round_idx: int, centers: Sequence[int], device: torch.device) -> None:
        self.generators = [
            torch_generator(seed, "dropout", round_idx, int(c), device=device) for c in centers
        ]
        self.device = device
        self._buffer = torch.empty(0, dtype=torch.int64, device=device)

    def words(self, rows: int, count: int) -> Tensor:
        """Random int64 ``[rows, count]``: row ``p`` is the next ``count`` words of stream ``p``.

        The buffer is reused between calls (callers turn the words into a mask right away).
        """
        if rows > len(self.generators):
            raise ValueError(f"{rows} rows requested but only {len(self.generators)} center streams")
        if self._buffer.numel() < rows * count:
            self._buffer = torch.empty(rows * count, dtype=torch.int64, device=self.device)
        out = self._buffer[: rows * count].view(rows, count)
        for p in range(rows):
            torch.randint(-(2**63), 2**63 - 1, (count,), generator=self.generators[p], out=out[p])
        return out


class PackedEngine(Engine):
    """Train every center in one batched computation (prefix schedule, vmap or ``packed_forward``).

    ``center_ids`` (:meth:`Engine.setup <lightning_fed.engine.base.Engine.setup>`) key each model's
    batch order and dropout stream, so a shard of the centers trains exactly as in the whole.
    """

    def _build(self, train: Sequence[TrainSet], dtype: torch.dtype) -> None:
        # Mixed precision needs autocast, which only the autograd path honours: callers pass
        # ``nullcontext`` (the default) when there is nothing to autocast.
        self.autocast_enabled = self.autocast is not nullcontext
        sizes = torch.tensor([len(y) for _, y in train])
        per_round = [steps_per_round(int(n), self.batch_size, self.epochs, self.local_steps) for n in sizes]
        steps = torch.tensor(per_round)
        # Stable sort: ties keep center order, so the layout is a pure function of the sizes.
        self.order = torch.argsort(steps, descending=True, stable=True)
        self.inverse = torch.argsort(self.order)
        self.sizes, self.steps = sizes[self.order], steps[self.order]
        self.active = torch.stack([(self.steps > s).sum() for s in range(int(self.steps.max()))]).tolist()
        xs = [train[int(c)][0] for c in self.order]
        ys = [train[int(c)][1] for c in self.order]
        # One padding row at the end: padded batch slots point at it and are masked out.
        self.x = torch.cat([*xs, xs[0].new_zeros(1, *xs[0].shape[1:])]).to(self.device, dtype)
        self.y = torch.cat([*ys, ys[0].new_zeros(1)]).to(self.device, dtype)
        self.pad_row = self.x.shape[0] - 1
        self.offsets = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.int64), self.sizes[:-1]]), 0)
        # All parameters of a center live in one row of a flat [C, D] buffer; per-name tensors are
        # views into it. The optimizer then updates one [k, D] slice per step instead of one small
        # tensor per parameter (fewer, larger kernels: measured ~1.5x faster per round).
        self.shapes = {n: p.shape for n, p in self.module.named_parameters()}
        self.spans: dict[str, tuple[int, int]] = {}
        offset = 0
        for n, p in self.module.named_parameters():
            self.spans[n] = (offset, offset + p.numel())
            offset += p.numel()
        template = torch.cat([p.detach().reshape(-1) for p in self.module.parameters()])
        template = template.to(self.device, dtype)
        self.flat = template.unsqueeze(0).repeat(self.num_models, 1)
        self.optimizer: StackedOptimizer = stacked_optimizer_for(self.module.configure_optimizers())
        self.opt_state = self.optimizer.init_state({"flat": self.flat})
        self.grad = torch.zeros_like(self.flat)
        # The hand-derived gradients know only the MLP's BCE: any extra term takes autograd.
        self.fast_path = (
            self.module.has_packed_loss_grad
            and not self.autocast_enabled
            and self.local_term is None
            and not self.module.has_penalty
        )
        self._saved: tuple[Tensor, dict[str, Tensor]] | None = (
            None  # round-start snapshot buffers  # reused every step (fresh buffers cost page faults)
        )
        #: Bool ``[C, D]`` (sorted order), True where a parameter is masked out; None: no mask.
        self._masked_out: Tensor | None = None
        self.mask = None

    def _views(self, flat: Tensor) -> dict[str, Tensor]:
        """Named parameter views ``[k, *shape]`` into a ``[k, D]`` buffer."""
        return {n: flat[:, a:b].view(flat.shape[0], *self.shapes[n]) for n, (a, b) in self.spans.items()}

    def _round_index(self, round_idx: int) -> Tensor:
        """Global row indices ``[C, S, B]`` (sorted order) of every batch of the round."""
        idx = torch.full(
            (self.num_models, int(self.steps[0]), self.batch_size), self.pad_row, dtype=torch.int64
        )
        for p, c in enumerate(self.center_ids[self.order].tolist()):
            n = int(self.sizes[p])
            b = center_batches(n, self.batch_size, self.epochs, self.seed, round_idx, c, self.local_steps)
            idx[p, : b.shape[0]] = torch.where(b >= 0, b + self.offsets[p], self.pad_row)
        return idx.to(self.device)

    #: Bool ``[C]`` (center order): centers whose last round diverged and was rolled back.
    last_diverged: Tensor | None = None

    def train_round(self, round_idx: int) -> Tensor:
        idx = self._round_index(round_idx)
        before = self._snapshot()
        self.module.train()
        gen = CenterStreams(self.seed, round_idx, self.center_ids[self.order].tolist(), self.device)
        loss_sum = torch.zeros(self.num_models, dtype=torch.float64, device=self.device)
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(derive_seed(self.seed, "dropout-vmap", round_idx))
            for s, k in enumerate(self.active):
                rows = idx[:k, s]
                xb, yb = self.x[rows], self.y[rows]
                mask = (rows != self.pad_row).to(xb.dtype)
                if self.fast_path:
                    grad = self.grad[:k]
                    per_center = self.module.packed_loss_grad(
                        self._views(self.flat[:k]), xb, yb, mask, gen, self._views(grad)
                    )
                else:
                    per_center, grad = self._autograd_step(k, xb, yb, mask, gen, before[0])
                if self._masked_out is not None:
                    # p = 0, state = 0 and g = 0 outside the mask: Adam/SGD (and L2 decay) move nothing there.
                    grad.masked_fill_(self._masked_out[:k], 0.0)
                self.optimizer.step({"flat": self.flat}, {"flat": grad}, self.opt_state, k)
                loss_sum[:k] += per_center.detach().to(torch.float64)
        loss = loss_sum / self.steps.to(loss_sum)
        self._contain(loss, *before)
        return loss.index_select(0, self.inverse.to(self.device))

    def _snapshot(self) -> tuple[Tensor, dict[str, Tensor]]:
        """Copy parameters and optimizer state into buffers kept across rounds (a fresh ~45 MB
        allocation every round costs page faults: measured ~25 % of a packed round)."""
        if self._saved is None:
            self._saved = (
                torch.empty_like(self.flat),
                {n: torch.empty_like(t) for n, t in self.opt_state.items()},
            )
        flat, state = self._saved
        flat.copy_(self.flat)
        for n, t in self.opt_state.items():
            state[n].copy_(t)
        return flat, state

    def _contain(self, loss: Tensor, flat: Tensor, opt_state: dict[str, Tensor]) -> None:
        """Roll back (to ``flat`` / ``opt_state``) the centers whose loss or parameters are non-finite."""
        bad = ~torch.isfinite(loss) | ~torch.isfinite(self.flat).all(1)
        if bool(bad.any()):
            self.flat[bad] = flat[bad]
            for n, t in self.opt_state.items():
                t[bad] = opt_state[n][bad]
            loss[bad] = float("nan")
        self.last_diverged = bad.index_select(0, self.inverse.to(self.device)).cpu()

    def _autograd_step(
        self, k: int, xb: Tensor, yb: Tensor, mask: Tensor, gen: CenterStreams, start: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Per-center loss and flat gradient ``[k, D]`` through autograd (any module, any term).

        ``start`` is the round-start ``[C, D]`` buffer (sorted order): the model each center
        received, which local terms such as FedProx's proximal term pull towards.
        """
        leaf = self.flat[:k].detach().requires_grad_(True)
        params = self._views(leaf)
        term = self.local_term
        features = None
        with self.autocast():
            if term is not None and term.needs_features:
                logits, features = packed_features(self.module, params, xb, gen)
            else:
                logits = packed_logits(self.module, params, xb, gen)
        per_row = self.module.loss_rows(logits.to(yb.dtype), yb)
        per_center = (per_row * mask).sum(1) / mask.sum(1)
        if self.module.has_penalty:
            per_center = per_center + self.module.penalty(params, self.sizes[:k].to(self.device))
        if term is not None:
            batch = TermBatch(
                params=params,
                start=self._views(start[:k]),
                centers=self.center_ids[self.order[:k]],
                x=xb,
                mask=mask,
                features=features,
                features_fn=self._reference_features,
            )
            per_center = per_center + term.loss(batch)
        (grad,) = torch.autograd.grad(per_center.sum(), [leaf])
        return per_center.detach(), grad

    @torch.no_grad()
    def _reference_features(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Representations of reference models (eval mode, no dropout) for local terms."""
        self.module.eval()
        try:
            with self.autocast():
                return packed_features(self.module, params, x, None)[1]
        finally:
            self.module.train()

    def get_params(self) -> dict[str, Tensor]:
        return self._views(self.flat.index_select(0, self.inverse.to(self.device)))

    def set_params(self, params: dict[str, Tensor]) -> None:
        order = self.order.to(self.device)
        for n, view in self._views(self.flat).items():
            view.copy_(params[n].index_select(0, order))
        if self._masked_out is not None:
            self.flat.masked_fill_(self._masked_out, 0.0)

    def set_mask(self, mask: dict[str, Tensor] | None) -> None:
        """See :meth:`Engine.set_mask <lightning_fed.engine.base.Engine.set_mask>`: one flat bool
        ``[C, D]`` row per center zeroes the flat gradient of the active prefix before each step."""
        if mask is None:
            self.mask = self._masked_out = None
            return
        check_mask(mask, self.shapes, self.num_models)
        self.mask = {n: m.detach().clone() for n, m in mask.items()}
        out = torch.zeros_like(self.flat, dtype=torch.bool)
        order = self.order.to(self.device)
        for n, m in mask.items():
            a, b = self.spans[n]
            out[:, a:b] = ~m.to(self.device).reshape(self.num_models, -1).index_select(0, order)
        self._masked_out = out
        self.flat.masked_fill_(out, 0.0)
        for t in self.opt_state.values():
            if t.shape == out.shape:
                t.masked_fill_(out, 0.0)

    def state_dict(self) -> dict[str, Any]:
        inv = self.inverse.to(self.device)
        out = {
            "params": self.get_params(),
            "optimizer": {n: t.index_select(0, inv).clone() for n, t in self.opt_state.items()},
        }
        if self.mask is not None:
            out["mask"] = {n: m.clone() for n, m in self.mask.items()}
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_mask(state.get("mask"))
        self.set_params(state["params"])
        order = self.order.to(self.device)
        for n, t in self.opt_state.items():
            t.copy_(state["optimizer"][n].index_select(0, order))
