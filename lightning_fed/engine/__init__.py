"""Local-training engines: :class:`PackedEngine` (all centers at once) and :class:`SequentialEngine`."""

from lightning_fed.engine.base import Engine
from lightning_fed.engine.packed import PackedEngine
from lightning_fed.engine.sequential import SequentialEngine

__all__ = ["Engine", "PackedEngine", "SequentialEngine"]
