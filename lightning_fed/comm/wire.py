"""The wire: the only way anything crosses between centers (architecture decision 4).

:meth:`Wire.send` encodes a payload with the configured :class:`CommHook`, records the encoded
bytes of every message on the :class:`Ledger`, and returns what the receivers decode. With a
:class:`~lightning_fed.comm.faults.FaultInjection` plan the wire also says which centers are reachable
in a round (:meth:`Wire.available`) and corrupts what the plan's faulty senders send.

Receivers never trust what arrives: :meth:`Wire.accept` checks every received message and rejects one
that holds a NaN/Inf or whose L2 norm (over all its tensors) exceeds ``max_norm_ratio`` times the
receiver's own shared-parameter norm. A rejected message's bytes stay on the ledger (they were
sent); the rejection is counted per round.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.comm.faults import FaultInjection
from lightning_fed.comm.hooks import CommHook, IdentityHook
from lightning_fed.comm.ledger import Ledger

__all__ = ["Wire", "message_norms"]


def message_norms(payload: dict[str, Tensor]) -> Tensor:
    """L2 norm of every message ``[E]`` over all of its tensors (float64; NaN/Inf propagate)."""
    total = None
    for t in payload.values():
        sq = t.detach().to(torch.float64).reshape(t.shape[0], -1).pow(2).sum(1)
        total = sq if total is None else total + sq
    return total.sqrt().cpu() if total is not None else torch.zeros(0, dtype=torch.float64)


class Wire:
    """Encode, count, decode; inject configured faults; validate what arrives.

    Args:
        hook: The encode/decode hook (identity by default).
        ledger: Where bytes are recorded (a fresh one by default).
        faults: The fault plan (none by default: every center is always available).
        max_norm_ratio: A received message whose norm exceeds this times the receiver's own
            shared-parameter norm is rejected.
    """

    def __init__(
        self,
        hook: CommHook | None = None,
        ledger: Ledger | None = None,
        faults: FaultInjection | None = None,
        max_norm_ratio: float = 1e3,
    ) -> None:
        if not max_norm_ratio > 0:
            raise ValueError(f"wire max_norm_ratio must be > 0, got {max_norm_ratio}")
        self.hook = hook if hook is not None else IdentityHook()
        self.ledger = ledger if ledger is not None else Ledger()
        self.faults = faults
        self.max_norm_ratio = float(max_norm_ratio)
        #: Rejected messages per round.
        self.rejected: dict[int, int] = {}

    def available(self, round_idx: int, num_centers: int) -> Tensor:
        """Bool ``[num_centers]``: which centers can send and receive in ``round_idx``."""
        if self.faults is None:
            return torch.ones(num_centers, dtype=torch.bool)
        return self.faults.available(round_idx, num_centers)

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
            The decoded payload, same shapes as ``payload`` (leading dimension ``E`` when a faulty
            sender's broadcast had to be corrupted).
        """
        src, dst = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
        if self.faults is not None:
            payload = self.faults.corrupt_payload(payload, src, round_idx)
        encoded = self.hook.encode(payload)
        per_message = sum(t[0].numel() * t.element_size() for t in encoded.values())
        self.ledger.record(round_idx, src, dst, per_message)
        return self.hook.decode(encoded, payload)

    def accept(self, received: dict[str, Tensor], own: dict[str, Tensor] | None, round_idx: int) -> Tensor:
        """Receiver-side validation: bool ``[E]``, True for messages the receiver may use.

        A message is rejected when it holds a NaN/Inf, or when its norm exceeds ``max_norm_ratio``
        times the reference norm: the receiver's own shared parameters ``own`` (leading dimension
        ``E`` or 1, same names), or, for a receiver with no parameters of its own (the server,
        ``own=None``), the median norm of the messages it received. A zero or non-finite reference
        skips the norm test. Rejections are added to :attr:`rejected` for ``round_idx``.
        """
        norms = message_norms(received)
        if own is not None:
            norms, ref = torch.broadcast_tensors(norms, message_norms(own))
        else:
            finite = norms[torch.isfinite(norms)]
            ref = finite.median() if finite.numel() else torch.tensor(0.0, dtype=torch.float64)
            norms, ref = torch.broadcast_tensors(norms, ref)
        ok = torch.isfinite(norms)
        check = torch.isfinite(ref) & (ref > 0)
        ok &= ~check | (norms <= self.max_norm_ratio * ref)
        bad = int((~ok).sum())
        if bad:
            self.rejected[round_idx] = self.rejected.get(round_idx, 0) + bad
        return ok

    def rejected_in(self, round_idx: int) -> int:
        """Messages rejected by their receivers in ``round_idx``."""
        return self.rejected.get(round_idx, 0)

    def rejected_total(self) -> int:
        """Messages rejected so far."""
        return sum(self.rejected.values())
