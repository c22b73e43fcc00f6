"""One exchange path (docs/architecture.md, decision 9): send over the wire, validate, drop the rejected.

Every method moves what crosses between centers through :func:`exchange`: the payload goes over the
:class:`~lightning_fed.comm.wire.Wire` (encoded by its hook, bytes booked on the ledger, configured
faults injected), every receiver validates what it decoded (:meth:`Wire.accept
<lightning_fed.comm.wire.Wire.accept>`, plus an optional method-specific test) and the rejected
messages are dropped, their bytes staying on the ledger. :func:`peer_exchange` is the common case
of peers sending rows of their stacked shared parameters to each other, each receiver validating
against its own. Methods differ only in who sends to whom (``src``, ``dst``) and in the weights
with which they mix what arrived (:func:`~lightning_fed.aggregation.mixing.mix_received`).

Users: FedAvg and its star variants (upload to and download from the server), ABPS (partner
exchange and metadata descriptors), DeceFL / DFedAvgM / EdgeDRM, DeFTA, WPFed (codes and models)
and DisPFL (sparse values and packed masks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain

import torch
from torch import Tensor

from lightning_fed.comm.wire import Wire, message_norms

__all__ = ["Delivery", "exchange", "peer_exchange", "peer_exchange_by_receiver", "rows", "rows_per_chunk"]


@dataclass(frozen=True)
class Delivery:
    """What arrived from one :func:`exchange`: the accepted messages only.

    Attributes:
        received: Decoded accepted messages ``{name: [E', ...]}`` in send order; a broadcast (a
            tensor with one row sent to several receivers) is one message and stays whole ``[1, ...]``.
        src: Senders of the accepted messages ``[E']`` (int64, CPU).
        dst: Their receivers ``[E']``.
        accepted: Bool ``[E]`` over every message sent: True where the receiver accepted it.
    """

    received: dict[str, Tensor]
    src: Tensor
    dst: Tensor
    accepted: Tensor


def rows(tensors: dict[str, Tensor], index: Tensor) -> dict[str, Tensor]:
    """``{name: t[index]}`` for stacked tensors (``index_select`` on each tensor's device)."""
    return {n: t.index_select(0, index.to(t.device)) for n, t in tensors.items()}


def exchange(
    wire: Wire,
    payload: dict[str, Tensor],
    src: Tensor,
    dst: Tensor,
    round_idx: int,
    own: dict[str, Tensor] | Tensor | None = None,
    checked: Callable[[dict[str, Tensor]], dict[str, Tensor]] | None = None,
    valid: Callable[[dict[str, Tensor]], Tensor] | None = None,
    anchored: bool = True,
) -> Delivery:
    """Send ``payload[e]`` from ``src[e]`` to ``dst[e]``, validate at the receivers, keep the accepted.

    Nothing is sent (and nothing booked) when there is no edge.

    Args:
        wire: The wire (hook, ledger, faults, norm defence).
        payload: Tensors with leading dimension ``E`` (one message per edge) or 1 (the same message
            to every edge: encoded once, booked once per edge).
        src: Sender ids ``[E]`` (center ids or :data:`~lightning_fed.comm.ledger.SERVER`).
        dst: Receiver ids ``[E]``.
        round_idx: The round the bytes and rejections are booked to.
        own: The receivers' references for the norm test (:meth:`Wire.accept`), leading dimension
            ``E`` or 1, the same names as what the test sees, or their norms (float64 ``[E]``, as
            :func:`~lightning_fed.comm.wire.message_norms` gives them); None: the median of the
            received norms (a receiver with no model of its own, the FedAvg server).
        checked: What the norm test sees of the decoded payload (default: all of it), e.g. only the
            values of a payload that also carries masks.
        valid: A further receiver-side test, bool ``[E]`` on the decoded payload (e.g. well-formed
            masks); a message failing it is dropped too but is not counted as a wire rejection.
        anchored: Whether the wire's update bound (``wire.norm_bound``) may check these messages
            against the round-start models (False: the ratio test only, for payloads that are not
            dense shared parameters, e.g. DisPFL's masked values).

    Returns:
        The :class:`Delivery` of the accepted messages.
    """
    src, dst = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
    if not len(src):
        return Delivery({n: t[:0] for n, t in payload.items()}, src, dst, torch.zeros(0, dtype=torch.bool))
    received = wire.send(payload, src, dst, round_idx)
    view = received if checked is None else checked(received)
    edges = {"src": src, "dst": dst} if anchored and wire.norm_bound is not None else {}
    if wire.merge is not None:  # a multi-process replay takes each receiver's own norm from its owner
        edges["receivers"] = dst
    accepted = wire.accept(view, own, round_idx, **edges)
    if wire.norm_bound is not None and wire.norm_bound.mode == "clip":
        received = {**received, **wire.clip(view, src, dst)}
    if valid is not None:
        accepted = accepted & valid(received).cpu()
    if not bool(accepted.all()):
        keep = torch.nonzero(accepted).reshape(-1)
        received = {
            n: t.index_select(0, keep.to(t.device)) if len(t) == len(src) else t for n, t in received.items()
        }
        src, dst = src[keep], dst[keep]
    return Delivery(received, src, dst, accepted)


def peer_exchange(
    wire: Wire,
    shared: dict[str, Tensor],
    src: Tensor,
    dst: Tensor,
    round_idx: int,
    max_bytes: int | None = None,
) -> Delivery:
    """Peers send ``shared[src[e]]`` to ``dst[e]``; each receiver validates against its own ``shared``.

    With ``max_bytes`` the edges go in chunks of at most that many bytes of messages (at least one
    edge), one :func:`exchange` call each. Each call sends, books and validates its edges as one
    call over all would (bytes per edge, the receiver's own-norm test per message, the faults keyed
    by sender and round), so the :class:`Delivery` is the same; what a call holds besides the
    accepted messages (the messages' float64 norms) is bounded by the chunk; the receivers' own norms are
    computed once per center. The accepted messages are copied into one buffer, in send order.

    Args:
        wire: The wire.
        shared: Every center's stacked shared parameters ``{name: [C, ...]}``.
        src: Senders ``[E]``.
        dst: Receivers ``[E]``.
        round_idx: The round.
        max_bytes: Most bytes of messages per :func:`exchange` call (None: one call).
    """
    src, dst = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
    calls = _peer_calls(wire, shared, src, dst, round_idx, max_bytes)
    first = next(calls)
    if first[1] == len(src):  # one call (or no edge): its delivery as it is
        return first[2]
    received = {n: t.new_empty((len(src), *t.shape[1:])) for n, t in first[2].received.items()}
    parts: list[tuple[Tensor, Tensor, Tensor]] = []
    filled = 0
    calls = chain([first], calls)
    del first  # each call's delivery is dropped once copied
    for _, _, got in calls:
        for name, t in got.received.items():
            received[name][filled : filled + len(got.src)] = t
        filled += len(got.src)
        parts.append((got.src, got.dst, got.accepted))
        del got
    src_acc, dst_acc, accepted = (torch.cat(column) for column in zip(*parts, strict=True))
    return Delivery({n: t[:filled] for n, t in received.items()}, src_acc, dst_acc, accepted)


def _peer_calls(
    wire: Wire,
    shared: dict[str, Tensor],
    src: Tensor,
    dst: Tensor,
    round_idx: int,
    max_bytes: int | None,
) -> Iterator[tuple[int, int, Delivery]]:
    """The :func:`exchange` calls of a peer exchange, in edge order: ``(start, end, delivery)`` of
    edges ``start:end``, at most ``max_bytes`` of messages each (at least one edge; None: one call).

    The one place that decides the calls, so :func:`peer_exchange` and
    :func:`peer_exchange_by_receiver` make the same ones (what a call decides, e.g. the norm test's
    median, depends on its edges). Each receiver's own norm is computed once per center rather than
    once per edge (a row's norm does not depend on the rows computed with it:
    :func:`~lightning_fed.comm.wire.message_norms`). No edge: one call that sends nothing.
    """
    if not len(src):
        yield 0, 0, exchange(wire, rows(shared, src), src, dst, round_idx)
        return
    chunk = len(src) if max_bytes is None else rows_per_chunk(shared, max_bytes)
    own = message_norms(shared)
    for start in range(0, len(src), chunk):
        s, d = src[start : start + chunk], dst[start : start + chunk]
        yield (
            start,
            start + len(s),
            exchange(wire, rows(shared, s), s, d, round_idx, own=own.index_select(0, d)),
        )


def peer_exchange_by_receiver(
    wire: Wire,
    shared: dict[str, Tensor],
    src: Tensor,
    dst: Tensor,
    round_idx: int,
    max_bytes: int | None = None,
) -> Iterator[tuple[int, int, Delivery]]:
    """:func:`peer_exchange` of receiver-major edges, handed out by ranges of receivers as they complete.

    The edges are sent in the same :func:`exchange` calls as :func:`peer_exchange` makes (chunks of
    at most ``max_bytes`` of messages, in edge order), so everything a call decides (the wire's
    faults, the norm test's per-call medians, the ledger) is the same. After each call, the
    receivers all of whose edges have been sent, ``[lo, hi)``, are yielded with their accepted
    messages (in send order), and those messages are then dropped: at most one call's messages, plus
    the earlier messages of the receiver a call boundary splits, exist at once, instead of every
    accepted message of the round (``E x |W|``: 0.7 GB for ABPS at 3,680 centers, issue 33). The
    ranges are ascending and cover every center, a receiver without an edge included (its range
    has an empty delivery); concatenated, the deliveries are :func:`peer_exchange`'s.

    Args:
        wire: The wire.
        shared: Every center's stacked shared parameters ``{name: [C, ...]}``.
        src: Senders ``[E]``.
        dst: Receivers ``[E]``, non-decreasing (as :func:`~lightning_fed.selection.base.partner_edges`
            gives them).
        round_idx: The round.
        max_bytes: Most bytes of messages per :func:`exchange` call (None: one call).

    Yields:
        ``(lo, hi, delivery)``: receivers ``lo <= i < hi`` and the accepted messages to them
        (``delivery.accepted`` covers the messages sent to them).

    Raises:
        ValueError: If ``dst`` is not receiver-major (non-decreasing).
    """
    src, dst = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
    if len(dst) > 1 and bool((dst[1:] < dst[:-1]).any()):
        raise ValueError("peer_exchange_by_receiver: dst must be non-decreasing (receiver-major edges)")
    num_centers = int(next(iter(shared.values())).shape[0]) if shared else 0
    pending: list[tuple[Delivery, Tensor]] = []  # (delivery, receivers of every message sent)
    lo = 0
    for start, end, got in _peer_calls(wire, shared, src, dst, round_idx, max_bytes):
        pending.append((got, dst[start:end]))
        hi = int(dst[end]) if end < len(src) else num_centers
        if hi > lo:
            done, pending = _split_deliveries(pending, hi)
            yield lo, hi, done
            lo = hi


def _split_deliveries(
    parts: list[tuple[Delivery, Tensor]], hi: int
) -> tuple[Delivery, list[tuple[Delivery, Tensor]]]:
    """The messages of ``parts`` to receivers below ``hi`` as one :class:`Delivery` (in order), and
    the rest, still as ``(delivery, receivers sent to)`` parts."""
    if len(parts) == 1:  # no receiver was split by the previous call: nothing to copy
        ((whole, sent),) = parts
        received, src, dst, accepted = whole.received, whole.src, whole.dst, whole.accepted
    else:
        received = {n: torch.cat([p.received[n] for p, _ in parts]) for n in parts[0][0].received}
        src = torch.cat([p.src for p, _ in parts])
        dst = torch.cat([p.dst for p, _ in parts])
        accepted = torch.cat([p.accepted for p, _ in parts])
        sent = torch.cat([d for _, d in parts])
    n_in, n_sent = int((dst < hi).sum()), int((sent < hi).sum())  # both receiver-major
    done = Delivery({n: t[:n_in] for n, t in received.items()}, src[:n_in], dst[:n_in], accepted[:n_sent])
    if n_sent == len(sent):
        return done, []
    rest = Delivery(
        {n: t[n_in:].clone() for n, t in received.items()}, src[n_in:], dst[n_in:], accepted[n_sent:]
    )
    return done, [(rest, sent[n_sent:])]


def rows_per_chunk(tensors: dict[str, Tensor], max_bytes: int) -> int:
    """Rows of ``tensors`` (one message each) that fit in ``max_bytes``, at least one."""
    per_row = sum(t[0].numel() * t.element_size() for t in tensors.values() if len(t))
    return max(1, int(max_bytes) // max(1, per_row))
