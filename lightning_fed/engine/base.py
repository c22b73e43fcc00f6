"""What every local-training engine provides (packed and sequential share this interface).

An engine owns the per-center parameters and optimizer states of one federation and trains all
centers for one round of local epochs. Optimizer states persist across rounds (each center keeps
its own Adam moments and step count, as a hospital keeping its optimizer between rounds would);
aggregation replaces parameters only. Parameters go in and out as stacked tensors ``[C, ...]`` in
center order, which is what aggregation (a mixing matrix) works on.

Two round-start settings (``trainer.lr_schedule``, ``trainer.reset_optimizer_each_round``) are
applied by every engine at the start of :meth:`Engine.train_round`, before anything of the round is
computed: every center's learning rate becomes ``base_lr * lr_schedule.factor(round_idx)``
(:mod:`lightning_fed.engine.lr_schedule`; ``base_lr`` is the rate ``configure_optimizers`` set),
and with the reset every center's optimizer state (momentum buffers, Adam moments, step counts) is
replaced by a fresh optimizer's (the EdgeDRM paper's "SGD momentum 0.9, reset each round",
App. D.3.2). Both are pure functions of the round, so checkpoints hold nothing new. A center whose
round diverges is rolled back to its state after these round-start changes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lightning_fed.engine.lr_schedule import Constant, LRSchedule
from lightning_fed.engine.objective import LocalTerm
from lightning_fed.engine.schedule import check_schedule
from lightning_fed.engine.training_step import overrides_training_step
from lightning_fed.models.base import CenterModule, RowStreams

if TYPE_CHECKING:
    from lightning_fed.data.augment import Augment
    from lightning_fed.dp.config import DPConfig

__all__ = [
    "Engine",
    "ForwardFeatures",
    "TrainSet",
    "check_dp_sgd",
    "check_mask",
    "packed_features",
    "packed_logits",
    "row_loss",
]

#: One center's (or training group's) training rows: features ``[n, F]`` and labels ``[n]``.
TrainSet = tuple[Tensor, Tensor]


def check_dp_sgd(module: CenterModule, local_term: LocalTerm | None) -> None:
    """Refuse, in one line, DP-SGD (``trainer.dp.level: sample``) with a loss that is not a mean of
    per-row losses: DP-SGD's clipping bounds one row's share of the gradient, and a local term
    (FedProx, FedDyn, MOON), a model penalty or a module's own ``training_step`` adds a gradient it
    does not clip."""
    what = (
        f"the algorithm's local term {type(local_term).__name__}"
        if local_term is not None
        else f"the model penalty of {type(module).__name__}"
        if module.has_penalty
        else f"{type(module).__name__}'s own training_step"
        if overrides_training_step(module)
        else None
    )
    if what is not None:
        raise ValueError(
            f"trainer.dp.level=sample: DP-SGD clips per-row gradients of the model's loss_rows, and "
            f"{what} adds a gradient it does not clip; use trainer.dp.level=client or FedAvg with the "
            "built-in loss"
        )


def row_loss(module: CenterModule) -> Callable[[dict[str, Tensor], Tensor, Tensor], Tensor]:
    """``loss(params, x [n, ...], y [n])``: the mean of ``module.loss_rows`` under ``params``
    (``functional_call``; what DP-SGD differentiates row by row, :mod:`lightning_fed.dp.per_sample`)."""

    def loss(params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        logits = torch.func.functional_call(module, params, (x,))
        return module.loss_rows(logits.to(y.dtype), y).mean()

    return loss


class Engine(ABC):
    """Local training for all centers of a federation.

    Call :meth:`setup` once, then :meth:`train_round` per round; :meth:`get_params` /
    :meth:`set_params` move stacked parameters in and out between rounds.
    """

    module: CenterModule
    num_models: int
    #: The parameter mask last passed to :meth:`set_mask` (None: dense); saved in :meth:`state_dict`.
    mask: dict[str, Tensor] | None = None
    #: Train-time batch augmentation (:mod:`lightning_fed.data.augment`); None: batches as stored.
    augment: Augment | None = None
    #: DP-SGD's settings (``trainer.dp`` at ``level: sample``); None: plain gradients.
    dp: DPConfig | None = None
    #: How local training computes the loss and its gradient, in words (``fit`` prints it).
    training_path: str = ""
    #: ``{name: [C]}``: each model's round mean of what its ``training_step`` logged in the last
    #: round (:mod:`lightning_fed.engine.training_step`); None when the module logs nothing.
    last_logged: dict[str, Tensor] | None = None
    #: Bool ``[C]`` (model order): the models :meth:`train_round` trains (client sampling,
    #: :mod:`lightning_fed.comm.sampling`; the federation sets it around a round's training). The
    #: others are not computed at all: parameters, optimizer states and scheduler counts unchanged,
    #: loss NaN, not diverged. None: every model.
    participants: Tensor | None = None

    def setup(
        self,
        module: CenterModule,
        train: Sequence[TrainSet],
        *,
        batch_size: int,
        epochs: int,
        seed: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        autocast: Callable[[], AbstractContextManager[Any]] = nullcontext,
        local_term: LocalTerm | None = None,
        steps: int | None = None,
        center_ids: Sequence[int] | None = None,
        lr_schedule: LRSchedule | None = None,
        reset_optimizer_each_round: bool = False,
        augment: Augment | None = None,
        dp: DPConfig | None = None,
    ) -> None:
        """Copy ``module``'s (already initialized) parameters to every model and index the data.

        Args:
            module: The per-center model; its current parameters are every model's start.
            train: Training rows of each model (center or training group).
            batch_size: Local batch size.
            epochs: Local epochs per round.
            seed: Run seed (batch order and dropout derive from it).
            device: Where the stacked tensors live.
            dtype: Parameter, optimizer-state and feature dtype (the federation passes the one of
                ``fabric.precision``, :mod:`lightning_fed.precision`).
            autocast: Context manager for mixed precision; ``nullcontext`` when there is none
                (only ``bf16-mixed`` autocasts).
            local_term: Extra term of every center's local loss (FedProx, FedDyn, MOON), or None.
            steps: Local updates per round instead of ``epochs`` epochs (``trainer.local_steps``).
            center_ids: The global center id of each model in ``train`` (a shard of a larger
                federation); it keys the model's batch order and dropout. Default ``0..len(train)-1``.
            lr_schedule: The round's learning-rate factor (``trainer.lr_schedule``); None: constant.
            reset_optimizer_each_round: Start every round from a fresh optimizer state
                (``trainer.reset_optimizer_each_round``).
            augment: Applied to every training batch ``[..., C, H, W]`` before the forward pass, with
                model ``c``'s draws of round ``r`` from ``(seed, "augment", r, c)``
                (:meth:`Augment.round_draws <lightning_fed.data.augment.Augment.round_draws>`; the
                federation passes ``data.train_augment``); None: batches as stored.
            dp: DP-SGD at every model (``trainer.dp`` with ``level: sample``,
                :mod:`lightning_fed.dp.per_sample`): every step's gradient is the clipped per-row
                gradients' sum plus Gaussian noise over the real rows; None: plain gradients.

        Raises:
            ValueError: One line, for DP-SGD with a loss it cannot clip per row (a local term, a
                model penalty, a module's own ``training_step``).
        """
        ids = list(range(len(train))) if center_ids is None else [int(c) for c in center_ids]
        if len(ids) != len(train):
            raise ValueError(f"center_ids has {len(ids)} ids for {len(train)} training sets")
        self.center_ids = torch.tensor(ids, dtype=torch.int64)
        has_features = type(module).forward_features is not CenterModule.forward_features
        if local_term is not None and local_term.needs_features and not has_features:
            raise ValueError(
                f"model: {type(module).__name__} has no forward_features(x) -> (logits, representation); "
                f"{type(local_term).__name__} needs the model's representation (use a model that has one)"
            )
        inner = getattr(module, "module", None) if overrides_training_step(module) else None
        if not all(getattr(m, "automatic_optimization", True) for m in (module, inner) if m is not None):
            raise ValueError(
                f"model: {type(inner or module).__name__} sets automatic_optimization = False; federated "
                "training steps the optimizer itself: return the loss from training_step instead"
            )
        if local_term is not None and local_term.needs_features and overrides_training_step(module):
            raise ValueError(
                f"model: {type(module).__name__} has its own training_step, and {type(local_term).__name__} "
                "adds a term on the representation of the same forward pass, which a training_step does "
                "not expose; use the built-in loss (remove training_step) or another algorithm"
            )
        if dp is not None:
            check_dp_sgd(module, local_term)
        self.dp = dp
        check_schedule([len(y) for _, y in train], batch_size, epochs, None if steps is None else int(steps))
        self.module, self.batch_size, self.epochs, self.seed = module, batch_size, epochs, seed
        self.local_steps = None if steps is None else int(steps)
        self.local_term = local_term
        self.lr_schedule: LRSchedule = Constant() if lr_schedule is None else lr_schedule
        self.reset_optimizer_each_round = bool(reset_optimizer_each_round)
        if augment is not None and any(x.dim() != 4 for x, _ in train):
            shapes = sorted({tuple(x.shape[1:]) for x, _ in train})
            raise ValueError(f"data: train-time augmentation needs image rows [n, C, H, W], got {shapes}")
        self.augment = augment
        self.device, self.autocast = torch.device(device), autocast
        self.num_models = len(train)
        #: One training row (what :meth:`step_flops` counts the forward of).
        self._one_row = next((x[:1].to(self.device, dtype) for x, _ in train if len(x)), None)
        self._build(train, dtype)

    def setup_inner(
        self, inner: Engine, train: Sequence[TrainSet], dtype: torch.dtype, center_ids: Sequence[int]
    ) -> None:
        """Set up ``inner`` (a wrapper's engine over part of the models: a DDP shard, a pass) on
        ``train`` with this engine's settings, its models keyed by the global ``center_ids``."""
        inner.setup(
            self.module,
            train,
            batch_size=self.batch_size,
            epochs=self.epochs,
            seed=self.seed,
            device=self.device,
            dtype=dtype,
            autocast=self.autocast,
            local_term=self.local_term,
            steps=self.local_steps,
            center_ids=center_ids,
            lr_schedule=self.lr_schedule,
            reset_optimizer_each_round=self.reset_optimizer_each_round,
            augment=self.augment,
            dp=self.dp,
        )

    @abstractmethod
    def _build(self, train: Sequence[TrainSet], dtype: torch.dtype) -> None:
        """Engine-specific state: stacked or per-center parameters, optimizer states, data layout."""

    def flip_labels(self, centers: set[int]) -> None:
        """Flip the binary training labels ``y -> 1 - y`` of the models of ``centers`` (global center
        ids, :attr:`center_ids`; a ``label_flip`` attack, :mod:`lightning_fed.comm.faults`). Flipping
        twice restores them."""
        for m, c in enumerate(self.center_ids.tolist()):
            if c in centers:
                self._flip_model(m)

    def _flip_model(self, model: int) -> None:
        """Flip model ``model``'s training labels in place (each engine's data layout)."""
        raise NotImplementedError(f"{type(self).__name__} cannot flip labels (a label_flip attack)")

    @abstractmethod
    def train_round(self, round_idx: int) -> Tensor:
        """Run the local epochs of round ``round_idx``; returns each model's mean batch loss ``[C]``.

        Starts by setting the round's learning rate and, with ``reset_optimizer_each_round``,
        resetting the optimizer states (module docstring). Only the models of :attr:`participants`
        train when it is set; each of them trains to the same values as in a round of every model
        (its draws are keyed by its global center id), and the others' losses are NaN."""

    def _participating(self) -> Tensor | None:
        """Model indices (int64, model order) of :attr:`participants`; None when every model trains.

        Raises:
            ValueError: If ``participants`` is not a bool tensor of one entry per model.
        """
        rows = self.participants
        if rows is None:
            return None
        if rows.dtype != torch.bool or tuple(rows.shape) != (self.num_models,):
            raise ValueError(
                f"Engine.participants must be a bool tensor [{self.num_models}] (one per model), "
                f"got {rows.dtype} {tuple(rows.shape)}"
            )
        return None if bool(rows.all()) else rows.cpu().nonzero().flatten()

    def _participant_mask(self) -> Tensor | None:
        """:attr:`participants` once checked by :meth:`_participating` (the bool mask an engine hands
        down to the engines it wraps), None when every model trains."""
        return None if self._participating() is None else self.participants

    def models_per_step(self) -> float:
        """How many models one optimizer step of this engine trains at once, on average (1: one
        center at a time; the packed engine: its mean number of active centers per step)."""
        return 1.0

    def step_flops(self) -> float:
        """FLOP of one optimizer step, ``6 P B m`` (what ``trainer.threads: auto`` sizes the threads
        by, :mod:`lightning_fed.threads`).

        ``2 P`` is the forward FLOP of one row as torch's ``FlopCounterMode`` counts it (matmuls and
        convolutions: ``P`` weights in matmuls for an MLP, more for a convolution, whose weights serve
        every position); training triples it (the weight and the input gradient), times ``B`` the
        batch rows and ``m`` :meth:`models_per_step`. Counted in eval mode, without gradients and
        with the global generators restored, so nothing of the run changes; where the forward cannot
        be counted, ``2 P`` is twice the parameter count.
        """
        module = getattr(self, "module", None)
        if module is None:
            return 0.0
        forward = 2.0 * sum(p.numel() for p in module.parameters())
        if self._one_row is not None:
            from torch.utils.flop_counter import FlopCounterMode

            was_training = module.training
            try:
                with (
                    torch.no_grad(),
                    torch.random.fork_rng(devices=[]),
                    FlopCounterMode(display=False) as ctr,
                ):
                    module.eval()
                    module(self._one_row)
                forward = float(ctr.get_total_flops()) or forward
            except (RuntimeError, TypeError, ValueError, NotImplementedError):  # cannot run on one row alone
                pass
            finally:
                module.train(was_training)
        return 3.0 * forward * self.batch_size * self.models_per_step()

    def keep_rows(self, before: dict[str, Any], rows: Tensor) -> None:
        """Put the models ``rows`` (bool ``[num_models]``) back to ``before`` (a deep copy of an
        earlier :meth:`state_dict`): parameters, optimizer states and scheduler counts, as if they
        had not trained since. Every tensor with one row per model and every per-model list of the
        state is merged row by row. Training every model and then keeping the non-participants'
        rows is the reference :attr:`participants` is tested against (and what client sampling did
        before it, at the cost of training every center; ``benchmarks/sampling.py``)."""
        self.load_state_dict(_merge_rows(self.state_dict(), before, rows.cpu(), self.num_models))

    def set_phase(self, epochs: int | None = None, frozen: tuple[str, ...] = ()) -> None:
        """Train the next rounds with ``epochs`` local epochs (None: the setup's) and ``frozen`` fixed.

        For methods whose round has phases (FedRep: head epochs with the body fixed, then body epochs
        with the head fixed). A frozen parameter keeps its value and its optimizer state (moments,
        momentum buffers) through every step of the round; the model's step count, one per model in
        the packed optimizer, still counts every step (the sequential engine does the same: it steps
        the frozen tensors with a zero gradient and restores them and their state after each step),
        so both engines agree. With ``trainer.local_steps`` the step count is fixed and ``epochs`` is
        ignored. ``set_phase()`` restores the setup's schedule and freezes nothing.

        Raises:
            ValueError: If this engine cannot train in phases (this default), or a name is unknown.
        """
        if epochs is not None or frozen:
            raise ValueError(
                f"trainer.engine: {type(self).__name__} cannot train in phases (frozen parameters, other "
                "epochs), which the algorithm asks for; use lightning_fed.engine.PackedEngine or "
                "SequentialEngine in one process"
            )

    def _phase_epochs(self, epochs: int | None, frozen: tuple[str, ...], names: Sequence[str]) -> int:
        """Validated :meth:`set_phase` arguments: the epochs to train (the setup's for None)."""
        unknown = sorted(set(frozen) - set(names))
        if unknown:
            raise ValueError(f"set_phase: frozen names {unknown[:3]} are not parameters of the model")
        if epochs is not None and (isinstance(epochs, bool) or int(epochs) != epochs or epochs < 1):
            raise ValueError(f"set_phase: epochs must be an integer >= 1, got {epochs!r}")
        if not hasattr(self, "setup_epochs"):
            self.setup_epochs = self.epochs
        return self.setup_epochs if epochs is None else int(epochs)

    def lr_factor(self, round_idx: int) -> float:
        """The learning-rate multiplier of round ``round_idx`` (``lr_schedule.factor``)."""
        return float(self.lr_schedule.factor(round_idx))

    @abstractmethod
    def get_params(self) -> dict[str, Tensor]:
        """Stacked parameters ``{name: [C, ...]}`` in center order (a copy)."""

    def replay_params(self) -> dict[str, Tensor]:
        """The rows the aggregation reads (a copy): :meth:`get_params` here; a multi-process engine
        gives other processes' rows as the wire delivers them
        (:class:`~lightning_fed.distributed.ShardedEngine`)."""
        return self.get_params()

    @abstractmethod
    def set_params(self, params: dict[str, Tensor]) -> None:
        """Overwrite the parameters (optimizer states are kept)."""

    def set_mask(self, mask: dict[str, Tensor] | None) -> None:
        """Train only the True coordinates of ``mask`` from now on (sparse methods such as DisPFL).

        ``mask`` maps parameter names to bool ``[num_models, *shape]`` (names left out are dense);
        None removes the mask. While a mask is set, coordinates outside it stay exactly 0: their
        gradient is zeroed before every optimizer step, :meth:`set_params` zeroes them, and setting a
        mask zeroes them in the current parameters and in the optimizer state (momentum, Adam
        moments; step counts are per model and kept), so a coordinate pruned now and regrown later
        restarts from a zero state. The mask is part of :meth:`state_dict` (``"mask"``, only when
        set) and :meth:`load_state_dict` restores it before the parameters, so a saved state (early
        stopping's best round) comes back exactly. Engines that cannot mask accept only None (this
        default).

        Raises:
            ValueError: If a mask is given to an engine without mask support.
        """
        if mask is not None:
            raise ValueError(
                f"trainer.engine: {type(self).__name__} cannot train masked (sparse) parameters, which "
                "the algorithm asks for; use lightning_fed.engine.PackedEngine or SequentialEngine in "
                "one process"
            )

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Parameters and optimizer states."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    @torch.no_grad()
    def predict_current(self, x: Tensor, chunk: int = 64) -> Tensor:
        """Logits ``[C, n]`` of the engine's current models (:meth:`get_params`) on their own inputs
        ``[C, n, F]``; a multi-process engine needs no other process's rows for it."""
        return self.predict(self.get_params(), x, chunk)

    def predict(self, params: dict[str, Tensor], x: Tensor, chunk: int = 64) -> Tensor:
        """Logits ``[C, n]`` of ``C`` stacked models on their own padded inputs ``[C, n, F]`` (eval mode)."""
        self.module.eval()
        device = next(iter(params.values())).device
        out = []
        for lo in range(0, x.shape[0], chunk):
            p = {k: v[lo : lo + chunk] for k, v in params.items()}
            out.append(packed_logits(self.module, p, x[lo : lo + chunk].to(device), None))
        return torch.cat(out) if out else x.new_zeros(0, x.shape[1])


def _merge_rows(now: Any, before: Any, rows: Tensor, num_models: int) -> Any:
    """``now`` with the per-model entries of ``rows`` (bool ``[num_models]``) taken from ``before``."""
    if isinstance(now, dict):
        return {k: _merge_rows(v, before[k], rows, num_models) if k in before else v for k, v in now.items()}
    if isinstance(now, list) and len(now) == num_models:
        return [b if bool(r) else n for n, b, r in zip(now, before, rows.tolist(), strict=True)]
    if isinstance(now, Tensor) and now.dim() and now.shape[0] == num_models:
        keep = rows.to(now.device).view(-1, *([1] * (now.dim() - 1)))
        return torch.where(keep, before.to(now.device), now)
    return now


def packed_logits(
    module: CenterModule, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | RowStreams | None
) -> Tensor:
    """``module.packed_forward`` when the module has one, else ``vmap`` over ``functional_call``.

    In the vmap path dropout draws from torch's global generator (``randomness="different"`` gives
    every center its own mask); callers seed it from the run seed through ``torch.random.fork_rng``.
    """
    if module.has_packed_forward:
        return module.packed_forward(params, x, generator)

    def single(p: dict[str, Tensor], xb: Tensor) -> Tensor:
        return torch.func.functional_call(module, p, (xb,))

    return torch.vmap(single, randomness="different")(params, x)


def check_mask(mask: dict[str, Tensor], shapes: dict[str, torch.Size], num_models: int) -> None:
    """Validate a :meth:`Engine.set_mask` argument against the parameter ``shapes`` (one model's).

    Raises:
        ValueError: On an unknown name, a non-bool tensor or a shape other than ``[num_models, *shape]``.
    """
    for name, m in mask.items():
        if name not in shapes:
            raise ValueError(f"parameter mask names {name!r}, which is not a parameter of the model")
        if m.dtype != torch.bool or tuple(m.shape) != (num_models, *shapes[name]):
            raise ValueError(
                f"parameter mask {name!r} must be bool of shape {(num_models, *shapes[name])}, "
                f"got {m.dtype} {tuple(m.shape)}"
            )


class ForwardFeatures(torch.nn.Module):
    """Wraps a module so that ``forward`` is its ``forward_features`` (for ``functional_call``)."""

    def __init__(self, module: CenterModule) -> None:
        super().__init__()
        self.m = module

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self.m.forward_features(x)


def packed_features(
    module: CenterModule, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | RowStreams | None
) -> tuple[Tensor, Tensor]:
    """Logits ``[k, B]`` and representations ``[k, B, H]``: ``packed_forward_features`` or ``vmap``."""
    if module.has_packed_forward_features:
        return module.packed_forward_features(params, x, generator)
    wrapper = ForwardFeatures(module)
    prefixed = {f"m.{n}": t for n, t in params.items()}

    def single(p: dict[str, Tensor], xb: Tensor) -> tuple[Tensor, Tensor]:
        return torch.func.functional_call(wrapper, p, (xb,))

    return torch.vmap(single, randomness="different")(prefixed, x)
