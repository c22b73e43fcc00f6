"""Local-training engines: :class:`PackedEngine` (all centers at once) and :class:`SequentialEngine`,
and the round-indexed learning-rate schedules they apply (:class:`Constant`, :class:`Cosine`,
:class:`Step`; ``trainer.lr_schedule``). ``trainer.max_centers_per_pass`` wraps the packed engine in
:class:`~lightning_fed.engine.passes.PassEngine` (bounded passes), as ``fabric`` with several
processes wraps it in :class:`~lightning_fed.distributed.ShardedEngine`."""

from lightning_fed.engine.base import Engine
from lightning_fed.engine.lr_schedule import Constant, Cosine, LRSchedule, Step
from lightning_fed.engine.packed import PackedEngine
from lightning_fed.engine.sequential import SequentialEngine

__all__ = ["Constant", "Cosine", "Engine", "LRSchedule", "PackedEngine", "SequentialEngine", "Step"]
