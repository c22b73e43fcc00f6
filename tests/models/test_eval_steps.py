"""A module's own ``validation_step`` / ``test_step`` are called per center, as ``Trainer`` calls them.

The reference is ``lightning.pytorch.Trainer.validate`` / ``Trainer.test`` of the same module with
one center's final weights on that center's split, in batches of ``trainer.batch_size`` rows in
split order: what the step logs is Lightning's epoch mean (``on_epoch=True``, weighted by the
batch's rows), and the federation must report the same number for that center.
"""

from __future__ import annotations

import copy
from typing import Any

import lightning as L
import pytest
from lightning.fabric import Fabric
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_fed.algorithms import FedAvg, LocalOnly
from lightning_fed.callbacks.rounds import RoundsWriter
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation
from tests.models.test_lightning_contract import PlainNet

BATCH, SEED = 4, 11


class EvalNet(PlainNet):
    """PlainNet plus the evaluation hooks a Lightning user writes (a loss that differs per batch size)."""

    def validation_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y = batch
        loss = nn.functional.binary_cross_entropy_with_logits(self(x), y)
        self.log("val_bce", loss)
        self.log_dict({"val_pos": y.mean(), "batch_idx": float(batch_idx)})
        return loss

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_hit", ((self(x) > 0).to(y.dtype) == y).to(x.dtype).mean())


def _lightning(module: L.LightningModule, x: Tensor, y: Tensor, hook: str) -> dict[str, float]:
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False
    )
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=False)
    run = trainer.validate if hook == "val" else trainer.test
    (metrics,) = run(module, loader, verbose=False)
    return {k: float(v) for k, v in metrics.items()}


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_validation_and_test_step_logs_match_trainer(engine_cls: type) -> None:
    trainer = TrainerConfig(rounds=2, batch_size=BATCH, engine=engine_cls())
    fed = Federation(make_federation([23, 9, 14]), EvalNet(), FedAvg(), trainer, seed=SEED)
    fed.fit()
    summary = fed.summary()
    val, test = fed.evaluate("val"), fed.evaluate("test")
    assert sorted(val.logged) == ["batch_idx", "val_bce", "val_pos"] and sorted(test.logged) == ["test_hit"]
    params = fed.center_params()
    for c, center in enumerate(fed.data.centers):
        module = copy.deepcopy(fed.module.module)
        module.load_state_dict({n.removeprefix("module."): p[c] for n, p in params.items()})
        want = _lightning(module, center.x_val, center.y_val, "val")
        for name in ("val_bce", "val_pos", "batch_idx"):
            assert float(val.logged[name][c]) == pytest.approx(want[name], rel=1e-5, abs=1e-7)
        want = _lightning(module, center.x_test, center.y_test, "test")
        assert float(test.logged["test_hit"][c]) == pytest.approx(want["test_hit"], rel=1e-5)
    assert summary["test/test_hit"] == pytest.approx(float(test.logged["test_hit"].mean()))
    assert summary["val/val_bce"] == pytest.approx(float(val.logged["val_bce"].mean()))


def test_logged_values_land_in_rounds_parquet(tmp_path: Any) -> None:
    import polars as pl

    trainer = TrainerConfig(rounds=2, batch_size=BATCH)
    fed = Federation(
        make_federation([23, 9]),
        EvalNet(),
        LocalOnly(),
        trainer,
        seed=SEED,
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[RoundsWriter(tmp_path / "rounds.parquet")]),
    )
    fed.fit()
    frame = pl.read_parquet(tmp_path / "rounds.parquet")
    assert {"val/val_bce", "val/val_pos", "test/test_hit", "train/bce"} <= set(frame.columns)
    last = frame.filter(pl.col("round") == 1).sort("center")
    val = fed.evaluate("val")
    assert last["val/val_bce"].to_list() == pytest.approx(val.logged["val_bce"].tolist())


def test_a_module_without_eval_steps_logs_nothing() -> None:
    fed = Federation(make_federation([23, 9]), PlainNet(), LocalOnly(), TrainerConfig(rounds=1), seed=SEED)
    fed.fit()
    assert fed.evaluate("val").logged == {} and not any("/" in k for k in fed.summary())
