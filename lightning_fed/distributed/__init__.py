"""Scale-out: the centers of one federation split across processes, GPUs and nodes (Fabric DDP).

Design (docs/architecture.md, decision 8). Every rank builds the same seeded :class:`FederatedData` and the
same algorithm state. Rank ``r`` trains only its contiguous shard of the centers with its own
packed engine (:class:`ShardedEngine`); every draw of a center is keyed by its global id (batch
order and per-center dropout streams), so a shard trains exactly as those centers do in one process.
After local training one ``fabric.all_gather`` gives every rank the full stacked ``[C, ...]``
parameters; then every rank runs the same deterministic ``algorithm.aggregate`` (same seeded draws,
same selector state, same ledger) and evaluation, and keeps its shard of the result. Decisions are
therefore identical on every rank without being broadcast, and equal to the one-process run.

Why the collective carries the parameters at full precision even with a bf16 wire: the ranks do not
stand for centers, each replays the decisions of *every* center, and those read each center's own
full-precision parameters (its own term of the average, its Shapley coalitions, the receiver-side
norm check of :meth:`Wire.accept`). A bf16 gather would give ranks rounded copies of other shards'
own parameters, and their decisions could drift apart. What the centers send each other still goes
through the :class:`~lightning_fed.comm.wire.Wire` (bf16-encoded when the Q extension is on), and
the ledger counts those bytes, exactly as in one process.

Only rank 0 writes files and shows progress (the callbacks check ``fabric.is_global_zero``);
Fabric's loggers log from rank 0 only.
"""

from lightning_fed.distributed.collectives import CollectiveTimer, gather_rows
from lightning_fed.distributed.engine import ShardedEngine
from lightning_fed.distributed.shards import shard_bounds

__all__ = ["CollectiveTimer", "ShardedEngine", "gather_rows", "shard_bounds"]
