"""Training rows read in place (:mod:`lightning_fed.engine.rows`, :mod:`lightning_fed.data.train_rows`).

A federation's training rows are one tensor (every center's block, then a zero row), so the packed
engine gathers batches from it without a copy. The reference is the same engine given copies of the
rows (its ``torch.cat`` path): 24 uneven centers (sizes 3 to 300), so the engine's order (by steps,
descending) is not the centers' order and a row/label misplacement would show; dropout, label flips
and a round with client sampling (the participants engine, built from the engine's own rows).
Every comparison is ``torch.equal``.
"""

from __future__ import annotations

import torch

from lightning_fed.data import IID, SyntheticICU
from lightning_fed.data.train_rows import pack_train_rows
from lightning_fed.engine import PackedEngine
from lightning_fed.engine.passes import PassEngine
from lightning_fed.engine.rows import rows_in_place
from lightning_fed.models import MortalityMLP

SIZES = [40, 7, 130, 3, 64, 200, 18, 9, 300, 11, 55, 4, 90, 27, 150, 6, 33, 71, 12, 240, 5, 48, 100, 21]


def _packed_sets() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every center's rows as views of one ``[N + 1, 6]`` tensor ending in a zero row (the layout
    :func:`pack_train_rows` gives), labels as separate tensors."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.cat([torch.randn(sum(SIZES), 6, generator=gen), torch.zeros(1, 6)])
    ys = [(torch.rand(n, generator=gen) < 0.4).float() for n in SIZES]
    starts = torch.cumsum(torch.tensor([0, *SIZES[:-1]]), 0).tolist()
    return [(rows[s : s + n], y) for s, n, y in zip(starts, SIZES, ys, strict=True)]


def _engine(engine: PackedEngine | PassEngine, train: list) -> PackedEngine | PassEngine:
    torch.manual_seed(0)
    module = MortalityMLP(in_features=6, hidden=(16, 8), dropout=0.3)
    engine.setup(module, train, batch_size=16, epochs=2, seed=3, dtype=torch.float32)
    return engine


def test_in_place_rows_train_bit_identically_to_copied_rows() -> None:
    packed = _packed_sets()
    copied = [(x.clone(), y.clone()) for x, y in packed]
    for make in (PackedEngine, lambda: PassEngine(PackedEngine(), 5)):
        reads, copies = _engine(make(), packed), _engine(make(), copied)
        inner = reads.passes if isinstance(reads, PassEngine) else [reads]
        storage = packed[0][0].untyped_storage().data_ptr()
        assert all(e.x.untyped_storage().data_ptr() == storage for e in inner)  # no copy
        others = copies.passes if isinstance(copies, PassEngine) else [copies]
        assert all(e.x.untyped_storage().data_ptr() != storage for e in others)
        for r in range(3):
            if r == 1:
                reads.flip_labels({2, 8, 19})
                copies.flip_labels({2, 8, 19})
            if r == 2:  # client sampling: the participants engine is built from the engine's rows
                sampled = torch.tensor([c % 3 != 0 for c in range(len(SIZES))])
                reads.participants, copies.participants = sampled, sampled
            torch.testing.assert_close(
                reads.train_round(r), copies.train_round(r), rtol=0, atol=0, equal_nan=True
            )
            reads.participants = copies.participants = None
            for name, t in reads.get_params().items():
                assert torch.equal(t, copies.get_params()[name]), name


def test_rows_in_place_refuses_layouts_it_cannot_read() -> None:
    train = _packed_sets()
    xs = [x for x, _ in train]
    found = rows_in_place(xs, torch.float32, torch.device("cpu"))
    assert found is not None
    rows, offsets, pad_row = found
    assert pad_row == sum(SIZES) and offsets.tolist()[:3] == [0, 40, 47]
    assert torch.equal(rows[offsets[2] : offsets[2] + SIZES[2]], xs[2])
    assert rows_in_place(xs, torch.float64, torch.device("cpu")) is None  # another dtype: copied
    assert rows_in_place([xs[0], xs[1].clone()], torch.float32, torch.device("cpu")) is None  # two storages
    assert rows_in_place([xs[0], xs[0][:3]], torch.float32, torch.device("cpu")) is None  # shared rows
    base = xs[0].as_strided((sum(SIZES) + 1, 6), (6, 1), 0)
    base[-1, 0] = 1.0  # no zero row to pad with
    assert rows_in_place(xs, torch.float32, torch.device("cpu")) is None


def test_federations_lay_out_train_rows_for_the_engine() -> None:
    data = SyntheticICU(num_centers=12, num_stays=12 * 40, partitioner=IID(12)).build(0)
    xs = [c.x_train for c in data.centers]
    assert len({x.untyped_storage().data_ptr() for x in xs}) == 1
    rows, offsets, pad_row = rows_in_place(xs, torch.float32, torch.device("cpu"))
    assert offsets.tolist() == torch.cumsum(torch.tensor([0] + [len(x) for x in xs[:-1]]), 0).tolist()
    assert pad_row == sum(len(x) for x in xs) and not rows[pad_row].any()
    # packing again keeps every value (and each center's other fields)
    repacked = pack_train_rows([c for c in data.centers])
    for a, b in zip(data.centers, repacked, strict=True):
        assert torch.equal(a.x_train, b.x_train) and a.y_train is b.y_train and a.name == b.name
