"""Observer callbacks (called through ``fabric.call``): progress, per-round parquet, checkpoint."""

from lightning_fed.callbacks.checkpoint import Checkpoint
from lightning_fed.callbacks.progress import ProgressBar
from lightning_fed.callbacks.rounds import RoundsWriter

__all__ = ["Checkpoint", "ProgressBar", "RoundsWriter"]
