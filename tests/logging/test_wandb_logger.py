"""The federation's W&B logger with the run object mocked: sections, ``round`` as the x-axis, finals
in the summary, group and job type passed to ``wandb.init``; no W&B process is started."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_fed.config import LoggerConfig
from lightning_fed.wandb_logger import FederationWandbLogger, log_job, section_key


@pytest.fixture(autouse=True)
def _rank_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process is rank 0: an earlier test of the session (a spawned DDP run) may have left
    Lightning's ``rank_zero_only.rank`` at another rank, which silences ``log_metrics``."""
    from lightning.pytorch.utilities import rank_zero_only

    monkeypatch.setattr(rank_zero_only, "rank", 0)


class FakeRun:
    """Records what the logger does with its W&B run."""

    def __init__(self) -> None:
        self.logged: list[dict] = []
        self.summary: dict = {}
        self.defined: list[tuple] = []

    def log(self, row: dict) -> None:
        self.logged.append(dict(row))

    def define_metric(self, name: str, step_metric: str | None = None) -> None:
        self.defined.append((name, step_metric))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("round", "round"),
        ("val_auroc_mean", "val/auroc_mean"),
        ("test_auroc_std", "test/auroc_std"),
        ("test_binary_average_precision_mean", "test/binary_average_precision_mean"),
        ("train_loss_mean", "train/loss_mean"),
        ("mb_cumulative", "comm/mb_cumulative"),
        ("bytes_vs_fedavg", "comm/bytes_vs_fedavg"),
        ("isolation_rate", "comm/isolation_rate"),
        ("seconds_train", "time/train"),
        ("mean_partners", "selection/mean_partners"),
        ("partner_repeat_rate", "selection/partner_repeat_rate"),
        ("finish/stage2_loss", "finish/stage2_loss"),
        ("bandwidth/bytes_per_center", "bandwidth/bytes_per_center"),
    ],
)
def test_every_key_gets_its_section(old: str, new: str) -> None:
    assert section_key(old) == new


def _logger(tmp_path: Path) -> tuple[FederationWandbLogger, FakeRun]:
    logger = FederationWandbLogger(group="abps_x", job_type="fit", save_dir=str(tmp_path), offline=True)
    run = FakeRun()
    logger._experiment = run
    return logger, run


def test_rows_are_sectioned_at_their_round_and_finals_go_to_the_summary(tmp_path: Path) -> None:
    logger, run = _logger(tmp_path)
    logger.log_metrics({"round": 3, "val_auroc_mean": 0.7, "mean_partners": 2.0}, step=3)
    logger.log_metrics({"final/test_auroc_mean": 0.8, "final/rounds": 4})
    assert run.logged == [{"round": 3, "val/auroc_mean": 0.7, "selection/mean_partners": 2.0}]
    assert run.summary == {"final/test_auroc_mean": 0.8, "final/rounds": 4}
    assert ("*", "round") in run.defined and ("round", None) in run.defined


def test_logger_config_passes_group_and_job_type_to_wandb_init(tmp_path: Path) -> None:
    (logger,) = LoggerConfig().build(tmp_path, {"seed": 0}, label="fedavg", job_type="fit")
    assert isinstance(logger, FederationWandbLogger)
    assert (logger._wandb_init["group"], logger._wandb_init["job_type"]) == ("fedavg", "fit")
    (other,) = LoggerConfig(group="mine").build(tmp_path, {}, label="fedavg", job_type="test")
    assert (other._wandb_init["group"], other._wandb_init["job_type"]) == ("mine", "test")


def test_log_job_logs_nothing_when_the_fit_did_not_log(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("logger: {enabled: false}\noutput: {label: x}\n")
    assert log_job(tmp_path, "test", {"test_auroc_mean": 0.5}) is False
    assert not (tmp_path / "wandb").exists()
