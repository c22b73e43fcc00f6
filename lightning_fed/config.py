"""Config groups that are plain settings (``fabric``, ``logger``, ``output``) and the W&B logger.

The plugin groups (``data``, ``model``, ``algorithm``, ``trainer.engine``) are chosen by
``class_path``/``init_args`` and are their classes' constructor signatures; these three groups are
small settings classes whose constructors validate their values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning_fed.precision import Precision, policy

__all__ = ["FabricConfig", "LoggerConfig", "OutputConfig"]

_STRATEGIES = ("auto", "ddp")


class FabricConfig:
    """Arguments passed to ``lightning.fabric.Fabric``.

    With ``devices x num_nodes > 1`` the centers are split across processes (DDP-packed centers,
    :mod:`lightning_fed.distributed`); the result equals the one-process run. The same command runs
    under ``fabric run``, ``torchrun`` and SLURM's ``srun``: Fabric detects the launcher from the
    environment and then starts no processes itself (docs/scale_out.md).

    Args:
        accelerator: ``"cpu"``, ``"cuda"``, ``"auto"`` (a GPU when there is one), ...
        strategy: ``"auto"`` or ``"ddp"`` (one process per device; CPU processes talk over gloo,
            GPUs over NCCL). Strategies that shard one model (FSDP, DeepSpeed) do not apply: the
            federation shards its centers itself.
        devices: Devices (processes) per node.
        num_nodes: Nodes.
        precision: Local-training precision, the one source of truth for the parameter and
            compute dtype (:mod:`lightning_fed.precision`): ``32-true`` / ``32`` float32;
            ``64-true`` / ``64`` float64 parameters; ``bf16-mixed`` float32 parameters, bfloat16
            autocast; ``bf16-true`` bfloat16 parameters. ``16-mixed`` is refused (float16 needs a
            loss scaler the engines do not have): use ``bf16-mixed``.
    """

    def __init__(
        self,
        accelerator: str = "auto",
        strategy: str = "auto",
        devices: int = 1,
        precision: Precision = "32-true",
        num_nodes: int = 1,
    ) -> None:
        policy(precision)  # one line naming fabric.precision for a refused or unknown value
        if strategy not in _STRATEGIES:
            raise ValueError(
                f"fabric.strategy must be one of {list(_STRATEGIES)}, got {strategy!r} (the federation "
                "shards its centers across processes itself; use ddp for several processes)"
            )
        for key, value in (("devices", devices), ("num_nodes", num_nodes)):
            if int(value) < 1:
                raise ValueError(f"fabric.{key} must be >= 1, got {value}")
        self.accelerator, self.strategy, self.precision = accelerator, strategy, precision
        self.devices, self.num_nodes = int(devices), int(num_nodes)

    def fabric(self, callbacks: list[Any], loggers: list[Any]) -> Any:
        """A ``Fabric`` with these settings, not launched yet."""
        from lightning.fabric import Fabric

        return Fabric(
            accelerator=self.accelerator,
            strategy=self.strategy,
            devices=self.devices,
            num_nodes=self.num_nodes,
            precision=self.precision,
            callbacks=callbacks,
            loggers=loggers,
        )

    def build(self, callbacks: list[Any], loggers: list[Any]) -> Any:
        """A launched ``Fabric`` with these settings.

        With ``strategy=ddp`` started as a plain command, launching starts the other local
        processes (each re-runs the same command line); under ``torchrun`` or ``srun`` the processes
        exist already and launching joins them; under ``fabric run`` Fabric's constructor joins them
        and launching is skipped (Fabric refuses a second launch there).
        """
        from lightning.fabric.connector import _is_using_cli

        fabric = self.fabric(callbacks, loggers)
        if not _is_using_cli():  # under `fabric run` the constructor has joined the processes already
            fabric.launch()
        return fabric


class LoggerConfig:
    """Weights & Biases logging (offline by default: no login, no network).

    Runs are grouped by label, typed by command (``job_type`` fit / test / refer), their keys
    sectioned (``train/``, ``val/``, ``test/``, ``comm/``, ``time/``, ``selection/``) over ``round``,
    and the final numbers are in the run summary (:mod:`lightning_fed.wandb_logger`; the old flat
    keys are listed in docs/cli.md).

    Args:
        enabled: Log to W&B at all (``--logger.enabled=false`` turns it off).
        project: W&B project.
        name: Run name (default: the run directory's name).
        tags: Run tags.
        offline: Write an offline run folder under the run directory (sync later with
            ``wandb sync``); set false to stream to a W&B server you are logged in to.
        group: W&B run group (default: the run's label, ``output.label``, so the seeds of one
            config aggregate in the W&B UI).
    """

    def __init__(
        self,
        enabled: bool = True,
        project: str = "lightning-fed",
        name: str | None = None,
        tags: list[str] | None = None,
        offline: bool = True,
        group: str | None = None,
    ) -> None:
        self.enabled, self.project, self.name = enabled, project, name
        self.tags, self.offline, self.group = list(tags or []), offline, group

    def build(
        self, run_dir: Path, config: dict[str, Any], label: str | None = None, job_type: str = "fit"
    ) -> list[Any]:
        """The Fabric loggers for this run (empty when disabled).

        Args:
            run_dir: The run folder (the offline W&B run goes under it).
            config: The resolved config (the W&B run's config).
            label: The run's label, the default group.
            job_type: ``fit``, ``test`` or ``refer``.
        """
        if not self.enabled:
            return []
        if self.offline:
            os.environ["WANDB_MODE"] = "offline"
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("WANDB_CONSOLE", "off")
        from lightning_fed.wandb_logger import FederationWandbLogger

        logger = FederationWandbLogger(
            group=self.group or label,
            job_type=job_type,
            project=self.project,
            name=self.name or run_dir.name,
            tags=self.tags,
            save_dir=str(run_dir),
            offline=self.offline,
            config=config,
        )
        # Lightning's WandbLogger always forwards ``anonymous`` (None unless asked) to
        # ``wandb.init``, and wandb >= 0.19 warns on every run that the setting is deprecated as soon
        # as it is passed at all. The init arguments are only read when the run starts (first use of
        # ``logger.experiment``), so dropping the key here keeps W&B quiet and changes nothing else.
        getattr(logger, "_wandb_init", {}).pop("anonymous", None)
        return [logger]


class OutputConfig:
    """Where a run writes its outputs.

    Args:
        root: Folder holding run directories.
        name: Run directory name (default: ``<label>-seed<seed>-<unique id>``, the id being the W&B
            run id under a W&B agent (``WANDB_RUN_ID``), the SLURM job id under SLURM, else the start
            time and eight random hex digits, so two runs started in the same second share a folder
            with odds of 1 in 2**32; a shared folder is refused by its lock, never written twice).
        label: The method label ``report`` groups runs by, recorded in ``summary.json`` (default: the
            stems of the ``--config`` files joined by ``+``, e.g. ``abps_x``; without a config file
            the algorithm's class name, lower-cased). Runs of one label differ only by seed.
        checkpoint_every: Also checkpoint every N rounds (0: only at the end). The default, 5, keeps a
            killed run resumable for about 2 % of the wall time: on an idle 2-core machine a
            checkpoint of the default 230-center federation (45 MB: parameters and Adam states)
            takes 0.056 s (FedAvg) / 0.071 s (ABPS) against 0.54 s / 0.76 s per round (about 10 %
            at every round), and a kill redoes at most 4 rounds.
        progress_bar: Show the per-round progress bar.
    """

    def __init__(
        self,
        root: str = "runs",
        name: str | None = None,
        checkpoint_every: int = 5,
        progress_bar: bool = True,
        label: str | None = None,
    ) -> None:
        if checkpoint_every < 0:
            raise ValueError(f"output.checkpoint_every must be >= 0, got {checkpoint_every}")
        if name is not None and (not name or "/" in name or name in (".", "..")):
            raise ValueError(f"output.name must be a plain folder name, got {name!r}")
        if label is not None and (not label.strip() or "/" in label):
            raise ValueError(f"output.label must be a non-empty name without '/', got {label!r}")
        self.root, self.name, self.label = Path(root), name, label
        self.checkpoint_every, self.progress_bar = int(checkpoint_every), progress_bar
