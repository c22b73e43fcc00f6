"""Encode/decode hooks: what a parameter payload looks like on the wire.

A hook turns a payload (a dict of stacked tensors, one message per leading index) into its wire
form and back. The :class:`~lightning_fed.comm.wire.Wire` counts the bytes of the *encoded*
tensors, so a hook that shrinks the encoding shrinks the ledger.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

__all__ = ["CommHook", "IdentityHook"]

Payload = dict[str, Tensor]


class CommHook(ABC):
    """Encode a payload for the wire and decode it on arrival.

    Attributes:
        wire_dtype: The dtype every floating tensor takes on the wire when :meth:`encode` is exactly
            ``t.to(wire_dtype)`` for floating tensors (other tensors unchanged), else None. A value
            already representable in it crosses unchanged, which is what lets multi-process runs
            gather the centers' rows in it (``docs/scale_out.md``, "What crosses between processes").
    """

    wire_dtype: ClassVar[torch.dtype | None] = None

    @abstractmethod
    def encode(self, payload: Payload) -> Payload:
        """The wire form of ``payload`` (its bytes are what the ledger counts)."""

    @abstractmethod
    def decode(self, encoded: Payload, like: Payload) -> Payload:
        """Tensors in the dtype of ``like`` (the sender's originals) from their wire form."""


class IdentityHook(CommHook):
    """Send tensors as they are (float32 parameters cost 4 bytes each)."""

    def encode(self, payload: Payload) -> Payload:
        return payload

    def decode(self, encoded: Payload, like: Payload) -> Payload:
        return encoded
