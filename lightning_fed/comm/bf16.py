"""bfloat16 on the wire (ABPS Sec. 6.4, extension Q).

Floating tensors are sent as ``torch.bfloat16`` (2 bytes per element instead of float32's 4), so a
float32 payload costs half the bytes on the ledger. bfloat16 keeps float32's 8-bit exponent and has
8 significant bits (7 stored). The cast rounds to nearest, so for values in the normal range the
round trip ``float32 -> bfloat16 -> float32`` has relative error at most the unit roundoff
``2^-8`` (half the spacing ``2^-7`` between bfloat16 numbers in ``[1, 2)``). The tests check
``|x' - x| <= 2^-8 |x|`` and that errors above ``2^-9`` do occur, so ``2^-8`` is the tight bound.
Receivers cast back to the sender's dtype; non-floating tensors pass unchanged.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from lightning_fed.comm.hooks import CommHook, Payload

__all__ = ["BFloat16Hook"]


class BFloat16Hook(CommHook):
    """Send floating tensors as bfloat16; receivers cast back to the sender's dtype."""

    wire_dtype: ClassVar[torch.dtype | None] = torch.bfloat16

    def encode(self, payload: Payload) -> Payload:
        return {n: t.to(torch.bfloat16) if t.is_floating_point() else t for n, t in payload.items()}

    def decode(self, encoded: Payload, like: Payload) -> Payload:
        return {n: t.to(like[n].dtype) if like[n].is_floating_point() else t for n, t in encoded.items()}
