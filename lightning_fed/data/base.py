"""The data-source interface: anything that builds a :class:`FederatedData` from a seed."""

from __future__ import annotations

from abc import ABC, abstractmethod

from lightning_fed.data.center import FederatedData

__all__ = ["DataSource"]


class DataSource(ABC):
    """A source of a federation (synthetic, MIMIC-IV, eICU, any table), chosen by ``class_path``."""

    @abstractmethod
    def build(self, seed: int) -> FederatedData:
        """Build the federation; every random draw derives from ``seed``."""
