"""A plain ``lightning.LightningModule`` federated as written, against Lightning's own ``Trainer``.

The reference for "as written" is ``lightning.pytorch.Trainer.fit`` of the same module, from the
same initial weights, on the same batches in the same order: a one-center ``LocalOnly``
federation never mixes anything, so after ``R`` rounds of ``E`` local epochs it must hold the
parameters ``Trainer.fit`` reaches after ``R * E`` epochs (the federation's batch order of round
``r`` is fed to the Trainer's epochs ``r E .. r E + E - 1`` through a batch sampler). The module
uses a class-weighted loss, logs with ``self.log`` and (in the scheduler test) returns a StepLR.
"""

from __future__ import annotations

import copy
from typing import Any

import lightning as L
import pytest
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

from lightning_fed.algorithms import FedAvg, LocalOnly
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.engine.schedule import center_batches
from lightning_fed.federation import Federation
from lightning_fed.models.adapter import LightningAdapter
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

ROUNDS, EPOCHS, BATCH, SEED = 3, 1, 8, 11


class PlainNet(L.LightningModule):
    """An ordinary LightningModule: no lightning_fed base class."""

    def __init__(self, scheduler: str | None = None, optimizer: str = "sgd") -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
        self.scheduler, self.optimizer = scheduler, optimizer

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x).squeeze(-1)

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        weight = torch.tensor(3.0, dtype=x.dtype)
        loss = nn.functional.binary_cross_entropy_with_logits(self(x), y, pos_weight=weight)
        self.log("bce", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        if self.optimizer == "adamw":
            opt: torch.optim.Optimizer = torch.optim.AdamW(self.parameters(), lr=0.01, weight_decay=0.1)
        else:
            opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        if self.scheduler is None:
            return opt
        step = self.scheduler == "step"
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2 if step else 1, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": self.scheduler}}


class ReplayBatches(Sampler[list[int]]):
    """Yields the federation's batches: Trainer epoch ``i`` is local epoch ``i % E`` of round ``i // E``."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        r, e = divmod(self.epoch, EPOCHS)
        per_epoch = -(-self.n // BATCH)
        batches = center_batches(self.n, BATCH, EPOCHS, SEED, r, 0)[e * per_epoch : (e + 1) * per_epoch]
        self.epoch += 1
        return iter([b[b >= 0].tolist() for b in batches])

    def __len__(self) -> int:
        return -(-self.n // BATCH)


def _federation(engine: Any, module: L.LightningModule, algorithm: Any = None) -> Federation:
    trainer = TrainerConfig(rounds=ROUNDS, local_epochs=EPOCHS, batch_size=BATCH, engine=engine)
    return Federation(make_federation([37]), module, algorithm or LocalOnly(), trainer, seed=SEED)


def _trainer_reference(start: L.LightningModule, x: Tensor, y: Tensor) -> tuple[dict[str, Tensor], float]:
    model = copy.deepcopy(start)
    loader = DataLoader(TensorDataset(x, y), batch_sampler=ReplayBatches(len(y)))
    trainer = L.Trainer(
        max_epochs=ROUNDS * EPOCHS,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, loader)
    return {n: p.detach() for n, p in model.named_parameters()}, float(trainer.callback_metrics["bce"])


@pytest.mark.parametrize(
    ("engine_cls", "scheduler", "optimizer"),
    [
        (SequentialEngine, None, "sgd"),
        (PackedEngine, None, "sgd"),
        (PackedEngine, None, "adamw"),
        (SequentialEngine, "epoch", "sgd"),
        (SequentialEngine, "step", "adamw"),
        (PackedEngine, "epoch", "sgd"),
        (PackedEngine, "step", "adamw"),
    ],
)
def test_one_center_local_only_matches_lightning_trainer(
    engine_cls: type, scheduler: str | None, optimizer: str
) -> None:
    fed = _federation(engine_cls(), PlainNet(scheduler, optimizer))
    assert isinstance(fed.module, LightningAdapter)
    start = copy.deepcopy(fed.module.module)  # the initial weights the federation trains from
    logged: list[float] = []
    fed.fabric.call = lambda hook, *args: (  # type: ignore[method-assign]
        logged.append(float(args[1].train_logged["bce"][0])) if hook == "on_round_end" else None
    )
    fed.fit()
    center = fed.data.centers[0]
    expected, bce = _trainer_reference(start, center.x_train, center.y_train)
    got = fed.engine.get_params()
    for name, value in expected.items():
        torch.testing.assert_close(got[f"module.{name}"][0], value, atol=1e-5, rtol=1e-4)
    assert logged[-1] == pytest.approx(bce, rel=1e-4)  # Lightning's on_epoch mean of the last epoch


def test_a_scheduler_changes_the_rate_as_lightning_does() -> None:
    """StepLR(step_size=1, gamma=0.5) per epoch: after R*E epochs the center's rate is 0.1 * 0.5^(R*E)."""
    fed = _federation(SequentialEngine(), PlainNet("epoch"))
    fed.fit()
    assert fed.engine.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** (ROUNDS * EPOCHS))


def test_a_scheduler_with_the_round_schedule_is_refused_in_one_line() -> None:
    from lightning_fed.engine.lr_schedule import Cosine

    for engine in (PackedEngine(), SequentialEngine()):
        trainer = TrainerConfig(rounds=2, batch_size=BATCH, engine=engine, lr_schedule=Cosine(horizon=2))
        with pytest.raises(ValueError, match=r"trainer\.lr_schedule and an lr_scheduler"):
            Federation(make_federation([37]), PlainNet("epoch"), LocalOnly(), trainer, seed=SEED)


def test_several_centers_packed_scheduler_matches_sequential() -> None:
    """Centers of 3 to 40 rows take different numbers of steps and epochs: each packed center's rate
    follows its own scheduler count, as each sequential center's own torch scheduler does (float32)."""
    results = []
    for engine in (PackedEngine(), SequentialEngine()):
        for interval in ("epoch", "step"):
            trainer = TrainerConfig(rounds=3, local_epochs=2, batch_size=BATCH, engine=engine)
            fed = Federation(
                make_federation([3, 9, 17, 40]), PlainNet(interval), LocalOnly(), trainer, seed=SEED
            )
            fed.fit()
            results.append(fed.engine.get_params())
    for a, b in ((results[0], results[2]), (results[1], results[3])):
        for name in a:
            torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-4)


def test_personal_layers_without_head_names_is_one_line_naming_the_method() -> None:
    with pytest.raises(
        ValueError, match=r"personal_layers=1: PlainNet does not implement head_parameter_names"
    ):
        _federation(PackedEngine(), PlainNet(), FedAvg(personal_layers=1))


def test_a_module_without_training_step_is_refused() -> None:
    class NoStep(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(6, 1)

        def forward(self, x: Tensor) -> Tensor:
            return self.lin(x).squeeze(-1)

    with pytest.raises(ValueError, match="does not define training_step or configure_optimizers"):
        _federation(PackedEngine(), NoStep())


def test_a_width_mismatch_names_the_width() -> None:
    class Wide(PlainNet):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(9, 1))

    with pytest.raises(ValueError, match="does not accept the data's 6 features"):
        _federation(PackedEngine(), Wide())


def test_head_names_that_are_not_names_are_refused_in_one_line() -> None:
    """A CenterModule whose head_parameter_names returns None (main: "'NoneType' object is not iterable")."""
    from lightning_fed.models import MortalityMLP

    class NoHead(MortalityMLP):
        def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
            return None  # type: ignore[return-value]

    with pytest.raises(ValueError, match=r"NoHead.head_parameter_names\(1\) must return a tuple"):
        _federation(PackedEngine(), NoHead(in_features=6), FedAvg(personal_layers=1))
