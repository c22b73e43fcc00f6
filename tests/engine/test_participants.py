"""``Engine.participants`` (client sampling): only the sampled models train, to the same bits as in
a round of every model.

The reference is what client sampling did before: train every model, then put the others back
with :meth:`Engine.keep_rows` (their parameters, optimizer states and scheduler counts as before
the round). Every engine keys a model's draws (batch order, dropout, augmentation) by its global
center id and never mixes models, so a participant's round cannot depend on who else trains:
the two must agree with ``torch.equal`` in float64 and float32, with dropout, a frozen phase, a
mask, flipped labels and a per-step scheduler; and the non-participants must not be computed at
all (the test that fails when every model still trains).
"""

from __future__ import annotations

import copy

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import FedAvg
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.engine.passes import PassEngine
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

SIZES = [40, 7, 130, 3, 64, 200, 18, 9, 33, 2]
SAMPLED = torch.tensor([1, 0, 1, 0, 0, 1, 1, 0, 0, 1], dtype=torch.bool)


class Scheduled(MortalityMLP):
    """The built-in MLP with a per-step StepLR from ``configure_optimizers``."""

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _engine(kind: str, dtype: torch.dtype, module: MortalityMLP, *, frozen: bool, flip: bool):
    """A set-up engine of ``kind`` over :data:`SIZES` (one round trained by every model, so the
    optimizer states are not fresh), with a frozen phase, a mask and flipped labels as asked."""
    data = make_federation(SIZES)
    train = [(c.x_train, c.y_train) for c in data.centers]
    engine = {"packed": PackedEngine, "sequential": SequentialEngine}.get(kind)
    engine = engine() if engine is not None else PassEngine(PackedEngine(), 3)
    torch.manual_seed(0)
    module = copy.deepcopy(module).to(dtype)
    engine.setup(module, train, batch_size=16, epochs=2, seed=11, dtype=dtype)
    engine.train_round(0)
    if frozen:
        names = list(engine.get_params())
        engine.set_phase(1, frozen=(names[0],))
        mask = {
            n: torch.rand(len(SIZES), *t.shape[1:], generator=torch.Generator().manual_seed(3)) > 0.3
            for n, t in engine.get_params().items()
        }
        engine.set_mask(mask)
    if flip:
        engine.flip_labels({0, 2, 3})
    return engine


def _assert_same_tree(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same_tree(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same_tree(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("kind", ["packed", "passes", "sequential"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    ("module", "frozen", "flip"),
    [
        (MortalityMLP(in_features=6, hidden=(8,), dropout=0.3), False, False),
        (MortalityMLP(in_features=6, hidden=(8, 4), dropout=0.2), True, True),
        (Scheduled(in_features=6, hidden=(8,), dropout=0.0), False, False),
    ],
    ids=["dropout", "phase-mask-flip", "scheduler"],
)
def test_participants_train_as_in_a_round_of_every_model(kind, dtype, module, frozen, flip) -> None:
    ref = _engine(kind, dtype, module, frozen=frozen, flip=flip)
    got = _engine(kind, dtype, module, frozen=frozen, flip=flip)
    before = copy.deepcopy(ref.state_dict())
    want_loss = ref.train_round(1)
    ref.keep_rows(before, ~SAMPLED)
    got.participants = SAMPLED
    loss = got.train_round(1)
    got.participants = None
    assert torch.equal(loss[SAMPLED], want_loss[SAMPLED].to(loss))
    assert torch.isnan(loss[~SAMPLED]).all()
    assert not got.last_diverged.any()
    _assert_same_tree(got.state_dict(), ref.state_dict())
    # And the round after, with every model again: the states carried on identically.
    assert torch.equal(got.train_round(2), ref.train_round(2))
    _assert_same_tree(got.state_dict(), ref.state_dict())


@pytest.mark.parametrize("kind", ["packed", "passes", "sequential"])
def test_no_participants_trains_nothing_and_a_wrong_shape_is_refused(kind) -> None:
    module = MortalityMLP(in_features=6, hidden=(8,))
    engine = _engine(kind, torch.float64, module, frozen=False, flip=False)
    before = copy.deepcopy(engine.state_dict())
    engine.participants = torch.zeros(len(SIZES), dtype=torch.bool)
    assert torch.isnan(engine.train_round(1)).all()
    _assert_same_tree(engine.state_dict(), before)
    engine.participants = torch.ones(3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"participants must be a bool tensor \[10\]"):
        engine.train_round(1)


def test_a_sampled_round_computes_only_the_sampled_centers(monkeypatch) -> None:
    """Fails where client sampling trains every center and restores the others: the rows the
    packed engine gathers in a sampled round are the sampled centers' batches only."""
    data = make_federation(SIZES)
    fed = Federation(
        data,
        MortalityMLP(hidden=(8,), dropout=0.0),
        FedAvg(),
        TrainerConfig(rounds=2, batch_size=16, engine=PackedEngine(), centers_per_round=3, local_epochs=1),
        fabric=Fabric(accelerator="cpu", devices=1, precision="64-true"),
        seed=5,
    )
    gathered = []
    gather = PackedEngine._gather

    def counting(self, rows):
        gathered.append(int((rows != self.pad_row).sum()))
        return gather(self, rows)

    monkeypatch.setattr(PackedEngine, "_gather", counting)
    fed._run_round(0)
    sampled = fed.participants(0)
    rows = sum(n for n, s in zip(SIZES, sampled.tolist(), strict=True) if s)
    assert sum(gathered) == rows  # one local epoch: each sampled center's rows once, no one else's
