"""The W&B logger of a federation: runs grouped by label, keys by section, ``round`` as the x-axis.

Lightning's ``WandbLogger`` with four changes (:class:`FederationWandbLogger`):

* ``group`` (default: the run's label, so the seeds of one config aggregate in the UI) and
  ``job_type`` (``fit``; ``test`` / ``refer`` for runs those commands log) go to ``wandb.init``;
* every key is prefixed by its section (:func:`section_key`): ``train/``, ``val/``, ``test/``,
  ``comm/`` (bytes, isolation, faults and defences), ``time/`` (seconds per phase) and
  ``selection/`` (the algorithm's own statistics: ABPS's partners and rests, ...); keys that have a
  section already (``finish/``, ``bandwidth/``) keep it;
* ``round`` is the step metric (``wandb.define_metric("*", step_metric="round")``), not
  ``trainer/global_step``;
* ``final/*`` (the summary) go to the run summary, not to one-point history charts.

Old flat keys -> new keys: docs/cli.md (W&B). W&B never needs a login here: offline by default
(:class:`lightning_fed.config.LoggerConfig`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_only

__all__ = ["FederationWandbLogger", "log_job", "section_key"]

#: The federation's own per-round keys and their section (anything else is the algorithm's).
SECTIONS = {
    "train_loss_mean": "train/loss_mean",
    "diverged_centers": "train/diverged_centers",
    "bytes_round": "comm/bytes_round",
    "mb_cumulative": "comm/mb_cumulative",
    "bytes_vs_fedavg": "comm/bytes_vs_fedavg",
    "bytes_vs_fedavg_same_rounds": "comm/bytes_vs_fedavg_same_rounds",
    "unavailable_centers": "comm/unavailable_centers",
    "rejected_payloads": "comm/rejected_payloads",
    "isolated_centers": "comm/isolated_centers",
    "ledger_isolation_rate": "comm/ledger_isolation_rate",
    "isolation_rate": "comm/isolation_rate",
    "seconds_train": "time/train",
    "seconds_aggregate": "time/aggregate",
    "seconds_eval": "time/eval",
    "seconds_collectives": "time/collectives",
}

#: The step metric.
STEP = "round"


def section_key(key: str) -> str:
    """The sectioned W&B key of a per-round scalar (``val_auroc_mean`` -> ``val/auroc_mean``).

    ``round`` and keys holding a ``/`` are kept; ``val_*`` / ``test_*`` go to ``val/`` / ``test/``;
    the federation's keys by :data:`SECTIONS`; anything else, the algorithm's own round statistics,
    to ``selection/``.
    """
    if key == STEP or "/" in key:
        return key
    if key in SECTIONS:
        return SECTIONS[key]
    for split in ("val", "test", "train"):
        if key.startswith(f"{split}_"):
            return f"{split}/{key[len(split) + 1 :]}"
    return f"selection/{key}"


class FederationWandbLogger(WandbLogger):
    """``WandbLogger`` for federations (module docstring).

    Args:
        group: W&B group (the run's label).
        job_type: W&B job type: ``fit``, ``test`` or ``refer``.
        **kwargs: As ``lightning.pytorch.loggers.WandbLogger`` (``project``, ``name``, ``save_dir``,
            ``offline``, ``config``, ``tags``, ...).
    """

    def __init__(self, group: str | None = None, job_type: str = "fit", **kwargs: Any) -> None:
        super().__init__(group=group, job_type=job_type, **kwargs)
        self._round_axis = False

    @property
    def experiment(self) -> Any:
        """The W&B run; on first use ``round`` becomes the x-axis of every key."""
        run = super().experiment
        if not self._round_axis and callable(getattr(run, "define_metric", None)):
            run.define_metric(STEP)
            run.define_metric("*", step_metric=STEP)
            self._round_axis = True
        return run

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Log ``metrics`` at round ``step`` under their sections; ``final/*`` into the run summary."""
        finals = {k: v for k, v in metrics.items() if k.startswith("final/")}
        history = {section_key(k): v for k, v in metrics.items() if not k.startswith("final/")}
        if finals:
            self.experiment.summary.update(finals)
        if history:
            if step is not None:
                history[STEP] = step
            self.experiment.log(history)


def log_job(
    run_dir: Path,
    job_type: str,
    finals: Mapping[str, Any],
    table: tuple[str, Any] | None = None,
    save_dir: Path | None = None,
) -> bool:
    """Log a ``test`` or ``refer`` job on a fit run folder as its own W&B run, in the fit's group.

    The logger settings are the fit's (``run_dir/config.yaml``); nothing is logged when they disable
    logging. The run is named ``<fit run name>-<job_type>``.

    Args:
        run_dir: The fit run folder.
        job_type: ``test`` or ``refer``.
        finals: Numbers for the run summary (as ``final/<key>``; non-numbers are left out).
        table: Optional ``(key, polars.DataFrame)`` logged as a W&B table (the referral table).
        save_dir: Where the offline W&B run goes (default: ``run_dir``; refer: its ``--out``).

    Returns:
        Whether a W&B run was logged.
    """
    import yaml

    from lightning_fed.config import LoggerConfig

    config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    settings = dict(config.get("logger") or {})
    if not settings.get("enabled", True):
        return False
    logger_config = LoggerConfig(**settings)
    logger_config.name = f"{logger_config.name or run_dir.name}-{job_type}"
    label = (config.get("output") or {}).get("label")
    numbers = {
        f"final/{k}": v for k, v in finals.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    for logger in logger_config.build(save_dir or run_dir, config, label=label, job_type=job_type):
        logger.log_metrics(numbers)
        if table is not None:
            key, frame = table
            logger.log_table(key, columns=list(frame.columns), data=[list(row) for row in frame.rows()])
        logger.experiment.finish()
    return True
