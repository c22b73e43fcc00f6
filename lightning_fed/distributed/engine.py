"""An engine that trains this process's shard of the centers and gathers the rest.

:class:`ShardedEngine` wraps a :class:`~lightning_fed.engine.packed.PackedEngine`: rank ``r`` packs
and trains only its contiguous shard of the models
(:func:`~lightning_fed.distributed.shards.shard_bounds`), keyed by their global center ids, so its
centers train to the same bits as in a one-process run. After local training one ``all_gather``
(:func:`~lightning_fed.distributed.collectives.gather_rows`) carries every shard's parameters, and,
bit-cast into extra columns of the same tensor, its losses and divergence flags, to every rank.
From there the engine looks like an ordinary engine over all ``C`` models: :meth:`get_params` returns
the full ``[C, ...]`` stack, :meth:`set_params` takes one (and keeps its shard), and
:meth:`state_dict` gathers the optimizer states too, so checkpoints have the one-process layout
and can be resumed with any number of processes.

:meth:`ShardedEngine.predict` (evaluation and the Shapley utilities of ABPS) splits its work too:
the one-process engine predicts in chunks of 64 models; each rank computes a contiguous run of those
same chunks and the logits are gathered, so every chunk is computed exactly as in one process.

**Rows in the wire's dtype** (:meth:`ShardedEngine.gather_in`): with a wire whose hook casts to a
narrower dtype (``comm: BFloat16Hook``) and a method whose aggregation needs only each receiver's
own rows (:meth:`Algorithm.replay_blocker <lightning_fed.algorithms.base.Algorithm.replay_blocker>`),
the trained rows cross in that dtype: every process then holds its own shard exactly and the other
shards as the wire delivers them, which is all the replay of the aggregation reads for the
receivers it keeps (the messages it builds from them are the same bits). :meth:`replay_params`
gives those rows to the aggregation; :meth:`get_params` (evaluation, checkpoints, the final stage)
first gathers the owners' exact rows once, in the parameters' dtype, when the rows changed since.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightning_fed.distributed.collectives import CollectiveTimer, gather_rows, pick_owned
from lightning_fed.distributed.shards import chunk_spans, prefix_lengths, shard_bounds
from lightning_fed.engine.base import Engine, TrainSet
from lightning_fed.engine.packed import PackedEngine
from lightning_fed.engine.passes import PassEngine
from lightning_fed.engine.schedule import steps_per_round

__all__ = ["ShardedEngine"]


class ShardedEngine(Engine):
    """Train this rank's shard with ``inner``; exchange shards with Fabric collectives.

    Args:
        inner: The engine of this rank's shard (a fresh :class:`PackedEngine`, or a
            :class:`~lightning_fed.engine.passes.PassEngine` training the shard in bounded passes; it
            must key batch order and dropout by global center id, which the sequential engine does not).
        fabric: The launched Fabric whose ranks share the federation.
    """

    def __init__(self, inner: Engine, fabric: Fabric) -> None:
        if not isinstance(inner, PackedEngine | PassEngine):
            raise ValueError(
                f"trainer.engine: {type(inner).__name__} cannot train a shard of the centers per process "
                "(fabric.devices x fabric.num_nodes > 1); use lightning_fed.engine.PackedEngine (the default)"
            )
        self.inner, self.fabric = inner, fabric
        self.timer = CollectiveTimer()
        #: Bool ``[C]``: centers whose last round diverged and was rolled back (all ranks' shards).
        self.last_diverged: Tensor | None = None
        #: The dtype the trained rows cross in (:meth:`gather_in`); None: the parameters' dtype.
        self.wire_dtype: torch.dtype | None = None
        #: Whether every row of ``_full`` is exact (False: other shards' rows as the wire delivers them).
        self._exact = True
        #: What the processes exchange, in words (``fit`` prints it with the training path).
        self.gather_note = ""
        #: The shard prefixes :meth:`predict_current` borrowed since the rows last changed.
        self._borrowed: Tensor | None = None

    @property
    def shard(self) -> tuple[int, int]:
        """``(lo, hi)``: this rank trains models ``lo <= m < hi``."""
        return self.bounds[self.fabric.global_rank]

    def _build(self, train: Sequence[TrainSet], dtype: torch.dtype) -> None:
        costs = [steps_per_round(len(y), self.batch_size, self.epochs, self.local_steps) for _, y in train]
        self.bounds = shard_bounds(costs, self.fabric.world_size)
        self.counts = [hi - lo for lo, hi in self.bounds]
        lo, hi = self.shard
        self.setup_inner(self.inner, list(train[lo:hi]), dtype, range(lo, hi))
        local = self.inner.get_params()
        self.names = list(local)
        self.shapes = {n: t.shape[1:] for n, t in local.items()}
        self.dtype = dtype
        self._full = self._unflatten(self._gather(self._flatten(local), "exact rows"))
        self.describe_gather()

    def describe_gather(self, why_not: str = "") -> None:
        """Set :attr:`gather_note` and the training path's words on what crosses between processes;
        ``why_not``: why the rows cross in the parameters' dtype although the wire is narrower."""
        if self.wire_dtype is not None:
            note = f"trained rows cross in {self.wire_dtype} (the wire's dtype; own shard exact)"
        else:
            note = f"trained rows cross in {self.dtype}" + (f": {why_not}" if why_not else "")
        self.gather_note = note
        base = self.inner.training_path
        self.training_path = f"{base} (a shard per process, {self.fabric.world_size} processes; {note})"

    def gather_in(self, dtype: torch.dtype) -> None:
        """Exchange the trained rows in ``dtype`` (the wire's; module docstring). The caller vouches
        that the aggregation is exact on owned rows (the federation asks the method and the wire)."""
        self.wire_dtype = dtype
        self.describe_gather()

    def owner_of(self, centers: Tensor) -> Tensor:
        """The process training each of ``centers`` (int64 ``[K]``; -1 for ids outside ``0..C-1``,
        such as the server's)."""
        centers = torch.as_tensor(centers).reshape(-1).cpu()
        highs = torch.tensor([hi for _, hi in self.bounds])
        owner = torch.bucketize(centers, highs, right=True)
        return torch.where((centers >= 0) & (centers < highs[-1]), owner, torch.full_like(owner, -1))

    def merge_by_owner(self, values: Tensor, centers: Tensor) -> Tensor:
        """``values [K]`` (computed on every process; entry ``k`` about center ``centers[k]``) with
        each entry taken from the process that trains its center, whose rows are exact (a collective)."""
        owners = self.owner_of(centers)
        return pick_owned(self.fabric, values, owners, self.timer).to(values.device)

    def _flatten(self, params: dict[str, Tensor]) -> Tensor:
        rows = next(iter(params.values())).shape[0]
        return torch.cat([params[n].reshape(rows, -1) for n in self.names], 1)

    def _unflatten(self, flat: Tensor) -> dict[str, Tensor]:
        out, offset = {}, 0
        for n in self.names:
            size = self.shapes[n].numel()
            out[n] = flat[:, offset : offset + size].reshape(flat.shape[0], *self.shapes[n])
            offset += size
        return out

    def _gather(self, local: Tensor, what: str = "rows") -> Tensor:
        return gather_rows(self.fabric, local, self.counts, self.timer, what)

    def flip_labels(self, centers: set[int]) -> None:
        """This process's shard flips the labels of those of ``centers`` it holds."""
        self.inner.flip_labels(centers)

    def train_round(self, round_idx: int) -> Tensor:
        """Train this rank's shard, then gather every shard's parameters, losses and divergence flags.

        The float64 losses travel bit-cast into the parameters' dtype (exact), so one collective
        per round carries everything.
        """
        lo, hi = self.shard
        taking_part = self._participant_mask()
        self.inner.participants = None if taking_part is None else taking_part[lo:hi]
        try:
            loss = self.inner.train_round(round_idx).to(torch.float64).contiguous()
        finally:
            self.inner.participants = None
        rows = loss.shape[0]
        flat = self._flatten(self.inner.get_params())
        diverged = getattr(self.inner, "last_diverged", None)
        flags = torch.zeros(rows, dtype=torch.bool) if diverged is None else diverged
        # What a module's own training_step logged: the same names on every rank (the inner engine
        # fixes them from its first call), float64 bit-cast like the losses.
        logged = self.inner.last_logged or {}
        names = sorted(logged)
        values = [
            logged[n].to(flat.device, torch.float64).contiguous().view(self.dtype).reshape(rows, -1)
            for n in names
        ]
        extra = [loss.view(self.dtype).reshape(rows, -1), *values]
        extra.append(flags.to(flat.device, self.dtype).reshape(rows, 1))
        width = flat.shape[1]
        if self.wire_dtype is not None:  # the rows as the wire delivers them; extras bit-cast (exact)
            extra = [t.contiguous().view(self.wire_dtype).reshape(rows, -1) for t in extra[:-1]]
            extra.append(flags.to(flat.device, self.wire_dtype).reshape(rows, 1))
            full = self._gather(torch.cat([flat.to(self.wire_dtype), *extra], 1))
            rows_full = full[:, :width].to(self.dtype)
            rows_full[lo:hi] = flat  # this shard's rows exact
            self._full, self._exact, self._borrowed = self._unflatten(rows_full), False, None
        else:
            full = self._gather(torch.cat([flat, *extra], 1))
            self._full = self._unflatten(full[:, :width])
        self.last_diverged = full[:, -1].cpu() != 0
        columns = full[:, width:-1].contiguous().view(torch.float64).reshape(full.shape[0], -1).cpu()
        self.last_logged = {n: columns[:, 1 + i] for i, n in enumerate(names)} if names else None
        return columns[:, 0].contiguous().to(full.device)

    @torch.no_grad()
    def predict(self, params: dict[str, Tensor], x: Tensor, chunk: int = 64) -> Tensor:
        """Logits of ``C`` stacked models on their own inputs (see :meth:`Engine.predict
        <lightning_fed.engine.base.Engine.predict>`), the chunks of ``chunk`` models split across
        ranks (a collective: call it on every rank with the same arguments)."""
        n, world = x.shape[0], self.fabric.world_size
        if n == 0:
            return super().predict(params, x, chunk)
        chunks = -(-n // chunk)
        edges = [min(n, (r * chunks // world) * chunk) for r in range(world + 1)]
        counts = [edges[r + 1] - edges[r] for r in range(world)]
        lo, hi = edges[self.fabric.global_rank], edges[self.fabric.global_rank + 1]
        mine = {k: v[lo:hi] for k, v in params.items()}
        local = super().predict(mine, x[lo:hi], chunk) if hi > lo else None
        if local is None:  # no chunk here: an empty block of the right trailing shape
            probe = super().predict({k: v[:1] for k, v in params.items()}, x[:1, :1], chunk)
            local = probe.new_zeros(0, *x.shape[1:2], *probe.shape[2:])
        return gather_rows(self.fabric, local.contiguous(), counts, self.timer, "logits")

    @torch.no_grad()
    def predict_current(self, x: Tensor, chunk: int = 64) -> Tensor:
        """Logits of the current models on their own inputs ``[C, n, F]``, each chunk of ``chunk``
        models computed exactly as in one process, without gathering every row (a collective).

        Chunk ``k`` (models ``[k chunk, (k + 1) chunk)``, the one-process chunks) is computed by the
        process training its first model; the few models of a chunk that run past that process's
        shard come from the next shards (a prefix of each, at most ``chunk - 1`` rows per boundary),
        gathered in the parameters' dtype; the logits are gathered as :meth:`predict` does.
        """
        n, rank = x.shape[0], self.fabric.global_rank
        if n != self.num_models:
            raise ValueError(
                f"predict_current: inputs for {n} models, but the engine trains {self.num_models}"
            )
        if self._exact:
            return self.predict(self.get_params(), x, chunk)
        spans = chunk_spans(self.bounds, n, chunk)
        prefix = prefix_lengths(self.bounds, spans)
        lo, hi = self.shard
        a, b = spans[rank]
        own = self._flatten(self.inner.get_params())
        # the prefixes of every shard, in rank order (once while the rows stay: validation and test)
        if self._borrowed is None:
            local_prefix = own[: prefix[rank]].contiguous()
            self._borrowed = gather_rows(self.fabric, local_prefix, prefix, self.timer, "chunk rows")
        borrowed = self._borrowed
        if b > hi:  # the end of this process's last chunk runs into later shards: their prefixes
            models = torch.arange(hi, b)
            owner = self.owner_of(models)
            starts = torch.tensor([start for start, _ in self.bounds])
            offsets = torch.tensor([0, *prefix]).cumsum(0)[:-1]  # where each prefix starts in borrowed
            index = offsets[owner] + models - starts[owner]
            rows = torch.cat([own[a - lo :], borrowed[index.to(borrowed.device)]])
        else:
            rows = own[a - lo : b - lo]
        if b > a:
            local = Engine.predict(self, self._unflatten(rows), x[a:b], chunk)
        else:  # no chunk here: an empty block of the right trailing shape
            probe = Engine.predict(self, self._unflatten(own[:1]), x[:1, :1], chunk)
            local = probe.new_zeros(0, *x.shape[1:2], *probe.shape[2:])
        counts = [end - start for start, end in spans]
        return gather_rows(self.fabric, local.contiguous(), counts, self.timer, "logits")

    def models_per_step(self) -> float:
        """This rank's shard's mean centers per step (each rank steps its own shard)."""
        return self.inner.models_per_step()

    def get_params(self) -> dict[str, Tensor]:
        """Every center's exact rows (a collective when other shards' rows are the wire's: each
        process contributes its own shard, in the parameters' dtype)."""
        if not self._exact:
            self._full = self._unflatten(self._gather(self._flatten(self.inner.get_params()), "exact rows"))
            self._exact = True
        return {n: t.clone() for n, t in self._full.items()}

    def replay_params(self) -> dict[str, Tensor]:
        """The rows the aggregation replays from: this shard's exact, the others' as the wire
        delivers them when :attr:`wire_dtype` is set (no collective)."""
        return {n: t.clone() for n, t in self._full.items()}

    def set_params(self, params: dict[str, Tensor]) -> None:
        """Install every center's rows; this process keeps its shard's (with :attr:`wire_dtype`,
        only those are exact: the others come from this process's replay)."""
        lo, hi = self.shard
        self._full = {n: params[n].detach().to(self.device).clone() for n in self.names}
        self.inner.set_params({n: t[lo:hi] for n, t in self._full.items()})
        self._exact, self._borrowed = self.wire_dtype is None, None

    def state_dict(self) -> dict[str, Any]:
        """The one-process layout: every center's parameters and optimizer state (a collective:
        call it on every rank)."""
        state = self.inner.state_dict()
        optimizer = {
            n: self._gather(t.contiguous(), "optimizer state") for n, t in state["optimizer"].items()
        }
        return {"params": self.get_params(), "optimizer": optimizer}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        lo, hi = self.shard
        params = {n: state["params"][n].to(self.device) for n in self.names}
        optimizer = {n: t[lo:hi] for n, t in state["optimizer"].items()}
        self.inner.load_state_dict(
            {"params": {n: t[lo:hi] for n, t in params.items()}, "optimizer": optimizer}
        )
        self._full = {n: t.clone() for n, t in params.items()}
        self._exact, self._borrowed = True, None
