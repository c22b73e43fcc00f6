"""Observer callbacks (called through ``fabric.call``): progress, parquet, bandwidth table, checkpoint,
early stopping."""

from lightning_fed.callbacks.bandwidth import BandwidthTable
from lightning_fed.callbacks.base import Callback
from lightning_fed.callbacks.centers import CentersWriter
from lightning_fed.callbacks.checkpoint import Checkpoint
from lightning_fed.callbacks.early_stopping import EarlyStopping
from lightning_fed.callbacks.partner_history import PartnerHistory
from lightning_fed.callbacks.predictions import PredictionsWriter
from lightning_fed.callbacks.progress import ProgressBar
from lightning_fed.callbacks.rounds import RoundsWriter

__all__ = [
    "BandwidthTable",
    "Callback",
    "CentersWriter",
    "Checkpoint",
    "EarlyStopping",
    "PartnerHistory",
    "PredictionsWriter",
    "ProgressBar",
    "RoundsWriter",
]
