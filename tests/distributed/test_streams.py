"""A shard of the centers trains exactly as those centers do in the whole federation (one process).

This is what makes a DDP run equal to the one-process run: every draw of a center is keyed by its
global id (batch order, per-center dropout streams) and every packed kernel gives a center the same
bits whatever the number of centers in the call.
"""

from __future__ import annotations

import torch

from lightning_fed.engine import PackedEngine
from lightning_fed.engine.packed import CenterStreams
from lightning_fed.models import MortalityMLP
from lightning_fed.models.mlp import dropout_mask
from lightning_fed.seeding import torch_generator

SIZES = [40, 7, 130, 3, 64, 90, 18]


def _train_sets() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(n, 6, generator=gen), (torch.rand(n, generator=gen) < 0.4).float()) for n in SIZES]


def _engine(module: MortalityMLP, lo: int, hi: int, batch: int) -> PackedEngine:
    engine = PackedEngine()
    engine.setup(module, _train_sets()[lo:hi], batch_size=batch, epochs=2, seed=3, center_ids=range(lo, hi))
    return engine


def test_shards_train_bit_identically_to_the_whole_federation() -> None:
    """Shards [0, 3) and [3, 7) against all 7 centers: different parameters per center (as after a
    personalized aggregation), dropout on, short last batches, 3 rounds: every bit equal."""
    torch.manual_seed(0)
    module = MortalityMLP(in_features=6, hidden=(16, 8), dropout=0.2)
    for batch in (16, 50):
        whole = _engine(module, 0, 7, batch)
        shards = [_engine(module, 0, 3, batch), _engine(module, 3, 7, batch)]
        gen = torch.Generator().manual_seed(1)
        start = {n: t + 0.1 * torch.randn(t.shape, generator=gen) for n, t in whole.get_params().items()}
        whole.set_params(start)
        shards[0].set_params({n: t[0:3] for n, t in start.items()})
        shards[1].set_params({n: t[3:7] for n, t in start.items()})
        for r in range(3):
            loss = whole.train_round(r)
            assert torch.equal(loss, torch.cat([s.train_round(r) for s in shards]))
            parts = [s.get_params() for s in shards]
            for name, p in whole.get_params().items():
                assert torch.equal(p, torch.cat([q[name] for q in parts])), (batch, r, name)
        for name, t in whole.state_dict()["optimizer"].items():
            assert torch.equal(t, torch.cat([s.state_dict()["optimizer"][name] for s in shards])), name


def test_center_streams_are_the_centers_own_generators() -> None:
    """Row p of every draw continues center ``centers[p]``'s generator (seed, "dropout", round, center),
    whichever rows are asked for."""
    streams = CenterStreams(seed=5, round_idx=2, centers=[4, 9, 1], device=torch.device("cpu"))
    first = streams.words(3, 10).clone()
    second = streams.words(2, 4).clone()  # center 1 (row 2) sits this draw out
    for p, c in enumerate([4, 9, 1]):
        gen = torch_generator(5, "dropout", 2, c)
        expected = torch.randint(
            -(2**63), 2**63 - 1, (14 if p < 2 else 10,), dtype=torch.int64, generator=gen
        )
        assert torch.equal(first[p], expected[:10])
        if p < 2:
            assert torch.equal(second[p], expected[10:])


def test_per_center_masks_keep_the_dropout_rate_and_scale() -> None:
    """Each center's mask is 0 or 1 / P(keep) with P(keep) = round(0.8 * 2^16) / 2^16; over 64k draws
    the kept share is within 4 standard deviations (~0.006) of 0.8, per center."""
    streams = CenterStreams(seed=0, round_idx=0, centers=range(3), device=torch.device("cpu"))
    like = torch.empty(3, 256, 256)
    mask = dropout_mask(like, 0.2, streams)
    keep = round(0.8 * 2**16) / 2**16
    values = mask.unique()
    assert values.tolist()[0] == 0.0 and torch.allclose(values[1:], torch.tensor([1.0 / keep]))
    kept = (mask > 0).float().mean(dim=(1, 2))
    assert torch.all((kept - keep).abs() < 4 * (keep * (1 - keep) / 65536) ** 0.5), kept
    assert not torch.equal(mask[0], mask[1])
