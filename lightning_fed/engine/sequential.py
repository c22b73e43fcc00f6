"""The sequential reference engine: a plain loop over centers with ``torch.optim``.

Each center owns a copy of the module and the optimizer its ``configure_optimizers`` returns, and
trains on the batches of :mod:`lightning_fed.engine.schedule` (augmented, if the data asks for it,
with the same draws as in the packed engine: :mod:`lightning_fed.data.augment`). It is the reference
the packed engine is tested against, and the fallback for models that cannot be packed (custom
optimizers, layers that ``vmap`` does not support).

With a parameter mask (:meth:`SequentialEngine.set_mask`, DisPFL) each center's ``p.grad`` is zeroed
outside its mask before ``opt.step()``, and parameters and optimizer state outside it are zeroed when
it is set and after :meth:`~SequentialEngine.set_params`.

The round's learning rate (``param_groups[0]["lr"]``) and, with ``reset_optimizer_each_round``,
a cleared ``optimizer.state`` are set at the start of every round (:mod:`lightning_fed.engine.base`).

A center whose loss turns non-finite gets its parameters and optimizer state restored to their
values before the round and skips the rest of the round (loss NaN, flagged in
:attr:`SequentialEngine.last_diverged`), as in the packed engine.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fed.dp.per_sample import dp_flat_mean, step_noise
from lightning_fed.engine.base import Engine, ForwardFeatures, TrainSet, check_mask
from lightning_fed.engine.lr_schedule import Constant
from lightning_fed.engine.objective import TermBatch
from lightning_fed.engine.optim import SchedulerConfig, optimizer_and_scheduler
from lightning_fed.engine.schedule import center_batches
from lightning_fed.engine.training_step import RoundLogs, TrainingStep, model_name, overrides_training_step
from lightning_fed.seeding import derive_seed

__all__ = ["SequentialEngine"]


class SequentialEngine(Engine):
    """Train centers one after another, each with its own module copy and torch optimizer."""

    def _build(self, train: Sequence[TrainSet], dtype: torch.dtype) -> None:
        self.data = [(x.to(self.device, dtype), y.to(self.device, dtype)) for x, y in train]
        self.models = [copy.deepcopy(self.module).to(self.device, dtype) for _ in train]
        configured = [optimizer_and_scheduler(m.configure_optimizers()) for m in self.models]
        self.optimizers = [opt for opt, _ in configured]
        #: Each center's lr scheduler from ``configure_optimizers`` (None: none), stepped as Lightning does.
        self.schedulers: list[SchedulerConfig | None] = [sched for _, sched in configured]
        self._scheduled = any(s is not None for s in self.schedulers)
        if self._scheduled and not isinstance(self.lr_schedule, Constant):
            raise ValueError(
                "trainer.lr_schedule and an lr_scheduler from configure_optimizers both set the learning "
                "rate: keep one of them"
            )
        #: Optimizer steps and local epochs each center has completed (what its scheduler counts).
        self.sched_counts = torch.zeros(len(self.models), 2, dtype=torch.int64)
        #: Each optimizer's rate as ``configure_optimizers`` set it (round ``r``: times ``lr_factor(r)``).
        self.base_lrs = [opt.param_groups[0]["lr"] for opt in self.optimizers]
        #: Per model, ``(parameter, bool masked-out)`` pairs of the masked parameters; None: no mask.
        self._masked_out: list[list[tuple[torch.nn.Parameter, Tensor]]] | None = None
        #: Parameter names :meth:`set_phase` froze (empty: none).
        self._frozen: tuple[str, ...] = ()
        self.mask = None
        #: Each model copy's ``training_step`` with its captured logs, when the module has its own.
        self._steps = [TrainingStep(m) for m in self.models] if overrides_training_step(self.module) else None
        self.training_path = (
            f"sequential: {model_name(self.module)}.training_step per center"
            if self._steps is not None
            else "sequential: the model's loss_rows per center"
        )
        if self.dp is not None:
            self.training_path = "sequential DP-SGD: one backward per row, clipped and noised (trainer.dp)"

    #: Bool ``[C]``: centers whose last round diverged and was rolled back.
    last_diverged: Tensor | None = None

    def _flip_model(self, model: int) -> None:
        x, y = self.data[model]
        self.data[model] = (x, 1 - y)

    def train_round(self, round_idx: int) -> Tensor:
        losses = torch.zeros(self.num_models, dtype=torch.float64)
        self.last_diverged = torch.zeros(self.num_models, dtype=torch.bool)
        logs = RoundLogs(self.num_models)
        factor = self.lr_factor(round_idx)
        index = self._participating()
        taking_part = set(range(self.num_models) if index is None else index.tolist())
        for c, (opt, base) in enumerate(zip(self.optimizers, self.base_lrs, strict=True)):
            if c not in taking_part:
                continue
            if not self._scheduled:  # a scheduler of configure_optimizers owns the rate otherwise
                opt.param_groups[0]["lr"] = base * factor
            if self.reset_optimizer_each_round:
                opt.state.clear()  # a fresh torch optimizer's state: lazily re-created at its first step
        for c, (model, opt, (x, y)) in enumerate(zip(self.models, self.optimizers, self.data, strict=True)):
            if c not in taking_part:  # not sampled this round: not trained, loss NaN
                losses[c] = float("nan")
                continue
            model.train()
            sched = self.schedulers[c]
            before = (
                copy.deepcopy(model.state_dict()),
                copy.deepcopy(opt.state_dict()),
                None
                if sched is None
                else (copy.deepcopy(sched.scheduler.state_dict()), self.sched_counts[c].clone()),
            )
            center = int(self.center_ids[c])
            batches = center_batches(
                len(y), self.batch_size, self.epochs, self.seed, round_idx, center, self.local_steps
            )
            start = {n: p.detach().clone().unsqueeze(0) for n, p in model.named_parameters()}
            frozen = _frozen_snapshot(model, opt, self._frozen) if self._frozen else None
            per_epoch = -(-len(y) // self.batch_size)
            draws = None
            if self.augment is not None:
                draws = self.augment.round_draws(self.seed, round_idx, center, len(batches), batches.shape[1])
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                torch.manual_seed(derive_seed(self.seed, "dropout-sequential", round_idx, center))
                for t, b in enumerate(batches):
                    rows = b[b >= 0].to(self.device)
                    xb = x[rows]
                    if draws is not None:  # slot j of batch t uses draws[t, j], as in the packed engine
                        xb = self.augment(xb, draws[t][b >= 0])
                    opt.zero_grad(set_to_none=True)
                    if self.dp is not None:
                        loss = self._dp_backward(model, xb, y[rows], round_idx, center, t)
                    else:
                        loss = self._loss(model, c, xb, y[rows], start, t % per_epoch, logs)
                    if not bool(torch.isfinite(loss)):
                        model.load_state_dict(before[0])
                        opt.load_state_dict(before[1])
                        if sched is not None:
                            sched.scheduler.load_state_dict(before[2][0])
                            self.sched_counts[c] = before[2][1]
                        self.last_diverged[c] = True
                        break
                    if self.dp is None:
                        loss.backward()
                    if frozen is not None:
                        for p, _, _ in frozen:  # stepped with a zero gradient (the step count advances)
                            p.grad = torch.zeros_like(p)
                    if self._masked_out is not None:
                        for p, out in self._masked_out[c]:
                            p.grad.masked_fill_(out, 0.0)
                    opt.step()
                    if frozen is not None:
                        _restore(frozen, opt)
                    if sched is not None:
                        self._step_scheduler(c, sched, epoch_end=(t + 1) % per_epoch == 0)
                    losses[c] += loss.item()
            losses[c] = float("nan") if self.last_diverged[c] else losses[c] / len(batches)
        self.last_logged = logs.means() if self._steps is not None else None
        return losses

    def dp_rows(self, model: torch.nn.Module, xb: Tensor, yb: Tensor) -> tuple[Tensor, Tensor]:
        """The per-sample reference: one backward per row. Flat gradients ``[B, D]`` (parameters in
        ``named_parameters`` order, the packed engine's flat layout) and losses ``[B]``."""
        grads, losses = [], []
        params = [p for _, p in model.named_parameters()]
        for b in range(len(yb)):
            with self.autocast():
                logits = model(xb[b : b + 1])
            loss = model.loss_rows(logits.to(yb.dtype), yb[b : b + 1]).mean()
            row = torch.autograd.grad(loss, params)
            grads.append(torch.cat([g.reshape(-1) for g in row]))
            losses.append(loss.detach())
        return torch.stack(grads), torch.stack(losses)

    def _dp_backward(
        self, model: torch.nn.Module, xb: Tensor, yb: Tensor, round_idx: int, center: int, t: int
    ) -> Tensor:
        """DP-SGD's step ``t`` of ``center``: ``p.grad`` is the noisy clipped mean of the per-row
        gradients (:func:`~lightning_fed.dp.per_sample.dp_flat_mean`, the same noise as the packed
        engine's); returns the batch's mean loss (detached)."""
        rows, losses = self.dp_rows(model, xb, yb)
        noise = step_noise(self.seed, round_idx, [center], t, rows.shape[1], rows.dtype)
        mask = torch.ones(1, len(yb), dtype=rows.dtype, device=rows.device)
        dp = self.dp
        grad = dp_flat_mean(rows.unsqueeze(0), mask, dp.max_grad_norm, dp.noise_multiplier, noise)[0]
        lo = 0
        for p in model.parameters():
            p.grad = grad[lo : lo + p.numel()].view_as(p).clone()
            lo += p.numel()
        return losses.mean()

    def set_phase(self, epochs: int | None = None, frozen: tuple[str, ...] = ()) -> None:
        """See :meth:`Engine.set_phase <lightning_fed.engine.base.Engine.set_phase>`."""
        self.epochs = self._phase_epochs(epochs, frozen, [n for n, _ in self.module.named_parameters()])
        self._frozen = tuple(frozen)

    def _step_scheduler(self, c: int, sched: SchedulerConfig, epoch_end: bool) -> None:
        """Lightning's stepping: after every ``frequency``-th optimizer step (``interval="step"``) or
        local epoch (``"epoch"``, counted at the end of each pass over the center's rows)."""
        counts = self.sched_counts[c]
        counts[0] += 1
        counts[1] += int(epoch_end)
        if sched.interval == "step" and int(counts[0]) % sched.frequency == 0:
            sched.scheduler.step()
        if sched.interval == "epoch" and epoch_end and int(counts[1]) % sched.frequency == 0:
            sched.scheduler.step()

    def _loss(
        self,
        model: torch.nn.Module,
        c: int,
        xb: Tensor,
        yb: Tensor,
        start: dict[str, Tensor],
        batch_idx: int,
        logs: RoundLogs,
    ) -> Tensor:
        """Center ``c``'s loss on one batch: its ``training_step`` (or mean task loss) + model
        penalty + local term; what ``training_step`` logs goes to ``logs``."""
        term = self.local_term
        features = None
        if self._steps is not None:
            with self.autocast():
                loss, logged = self._steps[c]((xb, yb), batch_idx)
            loss = loss.to(yb.dtype)
            logs.add(torch.tensor([c]), logged, torch.tensor([len(yb)]))
        else:
            with self.autocast():
                if term is not None and term.needs_features:
                    logits, features = model.forward_features(xb)
                else:
                    logits = model(xb)
            loss = model.loss_rows(logits.to(yb.dtype), yb).mean()
        if model.has_penalty or term is not None:
            params = {n: p.unsqueeze(0) for n, p in model.named_parameters()}
        if model.has_penalty:
            loss = loss + model.penalty(params, torch.tensor([len(self.data[c][1])], device=self.device))[0]
        if term is not None:
            batch = TermBatch(
                params=params,
                start=start,
                centers=self.center_ids[c : c + 1],  # the global id (a shard's models are not 0..k-1)
                x=xb.unsqueeze(0),
                mask=torch.ones(1, len(yb), dtype=yb.dtype, device=self.device),
                features=None if features is None else features.unsqueeze(0),
                features_fn=lambda p, x: self._reference_features(model, p, x),
            )
            loss = loss + term.loss(batch)[0]
        return loss

    @torch.no_grad()
    def _reference_features(self, model: torch.nn.Module, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Representations ``[1, B, H]`` of a reference model (eval mode, no dropout) on ``x [1, B, ...]``."""
        model.eval()
        try:
            single = {f"m.{n}": t[0] for n, t in params.items()}
            with self.autocast():
                _, feats = torch.func.functional_call(ForwardFeatures(model), single, (x[0],))
            return feats.unsqueeze(0)
        finally:
            model.train()

    def get_params(self) -> dict[str, Tensor]:
        names = [n for n, _ in self.module.named_parameters()]
        return {n: torch.stack([dict(m.named_parameters())[n].detach() for m in self.models]) for n in names}

    @torch.no_grad()
    def set_params(self, params: dict[str, Tensor]) -> None:
        for c, model in enumerate(self.models):
            for n, p in model.named_parameters():
                p.copy_(params[n][c])
        for pairs in self._masked_out or []:
            for p, out in pairs:
                p.masked_fill_(out, 0.0)

    @torch.no_grad()
    def set_mask(self, mask: dict[str, Tensor] | None) -> None:
        """See :meth:`Engine.set_mask <lightning_fed.engine.base.Engine.set_mask>`."""
        if mask is None:
            self.mask = self._masked_out = None
            return
        shapes = {n: p.shape for n, p in self.module.named_parameters()}
        check_mask(mask, shapes, self.num_models)
        self.mask = {n: m.detach().clone() for n, m in mask.items()}
        self._masked_out = []
        for c, (model, opt) in enumerate(zip(self.models, self.optimizers, strict=True)):
            named = dict(model.named_parameters())
            pairs = [(named[n], ~m[c].to(named[n].device)) for n, m in mask.items()]
            for p, out in pairs:
                p.masked_fill_(out, 0.0)
                for value in opt.state.get(p, {}).values():
                    if isinstance(value, Tensor) and value.shape == p.shape:
                        value.masked_fill_(out, 0.0)
            self._masked_out.append(pairs)

    def state_dict(self) -> dict[str, Any]:
        out = {
            "params": self.get_params(),
            "optimizers": [opt.state_dict() for opt in self.optimizers],
        }
        if self.mask is not None:
            out["mask"] = {n: m.clone() for n, m in self.mask.items()}
        if self._scheduled:
            out["schedulers"] = [None if s is None else s.scheduler.state_dict() for s in self.schedulers]
            out["scheduler_counts"] = self.sched_counts.clone()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_mask(state.get("mask"))
        self.set_params(state["params"])
        for opt, s in zip(self.optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(s)
        if self._scheduled:
            for sched, saved in zip(self.schedulers, state["schedulers"], strict=True):
                if sched is not None:
                    sched.scheduler.load_state_dict(saved)
            self.sched_counts.copy_(state["scheduler_counts"])


#: A frozen parameter, its value and its optimizer state tensors at the start of the round.
Frozen = list[tuple[torch.nn.Parameter, Tensor, dict[str, Tensor]]]


def _frozen_snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer, names: tuple[str, ...]) -> Frozen:
    """The frozen parameters of ``model`` with copies of their values and optimizer state (not ``step``)."""
    named = dict(model.named_parameters())
    out = []
    for n in names:
        p = named[n]
        state = {k: v.detach().clone() for k, v in opt.state.get(p, {}).items() if _restorable(k, v, p)}
        out.append((p, p.detach().clone(), state))
    return out


def _restorable(key: str, value: object, p: Tensor) -> bool:
    """A per-coordinate state tensor (moments, momentum buffer), not the step count."""
    return key != "step" and isinstance(value, Tensor) and value.shape == p.shape


@torch.no_grad()
def _restore(frozen: Frozen, opt: torch.optim.Optimizer) -> None:
    """Put the frozen parameters and their state back; state created this round returns to zero
    (the packed engine's fresh state), so the step count alone has moved."""
    for p, value, state in frozen:
        p.copy_(value)
        for k, v in opt.state.get(p, {}).items():
            if _restorable(k, v, p):
                if k in state:
                    v.copy_(state[k])
                else:
                    v.zero_()
