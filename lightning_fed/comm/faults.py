"""Fault injection: centers that are offline, gone for good, or send corrupt payloads.

A :class:`FaultInjection` plan is handed to the :class:`~lightning_fed.comm.wire.Wire`, which is
where it acts:

- ``unavailable``: round -> centers offline that round. An offline center neither sends nor
  receives (algorithms ask :meth:`Wire.available <lightning_fed.comm.wire.Wire.available>`); it
  still trains locally on its own rows.
- ``dropout``: center -> first round from which it is offline for good.
- ``corrupt``: round -> {center: ``"nan"`` | ``"inf"`` | ``"huge"`` | ``{scale: X}``}: every message
  that center *sends* that round is replaced on the wire by all-NaN, all-+Inf, every entry ``1e6``
  (finite but absurd), or ``X`` times the honest message (``X > 0``: every floating-point tensor of
  the message is multiplied by ``X``; integer and boolean tensors such as masks or codes are sent
  as they are). The bytes are counted as usual; the receivers' validation
  (:meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>`) rejects a non-finite message and one
  whose norm exceeds ``max_norm_ratio`` times its reference, so at the default ratio 5 a
  ``{scale: 10}`` sender is rejected whenever its honest norm is at least half the reference.

The plan is pure configuration: it draws nothing at random, so a faulty run is as reproducible as a
clean one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

__all__ = ["CORRUPTIONS", "HUGE", "Corruption", "FaultInjection"]

#: The payload corruptions a sender can be given.
CORRUPTIONS = ("nan", "inf", "huge")

#: Value of every entry of a ``"huge"`` payload.
HUGE = 1e6

#: One sender's corruption as stored: a kind of :data:`CORRUPTIONS`, or a float scale ``X``
#: (the configured ``{scale: X}``).
Corruption = str | float

_KINDS = f"one of {list(CORRUPTIONS)} or {{scale: X}}"


class FaultInjection:
    """Which centers fail, when, and how (the ``faults`` config group).

    Args:
        unavailable: Round -> centers unavailable that round, e.g. ``{3: [0, 5]}``.
        corrupt: Round -> {center: ``"nan"`` | ``"inf"`` | ``"huge"`` | ``{"scale": X}``}: corruption
            of every payload that center sends that round, e.g. ``{4: {2: "nan"}}`` or
            ``{4: {2: {"scale": 100}}}`` (send 100 times the honest message; ``X > 0``, finite).
        dropout: Center -> first round from which it is gone for good, e.g. ``{7: 10}``.

    Raises:
        ValueError: On a negative round or center id, an unknown corruption, or a scale that is not
            a finite number > 0 (the message names the field, e.g. ``faults.corrupt[4][2].scale``).
    """

    def __init__(
        self,
        unavailable: dict[int, list[int]] | None = None,
        corrupt: dict[int, dict[int, str | dict[str, float]]] | None = None,
        dropout: dict[int, int] | None = None,
    ) -> None:
        self.unavailable = {
            _index("faults.unavailable", "round", r): sorted(
                {_index(f"faults.unavailable[{r}]", "center", c) for c in _seq("faults.unavailable", cs)}
            )
            for r, cs in _map("faults.unavailable", unavailable).items()
        }
        self.corrupt: dict[int, dict[int, Corruption]] = {}
        for r, senders in _map("faults.corrupt", corrupt).items():
            field = f"faults.corrupt[{r}]"
            kinds = {
                _index(field, "center", c): _corruption(f"{field}[{c}]", kind)
                for c, kind in _map(field, senders).items()
            }
            self.corrupt[_index("faults.corrupt", "round", r)] = kinds
        self.dropout = {
            _index("faults.dropout", "center", c): _index(f"faults.dropout[{c}]", "round", r)
            for c, r in _map("faults.dropout", dropout).items()
        }

    def __repr__(self) -> str:
        fields = f"unavailable={self.unavailable}, corrupt={self.corrupt}, dropout={self.dropout}"
        return f"FaultInjection({fields})"

    def check(self, num_centers: int) -> None:
        """Raise a ValueError naming the field when the plan names a center the federation lacks."""
        named = [
            *(("faults.unavailable", c) for cs in self.unavailable.values() for c in cs),
            *(("faults.corrupt", c) for kinds in self.corrupt.values() for c in kinds),
            *(("faults.dropout", c) for c in self.dropout),
        ]
        for field, c in named:
            if c >= num_centers:
                raise ValueError(f"{field} names center {c}, but the federation has {num_centers} centers")

    def available(self, round_idx: int, num_centers: int) -> Tensor:
        """Bool ``[num_centers]``: False for centers unavailable or dropped out in ``round_idx``."""
        out = torch.ones(num_centers, dtype=torch.bool)
        gone = [c for c, r in self.dropout.items() if round_idx >= r]
        for c in [*self.unavailable.get(round_idx, []), *gone]:
            if c < num_centers:
                out[c] = False
        return out

    def corruptions(self, round_idx: int) -> dict[int, Corruption]:
        """{center: kind or scale} of the senders corrupted in ``round_idx``."""
        return dict(self.corrupt.get(round_idx, {}))

    def corrupt_payload(self, payload: dict[str, Tensor], src: Tensor, round_idx: int) -> dict[str, Tensor]:
        """``payload`` with the messages of this round's corrupt senders replaced (a new dict).

        Args:
            payload: Tensors with leading dimension ``E`` (one message per edge) or 1 (broadcast).
            src: Sender ids ``[E]``.
            round_idx: The round.
        """
        kinds = self.corruptions(round_idx)
        src = src.reshape(-1).cpu()
        hit = [(torch.as_tensor(src == c), kind) for c, kind in kinds.items() if bool((src == c).any())]
        if not hit:
            return payload
        out = {}
        for name, t in payload.items():
            if t.shape[0] != src.shape[0]:
                t = t.expand(src.shape[0], *t.shape[1:])
            view = (-1, *([1] * (t.dim() - 1)))
            for mask, kind in hit:
                t = torch.where(mask.to(t.device).view(view), _corrupted(t, kind), t)
            out[name] = t
        return out


def _corrupted(t: Tensor, kind: Corruption) -> Tensor:
    """What a corrupt sender puts on the wire instead of ``t``: ``X * t`` for a scale ``X`` (floating
    point tensors only), else ``t`` filled with NaN, +Inf or :data:`HUGE`."""
    if isinstance(kind, float):
        return t * kind if t.is_floating_point() else t
    return torch.full_like(t, {"nan": float("nan"), "inf": float("inf"), "huge": HUGE}[kind])


def _corruption(field: str, kind: object) -> Corruption:
    """A validated corruption: a kind of :data:`CORRUPTIONS`, or the float ``X`` of ``{scale: X}``."""
    if isinstance(kind, Mapping):
        if set(kind) != {"scale"}:
            raise ValueError(f"{field} must be {_KINDS}, got {dict(kind)!r}")
        scale = kind["scale"]
        if isinstance(scale, bool) or not isinstance(scale, int | float):
            raise ValueError(f"{field}.scale must be a number, got {scale!r}")
        if not math.isfinite(scale):
            raise ValueError(f"{field}.scale must be finite, got {scale!r}")
        if not scale > 0:
            raise ValueError(f"{field}.scale must be > 0, got {scale!r}")
        return float(scale)
    if kind not in CORRUPTIONS:
        raise ValueError(f"{field} must be {_KINDS}, got {kind!r}")
    return str(kind)


def _map(field: str, value: Mapping | None) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{field} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _seq(field: str, value: Sequence | None) -> list:
    if value is None:
        return []
    if isinstance(value, int | str) or not isinstance(value, Sequence):
        raise ValueError(f"{field} must map a round to a list of centers, got {value!r}")
    return list(value)


def _index(field: str, what: str, value: object) -> int:
    """A non-negative integer round or center id (ints written as strings are accepted)."""
    try:
        out = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{field}: {what} must be an integer, got {value!r}") from None
    if out < 0 or (isinstance(value, float) and value != out):
        raise ValueError(f"{field}: {what} must be a non-negative integer, got {value!r}")
    return out
