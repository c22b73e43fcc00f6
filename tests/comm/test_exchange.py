"""The one exchange path: send (booked), validate at the receivers, drop the rejected."""

from __future__ import annotations

import math

import torch

from lightning_fed.comm import SERVER, Wire
from lightning_fed.comm.exchange import exchange, peer_exchange, rows


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
