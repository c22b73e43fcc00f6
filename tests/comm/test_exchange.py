"""The one exchange path: send (booked), validate at the receivers, drop the rejected."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from lightning_fed.comm import SERVER, NormBound, Wire
from lightning_fed.comm.exchange import exchange, peer_exchange, peer_exchange_by_receiver, rows


def test_rejected_messages_are_dropped_but_stay_booked() -> None:
    """Three messages of 2 float32 (8 bytes) to the server (median reference): the NaN one and the
    one 100x the median are dropped, the honest one arrives; all three are on the ledger."""
    wire = Wire()
    payload = {"w": torch.tensor([[1.0, 1.0], [math.nan, 0.0], [100.0, 100.0], [1.2, 1.0]])}
    src = torch.tensor([0, 1, 2, 3])
    got = exchange(wire, payload, src, torch.full_like(src, SERVER), round_idx=0)
    assert got.accepted.tolist() == [True, False, False, True]
    assert got.src.tolist() == [0, 3] and got.dst.tolist() == [SERVER, SERVER]
    assert torch.equal(got.received["w"], payload["w"][[0, 3]])
    assert wire.ledger.total() == 4 * 8 and wire.rejected_in(0) == 2


def test_a_broadcast_stays_one_message_and_the_mask_says_who_took_it() -> None:
    """The server sends one [1, 2] model to 3 centers; center 1's own norm is 100x smaller, so it
    rejects (ratio > 5); the broadcast row is kept whole, 3 messages are booked."""
    wire = Wire()
    own = {"w": torch.tensor([[1.0, 0.0], [0.01, 0.0], [1.0, 0.0]])}
    dst = torch.tensor([0, 1, 2])
    got = exchange(wire, {"w": torch.tensor([[1.0, 0.0]])}, torch.full_like(dst, SERVER), dst, 0, own=own)
    assert got.accepted.tolist() == [True, False, True] and got.dst.tolist() == [0, 2]
    assert got.received["w"].shape == (1, 2)
    assert wire.ledger.total() == 3 * 8


def test_no_edge_sends_nothing() -> None:
    wire = Wire()
    empty = torch.zeros(0, dtype=torch.int64)
    got = exchange(wire, {"w": torch.ones(0, 3)}, empty, empty, 0)
    assert got.received["w"].shape == (0, 3) and got.accepted.numel() == 0
    assert wire.ledger.total() == 0


def test_checked_view_and_extra_validity_test() -> None:
    """The norm test sees only ``checked(received)``; ``valid`` drops a message without counting a
    wire rejection."""
    wire = Wire()
    payload = {"w": torch.ones(3, 2), "flag": torch.tensor([[1e9], [1.0], [0.0]])}
    src, dst = torch.tensor([0, 1, 2]), torch.tensor([1, 2, 0])
    got = exchange(
        wire,
        payload,
        src,
        dst,
        0,
        own={"w": torch.ones(3, 2)},
        checked=lambda r: {"w": r["w"]},
        valid=lambda r: r["flag"][:, 0] > 0,
    )
    assert got.accepted.tolist() == [True, True, False]
    assert got.src.tolist() == [0, 1] and wire.rejected_total() == 0
    assert torch.equal(got.received["flag"], payload["flag"][:2])


def test_peer_exchange_validates_against_the_receivers_own_parameters() -> None:
    """Center 2 (norm 10x the others) sends to 0 (ratio 10 > 5: rejected) and 0 sends to 2 (ratio
    0.1: accepted)."""
    wire = Wire()
    shared = {"w": torch.tensor([[1.0], [1.0], [10.0]])}
    got = peer_exchange(wire, shared, torch.tensor([2, 0]), torch.tensor([0, 2]), 0)
    assert got.accepted.tolist() == [False, True]
    assert got.src.tolist() == [0] and got.dst.tolist() == [2]
    assert torch.equal(got.received["w"], rows(shared, torch.tensor([0]))["w"])


def test_a_chunked_peer_exchange_is_the_single_call() -> None:
    """20 centers with spread norms, 60 random edges, a strict norm test (some rejected): sending
    a few messages a call (``max_bytes`` of 3 messages of 2 x 3 float32 = 24 B each) gives the
    same accepted messages, mask, ledger and rejection count as one call."""
    g = torch.Generator().manual_seed(0)
    shared = {
        "w": torch.randn(20, 2, generator=g) * torch.linspace(0.5, 3.0, 20)[:, None],
        "b": torch.randn(20, 1, generator=g),
    }
    src = torch.randint(0, 20, (60,), generator=g)
    dst = (src + torch.randint(1, 20, (60,), generator=g)) % 20
    wires = [Wire(max_norm_ratio=1.3), Wire(max_norm_ratio=1.3)]
    one = peer_exchange(wires[0], shared, src, dst, 3)
    chunked = peer_exchange(wires[1], shared, src, dst, 3, max_bytes=3 * 12)
    assert 0 < wires[0].rejected_in(3) == wires[1].rejected_in(3)
    assert torch.equal(one.accepted, chunked.accepted)
    assert torch.equal(one.src, chunked.src) and torch.equal(one.dst, chunked.dst)
    assert all(torch.equal(one.received[n], chunked.received[n]) for n in shared)
    ta, tb = wires[0].ledger.table(), wires[1].ledger.table()
    assert all(torch.equal(ta[k], tb[k]) for k in ta)


def _receiver_major_edges(g: torch.Generator, centers: int, edges: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random edges sorted by receiver (stable: a receiver's edges keep their drawn order); centers
    0 and ``centers - 1`` receive nothing."""
    dst = torch.randint(1, centers - 1, (edges,), generator=g)
    src = (dst + torch.randint(1, centers, (edges,), generator=g)) % centers
    order = torch.argsort(dst, stable=True)
    return src[order], dst[order]


@pytest.mark.parametrize("bound", ["ratio", "norm_bound"])
def test_peer_exchange_by_receiver_hands_out_peer_exchange_by_ranges(bound: str) -> None:
    """20 centers, 60 receiver-major edges, a strict norm test (some rejected), 3 messages a call:
    the ranges are ascending, cover every center (the two that receive nothing included), each
    holds exactly the messages to its receivers, at most one call's messages plus the split
    receiver's earlier ones, and concatenated they are ``peer_exchange``'s delivery, mask, ledger and
    rejections. With ``NormBound`` the per-call medians are the same because the calls are."""
    g = torch.Generator().manual_seed(0)
    shared = {
        "w": torch.randn(20, 2, generator=g) * torch.linspace(0.5, 3.0, 20)[:, None],
        "b": torch.randn(20, 1, generator=g),
    }
    src, dst = _receiver_major_edges(g, 20, 60)

    def wire() -> Wire:
        if bound == "ratio":
            return Wire(max_norm_ratio=1.3)
        return Wire(norm_bound=NormBound(max_update_ratio=1.5, min_projection_ratio=None))

    wires = [wire(), wire()]
    anchors = {n: t * 0.9 for n, t in shared.items()}
    for w in wires:
        if bound == "norm_bound":
            w.start_round(3, anchors)
    one = peer_exchange(wires[0], shared, src, dst, 3, max_bytes=3 * 12)
    parts = list(peer_exchange_by_receiver(wires[1], shared, src, dst, 3, max_bytes=3 * 12))
    assert 0 < wires[0].rejected_in(3) == wires[1].rejected_in(3)
    bounds = [(lo, hi) for lo, hi, _ in parts]
    assert bounds[0][0] == 0 and bounds[-1][1] == 20
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(bounds))
    longest = int(torch.bincount(dst).max())
    for lo, hi, got in parts:
        assert bool(((got.dst >= lo) & (got.dst < hi)).all())
        assert len(got.accepted) == int(((dst >= lo) & (dst < hi)).sum())
        assert len(got.src) <= 3 + longest - 1
    assert torch.equal(torch.cat([p.accepted for *_, p in parts]), one.accepted)
    assert torch.equal(torch.cat([p.src for *_, p in parts]), one.src)
    assert torch.equal(torch.cat([p.dst for *_, p in parts]), one.dst)
    for n in shared:
        assert torch.equal(torch.cat([p.received[n] for *_, p in parts]), one.received[n])
    ta, tb = wires[0].ledger.table(), wires[1].ledger.table()
    assert all(torch.equal(ta[k], tb[k]) for k in ta)


def test_peer_exchange_by_receiver_without_edges_and_with_unsorted_edges() -> None:
    """No edge: one empty range over every center, nothing booked; edges not receiver-major are
    refused (the ranges could not be complete)."""
    shared = {"w": torch.ones(4, 2)}
    empty = torch.zeros(0, dtype=torch.int64)
    wire = Wire()
    ((lo, hi, got),) = list(peer_exchange_by_receiver(wire, shared, empty, empty, 0))
    assert (lo, hi) == (0, 4) and got.received["w"].shape == (0, 2) and wire.ledger.total() == 0
    with pytest.raises(ValueError, match="receiver-major"):
        list(peer_exchange_by_receiver(wire, shared, torch.tensor([0, 1]), torch.tensor([2, 1]), 0))


def test_peer_exchange_decides_as_the_receivers_own_rows_do() -> None:
    """The receivers' own norms are computed once per center (issue 33): on 20 centers, 60 edges
    and a strict test, the accepted mask is the ratio test of every message against its receiver's
    own row, ``||r_e|| <= 1.3 ||theta_dst_e||``, written out with the rows gathered per edge."""
    g = torch.Generator().manual_seed(1)
    shared = {
        "w": torch.randn(20, 2, 3, generator=g) * torch.linspace(0.5, 3.0, 20)[:, None, None],
        "b": torch.randn(20, 1, generator=g),
    }
    src = torch.randint(0, 20, (60,), generator=g)
    dst = (src + torch.randint(1, 20, (60,), generator=g)) % 20
    got = peer_exchange(Wire(max_norm_ratio=1.3), shared, src, dst, 0)

    def norms(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        return sum(t.double().reshape(len(t), -1).pow(2).sum(1) for t in tensors.values()).sqrt()

    expected = norms(rows(shared, src)) <= 1.3 * norms(rows(shared, dst))
    assert 0 < int((~expected).sum()) < 60
    assert torch.equal(got.accepted, expected)


def test_message_norms_in_chunks_are_the_bits_of_one_call(monkeypatch) -> None:
    """Norms taken a few rows at a time (never one row alone) equal the one-call float64 formula
    bit for bit, for float32 and float64 payloads and row counts around the chunk size."""
    import lightning_fed.comm.wire as wire_module

    monkeypatch.setattr(wire_module, "NORM_CHUNK_BYTES", 3 * 8 * 13)  # 3 rows of 13 numbers
    g = torch.Generator().manual_seed(2)
    for dtype in (torch.float32, torch.float64):
        for n in (1, 2, 3, 4, 5, 7, 10):
            payload = {
                "w": torch.randn(n, 3, 4, generator=g).to(dtype),
                "b": torch.randn(n, 1, generator=g).to(dtype),
            }
            one = sum(t.double().reshape(n, -1).pow(2).sum(1) for t in payload.values()).sqrt()
            assert torch.equal(wire_module.message_norms(payload), one), (dtype, n)


def test_update_norms_in_chunks_are_the_bits_of_the_materialized_difference(monkeypatch) -> None:
    """``message_norms(r, minus=(start, owner))`` subtracts each chunk's own anchor rows; it must give
    the bits of ``message_norms({n: r[n] - start[n][owner]})`` (the E x |W| anchors materialized),
    for float32 and float64, row counts around the chunk size, and a one-row broadcast payload."""
    import lightning_fed.comm.wire as wire_module

    monkeypatch.setattr(wire_module, "NORM_CHUNK_BYTES", 3 * 8 * 13)  # 3 rows of 13 numbers
    g = torch.Generator().manual_seed(4)
    for dtype in (torch.float32, torch.float64):
        start = {
            "w": torch.randn(6, 3, 4, generator=g).to(dtype),
            "b": torch.randn(6, 1, generator=g).to(dtype),
        }
        for n in (1, 2, 3, 4, 5, 7, 10):
            owner = torch.randint(0, 6, (n,), generator=g)
            for m in sorted({n, 1}):  # a message per edge, and one broadcast to every owner
                got = {k: torch.randn(m, *t.shape[1:], generator=g).to(dtype) for k, t in start.items()}
                want = wire_module.message_norms({k: got[k] - start[k][owner] for k in got})
                assert torch.equal(wire_module.message_norms(got, minus=(start, owner)), want), (
                    dtype,
                    n,
                    rows,
                )
