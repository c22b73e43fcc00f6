"""A module's own ``training_step`` is the loss both engines train (issue 28).

The reference is a hand loop: for each center, the same batches in the same order
(:func:`lightning_fed.engine.schedule.center_batches`), ``torch.optim.Adam`` on a copy of the
module, and the user's loss ``BCEWithLogits(pos_weight=5)`` written out directly. Before issue 28
both engines trained the built-in ``loss_rows`` (plain BCE) and never called ``training_step``.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.engine.schedule import center_batches
from lightning_fed.models import MortalityMLP

SIZES = [1, 3, 8, 13, 17, 32, 33, 47]
BATCH, EPOCHS, SEED, ROUNDS = 16, 2, 5, 2
POS_WEIGHT = 5.0


class WeightedMLP(MortalityMLP):
    """The built-in MLP with a class-weighted loss and a logged value, in a ``training_step``."""

    calls = 0

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        type(self).calls += 1
        x, y = batch
        weight = torch.tensor(POS_WEIGHT, dtype=x.dtype)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(self(x), y, pos_weight=weight)
        self.log("weighted_bce", loss)
        self.log("positives", y.sum())
        return loss


class BranchingMLP(WeightedMLP):
    """A ``training_step`` with data-dependent Python control flow, which ``vmap`` cannot run."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        if float(batch[1].sum()) > 1e9:  # .item() inside vmap raises; the engine loops instead
            raise AssertionError
        return super().training_step(batch, batch_idx)


class IndexedMLP(WeightedMLP):
    """A loss that reads ``batch_idx`` (each center's own index within its local epoch)."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return super().training_step(batch, batch_idx) * (1.0 + 0.5 * batch_idx)


def _data(dtype: torch.dtype) -> list[tuple[Tensor, Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.randn(n, 6, generator=gen, dtype=dtype), (torch.rand(n, generator=gen) < 0.3).to(dtype))
        for n in SIZES
    ]


def _module(cls: type = WeightedMLP) -> MortalityMLP:
    torch.manual_seed(1)
    return cls(in_features=6, hidden=(8,), dropout=0.0).to(torch.float64)


def _hand_loop(
    module: MortalityMLP, train: list[tuple[Tensor, Tensor]], indexed: bool = False
) -> dict[str, Tensor]:
    """Each center alone: Adam on the weighted BCE over the engines' batches, rounds without mixing
    (``indexed``: times ``1 + 0.5 * batch_idx``, the batch's index within its epoch)."""
    finals = []
    for c, (x, y) in enumerate(train):
        model = copy.deepcopy(module)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
        per_epoch = -(-len(y) // BATCH)
        for r in range(ROUNDS):
            for t, b in enumerate(center_batches(len(y), BATCH, EPOCHS, SEED, r, c)):
                rows = b[b >= 0]
                opt.zero_grad()
                logits = model(x[rows])
                weight = torch.tensor(POS_WEIGHT, dtype=x.dtype)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    logits, y[rows], pos_weight=weight
                )
                (loss * (1.0 + 0.5 * (t % per_epoch)) if indexed else loss).backward()
                opt.step()
        finals.append(dict(model.named_parameters()))
    return {n: torch.stack([f[n].detach() for f in finals]) for n in finals[0]}


def _run(engine: PackedEngine | SequentialEngine, module: MortalityMLP, train: list) -> PackedEngine:
    engine.setup(module, train, batch_size=BATCH, epochs=EPOCHS, seed=SEED, dtype=torch.float64)
    for r in range(ROUNDS):
        engine.train_round(r)
    return engine


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_training_step_is_the_loss_both_engines_train(engine_cls: type) -> None:
    train = _data(torch.float64)
    module = _module()
    expected = _hand_loop(module, train)
    WeightedMLP.calls = 0
    engine = _run(engine_cls(), module, train)
    assert WeightedMLP.calls > 0
    got = engine.get_params()
    assert max(float((got[n] - expected[n]).abs().max()) for n in expected) < 1e-10
    assert "training_step" in engine.training_path


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_batch_idx_is_each_centers_index_in_its_epoch(engine_cls: type) -> None:
    train = _data(torch.float64)
    expected = _hand_loop(_module(IndexedMLP), train, indexed=True)
    engine = _run(engine_cls(), _module(IndexedMLP), train)
    got = engine.get_params()
    assert max(float((got[n] - expected[n]).abs().max()) for n in expected) < 1e-10


def test_batch_idx_use_is_read_from_the_source() -> None:
    from lightning_fed.engine.training_step import reads_batch_idx

    assert reads_batch_idx(_module(IndexedMLP)) and not reads_batch_idx(_module(WeightedMLP))


def test_plain_bce_would_differ() -> None:
    """The check has power: the built-in loss (what main trained) ends far from the weighted one."""
    train = _data(torch.float64)
    expected = _hand_loop(_module(), train)
    plain = _run(PackedEngine(), _module(MortalityMLP), train).get_params()
    assert max(float((plain[n] - expected[n]).abs().max()) for n in expected) > 1e-4


def test_unvmappable_training_step_runs_per_center_with_the_same_result() -> None:
    train = _data(torch.float64)
    expected = _hand_loop(_module(BranchingMLP), train)
    engine = _run(PackedEngine(), _module(BranchingMLP), train)
    assert engine.training_path.startswith("packed loop:")
    got = engine.get_params()
    assert max(float((got[n] - expected[n]).abs().max()) for n in expected) < 1e-10


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_logged_values_are_row_weighted_round_means_per_center(engine_cls: type) -> None:
    """``positives`` logged per batch: its row-weighted round mean is sum_b rows_b * pos_b / sum_b rows_b,
    computed here from the batches of the last round."""
    train = _data(torch.float64)
    engine = _run(engine_cls(), _module(), train)
    logged = engine.last_logged
    assert set(logged) == {"positives", "weighted_bce"}
    for c, (_, y) in enumerate(train):
        batches = [b[b >= 0] for b in center_batches(len(y), BATCH, EPOCHS, SEED, ROUNDS - 1, c)]
        num = sum(len(rows) * float(y[rows].sum()) for rows in batches)
        den = sum(len(rows) for rows in batches)
        assert float(logged["positives"][c]) == pytest.approx(num / den, rel=1e-12)
    assert torch.isfinite(logged["weighted_bce"]).all()


def test_packed_and_sequential_logs_agree() -> None:
    train = _data(torch.float64)
    a = _run(PackedEngine(), _module(), train).last_logged
    b = _run(SequentialEngine(), _module(), train).last_logged
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-10)


def test_a_training_step_returning_none_is_refused_in_one_line() -> None:
    class Skips(MortalityMLP):
        def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
            return None

    with pytest.raises(TypeError, match="training_step must return the loss"):
        _run(PackedEngine(), _module(Skips), _data(torch.float64))
