"""The label-flip direction diagnostic (``benchmarks/flip_direction.py``).

Three centers upload to the server; their round-start models are ``s = (1, 1), (2, 0), (0, 2)``
(one tensor ``w`` of two entries) and their uploads ``m = s + u`` with updates ``u = (1, 0), (3, 1),
(-1, -1)``. The coordinate-wise median update is ``med = (1, 0)``, so the cosines are ``1``,
``3 / sqrt(10)`` and ``-1 / sqrt(2)``; the recorder must give exactly these, in sender order, and
record nothing for peer messages (the diagnostic is about the server's view).
"""

from __future__ import annotations

import math

import torch

from benchmarks.flip_direction import DirectionWire
from lightning_fed.comm import NormBound
from lightning_fed.comm.wire import SERVER


def test_cosines_with_the_median_update_by_hand() -> None:
    start = {"w": torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 2.0]], dtype=torch.float64)}
    update = torch.tensor([[1.0, 0.0], [3.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    wire = DirectionWire(norm_bound=NormBound())
    wire.start_round(0, start)
    src = torch.tensor([0, 1, 2])
    wire.accept({"w": start["w"] + update}, None, 0, src=src, dst=torch.full((3,), SERVER))
    ((rnd, senders, cos),) = wire.cosines
    assert rnd == 0 and torch.equal(senders, src)
    want = torch.tensor([1.0, 3 / math.sqrt(10), -1 / math.sqrt(2)], dtype=torch.float64)
    torch.testing.assert_close(cos, want, rtol=0, atol=1e-15)


def test_peer_messages_are_not_recorded() -> None:
    start = {"w": torch.randn(3, 2, dtype=torch.float64)}
    wire = DirectionWire(norm_bound=NormBound())
    wire.start_round(0, start)
    wire.accept({"w": start["w"][[1, 2]]}, None, 0, src=torch.tensor([1, 2]), dst=torch.tensor([0, 0]))
    assert wire.cosines == []
