"""Config groups that are plain settings (``fabric``, ``logger``, ``output``) and the W&B logger.

The plugin groups (``data``, ``model``, ``algorithm``, ``trainer.engine``) are chosen by
``class_path``/``init_args`` and are their classes' constructor signatures; these three groups are
small settings classes whose constructors validate their values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["FabricConfig", "LoggerConfig", "OutputConfig"]

_PRECISIONS = ("32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true", "32", "64")


class FabricConfig:
    """Arguments passed to ``lightning.fabric.Fabric``.

    Args:
        accelerator: ``"cpu"``, ``"cuda"``, ``"auto"``, ...
        strategy: Fabric strategy (``"auto"``).
        devices: Number of devices; multi-process federations are not available yet.
        precision: Local-training precision (``"32-true"``, ``"bf16-mixed"``, ...).
    """

    def __init__(
        self, accelerator: str = "auto", strategy: str = "auto", devices: int = 1, precision: str = "32-true"
    ) -> None:
        if precision not in _PRECISIONS:
            raise ValueError(f"fabric.precision must be one of {list(_PRECISIONS)}, got {precision!r}")
        if int(devices) != 1:
            raise ValueError(
                f"fabric.devices={devices}: multi-process federations (DDP-packed centers) are not "
                "available in this version; use fabric.devices=1"
            )
        self.accelerator, self.strategy, self.devices, self.precision = (
            accelerator,
            strategy,
            int(devices),
            precision,
        )

    def build(self, callbacks: list[Any], loggers: list[Any]) -> Any:
        """A launched ``Fabric`` with these settings."""
        from lightning.fabric import Fabric

        fabric = Fabric(
            accelerator=self.accelerator,
            strategy=self.strategy,
            devices=self.devices,
            precision=self.precision,
            callbacks=callbacks,
            loggers=loggers,
        )
        fabric.launch()
        return fabric


class LoggerConfig:
    """Weights & Biases logging (offline by default: no login, no network).

    Args:
        enabled: Log to W&B at all (``--logger.enabled=false`` turns it off).
        project: W&B project.
        name: Run name (default: the run directory's name).
        tags: Run tags.
        offline: Write an offline run folder under the run directory (sync later with
            ``wandb sync``); set false to stream to a W&B server you are logged in to.
    """

    def __init__(
        self,
        enabled: bool = True,
        project: str = "lightning-fed",
        name: str | None = None,
        tags: list[str] | None = None,
        offline: bool = True,
    ) -> None:
        self.enabled, self.project, self.name = enabled, project, name
        self.tags, self.offline = list(tags or []), offline

    def build(self, run_dir: Path, config: dict[str, Any]) -> list[Any]:
        """The Fabric loggers for this run (empty when disabled)."""
        if not self.enabled:
            return []
        if self.offline:
            os.environ["WANDB_MODE"] = "offline"
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("WANDB_CONSOLE", "off")
        from lightning.pytorch.loggers import WandbLogger

        logger = WandbLogger(
            project=self.project,
            name=self.name or run_dir.name,
            tags=self.tags,
            save_dir=str(run_dir),
            offline=self.offline,
            config=config,
        )
        return [logger]


class OutputConfig:
    """Where a run writes its outputs.

    Args:
        root: Folder holding run directories.
        name: Run directory name (default: ``<algorithm>-seed<seed>-<timestamp>``).
        checkpoint_every: Also checkpoint every N rounds (0: only at the end).
        progress_bar: Show the per-round progress bar.
    """

    def __init__(
        self,
        root: str = "runs",
        name: str | None = None,
        checkpoint_every: int = 0,
        progress_bar: bool = True,
    ) -> None:
        if checkpoint_every < 0:
            raise ValueError(f"output.checkpoint_every must be >= 0, got {checkpoint_every}")
        if name is not None and (not name or "/" in name or name in (".", "..")):
            raise ValueError(f"output.name must be a plain folder name, got {name!r}")
        self.root, self.name = Path(root), name
        self.checkpoint_every, self.progress_bar = int(checkpoint_every), progress_bar
