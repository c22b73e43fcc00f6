"""Per-center models (LightningModules the engines pack)."""

from lightning_fed.models.base import CenterModule
from lightning_fed.models.mlp import MortalityMLP

__all__ = ["CenterModule", "MortalityMLP"]
