"""The packed engine: all centers trained at once on stacked parameters.

Centers are sorted by their number of optimizer steps in the round (descending) so that at global
step ``s`` exactly the first ``k_s`` centers still have a batch: each step works on the slice
``[0:k_s]`` of the stacked tensors and nothing is padded across centers (the prefix schedule of
docs/architecture.md, decision 1, 3-4x faster than masking). Within a step a center's short last batch is
padded and masked by rows, and its loss is the mean over its real rows, so its gradient is
exactly the one it would get alone. Each active center steps its own functional Adam/SGD
(:mod:`lightning_fed.engine.optim`); inactive centers do not step. Batch order comes from
:mod:`lightning_fed.engine.schedule`, shared with the sequential engine.

Every random draw of a center is keyed by its center id: its batch order by ``(seed, "batches",
round, center)``, its dropout masks by its own stream ``(seed, "dropout", round, center)``
(:class:`CenterStreams`), consumed in step order, and its train-time augmentation, if any
(:mod:`lightning_fed.data.augment`), by ``(seed, "augment", round, center)``. So a center trains to
the same bits whichever centers it is packed with: an engine over a shard of the centers
(``center_ids``, one shard per process under DDP, :mod:`lightning_fed.distributed`) reproduces those
centers of the whole-federation engine exactly. The engine learns from its first step how many words
a step draws; from then on a round's words are drawn up front (:meth:`CenterStreams.prefetch`: one
``randint`` per center and step, the centers' generators running in parallel on the intra-op thread
count), the same words the lazy per-step draws would give.

Where the time goes (measured with a per-op CPU-time profile on 2 cores, ``benchmarks/engine.py``
times it against the machine's FLOP floor): the batched matmuls are about half a round, the
mt19937 words for dropout ~10 % (serial per generator, hence the parallel prefetch), Adam's ten
elementwise passes over ``[k, D]`` ~12 %, the ReLU/dropout gates ~10 %. Nothing of a step allocates:
batch inputs are gathered with ``index_select`` into reused buffers (one step-major row table per
round, :meth:`PackedEngine._round_rows`), the fast path writes every activation and gradient
temporary into a workspace kept across rounds, and Adam runs in place; a fresh multi-MB tensor per
op cost more in page faults than its arithmetic. All of it computes the same ops in the same order
as plain allocating code, so results are bit-identical to it.

Sparse methods (DisPFL) set a parameter mask (:meth:`PackedEngine.set_mask`): the flat gradient of
the active centers is zeroed outside it before each optimizer step, and parameters and optimizer
state outside it are zeroed when it is set (and parameters again after :meth:`~PackedEngine.set_params`).
Without a mask the step is unchanged.

Every round starts by setting the stacked optimizer's ``lr`` to ``base_lr * lr_factor(round)`` (one
rate for all centers: the schedule is a function of the round only, so every shard sets the same;
a scheduler returned by ``configure_optimizers`` instead sets each center's rate before each of its
steps from its own step or epoch count, :class:`~lightning_fed.engine.optim.ScheduleReplay`)
and, with ``reset_optimizer_each_round``, zeroing its state (moments, buffers, step counts) for all
centers (:mod:`lightning_fed.engine.base`).

Divergence is contained per center: a center whose loss turns non-finite in any step of the round
(or whose parameters end the round non-finite) gets its parameters and optimizer state restored to
their values before the round, so its remaining steps of the round have no effect; its reported
loss is NaN and :attr:`PackedEngine.last_diverged` marks it. Centers never mix inside the packed
computation (per-center losses, gradients and optimizer steps), so the others are unaffected.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor

from lightning_fed.dp.per_sample import dp_flat_mean, per_sample_grads, step_noise
from lightning_fed.engine.base import (
    Engine,
    TrainSet,
    check_mask,
    packed_features,
    packed_logits,
    row_loss,
)
from lightning_fed.engine.lr_schedule import Constant
from lightning_fed.engine.objective import TermBatch
from lightning_fed.engine.optim import (
    ScheduleReplay,
    StackedOptimizer,
    optimizer_and_scheduler,
    stacked_optimizer_for,
)
from lightning_fed.engine.rows import rows_in_place
from lightning_fed.engine.schedule import center_batches, steps_per_round
from lightning_fed.engine.scratch import RoundScratch
from lightning_fed.engine.stacked_step import StackedTrainingStep
from lightning_fed.engine.training_step import (
    RoundLogs,
    model_name,
    overrides_training_step,
    reads_batch_idx,
)
from lightning_fed.seeding import derive_seed, torch_generator

__all__ = ["CenterStreams", "PackedEngine", "finite_rows"]


def finite_rows(x: Tensor) -> Tensor:
    """Bool ``[R]``: whether every entry of each row of the 2-D ``x`` is finite.

    ``torch.isfinite(x).all(1)``, computed as one summing pass over ``x``: a NaN or an infinity makes
    its row's sum non-finite (``inf - inf`` is NaN), so only the rows whose sum is not finite (those,
    and finite rows whose sum overflows) are tested entry by entry. Measured 0.5-2.7 ms against 25-30
    ms for ``isfinite(...).all(1)`` on ``[230, 16129]`` (the packed engine's check after every round).
    """
    suspect = ~torch.isfinite(x.sum(1))
    out = ~suspect
    if bool(suspect.any()):
        out[suspect] = torch.isfinite(x[suspect]).all(1)
    return out


class CenterStreams:
    """One round's dropout streams: stream ``p`` is center ``centers[p]``'s own generator.

    Row ``p`` of every draw comes from center ``centers[p]``'s generator, seeded by
    ``derive_seed(seed, "dropout", round, centers[p])``; the packed engine lists centers in its
    prefix order, so the first ``k`` rows are the ``k`` centers active at a step.

    Drawn lazily, each :meth:`words` call makes one ``randint`` per row. After :meth:`prefetch`
    (the packed engine's path once it knows how many words a step draws) every center's words of
    the whole round are drawn up front into one step-major table, one ``randint`` per center and
    step, split over worker threads (each generator is used by one thread; ``randint`` releases
    the GIL), and :meth:`words` returns views into it. A center's words are the same either way:
    its stream, consumed in step order.

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
        #: Words row 0 has taken so far (every row of a prefix step takes the same number).
        self.consumed = 0
        self._table: Tensor | None = None
        self._step_start: list[int] = []
        self._step = 0
        self._cursor = 0
        self._per_step = 0

    def words(self, rows: int, count: int) -> Tensor:
        """Random int64 ``[rows, count]``: row ``p`` is the next ``count`` words of stream ``p``.

        The result is a view of a buffer reused between calls (callers turn the words into a mask
        right away). After :meth:`prefetch`, ``rows`` must not exceed the centers active at the
        current step; words beyond the step's prefetched ones come from the generators, which
        continue after the prefetched words.
        """
        if rows > len(self.generators):
            raise ValueError(f"{rows} rows requested but only {len(self.generators)} center streams")
        self.consumed += count
        if self._table is None:
            return self._draw(rows, count)
        lo, hi = self._step_start[self._step], self._step_start[self._step + 1]
        if rows > hi - lo:
            raise ValueError(f"{rows} rows requested at a step with {hi - lo} active centers")
        take = min(count, self._per_step - self._cursor)
        table = self._table[lo : lo + rows, self._cursor : self._cursor + take]
        self._cursor += take
        if take == count:
            return table
        return torch.cat([table, self._draw(rows, count - take)], dim=1)

    def _draw(self, rows: int, count: int) -> Tensor:
        """The next ``count`` words of the first ``rows`` generators, one ``randint`` per row."""
        if self._buffer.numel() < rows * count:
            self._buffer = torch.empty(rows * count, dtype=torch.int64, device=self.device)
        out = self._buffer[: rows * count].view(rows, count)
        for p in range(rows):
            torch.randint(-(2**63), 2**63 - 1, (count,), generator=self.generators[p], out=out[p])
        return out

    def prefetch(
        self,
        steps: Sequence[int],
        words_per_step: int,
        *,
        threads: int = 1,
        out: Tensor | None = None,
    ) -> Tensor:
        """Draw the round's words up front: ``words_per_step`` per step of every center.

        Call before the first :meth:`words` of the round. Row ``p`` takes ``steps[p]`` steps
        (non-increasing in ``p``: the prefix schedule), so step ``s`` is active for the first
        ``k_s = #{p : steps[p] > s}`` rows; the table holds step ``s`` in rows
        ``[sum_{s' < s} k_{s'}, ... + k_s)``, row ``p`` of that block being center ``p``'s words of
        step ``s`` (the next ``words_per_step`` words of its stream). The caller marks the end of
        each step with :meth:`next_step`.

        Args:
            steps: Steps of each row in the round.
            words_per_step: Words each active row draws per step.
            threads: Worker threads drawing the centers' streams in parallel (1: in this thread).
            out: A reusable int64 buffer (at least ``sum(steps) * words_per_step`` elements) to
                hold the table; grown (a new one) when too small.

        Returns:
            The buffer holding the table (pass it back as ``out`` next round to reuse it).
        """
        steps = [int(n) for n in steps]
        if len(steps) != len(self.generators) or any(a < b for a, b in itertools.pairwise(steps)):
            raise ValueError("prefetch needs one non-increasing step count per center stream")
        active = [sum(n > s for n in steps) for s in range(steps[0] if steps else 0)]
        self._step_start = [0, *itertools.accumulate(active)]
        size = self._step_start[-1] * words_per_step
        if out is None or out.numel() < size or out.device != self.device:
            out = torch.empty(size, dtype=torch.int64, device=self.device)
        table = out[:size].view(self._step_start[-1], words_per_step)
        starts = self._step_start

        def fill(rows: range) -> None:
            for p in rows:
                gen = self.generators[p]
                for s in range(steps[p]):
                    torch.randint(
                        -(2**63), 2**63 - 1, (words_per_step,), generator=gen, out=table[starts[s] + p]
                    )

        workers = max(1, min(int(threads), len(steps)))
        if workers == 1:
            fill(range(len(steps)))
        else:  # centers dealt round-robin (they are sorted by steps), one generator per thread
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(fill, [range(w, len(steps), workers) for w in range(workers)]))
        self._table, self._per_step, self._step, self._cursor = table, int(words_per_step), 0, 0
        return out

    def next_step(self) -> None:
        """Mark the end of a step (after :meth:`prefetch`: the next :meth:`words` read the next step)."""
        if self._table is not None:
            self._step += 1
            self._cursor = 0


class PackedEngine(Engine):
    """Train every center in one batched computation (prefix schedule, vmap or ``packed_forward``).

    ``center_ids`` (:meth:`Engine.setup <lightning_fed.engine.base.Engine.setup>`) key each model's
    batch order and dropout stream, so a shard of the centers trains exactly as in the whole.
    """

    #: Round scratch (:mod:`lightning_fed.engine.scratch`); set before :meth:`setup` to share one
    #: between engines that train one after the other (the passes of a
    #: :class:`~lightning_fed.engine.passes.PassEngine`), else made at setup.
    scratch: RoundScratch | None = None

    def _build(self, train: Sequence[TrainSet], dtype: torch.dtype) -> None:
        # Mixed precision needs autocast, which only the autograd path honours: callers pass
        # ``nullcontext`` (the default) when there is nothing to autocast.
        self.autocast_enabled = self.autocast is not nullcontext
        sizes = torch.tensor([len(y) for _, y in train])
        per_round = [steps_per_round(int(n), self.batch_size, self.epochs, self.local_steps) for n in sizes]
        steps = torch.tensor(per_round)
        # Stable sort: ties keep center order, so the layout is a pure function of the sizes (and
        # the same for every number of epochs: steps = epochs * ceil(n / B) orders like the sizes).
        self.order = torch.argsort(steps, descending=True, stable=True)
        self.inverse = torch.argsort(self.order)
        self.sizes = sizes[self.order]
        self._schedule()
        xs = [train[int(c)][0] for c in self.order]
        ys = [train[int(c)][1] for c in self.order]
        # One padding row: padded batch slots point at it and are masked out. Rows laid out by
        # pack_train_rows (every federation's) are read where they are, others copied (train_rows.py).
        in_place = rows_in_place(xs, dtype, torch.device(self.device))
        if in_place is None:
            self.x = torch.cat([*xs, xs[0].new_zeros(1, *xs[0].shape[1:])]).to(self.device, dtype)
            self.pad_row = self.x.shape[0] - 1
            self.offsets = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.int64), self.sizes[:-1]]), 0)
            self.y = torch.cat([*ys, ys[0].new_zeros(1)]).to(self.device, dtype)
        else:  # the labels laid out as the rows are: model i's at rows offsets[i] ...
            self.x, self.offsets, self.pad_row = in_place
            self.y = torch.zeros(self.x.shape[0], dtype=dtype, device=self.device)
            for y, start in zip(ys, self.offsets.tolist(), strict=True):
                self.y[start : start + len(y)] = y.to(self.device, dtype)
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
        optimizer, scheduler = optimizer_and_scheduler(self.module.configure_optimizers())
        self.optimizer: StackedOptimizer = stacked_optimizer_for(optimizer)
        #: The ``configure_optimizers`` scheduler as rates per center (None: the round schedule).
        self._replay = None if scheduler is None else ScheduleReplay(scheduler)
        if self._replay is not None and not isinstance(self.lr_schedule, Constant):
            raise ValueError(
                "trainer.lr_schedule and an lr_scheduler from configure_optimizers both set the learning "
                "rate: keep one of them"
            )
        #: Optimizer steps and local epochs each center has completed (sorted order; what its
        #: scheduler counts; kept apart from the optimizer's step, which a reset zeroes).
        self._sched_counts = torch.zeros(self.num_models, 2, dtype=torch.int64)
        #: The rate ``configure_optimizers`` set; round ``r`` trains at ``base_lr * lr_factor(r)``.
        self.base_lr = self.optimizer.lr
        self.opt_state = self.optimizer.init_state({"flat": self.flat})
        #: Scratch reused every step and round (a fresh multi-MB tensor per op costs more in page
        #: faults than its arithmetic on CPU): the flat gradient, the round-start snapshot, the
        #: prefetched dropout words, the fast path's activations, the optimizer's temporaries and the
        #: gathered batch inputs. A :class:`~lightning_fed.engine.passes.PassEngine` sets one shared
        #: by its passes before setup; otherwise the engine has its own.
        if self.scratch is None:
            self.scratch = RoundScratch()
        if hasattr(self.optimizer, "buffers"):
            self.optimizer.buffers = self.scratch.optimizer
        self._take_grad()
        # Per-name views of the whole parameter stack, sliced [:k] per step (self.flat is never rebound).
        self._flat_views = self._views(self.flat)
        # Dropout words each center draws per step, learnt from the first step (0: no dropout);
        # from then on a round's words are drawn up front (CenterStreams.prefetch) into the scratch.
        self._words_per_step: int | None = None
        #: ``(a, b)`` column spans of the parameters :meth:`set_phase` froze (empty: none).
        self._frozen_spans: list[tuple[int, int]] = []
        #: The names :meth:`set_phase` froze (what an engine over the participants freezes too).
        self._frozen_names: tuple[str, ...] = ()
        # A module's own training_step is its loss (engine/training_step.py): run through vmap, or
        # center by center where vmap cannot run it (learnt once here, outside any round's draws).
        self._step_module: StackedTrainingStep | None = None
        if overrides_training_step(self.module):
            self._step_module = StackedTrainingStep(
                self.module, self.batch_size, reads_batch_idx(self.module)
            )
        #: Batches per local epoch of each center (sorted order): ``batch_idx`` is step mod this.
        self._per_epoch = torch.clamp(-(-self.sizes // self.batch_size), min=1)
        #: Why vmap cannot run the module's training_step (None: it can), and the names it logs.
        self._unvmappable: str | None = None
        self.logged_names: tuple[str, ...] = ()
        #: ``training_step`` calls of the last round (vmapped group calls, or per-center calls of
        #: the loop); 0 for modules without their own ``training_step``.
        self.training_step_calls = 0
        if self._step_module is not None and self._probed is not None:  # an engine over participants
            self.logged_names, self._unvmappable = self._probed
            self._step_module.unvmappable = self._unvmappable
        elif self._step_module is not None:
            self._probe_training_step(train)
        # The hand-derived gradients know only the MLP's BCE: any extra term takes autograd.
        self.fast_path = (
            self.dp is None
            and self.module.has_packed_loss_grad
            and self._step_module is None
            and not self.autocast_enabled
            and self.local_term is None
            and not self.module.has_penalty
        )
        self._pass_workspace = (
            self.fast_path and "workspace" in inspect.signature(self.module.packed_loss_grad).parameters
        )
        self.training_path = self._describe_path()
        #: Bool ``[C, D]`` (sorted order), True where a parameter is masked out; None: no mask.
        self._masked_out: Tensor | None = None
        self.mask = None

    def _take_grad(self) -> None:
        """The flat gradient ``[C, D]`` and its per-name views, in the (possibly shared) scratch; taken
        again at every round start since another pass's engine may have grown the buffer since."""
        self.grad = self.scratch.take("grad", tuple(self.flat.shape), self.flat, zero=True)
        self._grad_views = self._views(self.grad)

    def _schedule(self) -> None:
        """Each center's steps this round (sorted order) and the step-major layout of its batches.

        Step ``s`` is rows ``[step_start[s], step_start[s] + k_s)`` of one ``[sum_s k_s, B]`` table,
        row ``step_start[s] + p`` being center ``p``'s batch ``s``; built once per round from the
        centers' batch lists (center-major: center ``p``'s batches are rows ``block_start[p] ..
        + steps[p]``) through the fixed permutation ``_to_step_major``.
        """
        per_round = [
            steps_per_round(int(n), self.batch_size, self.epochs, self.local_steps) for n in self.sizes
        ]
        self.steps = torch.tensor(per_round, dtype=torch.int64)
        self.active = torch.stack([(self.steps > s).sum() for s in range(int(self.steps.max()))]).tolist()
        self.step_start = [0, *torch.tensor(self.active, dtype=torch.int64).cumsum(0).tolist()]
        block_start = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.int64), self.steps[:-1]]), 0)
        self._to_step_major = torch.cat(
            [block_start[:k] + s for s, k in enumerate(self.active)] or [torch.zeros(0, dtype=torch.int64)]
        )
        self._steps_list = self.steps.tolist()

    def set_phase(self, epochs: int | None = None, frozen: tuple[str, ...] = ()) -> None:
        """See :meth:`Engine.set_phase <lightning_fed.engine.base.Engine.set_phase>`: the schedule is
        rebuilt for ``epochs`` (the centers' order does not change) and after every optimizer step
        the frozen columns of the stepped centers' parameters and state are copied back from the
        round-start snapshot."""
        self.epochs = self._phase_epochs(epochs, frozen, list(self.spans))
        self._schedule()
        self._frozen_spans = [self.spans[n] for n in frozen]
        self._frozen_names = tuple(frozen)

    def _describe_path(self) -> str:
        """The training path in words: fast hand gradients, vmap, or a per-center loop (and why)."""
        name = model_name(self.module)
        if self.dp is not None:
            return (
                f"packed DP-SGD: per-row gradients of {name}.loss_rows under torch.vmap over centers "
                "and rows, clipped and noised (trainer.dp)"
            )
        if self._step_module is not None:
            if self._unvmappable is None:
                return f"packed vmap: {name}.training_step under torch.vmap(functional_call)"
            return (
                f"packed loop: {name}.training_step center by center (vmap cannot run it: "
                f"{self._unvmappable}); same loss and updates, slower"
            )
        if self.fast_path:
            return f"packed fast: {name}.packed_loss_grad (hand-derived gradients)"
        forward = "packed_forward" if self.module.has_packed_forward else "torch.vmap(functional_call)"
        reasons = [
            why
            for why, on in (
                ("a local term", self.local_term is not None),
                ("a model penalty", self.module.has_penalty),
                ("autocast", self.autocast_enabled),
            )
            if on
        ]
        why = f" (for {', '.join(reasons)})" if reasons and self.module.has_packed_loss_grad else ""
        return f"packed autograd: {name}.loss_rows over {forward}{why}"

    def _probe_training_step(self, train: Sequence[TrainSet]) -> None:
        """Learn whether ``torch.vmap`` can run the module's ``training_step`` and what it logs.

        Tried once on the first rows of the first center (random state forked, so the probe draws
        nothing from any round's streams). A vmap failure is recorded in ``_unvmappable``, not
        raised: the engine then runs each center's step on its own
        (:meth:`StackedTrainingStep.looped <lightning_fed.engine.stacked_step.StackedTrainingStep.looped>`);
        a failure of that too is the module's own error and is raised.
        """
        x, y = train[int(self.order[0])]
        n = max(1, min(len(y), self.batch_size))
        params = {
            name: p.detach().unsqueeze(0).expand(2, *p.shape) for name, p in self.module.named_parameters()
        }
        xb = torch.stack([x[:n], x[:n]]).to(self.device, next(iter(params.values())).dtype)
        yb = torch.stack([y[:n], y[:n]]).to(self.device, xb.dtype)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            self.logged_names = self._step_module.probe(params, xb, yb)
        self._unvmappable = self._step_module.unvmappable

    def _views(self, flat: Tensor) -> dict[str, Tensor]:
        """Named parameter views ``[k, *shape]`` into a ``[k, D]`` buffer."""
        return {n: flat[:, a:b].view(flat.shape[0], *self.shapes[n]) for n, (a, b) in self.spans.items()}

    def _round_rows(self, round_idx: int) -> tuple[Tensor, Tensor]:
        """Global row indices ``[sum_s k_s, B]`` of every batch of the round in step-major order
        (see ``step_start``; padded slots point at the padding row) and their float row mask."""
        ids = self.center_ids[self.order].tolist()
        batches = [
            center_batches(int(n), self.batch_size, self.epochs, self.seed, round_idx, c, self.local_steps)
            for n, c in zip(self.sizes.tolist(), ids, strict=True)
        ]
        blocks = torch.cat(batches)
        offsets = torch.repeat_interleave(self.offsets, self.steps).unsqueeze(1)
        blocks = torch.where(blocks >= 0, blocks + offsets, self.pad_row)
        rows = blocks.index_select(0, self._to_step_major).to(self.device)
        return rows, (rows != self.pad_row).to(self.x.dtype)

    def _augment_draws(self, round_idx: int) -> Tensor:
        """Every batch slot's augmentation draws ``[sum_s k_s, B, D]``, step-major like :meth:`_round_rows`:
        center ``c`` draws its whole round ``[steps, B, D]`` from its own ``(seed, "augment", round, c)``."""
        ids = self.center_ids[self.order].tolist()
        per_center = [
            self.augment.round_draws(self.seed, round_idx, c, n, self.batch_size)
            for c, n in zip(ids, self._steps_list, strict=True)
        ]
        return torch.cat(per_center).index_select(0, self._to_step_major).to(self.device)

    def _gather(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        """Inputs ``[k, B, F]`` and labels ``[k, B]`` of the rows ``[k, B]``, in reused buffers."""
        n = rows.numel()
        flat = rows.view(-1)
        xb = torch.index_select(self.x, 0, flat, out=self.scratch.take("xb", (n, *self.x.shape[1:]), self.x))
        yb = torch.index_select(self.y, 0, flat, out=self.scratch.take("yb", (n,), self.y))
        return xb.view(*rows.shape, *self.x.shape[1:]), yb.view(rows.shape)

    #: Bool ``[C]`` (center order): centers whose last round diverged and was rolled back.
    last_diverged: Tensor | None = None

    def models_per_step(self) -> float:
        """The mean number of centers a step trains (the prefix schedule's ``k_t`` averaged over steps)."""
        return sum(self.active) / max(1, len(self.active))

    def _flip_model(self, model: int) -> None:
        p = int(self.inverse[model])
        lo = int(self.offsets[p])
        rows = slice(lo, lo + int(self.sizes[p]))
        self.y[rows] = 1 - self.y[rows]

    #: What the probe of the module's ``training_step`` found, ``(logged_names, unvmappable)``, handed
    #: to an engine over the participants so that it does not call ``training_step`` to probe again.
    _probed: tuple[tuple[str, ...], str | None] | None = None

    def _participants_engine(self, index: Tensor) -> tuple[PackedEngine, Tensor]:
        """An engine of this type over the models ``index`` alone, holding their current state.

        Its training rows are theirs as they stand (label flips included), its models are keyed by
        their global center ids (batch order, dropout, augmentation and DP noise draws), and it
        freezes and masks what this engine does. Returns it and ``rows``: row ``q`` of its stacked
        buffers (its sorted order) is row ``rows[q]`` of this engine's (the same index both ways).
        """
        positions = self.inverse[index]
        train = [
            (self.x[o : o + n], self.y[o : o + n])
            for o, n in zip(self.offsets[positions].tolist(), self.sizes[positions].tolist(), strict=True)
        ]
        sub = type(self)()
        sub.scratch = self.scratch
        if self._step_module is not None:
            sub._probed = (self.logged_names, self._unvmappable)
        self.setup_inner(sub, train, self.flat.dtype, self.center_ids[index].tolist())
        if self._frozen_names:
            sub.set_phase(None, self._frozen_names)
        if self.mask is not None:
            sub.set_mask({n: m.index_select(0, index.to(m.device)) for n, m in self.mask.items()})
        rows = positions.index_select(0, sub.order).to(self.device)
        sub.flat.copy_(self.flat.index_select(0, rows))
        for n, t in sub.opt_state.items():
            t.copy_(self.opt_state[n].index_select(0, rows))
        sub._sched_counts.copy_(self._sched_counts.index_select(0, rows.cpu()))
        return sub, rows

    def _train_participants(self, round_idx: int, index: Tensor) -> Tensor:
        """Round ``round_idx`` of the models ``index`` only (:attr:`Engine.participants
        <lightning_fed.engine.base.Engine.participants>`): an engine over them trains the round and
        their rows are written back. Each trains to the same bits as in a round of every model (the
        property bounded passes rest on, :mod:`lightning_fed.engine.passes`, with the same exception:
        a module drawing from torch's global generator); the others are not computed."""
        losses = torch.full((self.num_models,), float("nan"), dtype=torch.float64, device=self.device)
        self.last_diverged = torch.zeros(self.num_models, dtype=torch.bool)
        self.training_step_calls = 0
        nan = torch.full((self.num_models,), float("nan"), dtype=torch.float64)
        self.last_logged = None if self._step_module is None else {n: nan.clone() for n in self.logged_names}
        if index.numel() == 0:
            return losses
        sub, rows = self._participants_engine(index)
        got = sub.train_round(round_idx)
        self.flat.index_copy_(0, rows, sub.flat)
        for n, t in self.opt_state.items():
            t.index_copy_(0, rows, sub.opt_state[n])
        self._sched_counts.index_copy_(0, rows.cpu(), sub._sched_counts)
        losses.index_copy_(0, index.to(self.device), got.to(losses))
        self.last_diverged[index] = sub.last_diverged
        if self.last_logged is not None and sub.last_logged is not None:
            for n, v in sub.last_logged.items():
                self.last_logged[n][index] = v.to(torch.float64).cpu()
        self.training_step_calls = sub.training_step_calls
        return losses

    def train_round(self, round_idx: int) -> Tensor:
        index = self._participating()
        if index is not None:
            return self._train_participants(round_idx, index)
        # The round's rate (the same for every center, so a shard agrees with the whole) and, if
        # asked, a fresh optimizer state; both before the snapshot a diverged center returns to.
        if self._replay is None:
            self.optimizer.lr = self.base_lr * self.lr_factor(round_idx)
        if self.reset_optimizer_each_round:
            self.optimizer.reset_state(self.opt_state)
        self._take_grad()
        rows, masks = self._round_rows(round_idx)
        draws = self._augment_draws(round_idx) if self.augment is not None else None
        before = self._snapshot()
        self.module.train()
        gen = CenterStreams(self.seed, round_idx, self.center_ids[self.order].tolist(), self.device)
        if self._words_per_step:
            threads = torch.get_num_threads() if self.device.type == "cpu" else 1
            self.scratch.buffers["words"] = gen.prefetch(
                self._steps_list, self._words_per_step, threads=threads, out=self.scratch.buffers.get("words")
            )
        loss_sum = torch.zeros(self.num_models, dtype=torch.float64, device=self.device)
        logs = RoundLogs(self.num_models, self.logged_names)
        extra = {"workspace": self.scratch.workspace} if self._pass_workspace else {}
        calls_before = self._step_module.calls if self._step_module is not None else 0
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(derive_seed(self.seed, "dropout-vmap", round_idx))
            for s, k in enumerate(self.active):
                lo = self.step_start[s]
                xb, yb = self._gather(rows[lo : lo + k])
                if draws is not None:
                    xb = self.augment(xb, draws[lo : lo + k])
                mask = masks[lo : lo + k]
                if self.dp is not None:
                    per_center, grad = self._dp_step(k, xb, yb, mask, round_idx, s)
                elif self.fast_path:
                    grad = self.grad[:k]
                    per_center = self.module.packed_loss_grad(
                        {n: v[:k] for n, v in self._flat_views.items()},
                        xb,
                        yb,
                        mask,
                        gen,
                        {n: v[:k] for n, v in self._grad_views.items()},
                        **extra,
                    )
                else:
                    per_center, grad = self._autograd_step(k, xb, yb, mask, gen, before[0], s, logs)
                if self._masked_out is not None:
                    # p = 0, state = 0 and g = 0 outside the mask: Adam/SGD (and L2 decay) move nothing there.
                    grad.masked_fill_(self._masked_out[:k], 0.0)
                if self._replay is not None:
                    self._scheduled_rate(k)
                self.optimizer.step({"flat": self.flat}, {"flat": grad}, self.opt_state, k)
                for a, b in self._frozen_spans:  # set_phase: frozen values and state stay
                    self.flat[:k, a:b] = before[0][:k, a:b]
                    for n, t in self.opt_state.items():
                        if t.shape == self.flat.shape:
                            t[:k, a:b] = before[1][n][:k, a:b]
                if self._replay is not None:
                    self._sched_counts[:k, 0] += 1
                    self._sched_counts[:k, 1] += ((s + 1) % self._per_epoch[:k] == 0).to(torch.int64)
                loss_sum[:k] += per_center.detach().to(torch.float64)
                if self._words_per_step is None:  # learnt from the first step the engine takes
                    self._words_per_step = gen.consumed
                gen.next_step()
        loss = loss_sum / self.steps.to(loss_sum)
        if self._step_module is not None:
            self.last_logged = logs.means()
            self.training_step_calls = self._step_module.calls - calls_before
        else:
            self.last_logged = None
        self._contain(loss, *before)
        return loss.index_select(0, self.inverse.to(self.device))

    def dp_rows(self, k: int, xb: Tensor, yb: Tensor) -> tuple[Tensor, Tensor]:
        """Per-row gradients ``[k, B, D]`` (the flat layout) and losses ``[k, B]`` of the first ``k``
        centers (sorted order) on their batches ``[k, B, ...]``: ``per_sample_grads`` vmapped once
        more over the centers (dropout: a mask per center and row from the round's global stream)."""
        params = self._views(self.flat[:k].detach())
        loss = row_loss(self.module)

        def center(p: dict[str, Tensor], x: Tensor, y: Tensor) -> tuple[dict[str, Tensor], Tensor]:
            return per_sample_grads(loss, p, x, y, randomness="different", with_loss=True)

        with self.autocast():
            grads, losses = torch.vmap(center, randomness="different")(params, xb, yb)
        flat = torch.cat([grads[n].reshape(k, xb.shape[1], -1) for n in self.spans], dim=2)
        return flat.to(self.flat.dtype), losses.detach()

    def _dp_step(
        self, k: int, xb: Tensor, yb: Tensor, mask: Tensor, round_idx: int, s: int
    ) -> tuple[Tensor, Tensor]:
        """DP-SGD's per-center loss ``[k]`` and noisy clipped gradient ``[k, D]`` of step ``s``
        (:func:`~lightning_fed.dp.per_sample.dp_flat_mean`; noise keyed by the centers' global ids)."""
        rows, losses = self.dp_rows(k, xb, yb)
        centers = self.center_ids[self.order[:k]].tolist()
        noise = step_noise(self.seed, round_idx, centers, s, rows.shape[2], rows.dtype)
        grad = dp_flat_mean(rows, mask, self.dp.max_grad_norm, self.dp.noise_multiplier, noise)
        per_center = (losses.to(mask.dtype) * mask).sum(1) / mask.sum(1)
        return per_center, grad

    def _scheduled_rate(self, k: int) -> None:
        """Each of the first ``k`` centers' rate from its own scheduler count (``ScheduleReplay``)."""
        counts = self._replay.counts(self._sched_counts[:k, 0], self._sched_counts[:k, 1])
        self.optimizer.lr = self._replay.rates(counts).to(self.device)

    def _snapshot(self) -> tuple[Tensor, dict[str, Tensor]]:
        """Copy parameters and optimizer state into scratch buffers kept across rounds (a fresh ~45 MB
        allocation every round costs page faults: measured ~25 % of a packed round)."""
        take = self.scratch.take
        flat = take("saved.flat", tuple(self.flat.shape), self.flat)
        state = {n: take(f"saved.{n}", tuple(t.shape), t) for n, t in self.opt_state.items()}
        self._counts_before = self._sched_counts.clone()
        flat.copy_(self.flat)
        for n, t in self.opt_state.items():
            state[n].copy_(t)
        return flat, state

    def _contain(self, loss: Tensor, flat: Tensor, opt_state: dict[str, Tensor]) -> None:
        """Roll back (to ``flat`` / ``opt_state``) the centers whose loss or parameters are non-finite."""
        bad = ~torch.isfinite(loss) | ~finite_rows(self.flat)
        if bool(bad.any()):
            self.flat[bad] = flat[bad]
            for n, t in self.opt_state.items():
                t[bad] = opt_state[n][bad]
            self._sched_counts[bad.cpu()] = self._counts_before[bad.cpu()]
            loss[bad] = float("nan")
        self.last_diverged = bad.index_select(0, self.inverse.to(self.device)).cpu()

    def _autograd_step(
        self,
        k: int,
        xb: Tensor,
        yb: Tensor,
        mask: Tensor,
        gen: CenterStreams,
        start: Tensor,
        s: int,
        logs: RoundLogs,
    ) -> tuple[Tensor, Tensor]:
        """Per-center loss and flat gradient ``[k, D]`` of step ``s`` through autograd (any module,
        any term); what a module's own ``training_step`` logs goes to ``logs``.

        ``start`` is the round-start ``[C, D]`` buffer (sorted order): the model each center
        received, which local terms such as FedProx's proximal term pull towards.
        """
        leaf = self.flat[:k].detach().requires_grad_(True)
        params = self._views(leaf)
        term = self.local_term
        features = None
        own_grad = None  # the gradient of a module's own training_step, computed group by group
        if self._step_module is not None:
            own_grad = self.grad[:k]
            with self.autocast():
                per_center = self._step_module.loss_grad(
                    {n: v[:k] for n, v in self._flat_views.items()},
                    xb,
                    yb,
                    mask.sum(1).to(torch.int64).cpu(),
                    s % self._per_epoch[:k],
                    own_grad,
                    logs,
                    self.order[:k],
                )
        else:
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
        if own_grad is None:
            (grad,) = torch.autograd.grad(per_center.sum(), [leaf])
            return per_center.detach(), grad
        if per_center.requires_grad:  # the penalty's and the term's gradient, added to training_step's
            (extra,) = torch.autograd.grad(per_center.sum(), [leaf])
            own_grad.add_(extra)
        return per_center.detach(), own_grad

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
        """Every model's parameters in model order, one contiguous ``[C, *shape]`` tensor per name.

        Each name is gathered from its own columns of the flat buffer (one copy, as before): views
        of one ``[C, D]`` copy would be strided (row stride ``D``), so every consumer that reshapes
        them (norms, flattened messages) would copy them again, and all of them would keep the
        whole copy alive while any one is held.
        """
        inverse = self.inverse.to(self.device)
        return {
            n: self.flat[:, a:b].index_select(0, inverse).view(self.num_models, *self.shapes[n])
            for n, (a, b) in self.spans.items()
        }

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
        if self._replay is not None:
            out["scheduler_counts"] = self._sched_counts.index_select(0, self.inverse).clone()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_mask(state.get("mask"))
        self.set_params(state["params"])
        order = self.order.to(self.device)
        for n, t in self.opt_state.items():
            t.copy_(state["optimizer"][n].index_select(0, order))
        if self._replay is not None:
            self._sched_counts.copy_(state["scheduler_counts"].index_select(0, self.order))
