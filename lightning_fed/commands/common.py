"""What the commands share: argv the parser cannot take as it comes, instantiation, rebuilding a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_fed.processes import fail
from lightning_fed.startup import mark

__all__ = [
    "build_federation",
    "configs_first",
    "dump_config",
    "instantiate",
    "load_run",
    "one_line",
    "pop_flag",
]


def one_line(message: str) -> str:
    """The line that names the setting, out of jsonargparse's multi-line Union report."""
    reasons = [
        line.strip()[2:]
        for line in message.splitlines()
        if line.strip().startswith("- ") and "Expected a <class 'NoneType'>" not in line
    ]
    return reasons[0] if message.startswith("Does not validate") and reasons else message


def dump_config(parser: Any, cfg: Any) -> str:
    """The resolved config as YAML, None values included (``skip_none`` is deprecated in jsonargparse
    4.49 in favour of ``skip_unset``; both keep them when False)."""
    import inspect
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keep = {"skip_unset": False} if "skip_unset" in inspect.signature(parser.dump).parameters else {}
        return parser.dump(cfg, **(keep or {"skip_none": False}))


def instantiate(parser: Any, cfg: Any) -> Any:
    """Instantiate every group, turning constructor errors into one clear line."""
    # jsonargparse >= 4.49 names it ``instantiate`` (and warns about the old name).
    build = getattr(parser, "instantiate", None) or parser.instantiate_classes
    try:
        return build(cfg)
    except (ValueError, TypeError, FileNotFoundError) as err:
        fail(one_line(str(err)))


def configs_first(argv: list[str]) -> list[str]:
    """``argv`` with every ``--config FILE`` / ``--config=FILE`` moved to the front (in their order).

    Options override the config files whatever their order on the command line: W&B sweep agents
    pass ``--seed=11 --config=configs/abps.yaml`` in an order of their own, and the file's
    ``seed: 0`` must not win. jsonargparse applies arguments in the order given (a later config file
    overrides an earlier option), which is right for layered configs but not for this order, so it
    is rewritten before parsing.
    """
    configs, rest, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            configs += argv[i : i + 2]
            i += 2
            continue
        (configs if arg.startswith("--config=") else rest).append(arg)
        i += 1
    return [*configs, *rest]


def pop_flag(argv: list[str], flag: str) -> tuple[list[str], bool]:
    """``argv`` without the bare ``flag``, and whether it was there.

    For ``fit --overwrite``: it says what to do with the run folder, not how to train, so it is kept
    out of the fit parser, whose every key is written to ``config.yaml`` and fingerprinted.
    """
    return [a for a in argv if a != flag], flag in argv


def pooled_text(summary: dict[str, Any]) -> str:
    """The end-of-run line's pooled part: ``pooled 0.8123``, or for a run without a pooled AUROC (a
    multi-class model, or one class over every center) ``pooled n/a, accuracy 0.8236``."""
    import math

    pooled = summary["test_auroc_pooled"]
    if math.isfinite(pooled):
        return f"pooled {pooled:.4f}"
    return f"pooled n/a, accuracy {summary['test_accuracy_mean']:.4f}"


def build_federation(init: Any, fabric: Any, data_threads: int | None = None) -> Any:
    """Build the data and the federation; bad data or model settings end here with one clear line.

    The data are built at ``data_threads`` torch threads (a run folder's checkpoint records the count
    its fit built them at), or (None) at this process's own count
    (:func:`lightning_fed.threads.process_threads`); the federation's ``data_threads`` says which,
    and its checkpoints record it.
    """
    import torch

    from lightning_fed.federation import Federation
    from lightning_fed.fit_parser import wire_from
    from lightning_fed.metrics.torchmetrics_per_center import resolve_metrics
    from lightning_fed.threads import process_threads

    try:
        if getattr(init.trainer, "dp", None) is not None:  # the accountant is there, before the data
            from lightning_fed.dp.accountant import require_dp_accounting

            require_dp_accounting()
        metrics = resolve_metrics(getattr(init, "metrics", None))  # a bad entry fails before the data
        wire = wire_from(init)
        if wire.faults is not None:  # a plan that never acts fails before the data (also in Federation)
            wire.faults.check_rounds(init.trainer.rounds)
        with process_threads(data_threads):  # the thread count the run's fit built its data at
            data = init.data.build(init.seed)
            built_at = torch.get_num_threads()
        mark("data")
        settings = getattr(init, "evaluation", None)  # evaluation.holdout_centers (lightning_fed.holdout)
        data, held_out = (data, None) if settings is None else settings.split(data, init.seed)
        if held_out is not None:
            held_out.check(init.algorithm)
        federation = Federation(
            data,
            init.model,
            init.algorithm,
            init.trainer,
            fabric=fabric,
            seed=init.seed,
            wire=wire,
            metrics=metrics,
        )
        federation.held_out = held_out
        federation.data_threads = built_at
        mark("federation")
        return federation
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        fail(str(err))


def load_run(run_dir: Path, flag: str = "--run-dir") -> Any:
    """Rebuild a finished run's federation from ``run_dir/config.yaml`` and load its checkpoint.

    The config must be the one the checkpoint was trained with (up to the keys safe to change):
    an edited ``config.yaml`` (another seed, other data) is refused before anything is built.
    """
    for needed in ("config.yaml", "checkpoint.pt"):
        if not (run_dir / needed).is_file():
            fail(f"{flag} {run_dir}: no {needed} there (is it a finished 'lightning-fed fit' folder?)")

    from lightning.fabric import Fabric

    from lightning_fed.callbacks import Checkpoint
    from lightning_fed.fit_parser import fit_parser
    from lightning_fed.runfolder.session import RunFolderError, check_config
    from lightning_fed.runfolder.state import read_checkpoint

    parser = fit_parser()
    cfg = parser.parse_args(["--config", str(run_dir / "config.yaml")])
    cfg.pop("config", None)
    try:
        check_config(run_dir, cfg.as_dict(), flag)
    except RunFolderError as err:
        fail(str(err))
    init = instantiate(parser, cfg)
    try:
        state = read_checkpoint(run_dir / "checkpoint.pt")
    except ValueError as err:
        fail(f"{flag} {run_dir}: {err}")
    federation = build_federation(init, Fabric(accelerator="cpu", devices=1), state.get("data_threads"))
    try:
        Checkpoint(run_dir / "checkpoint.pt").restore(federation, state)
    except ValueError as err:
        fail(f"{flag} {run_dir}: {err}")
    return federation
