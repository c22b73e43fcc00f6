"""The wire and the byte ledger."""

from __future__ import annotations

import torch

from lightning_fed.comm import SERVER, Ledger, Wire


def test_ledger_merges_both_directions_of_an_edge() -> None:
    ledger = Ledger()
    ledger.record(0, torch.tensor([0, 2]), torch.tensor([2, 0]), 10)
    ledger.record(0, torch.tensor([1]), torch.tensor([SERVER]), 7)
    ledger.record(1, torch.tensor([0]), torch.tensor([1]), 3)
    table = ledger.table()
    rows = set(zip(*(table[k].tolist() for k in ("round", "u", "v", "bytes")), strict=True))
    assert rows == {(0, 0, 2, 20), (0, SERVER, 1, 7), (1, 0, 1, 3)}
    assert ledger.total() == 30
    assert ledger.round_total(0) == 27
    assert ledger.per_center(3).tolist() == [23, 10, 20]
    assert ledger.per_center(3, round_idx=1).tolist() == [3, 3, 0]


def test_ledger_state_round_trip() -> None:
    ledger = Ledger()
    ledger.record(3, torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([5, 6]))
    other = Ledger()
    other.load_state_dict(ledger.state_dict())
    assert other.total() == 11
    assert other.per_center(3).tolist() == [5, 11, 6]


def test_wire_counts_encoded_bytes_per_message_and_broadcast() -> None:
    wire = Wire()
    payload = {"w": torch.zeros(3, 4, 5), "b": torch.zeros(3, 5, dtype=torch.float64)}
    out = wire.send(payload, torch.arange(3), torch.full((3,), SERVER), 0)
    assert out["w"].shape == (3, 4, 5)
    per_message = 4 * 5 * 4 + 5 * 8
    assert wire.ledger.total() == 3 * per_message
    wire.send({"w": torch.zeros(1, 10)}, torch.full((3,), SERVER), torch.arange(3), 0)
    assert wire.ledger.total() == 3 * per_message + 3 * 40
