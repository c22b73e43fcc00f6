"""Functional Adam and SGD on stacked per-center tensors, with per-center step counts.

The packed engine reads the optimizer a :class:`~lightning_fed.models.base.CenterModule` returns from
``configure_optimizers`` and replays its update rule on tensors whose leading dimension is the
center. Only the first ``k`` centers (a prefix: the packed engine sorts centers by batch count) step
at a time, and each keeps its own step count, so a center with fewer batches neither moves nor
advances its bias correction: the packed update equals ``torch.optim.Adam`` / ``SGD`` run per center
(checked in float64 by the engine-equivalence tests).

Adam (Kingma & Ba 2015, torch's L2 ``weight_decay``; AdamW instead first decays ``p <- p (1 - lr wd)``),
per center with step count ``t``:
    g <- g + wd * p;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
    p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
SGD with momentum mu, dampening d (torch semantics, buffer = g on a center's first step):
    g <- g + wd * p;  buf <- mu buf + (1 - d) g;  p <- p - lr * (g + mu buf if nesterov else buf)

The bias corrections ``b^t`` are looked up per center in a table of C's ``pow(b, t)`` (what
``torch.optim.Adam`` computes in Python and torch's scalar loop computes), not computed as
``torch.pow`` over the ``[k]`` step counts: torch's vectorized ``pow`` differs from the scalar one in
the last bit and covers all but the tail of a ``[k]`` tensor, so a center's correction would depend
on how many centers step with it, and a shard or a pass of the centers
(:mod:`lightning_fed.engine.passes`) would not train to the bits of the whole federation.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "ScheduleReplay",
    "SchedulerConfig",
    "StackedAdam",
    "StackedOptimizer",
    "StackedSGD",
    "optimizer_and_scheduler",
    "stacked_optimizer_for",
]


class Powers:
    """``b^t`` for integer step counts ``t >= 0``: C's ``pow(b, t)``, whatever the number of centers.

    Args:
        base: ``b`` (an Adam beta).
    """

    def __init__(self, base: float) -> None:
        self.base = float(base)
        self._values = [1.0]
        self._table = torch.ones(1, dtype=torch.float64)

    def __call__(self, steps: Tensor) -> Tensor:
        """float64 ``b^t`` of each count in ``steps`` (int64 ``[k]``; the table grows as needed)."""
        need = int(steps.max()) if steps.numel() else 0
        if need >= len(self._values):
            top = max(need + 1, 2 * len(self._values))
            self._values.extend(self.base**t for t in range(len(self._values), top))
            self._table = torch.tensor(self._values, dtype=torch.float64)
        if self._table.device != steps.device:
            self._table = self._table.to(steps.device)
        return self._table[steps]


def _per_center(vec: Tensor, like: Tensor) -> Tensor:
    """Reshape a ``[k]`` vector to broadcast against ``[k, ...]``."""
    return vec.view(-1, *([1] * (like.dim() - 1)))


def _vector(lr: float | Tensor) -> bool:
    """Whether ``lr`` is a per-center rate ``[k]`` (a scheduler's) rather than one number."""
    return isinstance(lr, Tensor)


class StackedOptimizer(ABC):
    """An optimizer over stacked tensors ``[C, ...]``; state is a dict of stacked tensors."""

    @abstractmethod
    def init_state(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        """Fresh state for stacked ``params`` (includes ``"step"``: int64 ``[C]``)."""

    #: The learning rate of the next steps: one number (the packed engine sets it per round from
    #: its schedule), or a float64 ``[k]`` rate per stepping center (a ``configure_optimizers``
    #: scheduler, :class:`ScheduleReplay`).
    lr: float | Tensor

    @abstractmethod
    def step(
        self, params: dict[str, Tensor], grads: dict[str, Tensor], state: dict[str, Tensor], k: int
    ) -> None:
        """Update the first ``k`` centers in place (``params`` and ``state`` are full stacks)."""

    @torch.no_grad()
    def reset_state(self, state: dict[str, Tensor]) -> None:
        """Make ``state`` a fresh :meth:`init_state` in place, for every center.

        The fresh state of Adam and SGD is all zeros (moments, momentum buffers and step counts;
        SGD's first step then takes ``buf = g``, as a fresh ``torch.optim.SGD`` does); an optimizer
        whose fresh state is not zero overrides this.
        """
        for t in state.values():
            t.zero_()


class StackedAdam(StackedOptimizer):
    """Adam with torch's semantics (no amsgrad) on stacked tensors; L2 weight decay (``Adam``) or
    decoupled weight decay ``p <- p (1 - lr wd)`` before the update (``AdamW``, Loshchilov & Hutter 2019).
    """

    def __init__(
        self, lr: float, betas: tuple[float, float], eps: float, weight_decay: float, decoupled: bool = False
    ) -> None:
        self.decoupled = bool(decoupled)
        self.lr, self.eps, self.weight_decay = float(lr), float(eps), float(weight_decay)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self._powers1, self._powers2 = Powers(self.beta1), Powers(self.beta2)
        #: Reusable temporaries by name (a packed engine hands in its round scratch's dict, which the
        #: engines of consecutive passes share, :mod:`lightning_fed.engine.scratch`).
        self.buffers: dict[str, Tensor] = {}

    def init_state(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        first = next(iter(params.values()))
        state = {"step": torch.zeros(first.shape[0], dtype=torch.int64, device=first.device)}
        for name, p in params.items():
            state[f"exp_avg.{name}"] = torch.zeros_like(p)
            state[f"exp_avg_sq.{name}"] = torch.zeros_like(p)
        return state

    @torch.no_grad()
    def step(
        self, params: dict[str, Tensor], grads: dict[str, Tensor], state: dict[str, Tensor], k: int
    ) -> None:
        """One Adam step of the first ``k`` centers; ``grads`` are scratch (overwritten in place).

        The update is the same sequence of elementwise ops as the formula above (so the same bits
        as computing it with fresh temporaries), written in place into the gradient and into two
        buffers kept between steps: a fresh ``[k, D]`` temporary per op cost more in page faults
        than the arithmetic (docs/architecture.md, Performance decisions).
        """
        steps = state["step"][:k]
        steps += 1
        bc1 = 1.0 - self._powers1(steps)
        bc2_sqrt = torch.sqrt(1.0 - self._powers2(steps))
        for name, g in grads.items():
            p = params[name][:k]
            m, v = state[f"exp_avg.{name}"][:k], state[f"exp_avg_sq.{name}"][:k]
            if self.weight_decay and self.decoupled:
                p.mul_(
                    _per_center(1.0 - self.lr * self.weight_decay, p).to(p.dtype)
                    if _vector(self.lr)
                    else 1.0 - self.lr * self.weight_decay
                )
            elif self.weight_decay:
                g.add_(p, alpha=self.weight_decay)
            m.lerp_(g, 1.0 - self.beta1)
            v.mul_(self.beta2).addcmul_(g, g, value=1.0 - self.beta2)
            denom = torch.sqrt(v, out=self._buffer("denom", v))
            denom.div_(_per_center(bc2_sqrt, v).to(v.dtype)).add_(self.eps)
            step = torch.mul(_per_center(self.lr / bc1, p).to(p.dtype), m, out=g)
            p.addcdiv_(step, denom, value=-1.0)  # p - step / denom, the same bits in one pass

    def _buffer(self, name: str, like: Tensor) -> Tensor:
        """A reusable buffer shaped like ``like`` (grown when a larger one is asked for)."""
        buf = self.buffers.get(name)
        n = like.numel()
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            buf = self.buffers[name] = torch.empty(n, dtype=like.dtype, device=like.device)
        return buf[:n].view(like.shape)


class StackedSGD(StackedOptimizer):
    """SGD with optional momentum, dampening, Nesterov and L2 weight decay (torch semantics)."""

    def __init__(
        self, lr: float, momentum: float, dampening: float, nesterov: bool, weight_decay: float
    ) -> None:
        self.lr, self.momentum, self.dampening = float(lr), float(momentum), float(dampening)
        self.nesterov, self.weight_decay = bool(nesterov), float(weight_decay)

    def init_state(self, params: dict[str, Tensor]) -> dict[str, Tensor]:
        first = next(iter(params.values()))
        state = {"step": torch.zeros(first.shape[0], dtype=torch.int64, device=first.device)}
        if self.momentum:
            state.update({f"momentum_buffer.{n}": torch.zeros_like(p) for n, p in params.items()})
        return state

    @torch.no_grad()
    def step(
        self, params: dict[str, Tensor], grads: dict[str, Tensor], state: dict[str, Tensor], k: int
    ) -> None:
        first_step = state["step"][:k] == 0
        state["step"][:k] += 1
        for name, g in grads.items():
            p = params[name][:k]
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            if self.momentum:
                buf = state[f"momentum_buffer.{name}"][:k]
                updated = buf * self.momentum + g * (1.0 - self.dampening)
                buf.copy_(torch.where(_per_center(first_step, g), g, updated))
                g = g.add(buf, alpha=self.momentum) if self.nesterov else buf
            if _vector(self.lr):
                p.sub_(g * _per_center(self.lr, g).to(g.dtype))
            else:
                p.sub_(g, alpha=self.lr)


@dataclass(frozen=True)
class SchedulerConfig:
    """The learning-rate scheduler ``configure_optimizers`` returned, in Lightning's terms.

    Attributes:
        scheduler: The ``torch.optim.lr_scheduler`` object (bound to the returned optimizer).
        interval: ``"epoch"`` (step it after each local epoch of the center) or ``"step"`` (after
            each optimizer step).
        frequency: Step it every ``frequency`` intervals.
    """

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1


class ScheduleReplay:
    """A scheduler's rate after ``n`` of its steps, for every ``n``, replayed on its own optimizer.

    The torch schedulers that need no metric are functions of their step count, so one replay
    serves every center: center ``c`` trains at ``rate(n_c)`` with ``n_c`` its own count of
    scheduler steps (``optimizer steps // frequency`` for ``interval="step"``, ``local epochs //
    frequency`` for ``"epoch"``), which is what a per-center ``torch`` scheduler stepped the
    Lightning way gives (the sequential engine; tested against it and ``Trainer``).

    Args:
        config: The scheduler ``configure_optimizers`` returned (its optimizer is consumed: the
            replay steps it).
    """

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self._group = config.scheduler.optimizer.param_groups[0]
        self._rates = [float(self._group["lr"])]

    def counts(self, steps: Tensor, epochs: Tensor) -> Tensor:
        """Scheduler steps taken by centers with ``steps`` optimizer steps and ``epochs`` local epochs."""
        done = steps if self.config.interval == "step" else epochs
        return torch.div(done, self.config.frequency, rounding_mode="floor")

    def rates(self, counts: Tensor) -> Tensor:
        """float64 rates ``[k]`` after ``counts [k]`` scheduler steps (extending the replay as needed)."""
        need = int(counts.max()) if counts.numel() else 0
        while len(self._rates) <= need:
            with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": intended here
                warnings.simplefilter("ignore", UserWarning)
                self.config.scheduler.step()
            self._rates.append(float(self._group["lr"]))
        return torch.tensor(self._rates, dtype=torch.float64)[counts.cpu()]


def optimizer_and_scheduler(configured: Any) -> tuple[torch.optim.Optimizer, SchedulerConfig | None]:
    """The optimizer and (optional) scheduler of whatever ``configure_optimizers`` returned.

    Accepts Lightning's single-optimizer forms: an optimizer; ``[optimizer]``; ``([optimizer],
    [scheduler])``; ``{"optimizer": ..., "lr_scheduler": scheduler or {"scheduler": ...,
    "interval": "epoch" | "step", "frequency": n}}``.

    Raises:
        TypeError: One line naming the unsupported piece (several optimizers, a scheduler that
            needs a ``monitor`` metric such as ``ReduceLROnPlateau``, an unknown interval).
    """
    scheduler: Any = None
    if (
        isinstance(configured, tuple | list)
        and len(configured) == 2
        and isinstance(configured[0], list | tuple)
    ):
        optimizers, schedulers = configured
        if len(schedulers) > 1:
            raise TypeError("configure_optimizers: one lr scheduler per center is supported, got several")
        configured, scheduler = optimizers, (schedulers[0] if schedulers else None)
    if isinstance(configured, dict):
        scheduler = configured.get("lr_scheduler")
        configured = configured.get("optimizer")
    optimizer = _only_optimizer(configured)
    if scheduler is None:
        return optimizer, None
    settings = dict(scheduler) if isinstance(scheduler, dict) else {"scheduler": scheduler}
    unknown = sorted(set(settings) - {"scheduler", "interval", "frequency", "name", "strict", "monitor"})
    if unknown:
        raise TypeError(f"configure_optimizers: lr_scheduler keys {unknown} are not supported")
    sched = settings["scheduler"]
    if isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau) or settings.get("monitor"):
        raise TypeError(
            "configure_optimizers: a scheduler driven by a monitored metric (ReduceLROnPlateau) is not "
            "supported in federated training; use a schedule of the step or epoch count"
        )
    interval = settings.get("interval", "epoch")
    if interval not in ("epoch", "step"):
        raise TypeError(
            f"configure_optimizers: lr_scheduler interval must be 'epoch' or 'step', got {interval!r}"
        )
    frequency = int(settings.get("frequency", 1))
    if frequency < 1:
        raise TypeError(f"configure_optimizers: lr_scheduler frequency must be >= 1, got {frequency}")
    return optimizer, SchedulerConfig(sched, interval, frequency)


def _only_optimizer(configured: Any) -> torch.optim.Optimizer:
    """The single optimizer out of whatever ``configure_optimizers`` returned (no scheduler)."""
    if isinstance(configured, dict):
        if configured.get("lr_scheduler") is not None:
            raise TypeError(
                "configure_optimizers returned an lr_scheduler where only an optimizer is used (FedSPD's "
                "M-step): return the optimizer alone, or use trainer.lr_schedule"
            )
        configured = configured.get("optimizer")
    if (
        isinstance(configured, list | tuple)
        and len(configured) == 2
        and isinstance(configured[0], list | tuple)
    ):
        if configured[1]:
            return _only_optimizer({"optimizer": configured[0], "lr_scheduler": configured[1]})
        configured = configured[0]
    if isinstance(configured, list | tuple) and len(configured) == 1:
        configured = configured[0]
    if not isinstance(configured, torch.optim.Optimizer):
        raise TypeError(
            "configure_optimizers must return one torch.optim.Optimizer for federated training, "
            f"got {type(configured).__name__}"
        )
    if len(configured.param_groups) != 1:
        raise ValueError("the packed engine supports one parameter group per optimizer")
    return configured


def stacked_optimizer_for(configured: Any) -> StackedOptimizer:
    """Build the stacked equivalent of the optimizer ``configure_optimizers`` returned.

    Raises:
        TypeError: For optimizers other than Adam and SGD (use ``trainer.engine`` =
            ``SequentialEngine`` for those).
    """
    opt = _only_optimizer(configured)
    group = opt.param_groups[0]
    # Exact type checks: subclasses (AdamW, ...) have other update rules.
    if type(opt) in (torch.optim.Adam, torch.optim.AdamW):
        name = type(opt).__name__
        if group.get("amsgrad") or group.get("maximize"):
            raise TypeError(f"the packed engine's {name} supports neither amsgrad nor maximize")
        if type(opt) is torch.optim.Adam and group.get("decoupled_weight_decay"):
            raise TypeError("the packed engine's Adam does not support decoupled_weight_decay: use AdamW")
        decoupled = type(opt) is torch.optim.AdamW
        return StackedAdam(
            group["lr"], group["betas"], group["eps"], group["weight_decay"], decoupled=decoupled
        )
    if type(opt) is torch.optim.SGD:
        if group.get("maximize"):
            raise TypeError("the packed engine's SGD does not support maximize")
        return StackedSGD(
            group["lr"], group["momentum"], group["dampening"], group["nesterov"], group["weight_decay"]
        )
    raise TypeError(
        f"the packed engine supports torch.optim.Adam, AdamW and SGD, not {type(opt).__name__}: "
        "use --trainer.engine=lightning_fed.engine.SequentialEngine"
    )
