"""Which rows cross between processes in the wire's dtype, and the pieces that keep a replay exact.

The 2-process equality itself (bit-identical to one process with bf16 rows crossing) is in
``test_ddp.py``; these tests check the pieces in one process: the prediction spans that keep the
one-process chunks, the per-method audit, the federation's choice and its stated reasons, the
owner merge and the byte book.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lightning_fed.algorithms import ABPS, DeceFL, DFedAvgM, EdgeDRM, FedAvg, FedProx, LocalOnly
from lightning_fed.comm import BFloat16Hook, FaultInjection, Wire
from lightning_fed.distributed import shard_bounds
from lightning_fed.distributed.collectives import CollectiveTimer, gather_rows, pick_owned
from lightning_fed.distributed.shards import chunk_spans, prefix_lengths
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation
from tests.distributed.fakes import two_ranks


@pytest.mark.parametrize("chunk", [1, 7, 64])
@pytest.mark.parametrize("seed", range(6))
def test_chunk_spans_keep_the_one_process_chunks(chunk: int, seed: int) -> None:
    """Random shards of up to 300 models on 1-5 processes: the spans are contiguous and cover every
    model; every one-process chunk ``[k chunk, (k + 1) chunk)`` lies in one span, the span of the
    process holding its first model; and every model a process predicts but does not train lies in
    the borrowed prefix of its own shard (brute force over the models)."""
    gen = torch.Generator().manual_seed(seed)
    world = int(torch.randint(1, 6, (1,), generator=gen))
    models = int(torch.randint(world, 300, (1,), generator=gen))
    bounds = shard_bounds(torch.randint(0, 50, (models,), generator=gen).tolist(), world)
    spans = chunk_spans(bounds, models, chunk)
    prefix = prefix_lengths(bounds, spans)
    assert spans[0][0] == 0 and spans[-1][1] == models
    assert all(spans[r][1] == spans[r + 1][0] for r in range(world - 1))
    for start in range(0, models, chunk):
        owner = next(r for r, (lo, hi) in enumerate(bounds) if lo <= start < hi)
        a, b = spans[owner]
        assert a <= start and min(start + chunk, models) <= b
    for r, (a, b) in enumerate(spans):
        for m in range(a, b):
            q = next(q for q, (lo, hi) in enumerate(bounds) if lo <= m < hi)
            assert q == r or (q > r and m < bounds[q][0] + prefix[q]), (r, m, q)
        if b > a:
            assert a >= bounds[r][0]


def test_prefixes_are_below_one_chunk_per_boundary() -> None:
    """230 centers on 2 processes, chunks of 64: rank 0 predicts models 0-127 and trains 0-114, so
    it borrows the 13 first rows of rank 1's shard; rank 1 predicts 128-229 and borrows nothing."""
    bounds = [(0, 115), (115, 230)]
    spans = chunk_spans(bounds, 230, 64)
    assert spans == [(0, 128), (128, 230)]
    assert prefix_lengths(bounds, spans) == [0, 13]


class UserGossip(DeceFL):
    """A user's subclass of an audited method: audited on its own, so not by inheritance."""


@pytest.mark.parametrize("method", [LocalOnly(), DeceFL(), DFedAvgM(), EdgeDRM(), FedAvg()])
def test_audited_methods_need_only_owned_rows(method: object) -> None:
    assert method.replay_blocker() is None


@pytest.mark.parametrize(
    ("method", "reason"),
    [
        (ABPS(), "ABPS's aggregation is not audited"),
        (FedProx(), "FedProx's aggregation is not audited"),
        (UserGossip(), "UserGossip's aggregation is not audited"),
        (FedAvg(momentum=0.5), "algorithm.momentum=0.5 keeps a buffer per center"),
    ],
)
def test_unaudited_methods_say_why(method: object, reason: str) -> None:
    assert reason in method.replay_blocker()


def _federation(algorithm: object, wire: Wire) -> Federation:
    data = make_federation([20, 30, 25, 18, 22, 27])
    trainer = TrainerConfig(rounds=3, batch_size=8)
    return Federation(data, MortalityMLP(hidden=(4,)), algorithm, trainer, fabric=two_ranks(), wire=wire)


def test_bf16_wire_and_an_audited_method_gather_in_bf16() -> None:
    fed = _federation(DFedAvgM(), Wire(hook=BFloat16Hook()))
    assert fed.engine.wire_dtype == torch.bfloat16
    assert fed.wire.merge is not None
    assert "trained rows cross in torch.bfloat16" in fed.engine.training_path


@pytest.mark.parametrize(
    ("algorithm", "wire", "why"),
    [
        (ABPS(), Wire(hook=BFloat16Hook()), "ABPS's aggregation is not audited"),
        (
            FedAvg(),
            Wire(hook=BFloat16Hook(), faults=FaultInjection(corrupt={1: {0: {"scale": 3}}})),
            "wire.faults corrupt messages before the cast",
        ),
        (FedAvg(), Wire(), ""),  # a float32 wire: nothing to gain, nothing to say
    ],
)
def test_rows_stay_full_precision_with_the_reason(algorithm: object, wire: Wire, why: str) -> None:
    fed = _federation(algorithm, wire)
    assert fed.engine.wire_dtype is None and fed.wire.merge is None
    assert "trained rows cross in torch.float32" in fed.engine.training_path
    assert why in fed.engine.training_path


def test_pick_owned_takes_each_entry_from_its_owner() -> None:
    """Process 0 computed ``[10, 11, 12]``, process 1 ``[20, 21, 22]``; entries owned by 1, 0 and
    nobody (-1) give ``[20, 11, 12]`` (the last keeps the local value), and the bytes are booked."""
    gathered = torch.tensor([[10.0, 11.0, 12.0], [20.0, 21.0, 22.0]])
    fabric = SimpleNamespace(world_size=2, all_gather=lambda t: gathered)
    timer = CollectiveTimer()
    out = pick_owned(fabric, gathered[0].clone(), torch.tensor([1, 0, -1]), timer)
    assert out.tolist() == [20.0, 11.0, 12.0]
    assert timer.sent == {"owner values": {"torch.float32": 12}}


def test_the_byte_book_counts_what_this_process_sends() -> None:
    """Shards of 3 and 2 rows: rank 1 pads its 2 rows to 3 for the all_gather, so it sends 3 rows;
    one process sends nothing."""
    timer = CollectiveTimer()
    fabric = SimpleNamespace(world_size=2, global_rank=1, all_gather=lambda t: torch.stack([t, t]))
    gather_rows(fabric, torch.zeros(2, 4, dtype=torch.bfloat16), [3, 2], timer, "rows")
    assert timer.sent == {"rows": {"torch.bfloat16": 3 * 4 * 2}}
    assert timer.bytes_sent("torch.bfloat16") == 24 and timer.bytes_sent("torch.float32") == 0
    alone = CollectiveTimer()
    gather_rows(SimpleNamespace(world_size=1, global_rank=0), torch.zeros(2, 4), [2], alone)
    assert alone.sent == {}
