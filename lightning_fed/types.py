"""Frozen records handed to observer hooks, and the training settings of a federation."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from lightning_fed.comm.sampling import check_centers_per_round
from lightning_fed.dp.config import DPConfig
from lightning_fed.engine.base import Engine
from lightning_fed.engine.lr_schedule import Constant, LRSchedule
from lightning_fed.threads import check_threads

if TYPE_CHECKING:
    from lightning_fed.comm.wire import Wire
    from lightning_fed.data.center import FederatedData
    from lightning_fed.models.base import CenterModule

__all__ = ["FinishContext", "ObserverNeeds", "RoundContext", "RoundResult", "TrainerConfig"]


@dataclass(frozen=True, eq=False)
class RoundContext:
    """What a decision plugin may use in a round besides the parameters and the wire.

    Attributes:
        round: Round index (0-based).
        seed: The run seed (derive generators from it with :mod:`lightning_fed.seeding`).
        val_utility: ``val_utility(params, centers)`` evaluates stacked models ``{name: [Q, ...]}``,
            model ``q`` on center ``centers[q]``'s own validation split, and returns the AUROC
            ``[Q]`` (NaN where undefined); ``metric="log_likelihood"`` or ``"brier"`` (keyword) returns
            that utility instead (:meth:`~lightning_fed.federation.Federation.val_utility`). Batched;
            this is how Shapley utilities are computed without any row leaving its center.
        rounds: The run's round budget (``trainer.rounds``), for schedules over the run; None when
            the caller has none (a hand-built context).
    """

    round: int
    seed: int
    val_utility: Callable[..., Tensor]
    rounds: int | None = None


@dataclass(frozen=True, eq=False)
class FinishContext:
    """What :meth:`Algorithm.finish <lightning_fed.algorithms.base.Algorithm.finish>` may use.

    Attributes:
        seed: The run seed.
        data: All centers (a simulation holds them in one process; a method's code must still only
            combine what the two endpoints of an edge may share).
        module: The model template (``torch.func.functional_call`` it with one center's parameters).
        params: Final stacked per-center parameters ``{name: [C, ...]}`` after the last round.
        wire: The wire, for booking the final stage's messages.
        round: Ledger round index for those messages (the number of rounds done).
        device: Where the parameters live.
        log: ``log(scalars)`` sends progress scalars to the loggers (W&B) and the progress bar.
    """

    seed: int
    data: FederatedData
    module: CenterModule
    params: dict[str, Tensor]
    wire: Wire
    round: int
    device: torch.device
    log: Callable[[dict[str, float]], None]


@dataclass
class ObserverNeeds:
    """What the observers need of the round loop, declared once when the federation is built.

    The federation passes one instance to every Fabric callback's ``declare_needs`` hook
    (:meth:`lightning_fed.callbacks.Callback.declare_needs`) and reads it afterwards, so it never
    looks inside Fabric for its callbacks.

    Attributes:
        val_every_round: Some observer reads the validation AUROC every round (early stopping),
            whatever ``trainer.eval_every``.
    """

    val_every_round: bool = False


@dataclass(frozen=True, eq=False)
class RoundResult:
    """What one round produced (passed to ``on_round_end``).

    Attributes:
        round: Round index (0-based).
        train_loss: Mean local batch loss per center ``[C]``.
        val_auroc: Validation AUROC per center ``[C]`` (NaN when undefined); None on a round that
            did not evaluate validation (``trainer.eval_every > 1``, see
            :meth:`Federation.evaluates <lightning_fed.federation.Federation.evaluates>`).
        test_auroc: Test AUROC per center ``[C]`` (NaN when undefined); None on a round that did
            not evaluate the test split (``trainer.eval_every > 1``).
        bytes_per_center: Bytes on edges touching each center this round ``[C]``.
        bytes_round: All bytes of this round.
        bytes_cumulative: All bytes so far.
        seconds: Wall time of the round.
        stats: Scalars from the algorithm (isolation rate, E|P_i|, ...).
        val_accuracy: Validation accuracy per center ``[C]`` (None when not computed or not
            evaluated this round).
        test_accuracy: Test accuracy per center ``[C]`` (None when not computed or not evaluated
            this round).
        train_logged: What the model's own ``training_step`` logged with ``self.log``: per name,
            each center's row-weighted mean over the round's steps ``[C]``
            (:mod:`lightning_fed.engine.training_step`); empty when it logs nothing.
        val_metrics: The ``metrics:`` of the config on validation, ``{name: [C]}`` (NaN where
            undefined; None on a round that did not evaluate validation; empty without ``metrics:``).
        test_metrics: The same on the test split.
        val_logged: What the model's own ``validation_step`` logged, ``{name: [C]}`` per-center epoch
            means (:mod:`lightning_fed.engine.eval_step`); empty when it defines none or validation
            was not evaluated this round.
        test_logged: The same for ``test_step`` on the test split.
    """

    round: int
    train_loss: Tensor
    val_auroc: Tensor | None
    test_auroc: Tensor | None
    bytes_per_center: Tensor
    bytes_round: int
    bytes_cumulative: int
    seconds: float
    stats: dict[str, float] = field(default_factory=dict)
    val_accuracy: Tensor | None = None
    test_accuracy: Tensor | None = None
    train_logged: dict[str, Tensor] = field(default_factory=dict)
    val_metrics: dict[str, Tensor] | None = None
    test_metrics: dict[str, Tensor] | None = None
    val_logged: dict[str, Tensor] = field(default_factory=dict)
    test_logged: dict[str, Tensor] = field(default_factory=dict)


class TrainerConfig:
    """Round-loop settings (the ``trainer`` config group).

    The parameter and compute dtype are not set here: Fabric's precision (``fabric.precision``,
    :mod:`lightning_fed.precision`) is their one source of truth (``64-true`` trains in float64).

    Args:
        rounds: Communication rounds (paper: 50).
        local_epochs: Local epochs per round (paper: 2).
        batch_size: Local batch size (paper: 128).
        local_steps: A fixed number of local updates (optimizer steps) per center and round instead of
            ``local_epochs`` epochs, whatever the center's size (EdgeDRM App. D.1: "ten local updates
            per round"); None (default) trains epochs.
        engine: Local-training engine; default :class:`~lightning_fed.engine.PackedEngine`.
        eval_every: Evaluate the per-round test AUROC every ``eval_every`` rounds: at the 0-based
            rounds ``r`` with ``(r + 1) % eval_every == 0`` and always at the last round of the
            budget (``r = rounds - 1``). Validation follows the same cadence unless an observer
            needs it every round (early stopping does); see :meth:`Federation.evaluates
            <lightning_fed.federation.Federation.evaluates>`. Training, the final summary and
            every number recorded are the same for every value; rounds not evaluated have null
            ``test_auroc`` (``val_auroc``) in ``rounds.parquet``. Default 1: every round.
        lr_schedule: Round-indexed learning-rate schedule (:mod:`lightning_fed.engine.lr_schedule`),
            chosen by ``class_path``: :class:`~lightning_fed.engine.Constant`,
            :class:`~lightning_fed.engine.Cosine` (``horizon``, ``min_factor``; the EdgeDRM paper's
            ``eta_r = eta_0/2 (1 + cos(pi (r-1)/H))``), :class:`~lightning_fed.engine.Step`
            (``every``, ``gamma``). Round ``r`` (0-based) trains at ``lr * factor(r)``, ``lr`` being
            the model's optimizer's rate, in every engine. None (default): constant.
        reset_optimizer_each_round: Start every round of every center from a fresh optimizer state
            (momentum buffers, Adam moments and step counts), as the EdgeDRM paper's "SGD momentum
            0.9, reset each round" (App. D.3.2). Default False: states persist across rounds.
        robust_min_per_class: Fewest rows of every class a center's split needs for its AUROC to
            enter the summary's robust mean (``test_auroc_robust``; :mod:`lightning_fed.metrics.support`).
            Default 2: an AUROC resting on one case of a class (a fragile one) is left out. Changes
            no training, only that reported number.
        threads: Torch's intra-op threads for this fit: ``"auto"`` (default) keeps a thread count set
            through ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``, else takes this fit's share of the
            cores (``cores // fits at once``: a ``sweep`` with ``processes: P`` gives each fit
            ``cores // P``) and no more threads than a training step's arithmetic pays (a tiny
            federation: one); an integer >= 1 is used as given (:mod:`lightning_fed.threads`).
            ``fit`` prints the choice and ``summary.json`` records it (``threads``). It changes
            speed, and for convolutional models the last bits of training: oneDNN splits a
            convolution's reductions by thread (SmallCNN on Fashion-MNIST: 1.6e-7 apart after 2
            rounds at 1 and 2 threads), while the MLPs' batched matmuls give the same bits at any
            count. Give an integer to reproduce a CNN run bit for bit outside its sweep or on another
            machine. Not fingerprinted, so a resume may use another count.
        centers_per_round: Client sampling (:mod:`lightning_fed.comm.sampling`): an integer count
            ``>= 1`` or a fraction of the federation in ``(0, 1]`` of the reachable centers, drawn
            each round from ``(seed, round)``; the others neither train, send nor receive that round.
            None (default): every reachable center every round.
        dp: Differential privacy of training (:class:`~lightning_fed.dp.DPConfig`; docs/privacy.md):
            ``level: sample`` is DP-SGD at every center (per-row clipping and noise in both
            engines), ``level: client`` DP-FedAvg (update clipping at the centers, noise at FedAvg's
            server); ``noise_multiplier``, ``max_grad_norm``, ``delta``. The privacy spent,
            ``privacy/epsilon`` at ``delta``, goes to ``rounds.parquet`` and ``summary.json``; it
            needs the ``privacy`` extra (dp-accounting). None (default): no DP.
        max_centers_per_pass: Train the packed engine's centers in consecutive passes of at most this
            many centers (:class:`~lightning_fed.engine.PassEngine`), so the round scratch (gradient,
            round-start snapshot, prefetched dropout words, activation workspace) is sized by a pass,
            not the federation: an integer >= 1. The built-in models train to the same bits as in
            one pass (every draw of a center is keyed by its id; docs/scale_out.md). None (default):
            all centers in one pass.

    Raises:
        ValueError: One line naming the ``trainer`` key, if a value is below 1 or of the wrong type.
    """

    def __init__(
        self,
        rounds: int = 50,
        local_epochs: int = 2,
        batch_size: int = 128,
        engine: Engine | None = None,
        local_steps: int | None = None,
        eval_every: int = 1,
        lr_schedule: LRSchedule | None = None,
        reset_optimizer_each_round: bool = False,
        robust_min_per_class: int = 2,
        threads: int | Literal["auto"] = "auto",
        centers_per_round: int | float | None = None,
        dp: DPConfig | None = None,
        max_centers_per_pass: int | None = None,
    ) -> None:
        checked = [("rounds", rounds), ("local_epochs", local_epochs), ("batch_size", batch_size)]
        for key, value in [*checked, *([("local_steps", local_steps)] if local_steps is not None else [])]:
            if int(value) < 1:
                raise ValueError(f"trainer.{key} must be >= 1, got {value}")
        try:
            every = operator.index(eval_every)  # ints and numpy integers, not floats or strings
        except TypeError:
            every = 0
        if isinstance(eval_every, bool) or every < 1:
            raise ValueError(
                f"trainer.eval_every must be an integer >= 1 (1: evaluate every round), got {eval_every!r}"
            )
        if lr_schedule is not None and not isinstance(lr_schedule, LRSchedule):
            raise ValueError(
                "trainer.lr_schedule must be a lightning_fed.engine.LRSchedule (class_path "
                f"lightning_fed.engine.Constant / Cosine / Step) or null, got {type(lr_schedule).__name__}"
            )
        if not isinstance(reset_optimizer_each_round, bool):
            raise ValueError(
                "trainer.reset_optimizer_each_round must be true or false, "
                f"got {reset_optimizer_each_round!r}"
            )
        if isinstance(robust_min_per_class, bool) or not isinstance(robust_min_per_class, int):
            raise ValueError(
                f"trainer.robust_min_per_class must be an integer >= 1, got {robust_min_per_class!r}"
            )
        if robust_min_per_class < 1:
            raise ValueError(f"trainer.robust_min_per_class must be >= 1, got {robust_min_per_class}")
        self.robust_min_per_class = robust_min_per_class
        self.threads = check_threads(threads)
        self.centers_per_round = check_centers_per_round(centers_per_round)
        if dp is not None and not isinstance(dp, DPConfig):
            raise ValueError(
                "trainer.dp must be a group {level, noise_multiplier, max_grad_norm, delta} or null, "
                f"got {type(dp).__name__}"
            )
        self.dp = dp
        from lightning_fed.engine.packed import PackedEngine
        from lightning_fed.engine.passes import check_max_centers_per_pass

        if engine is None:
            engine = PackedEngine()
        self.max_centers_per_pass = check_max_centers_per_pass(max_centers_per_pass, engine)
        self.rounds, self.local_epochs, self.batch_size = int(rounds), int(local_epochs), int(batch_size)
        self.engine = engine
        self.local_steps = None if local_steps is None else int(local_steps)
        self.eval_every = every
        #: The schedule the engines apply; None in the config means :class:`Constant`.
        self.lr_schedule: LRSchedule = Constant() if lr_schedule is None else lr_schedule
        self.reset_optimizer_each_round = reset_optimizer_each_round
