"""The wire: the only way anything crosses between centers (architecture decision 4).

:meth:`Wire.send` encodes a payload with the configured :class:`CommHook`, records the encoded
bytes of every message on the :class:`Ledger`, and returns what the receivers decode.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.comm.hooks import CommHook, IdentityHook
from lightning_fed.comm.ledger import Ledger

__all__ = ["Wire"]


class Wire:
    """Encode, count, decode.

    Args:
        hook: The encode/decode hook (identity by default).
        ledger: Where bytes are recorded (a fresh one by default).
    """

    def __init__(self, hook: CommHook | None = None, ledger: Ledger | None = None) -> None:
        self.hook = hook if hook is not None else IdentityHook()
        self.ledger = ledger if ledger is not None else Ledger()

    def message_bytes(self, payload: dict[str, Tensor]) -> int:
        """Encoded bytes of one message of ``payload`` (leading dimension = messages)."""
        return sum(t[0].numel() * t.element_size() for t in self.hook.encode(payload).values())

    def send(self, payload: dict[str, Tensor], src: Tensor, dst: Tensor, round_idx: int) -> dict[str, Tensor]:
        """Send messages along edges ``src[e] -> dst[e]``.

        Args:
            payload: Tensors whose leading dimension is the number of edges ``E`` (one message per
                edge) or 1 (the same message to every edge: encoded once, counted once per edge).
            src: Sender ids ``[E]`` (center ids or :data:`~lightning_fed.comm.ledger.SERVER`).
            dst: Receiver ids ``[E]``.
            round_idx: Round the bytes are booked to.

        Returns:
            The decoded payload, same shapes as ``payload``.
        """
        src, dst = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
        encoded = self.hook.encode(payload)
        per_message = sum(t[0].numel() * t.element_size() for t in encoded.values())
        self.ledger.record(round_idx, src, dst, per_message)
        return self.hook.decode(encoded, payload)
