"""The federation: the round loop, and nothing else.

:class:`Federation` owns the order of a round. Decision plugins (the engine, the algorithm) are
called directly and their results used; observers (progress bar, W&B, parquet, checkpoint) are
Fabric callbacks reached through ``fabric.call``, which discards return values.

Observer hooks, in call order (each receives the federation first)::

    declare_needs(needs)                 in the constructor: an observer declares what it needs of
                                         the loop on an ObserverNeeds (validation every round)
    check_data(data)                     in the constructor, the data alone: an observer refuses data
                                         it cannot use (one-line ValueError, before any training)
    on_fit_start(federation)
    for each round r:
        on_round_start(federation, r)
        # algorithm.start_round(ctx, engine, wire)  an exchange the round opens with (FedAvg with
        #                                  client sampling: the server model to the sampled centers
        #                                  that do not hold it); nothing by default
        # algorithm.train_round(engine, r) local training, all centers at once (default:
        #                                  engine.train_round(r)); with trainer.centers_per_round
        #                                  the centers not sampled are put back (they do not train)
        # algorithm.aggregate(r, ...)      exchange over the wire (bytes on the ledger) + mixing
        # privacy spent                    with trainer.dp: the round's DP steps into the accountant
        #                                  (lightning_fed.dp.spent; privacy/epsilon in the stats)
        # engine.set_mask(algorithm.parameter_mask())   next round's sparse mask (None: dense)
        # evaluation                       per-center validation and test AUROC (on the rounds
        #                                  trainer.eval_every selects; see below)
        on_round_end(federation, result)   result: RoundResult; a callback may set
                                           federation.should_stop = True
    on_train_end(federation)               after the last round, before the summary (early
                                           stopping restores the best parameters here)
    # algorithm.finish(ctx)                a final stage on those parameters (EdgeDRM's stage II),
    #                                      once, also after early stopping; it reports progress
    #                                      through on_finish_log(federation, scalars)
    on_fit_end(federation, summary)        summary: dict of final metrics

Per-round scalars (mean/std AUROC, bytes, and the algorithm's own statistics) also go to
``fabric.log_dict`` so every Fabric logger (W&B) receives them.

Evaluation cadence (``trainer.eval_every = k``, default 1; :meth:`Federation.evaluates`). The
per-round evaluation is read only by observers: the progress bar (mean validation AUROC),
``rounds.parquet`` (per-center ``val_auroc`` / ``test_auroc``), the loggers (their means) and
observers such as :class:`~lightning_fed.callbacks.EarlyStopping` (mean validation AUROC, every
round). No decision plugin reads it: ABPS's Shapley credit, DeFTA's trust and WPFed's ranks
evaluate their own candidate models through :attr:`RoundContext.val_utility
<lightning_fed.types.RoundContext.val_utility>` inside ``aggregate``, on every round, whatever
``k``. So:

* the test split is evaluated at the 0-based rounds ``r`` with ``(r + 1) % k == 0`` and always at
  the last round of the budget, ``r = trainer.rounds - 1`` (k = 3, 10 rounds: rounds 2, 5, 8, 9);
* the validation split on the same rounds, unless some observer among the Fabric callbacks declares
  it needs it every round (:class:`~lightning_fed.types.ObserverNeeds`; a
  :class:`~lightning_fed.callbacks.Callback` with ``needs_val_every_round = True`` does, early
  stopping for one), which makes it every round;
* on the other rounds :class:`~lightning_fed.types.RoundResult` carries None for that split's
  per-center AUROC and accuracy, ``rounds.parquet`` a null, the loggers no ``<split>_*`` scalar
  that round, and the progress bar keeps the last value shown.

Evaluation changes no state and draws no random numbers, so training, every value recorded and the
summary (evaluated after the last round, always) are the same for every ``k``; ``k = 1`` is the
former behaviour, bit for bit. A run early-stopped before its budget ends on a round the cadence
may have skipped; its final numbers are those of ``summary.json``.

Under Fabric DDP (``fabric.world_size > 1``) each rank trains its shard of the centers and the
engine gathers the others' parameters after local training (:mod:`lightning_fed.distributed`);
everything after that (aggregation, evaluation, hooks) runs identically on every rank, so the
results equal the one-process run. Observers run on every rank; those that write files or show
progress do so on rank 0 only. ``seconds_collectives`` in the round statistics is the time spent in
collectives (0 in one process).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from contextlib import nullcontext
from typing import Any

import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightning_fed.algorithms.base import Algorithm
from lightning_fed.comm.sampling import CenterSampler
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.distributed import ShardedEngine
from lightning_fed.dp.accountant import require_dp_accounting
from lightning_fed.dp.spent import PrivacySpent
from lightning_fed.engine.base import Engine
from lightning_fed.engine.eval_step import overrides_eval_step, step_logs
from lightning_fed.engine.passes import PassEngine
from lightning_fed.engine.schedule import steps_per_round
from lightning_fed.evaluation import EvalSet, Evaluation, evaluate, support_columns
from lightning_fed.metrics import (
    batched_auroc,
    batched_brier,
    batched_likelihood,
    fragile_auroc,
    round_isolation,
    run_isolation,
    summarize,
)
from lightning_fed.metrics.support import auroc_averages, split_support
from lightning_fed.metrics.torchmetrics_per_center import PerCenterMetrics, resolve_metrics
from lightning_fed.models.adapter import as_center_module
from lightning_fed.models.base import CenterModule
from lightning_fed.precision import PrecisionPolicy, policy_of
from lightning_fed.seeding import derive_seed
from lightning_fed.threads import ThreadChoice, apply_threads, choose_threads
from lightning_fed.types import FinishContext, ObserverNeeds, RoundContext, RoundResult, TrainerConfig

#: Validation utilities of :meth:`Federation.val_utility` (issue 30: the Shapley utility's choices).
_UTILITIES = {"auroc": batched_auroc, "log_likelihood": batched_likelihood, "brier": batched_brier}

__all__ = ["Federation"]


class Federation:
    """Train a federation of centers round by round.

    Args:
        data: The centers.
        module: The per-center model (its current parameters are replaced by a seeded init).
        algorithm: The federated method.
        trainer: Round-loop settings (rounds, local epochs, batch size, engine).
        fabric: Fabric for device, precision, loggers and callbacks (a CPU Fabric by default). Its
            precision sets the parameter dtype and the autocast of local training
            (:mod:`lightning_fed.precision`); a precision the engines cannot apply raises.
        seed: The run seed every draw derives from.
        wire: The wire (identity encoding, fresh ledger by default).
        metrics: torchmetrics metrics evaluated per center on validation and test beside the
            built-ins (the ``metrics:`` key; :mod:`lightning_fed.metrics.torchmetrics_per_center`);
            checked against the model before any training.
    """

    def __init__(
        self,
        data: FederatedData,
        module: CenterModule,
        algorithm: Algorithm,
        trainer: TrainerConfig | None = None,
        fabric: Fabric | None = None,
        seed: int = 0,
        wire: Wire | None = None,
        metrics: PerCenterMetrics | list[Any] | None = None,
    ) -> None:
        self.data, self.module, self.algorithm = (
            data,
            algorithm.model_for(as_center_module(module)),
            algorithm,
        )
        self.metrics = metrics if isinstance(metrics, PerCenterMetrics) else resolve_metrics(metrics)
        self.trainer = trainer if trainer is not None else TrainerConfig()
        self.fabric = fabric if fabric is not None else Fabric(accelerator="cpu", devices=1)
        #: What Fabric's precision applies (parameter dtype, autocast): the one source of truth.
        self.precision: PrecisionPolicy = policy_of(self.fabric)
        self.dtype = self.precision.dtype
        self.seed, self.wire = int(seed), wire if wire is not None else Wire()
        self.engine: Engine = self.trainer.engine
        per_pass = getattr(self.trainer, "max_centers_per_pass", None)
        if per_pass is not None:  # the packed engine in bounded passes (lightning_fed.engine.passes)
            self.engine = PassEngine(self.engine, per_pass)
        if self.fabric.world_size > 1:
            self.engine = ShardedEngine(self.engine, self.fabric)
        self.round = 0
        self.should_stop = False
        self.last_result: RoundResult | None = None
        #: Extra summary entries observers contribute (e.g. early stopping's best round).
        self.summary_extras: dict[str, Any] = {}
        #: The centers held out of training (``evaluation.holdout_centers``, a
        #: :class:`~lightning_fed.holdout.HeldOut` set by the command that builds the run); None: all train.
        self.held_out: Any = None
        #: Center-rounds whose local training diverged and was rolled back.
        self.diverged_total = 0
        #: Rounds in which every center that trained diverged (nothing learned that round; the first
        #: one prints a one-line warning: :meth:`_fault_stats`).
        self.all_diverged_rounds = 0
        #: Whether :meth:`Algorithm.finish` has run (a resumed finished run does not rerun it).
        self.finished = False
        #: Wall seconds of the fit segments before this one (a resumed run carries them on).
        self._wall_before = 0.0
        self._segment_start: float | None = None
        self._setup()

    def _setup(self) -> None:
        if self.wire.faults is not None:
            self.wire.faults.check_rounds(self.trainer.rounds)
        self.data = self.algorithm.prepare(self.data)
        with torch.random.fork_rng():
            torch.manual_seed(derive_seed(self.seed, "init"))
            self.module.set_num_features(self.data.num_features)
            for layer in self.module.modules():
                if hasattr(layer, "reset_parameters"):
                    layer.reset_parameters()
        self.module.to(self.fabric.device, self.dtype)
        if self.wire.faults is not None:
            self.wire.faults.check(self.data.num_centers)
            self.wire.faults.bind(self.seed, torch.tensor([c.n_train for c in self.data.centers]))
        self.algorithm.setup(self.data, self.module, self.seed)
        dp = getattr(self.trainer, "dp", None)
        if dp is not None:  # refused before any work: no accountant, or a method DP does not cover
            require_dp_accounting()
            if dp.level == "client":
                self.algorithm.use_client_dp(dp)
        groups = self.algorithm.train_groups(self.data)
        sampling = getattr(self.trainer, "centers_per_round", None)
        if sampling is not None:
            if len(groups) != self.data.num_centers:
                raise ValueError(
                    f"trainer.centers_per_round={sampling}: {type(self.algorithm).__name__} trains "
                    f"{len(groups)} pooled model(s), not one per center, so there is nothing to sample "
                    "(remove trainer.centers_per_round)"
                )
            self.wire.sampler = CenterSampler(sampling, self.seed)
        self.assignment = torch.empty(self.data.num_centers, dtype=torch.int64)
        train = []
        for g, members in enumerate(groups):
            self.assignment[members] = g
            centers = [self.data.centers[c] for c in members]
            if len(centers) == 1:  # the center's own rows: the engine reads them in place (engine/rows.py)
                train.append((centers[0].x_train, centers[0].y_train))
            else:
                rows = (torch.cat([c.x_train for c in centers]), torch.cat([c.y_train for c in centers]))
                train.append(rows)
        self.engine.setup(
            self.module,
            train,
            batch_size=self.trainer.batch_size,
            epochs=self.trainer.local_epochs,
            seed=self.seed,
            device=self.fabric.device,
            dtype=self.dtype,
            autocast=self.fabric.autocast if self.mixed_precision else nullcontext,
            local_term=self.algorithm.local_term(),
            steps=self.trainer.local_steps,
            lr_schedule=getattr(self.trainer, "lr_schedule", None),
            reset_optimizer_each_round=getattr(self.trainer, "reset_optimizer_each_round", False),
            augment=getattr(self.data, "train_augment", None),
            dp=dp if dp is not None and dp.level == "sample" else None,
        )
        #: The privacy spent so far (``trainer.dp``; :mod:`lightning_fed.dp.spent`); None without DP.
        self.privacy: PrivacySpent | None = None
        #: Training rows of each model the engine trains (what DP-SGD's sampling rates divide).
        self._model_rows = [len(y) for _, y in train]
        if dp is not None:
            sizes = self._model_rows if dp.level == "sample" else [c.n_train for c in self.data.centers]
            self.privacy = PrivacySpent(dp, sizes, self.trainer.batch_size)
        self.engine.set_mask(self.algorithm.parameter_mask())
        if isinstance(self.engine, ShardedEngine):
            self._choose_gather(self.engine)
        #: Torch's intra-op threads for this fit and why (``trainer.threads``; ``fit`` prints it).
        self.threads: ThreadChoice = apply_threads(
            choose_threads(
                getattr(self.trainer, "threads", "auto"),
                self.engine.step_flops(),
                processes=self.fabric.world_size // max(1, getattr(self.fabric.strategy, "num_nodes", 1)),
            )
        )
        self._check_label_flips()
        #: Centers whose training labels are flipped now (``label_flip`` attacks, :meth:`_flip_labels`).
        self.flipped: set[int] = set()
        self.val = EvalSet.from_splits([(c.x_val, c.y_val) for c in self.data.centers], self.dtype)
        self.test = EvalSet.from_splits([(c.x_test, c.y_test) for c in self.data.centers], self.dtype)
        # What the observers need of the loop, asked once through the public hook call (the
        # federation keeps no reference to Fabric's callback list).
        self.observer_needs = ObserverNeeds()
        self.fabric.call("declare_needs", self.observer_needs)
        # Observers that need something of the data (e.g. a referral query panel that must fit the
        # federation) refuse it here, with a one-line ValueError, before any training.
        self.fabric.call("check_data", self.data)
        if self.metrics:  # a metric that does not fit the model fails here, before any training
            probe = self.engine.predict(
                {n: p[:1] for n, p in self.center_params().items()}, self.val.x[:1, :2]
            )
            self.metrics.check(probe.shape[2] if probe.dim() == 3 else 2)

    def _check_label_flips(self) -> None:
        """A ``label_flip`` attack needs one model per center and binary labels (a one-line error)."""
        faults = self.wire.faults
        flips = [] if faults is None else [k for k, a in enumerate(faults.attacks) if a.kind == "label_flip"]
        if not flips:
            return
        field = f"wire.faults.attacks[{flips[0]}]"
        if not torch.equal(self.assignment, torch.arange(self.data.num_centers)):
            raise ValueError(f"{field}: label_flip needs one model per center; this algorithm pools centers")
        labels = torch.cat([c.y_train.reshape(-1) for c in self.data.centers])
        if not bool(((labels == 0) | (labels == 1)).all()):
            raise ValueError(
                f"{field}: label_flip flips binary labels (y -> 1 - y); these labels are not 0/1"
            )

    def _flip_labels(self, r: int) -> None:
        """Before round ``r``'s training: flip the labels of the centers whose ``label_flip`` attack
        starts or ends (the engine holds the flipped labels of :attr:`flipped`)."""
        want = self.wire.faults.flipped(r) if self.wire.faults is not None else set()
        if want != self.flipped:
            self.engine.flip_labels(want ^ self.flipped)
            self.flipped = want

    @property
    def mixed_precision(self) -> bool:
        """Whether local training autocasts (``bf16-mixed``; :mod:`lightning_fed.precision`)."""
        return self.precision.autocast

    @property
    def pooled(self) -> bool:
        """Whether some model is trained on several centers' rows (Centralized): no per-center
        exchange, so no ledger isolation either."""
        return bool(torch.bincount(self.assignment).max() > 1)

    def _choose_gather(self, engine: ShardedEngine) -> None:
        """Let the processes exchange the trained rows in the wire's dtype where that is exact.

        The wire's hook must be a plain cast to a narrower dtype (``CommHook.wire_dtype``), and every
        receiver's replay must be exact on its owner: the method says so
        (:meth:`Algorithm.replay_blocker <lightning_fed.algorithms.base.Algorithm.replay_blocker>`),
        each model is one center, and no configured fault rewrites a message before the cast (a
        rescaled row rounds differently from the rescaled wire row). Otherwise the rows cross in the
        parameters' dtype as before, and the training path says why.
        """
        wire_dtype = getattr(self.wire.hook, "wire_dtype", None)
        if wire_dtype is None or wire_dtype == self.dtype:
            return
        faults = self.wire.faults
        corrupted = faults is not None and any(faults.corruptions(r) for r in range(self.trainer.rounds))
        blocker = self.algorithm.replay_blocker()
        if blocker is None and engine.num_models != self.data.num_centers:
            method, centers = type(self.algorithm).__name__, self.data.num_centers
            blocker = f"{method} trains {engine.num_models} models for {centers} centers"
        if blocker is None and corrupted:
            blocker = "wire.faults corrupt messages before the cast, so a replay from wire rows would differ"
        if blocker is not None:
            engine.describe_gather(why_not=blocker)
            return
        engine.gather_in(wire_dtype)
        self.wire.merge = engine.merge_by_owner

    @property
    def wall_seconds(self) -> float:
        """Wall seconds of fitting so far, summed over every segment of a resumed run (each segment
        counts from its start; rounds redone after a kill count once, in the segment that kept them)."""
        running = 0.0 if self._segment_start is None else time.perf_counter() - self._segment_start
        return self._wall_before + running

    @property
    def collective_seconds(self) -> float:
        """Seconds spent in cross-process collectives so far (0 in one process)."""
        timer = getattr(self.engine, "timer", None)
        return timer.total if timer is not None else 0.0

    @property
    def reference_message_bytes(self) -> int:
        """Bytes of one float32 message of the reference model, ``4 P_ref``: the denominator's unit.

        ``P_ref`` is :meth:`CenterModule.reference_parameters
        <lightning_fed.models.base.CenterModule.reference_parameters>`: the run's model's whole
        parameter count (personal layers included, as plain FedAvg sends them), except that a model
        which replaces another declares the replaced one's (the Bayesian MLP: the MLP's).
        """
        return int(self.module.reference_parameters()) * 4

    def fedavg_reference_bytes(self, rounds: int) -> int:
        """Bytes float32 FedAvg of the reference model sends in ``rounds`` rounds:
        ``rounds * 2 * C * 4 P_ref`` (one upload and one download per center per round)."""
        return rounds * 2 * self.data.num_centers * self.reference_message_bytes

    @property
    def round_budget(self) -> int:
        """The rounds the fixed reference covers: ``trainer.rounds`` (or the rounds already run, if a
        resume shortened the budget below them; at least 1)."""
        return max(1, self.trainer.rounds, self.round)

    @property
    def num_shared_parameters(self) -> int:
        """|W|: parameters per center that cross the wire."""
        return sum(p.numel() for n, p in self.module.named_parameters() if n in self.algorithm.shared_names)

    def center_params(self) -> dict[str, Tensor]:
        """Each center's current model as stacked tensors ``[C, ...]`` (Centralized: the one model)."""
        params = self.engine.get_params()
        if self.engine.num_models == self.data.num_centers:
            return params
        index = self.assignment.to(next(iter(params.values())).device)
        return {n: p.index_select(0, index) for n, p in params.items()}

    @property
    def val_every_round(self) -> bool:
        """Whether an observer declared that it reads the validation AUROC every round
        (:attr:`ObserverNeeds.val_every_round <lightning_fed.types.ObserverNeeds.val_every_round>`;
        e.g. :class:`~lightning_fed.callbacks.EarlyStopping`)."""
        return self.observer_needs.val_every_round

    def evaluates(self, r: int, split: str = "test") -> bool:
        """Whether round ``r`` (0-based) evaluates ``split`` per center (module docstring, cadence).

        ``"test"``: ``(r + 1) % trainer.eval_every == 0`` or ``r == trainer.rounds - 1``. ``"val"``:
        the same, or every round when :attr:`val_every_round`.
        """
        if split not in ("val", "test"):
            raise ValueError(f"split must be 'val' or 'test', got {split!r}")
        every = getattr(self.trainer, "eval_every", 1)
        due = (r + 1) % every == 0 or r == self.trainer.rounds - 1
        return due or (split == "val" and self.val_every_round)

    def evaluate(self, split: str = "test") -> Evaluation:
        """Per-center AUROC on ``"val"`` or ``"test"``."""
        if split not in ("val", "test"):
            raise ValueError(f"split must be 'val' or 'test', got {split!r}")
        split_set = self.val if split == "val" else self.test
        own_models = self.engine.num_models == self.data.num_centers  # model c is center c's
        params = None if own_models else self.center_params()
        evaluation = evaluate(self.engine, params, split_set, self.metrics)
        if not overrides_eval_step(self.module, split):
            return evaluation
        params = self.center_params()
        logged = step_logs(
            self.module, params, split_set.x, split_set.y, split_set.mask, split, self.trainer.batch_size
        )
        return dataclasses.replace(evaluation, logged=logged)

    @torch.no_grad()
    def val_utility(
        self, params: dict[str, Tensor], centers: Tensor, chunk: int = 256, metric: str = "auroc"
    ) -> Tensor:
        """Validation utility ``[Q]`` of stacked models ``params`` (``[Q, ...]``), model ``q`` on center
        ``centers[q]``'s own validation split (see :class:`~lightning_fed.types.RoundContext`).

        Models are taken in order of their center's validation size and each chunk is cut to its
        longest split, so small centers are not padded to the largest one.

        Args:
            params: Stacked models.
            centers: The center of each model ``[Q]``.
            chunk: Models per forward.
            metric: ``"auroc"`` (the paper's, NaN on a one-class split), ``"log_likelihood"`` (the
                geometric-mean likelihood, :func:`~lightning_fed.metrics.likelihood.batched_likelihood`)
                or ``"brier"`` (``1 -`` Brier score); the last two are defined on any non-empty split.
        """
        score = _UTILITIES.get(metric)
        if score is None:
            raise ValueError(f"val_utility metric must be one of {sorted(_UTILITIES)}, got {metric!r}")
        sizes = self.val.mask.sum(1)[centers.cpu()]
        order = torch.argsort(sizes, stable=True)
        out = torch.empty(centers.shape[0], dtype=torch.float64)
        for lo in range(0, centers.shape[0], chunk):
            sel = order[lo : lo + chunk]
            idx = centers.cpu()[sel]
            width = max(1, int(sizes[sel].max()))
            p = {n: t.index_select(0, sel.to(t.device)) for n, t in params.items()}
            logits = self.engine.predict(p, self.val.x[idx, :width]).float().cpu()
            out[sel] = score(logits, self.val.y[idx, :width], self.val.mask[idx, :width]).cpu()
        return out

    def fit(self) -> dict[str, Any]:
        """Run the remaining rounds; returns the summary (also passed to ``on_fit_end``)."""
        self._segment_start = time.perf_counter()
        self.fabric.call("on_fit_start", self)
        while self.round < self.trainer.rounds and not self.should_stop:
            result = self._run_round(self.round)
            self.last_result = result
            self.round += 1
            self.fabric.log_dict(self._round_scalars(result), step=result.round)
            self.fabric.call("on_round_end", self, result)
        self.fabric.call("on_train_end", self)
        if not self.finished:
            self._finish()
        summary = self.summary(wall_seconds=self.wall_seconds)
        self.fabric.log_dict({f"final/{k}": v for k, v in summary.items() if isinstance(v, int | float)})
        self.fabric.call("on_fit_end", self, summary)
        return summary

    def _finish(self) -> None:
        """Run the algorithm's final stage and install the parameters it returns."""
        step = [0]

        def log(scalars: dict[str, float]) -> None:
            self.fabric.log_dict({f"finish/{k}": v for k, v in scalars.items()}, step=self.round + step[0])
            self.fabric.call("on_finish_log", self, scalars)
            step[0] += 1

        ctx = FinishContext(
            seed=self.seed,
            data=self.data,
            module=self.module,
            params=self.engine.get_params(),
            wire=self.wire,
            round=self.round,
            device=self.fabric.device,
            log=log,
        )
        params = self.algorithm.finish(ctx)
        if params is not ctx.params:
            self.engine.set_params(params)
        self.finished = True

    def _run_round(self, r: int) -> RoundResult:
        self.fabric.call("on_round_start", self, r)
        collective_start = self.collective_seconds
        t0 = time.perf_counter()
        ctx = RoundContext(round=r, seed=self.seed, val_utility=self.val_utility, rounds=self.trainer.rounds)
        self.algorithm.start_round(ctx, self.engine, self.wire)
        self._flip_labels(r)
        if self.wire.norm_bound is not None:  # the update bound's anchors: the round-start models
            self.wire.start_round(r, self.engine.replay_params(), copy=False)  # a copy: handed over
        losses = self._train(r)
        t1 = time.perf_counter()
        params = self.algorithm.aggregate(ctx, self.engine.replay_params(), self.wire)
        self.engine.set_mask(self.algorithm.parameter_mask())  # the next round's mask (sparse methods)
        self.engine.set_params(params)
        del params  # installed: not held through the evaluation (issue 33, peak memory)
        if self.privacy is not None:
            self._spend_privacy(r)
        t2 = time.perf_counter()
        val = self.evaluate("val") if self.evaluates(r, "val") else None
        test = self.evaluate("test") if self.evaluates(r, "test") else None
        t3 = time.perf_counter()
        ledger = self.wire.ledger
        bytes_per_center = ledger.per_center(self.data.num_centers, r)
        # Ledger isolation (metrics/isolation.py) for every method; an algorithm's own
        # isolation_rate (ABPS: rested share) overrides it. A pooled model (Centralized) has none.
        # Bandwidth (see summary): the fixed whole-budget reference, growing to the summary's value,
        # and the running ratio over the r + 1 rounds run so far.
        stats = {
            "bytes_vs_fedavg": ledger.total() / self.fedavg_reference_bytes(self.round_budget),
            "bytes_vs_fedavg_same_rounds": ledger.total() / self.fedavg_reference_bytes(r + 1),
            "seconds_train": t1 - t0,
            "seconds_aggregate": t2 - t1,
            "seconds_eval": t3 - t2,
            "seconds_collectives": self.collective_seconds - collective_start,
            **self._fault_stats(r),
            **({} if self.pooled else round_isolation(bytes_per_center, self.participants(r))),
            **self.algorithm.round_stats(),
            **({} if self.privacy is None else self.privacy.round_stats()),
        }
        return RoundResult(
            round=r,
            train_loss=losses.cpu()[self.assignment],
            val_auroc=None if val is None else val.auroc,
            test_auroc=None if test is None else test.auroc,
            bytes_per_center=bytes_per_center,
            bytes_round=ledger.round_total(r),
            bytes_cumulative=ledger.total(),
            seconds=t3 - t0,
            stats=stats,
            val_accuracy=None if val is None else val.accuracy,
            test_accuracy=None if test is None else test.accuracy,
            train_logged={n: v.cpu()[self.assignment] for n, v in (self.engine.last_logged or {}).items()},
            val_metrics=None if val is None else val.metrics,
            test_metrics=None if test is None else test.metrics,
            val_logged={} if val is None else val.logged,
            test_logged={} if test is None else test.logged,
        )

    def _spend_privacy(self, r: int) -> None:
        """Round ``r``'s steps into the privacy ledger (:mod:`lightning_fed.dp.spent`): DP-SGD's
        noisy steps of every model that trained, or DP-FedAvg's one release of the round."""
        if self.privacy.dp.level == "client":
            self.privacy.record_client(int(getattr(self.algorithm, "participants", 0)))
            return
        sampled = self.participants(r)
        epochs = getattr(self.engine, "epochs", self.trainer.local_epochs)
        steps = [
            steps_per_round(n, self.trainer.batch_size, epochs, self.trainer.local_steps)
            for n in self._model_rows
        ]
        if sampled is not None:
            steps = [t if bool(sampled[m]) else 0 for m, t in enumerate(steps)]
        self.privacy.record_sample(steps)

    def participants(self, r: int) -> Tensor | None:
        """Bool ``[C]``: the centers sampled in round ``r`` (:mod:`lightning_fed.comm.sampling`);
        None without ``trainer.centers_per_round`` (every reachable center takes part)."""
        if self.wire.sampler is None:
            return None
        return self.wire.available(r, self.data.num_centers)

    def _train(self, r: int) -> Tensor:
        """The round's local training; with client sampling only the sampled centers train (the
        engine's :attr:`~lightning_fed.engine.base.Engine.participants`: the others are not computed,
        their state stays as it was) and the others' loss is NaN."""
        sampled = self.participants(r)
        if sampled is None or bool(sampled.all()):
            return self.algorithm.train_round(self.engine, r)
        self.engine.participants = sampled.cpu()
        try:
            losses = self.algorithm.train_round(self.engine, r)
        finally:
            self.engine.participants = None
        losses = losses.clone()
        losses[~sampled.to(losses.device)] = float("nan")
        diverged = getattr(self.engine, "last_diverged", None)
        if diverged is not None:
            self.engine.last_diverged = diverged & sampled.to(diverged.device)
        return losses

    def _fault_stats(self, r: int) -> dict[str, float]:
        """This round's faults and defences: unavailable centers, rejected payloads, diverged centers
        (and, with client sampling, the sampled centers)."""
        diverged = getattr(self.engine, "last_diverged", None)
        n_diverged = int(diverged.sum()) if diverged is not None else 0
        bound = self.wire.norm_bound
        self.diverged_total += n_diverged
        sampled = self.participants(r)
        trained = (diverged.numel() if sampled is None else int(sampled.sum())) if diverged is not None else 0
        if n_diverged and n_diverged == trained:
            self._all_diverged(r)
        return {
            "unavailable_centers": int((~self.wire.reachable(r, self.data.num_centers)).sum()),
            "rejected_payloads": self.wire.rejected_in(r),
            "diverged_centers": n_diverged,
            **({} if sampled is None else {"sampled_centers": int(sampled.sum())}),
            **({} if bound is None else {"clipped_payloads": bound.clipped.get(r, 0)}),
        }

    def _all_diverged(self, r: int) -> None:
        """Count a round in which every center that trained diverged; warn in one line (rank 0) the
        first time. A warning, not a refusal: divergence depends on the data and the round (a rate
        that diverges early may settle once a schedule lowers it), and the run stays well defined,
        its models rolled back to the round's start. ``summary.json`` records the count
        (``all_diverged_rounds``) and ``report`` shows the diverged center-rounds per method."""
        self.all_diverged_rounds += 1
        if self.all_diverged_rounds == 1 and self.fabric.is_global_zero:
            print(
                f"lightning-fed: warning: round {r}: every center's local training diverged (NaN/Inf) and "
                "was rolled back, so no model learned this round: lower the learning rate (e.g. "
                "model.init_args.lr); summary.json counts such rounds in all_diverged_rounds",
                file=sys.stderr,
            )

    @staticmethod
    def _round_scalars(result: RoundResult) -> dict[str, float]:
        """The round's scalars for the loggers; a split not evaluated this round has none."""
        auroc: dict[str, float] = {}
        for split, values in (("val", result.val_auroc), ("test", result.test_auroc)):
            if values is not None:
                s = summarize(values)
                auroc.update({f"{split}_auroc_mean": s.mean, f"{split}_auroc_std": s.std})
        accuracy = {
            f"{split}_accuracy_mean": summarize(acc).mean
            for split, acc in (("val", result.val_accuracy), ("test", result.test_accuracy))
            if acc is not None
        }
        for split, values in (("val", result.val_metrics), ("test", result.test_metrics)):
            accuracy.update({f"{split}_{name}_mean": summarize(v).mean for name, v in (values or {}).items()})
        return {
            "round": result.round,
            **auroc,
            "train_loss_mean": float(result.train_loss.nanmean()),
            **{
                f"{split}/{n}": float(v.nanmean())
                for split, logged in (
                    ("train", result.train_logged),
                    ("val", result.val_logged),
                    ("test", result.test_logged),
                )
                for n, v in logged.items()
            },
            "bytes_round": result.bytes_round,
            "mb_cumulative": result.bytes_cumulative / 1e6,
            **accuracy,
            **result.stats,
        }

    def summary(self, wall_seconds: float | None = None) -> dict[str, Any]:
        """Final metrics: per-center test/val AUROC summaries, pooled AUROC, bytes, rounds.

        Bandwidth against a fixed reference, float32 FedAvg of the reference architecture
        (:attr:`reference_message_bytes`, ``4 P_ref`` per message) over the whole round budget ``R``
        (``trainer.rounds``), with ``C`` centers and ``B`` the bytes on the ledger:

            bytes_vs_fedavg            = B / (R * 2 * C * 4 P_ref)
            bytes_vs_fedavg_same_rounds = B / (r * 2 * C * 4 P_ref),   r = rounds run (at least 1)

        so early stopping's savings show in ``bytes_vs_fedavg`` (FedAvg stopped after 5 of 10 rounds:
        0.5, same-rounds 1.0), and a model that sends more than the one it replaces shows it (BNN+FL
        sends means and variances: 2.0). The per-round statistics use the same two denominators with
        the bytes so far (``bytes_vs_fedavg`` grows to the summary's value; same-rounds uses the
        ``r + 1`` rounds run by then). Bytes booked after the last round (a final stage) count in ``B``.

        ``*_auroc_fragile`` counts the centers whose AUROC is defined but rests on a single case of
        some class (:func:`~lightning_fed.metrics.fragile_auroc`). ``isolated_center_rounds`` and
        ``ledger_isolation_rate`` (the mean over rounds of the share of centers that sent and received
        no bytes) come from the ledger; ``isolation_rate`` is the same unless the algorithm reports
        its own (ABPS: rested center-rounds); none of them for a pooled model (Centralized).

        What each federation AUROC averages (:mod:`lightning_fed.metrics.support`): ``*_auroc_mean``
        the centers whose AUROC is defined (the ABPS paper's metric); ``*_auroc_robust`` the centers
        with at least ``m = trainer.robust_min_per_class`` rows of every class (``*_auroc_robust_centers``
        of them); ``*_auroc_weighted`` the defined centers weighted by their split's rows;
        ``test_auroc_pooled`` every center's test rows as one set. The per-center numbers behind
        them, with DeLong intervals, are :meth:`center_rows` (``centers.parquet``).
        """
        test, val = self.evaluate("test"), self.evaluate("val")
        self.final_evaluations = {"test": test, "val": val}
        t, v = summarize(test.auroc), summarize(val.auroc)
        m = self.robust_min_per_class
        t_avg = auroc_averages(
            test.auroc, split_support(self.test.y, self.test.mask, self.data.num_classes), m
        )
        v_avg = auroc_averages(val.auroc, split_support(self.val.y, self.val.mask, self.data.num_classes), m)
        total = self.wire.ledger.total()
        by_round = self.wire.ledger.per_center_by_round(self.data.num_centers, self.round)
        return {
            "bytes_vs_fedavg": total / self.fedavg_reference_bytes(self.round_budget),
            "bytes_vs_fedavg_same_rounds": total / self.fedavg_reference_bytes(max(1, self.round)),
            "test_auroc_mean": t.mean,
            "test_auroc_std": t.std,
            "test_auroc_undefined": t.n_undefined,
            "test_auroc_fragile": int(fragile_auroc(test.auroc, self.test.y, self.test.mask).sum()),
            "test_auroc_pooled": test.pooled_auroc,
            "test_auroc_robust": t_avg["robust"],
            "test_auroc_robust_centers": t_avg["robust_centers"],
            "test_auroc_weighted": t_avg["weighted"],
            "robust_min_per_class": m,
            "test_accuracy_mean": summarize(test.accuracy).mean,
            "test_balanced_accuracy_mean": summarize(test.balanced_accuracy).mean,
            "val_auroc_mean": v.mean,
            "val_auroc_std": v.std,
            "val_auroc_undefined": v.n_undefined,
            "val_auroc_fragile": int(fragile_auroc(val.auroc, self.val.y, self.val.mask).sum()),
            "val_auroc_robust": v_avg["robust"],
            "val_auroc_robust_centers": v_avg["robust_centers"],
            "val_auroc_weighted": v_avg["weighted"],
            **self._metric_summary(test, val),
            **self._concept_summary(test),
            **{
                f"{split}/{name}": float(values.nanmean())
                for split, evaluation in (("test", test), ("val", val))
                for name, values in evaluation.logged.items()
            },
            "total_bytes": total,
            "total_mb": total / 1e6,
            "rounds": self.round,
            "num_centers": self.data.num_centers,
            "shared_parameters": self.num_shared_parameters,
            "seed": self.seed,
            "wall_seconds": wall_seconds,
            "rejected_payloads": self.wire.rejected_total(),
            "diverged_center_rounds": self.diverged_total,
            "all_diverged_rounds": self.all_diverged_rounds,
            **(
                {} if (nb := self.wire.norm_bound) is None else {"clipped_payloads": sum(nb.clipped.values())}
            ),
            **({} if self.pooled else run_isolation(by_round, self._participation())),
            **self.algorithm.summary_stats(),
            **({} if self.privacy is None else self.privacy.summary()),
            **self.summary_extras,
        }

    def _participation(self) -> Tensor | None:
        """Bool ``[R, C]`` of :meth:`participants` over the rounds run (None without sampling)."""
        if self.wire.sampler is None:
            return None
        rounds = [self.participants(r) for r in range(self.round)]
        return torch.stack(rounds) if rounds else torch.zeros(0, self.data.num_centers, dtype=torch.bool)

    @property
    def robust_min_per_class(self) -> int:
        """``m`` of the robust mean: ``trainer.robust_min_per_class`` (default 2)."""
        return int(getattr(self.trainer, "robust_min_per_class", 2))

    def center_rows(self) -> dict[str, list[Any]]:
        """One row per center of the final evaluation (``centers.parquet``'s columns).

        ``center``, ``name``, ``n_train``, then per split (``val``, ``test``): ``<split>_n``,
        ``_positives``, ``_negatives``, ``_auroc`` with its DeLong (1988) 95 % interval
        ``_auroc_low`` / ``_auroc_high`` (NaN where a class has fewer than two rows),
        ``_auroc_fragile`` (defined but resting on one case of a class), ``_robust`` (at least
        :attr:`robust_min_per_class` of every class), ``_accuracy`` and ``_balanced_accuracy``.
        Uses the evaluations of the last :meth:`summary` (evaluates now when there is none).
        """
        evaluations = getattr(self, "final_evaluations", None) or {
            "test": self.evaluate("test"),
            "val": self.evaluate("val"),
        }
        rows: dict[str, list[Any]] = {
            "center": list(range(self.data.num_centers)),
            "name": [c.name for c in self.data.centers],
            "n_train": [c.n_train for c in self.data.centers],
        }
        for split in ("val", "test"):
            padded = self.val if split == "val" else self.test
            rows.update(
                support_columns(
                    split, evaluations[split], padded, self.data.num_classes, self.robust_min_per_class
                )
            )
        return rows

    def _concept_summary(self, test: Evaluation) -> dict[str, Any]:
        """On a federation whose centers declare a ``concept`` (the mixed federation of
        :class:`~lightning_fed.data.TeacherICU`, ``off_concept``): ``test_auroc_<concept>_concept``
        (``in``, ``off``), the mean test AUROC over that concept's centers where it is defined, and
        ``..._centers``, their count; nothing otherwise."""
        concepts = [c.attributes.get("concept") for c in self.data.centers]
        if not concepts or any(x is None for x in concepts):
            return {}
        out: dict[str, Any] = {}
        for concept in sorted(set(map(str, concepts))):
            rows = torch.tensor([str(x) == concept for x in concepts])
            s = summarize(test.auroc.detach().to("cpu")[rows])
            out[f"test_auroc_{concept}_concept"] = s.mean
            out[f"test_auroc_{concept}_concept_centers"] = s.n_defined
        return out

    def _metric_summary(self, test: Evaluation, val: Evaluation) -> dict[str, Any]:
        """The ``metrics:`` entries of the summary: per metric and split, the mean and std over the
        centers where it is defined and their count (``test_<name>_mean``, ``_std``, ``_defined``),
        and ``metrics``, the names (none of them without ``metrics:``)."""
        if not self.metrics:
            return {}
        out: dict[str, Any] = {"metrics": list(self.metrics.names)}
        for split, evaluation in (("test", test), ("val", val)):
            for name, values in evaluation.metrics.items():
                s = summarize(values)
                out.update(
                    {
                        f"{split}_{name}_mean": s.mean,
                        f"{split}_{name}_std": s.std,
                        f"{split}_{name}_defined": s.n_defined,
                    }
                )
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to evaluate or continue: engine, algorithm, ledger, round."""
        return {
            "round": self.round,
            "finished": self.finished,
            "engine": self.engine.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "ledger": self.wire.ledger.state_dict(),
            "faults": {
                "rejected": dict(self.wire.rejected),
                "diverged": self.diverged_total,
                "all_diverged": self.all_diverged_rounds,
            },
            **({"norm_bound": self.wire.norm_bound.state_dict()} if self.wire.norm_bound is not None else {}),
            "wall_seconds": self.wall_seconds,
            **({} if self.privacy is None else {"privacy": self.privacy.state_dict()}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.round = int(state["round"])
        self.finished = bool(state.get("finished", False))
        self.engine.load_state_dict(state["engine"])
        self.algorithm.load_state_dict(state["algorithm"])
        self.engine.set_mask(self.algorithm.parameter_mask())
        self.wire.ledger.load_state_dict(state["ledger"])
        faults = state.get("faults", {})
        self.wire.rejected = {int(r): int(n) for r, n in faults.get("rejected", {}).items()}
        self.diverged_total = int(faults.get("diverged", 0))
        self.all_diverged_rounds = int(faults.get("all_diverged", 0))
        if self.wire.norm_bound is not None and "norm_bound" in state:
            self.wire.norm_bound.load_state_dict(state["norm_bound"])
        self._wall_before = float(state.get("wall_seconds", 0.0))
        if self.privacy is not None and "privacy" in state:
            self.privacy.load_state_dict(state["privacy"])
