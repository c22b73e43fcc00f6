"""``lightning-fed fit``: validate the config, build everything, train, write the run folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_fed.commands.common import (
    build_federation,
    configs_first,
    dump_config,
    instantiate,
    pooled_text,
    pop_flag,
)
from lightning_fed.processes import fail
from lightning_fed.startup import logger_enabled_hint, mark, preimport_wandb, startup_marks

__all__ = ["fit", "run_label"]


def run_label(cfg: Any, output: Any, algorithm: Any) -> str:
    """The run's method label (``output.label``; default: the ``--config`` stems joined by ``+``, else
    the algorithm's class name lower-cased), recorded in ``summary.json`` for ``report``."""
    if output.label:
        return output.label
    stems = [Path(str(path)).stem for path in (cfg.get("config") or []) if path is not None]
    return "+".join(stems) if stems else type(algorithm).__name__.lower()


def fit(argv: Sequence[str]) -> dict[str, Any]:
    """``lightning-fed fit``: validate the config, build everything, then train and write the run dir.

    Nothing is written until the config, the data and the federation have been built without error.
    The fit holds the run folder (:class:`~lightning_fed.runfolder.session.RunFolder`) from the
    first check to the last write: a second writer fails at once, naming this one. When the command
    line names the folder (``output.name``, ``--resume``), a busy folder is refused before the config
    parse (:mod:`~lightning_fed.runfolder.early`), in a fraction of the parse's seconds.
    """
    from lightning_fed.runfolder.early import named_run_folder
    from lightning_fed.runfolder.lock import RunFolderBusyError, RunLock
    from lightning_fed.runfolder.session import (
        RunFolder,
        RunFolderError,
        launched,
        resume_argv,
        run_folder_path,
    )

    argv, overwrite = pop_flag(configs_first(list(argv)), "--overwrite")
    try:
        argv, resume = resume_argv(argv)
        if resume is not None and overwrite:
            fail("--resume continues a run and --overwrite starts it again: give one of them")
        named = named_run_folder(argv, resume)
        if named is not None and not launched():
            try:
                RunLock.check(named)  # before the parse: a busy folder is refused at once
            except RunFolderBusyError as err:
                fail(str(err))
        from lightning_fed.fit_parser import fit_parser

        if not launched() and logger_enabled_hint(argv):  # rank 0 alone logs
            preimport_wandb()
        parser = fit_parser()
        mark("parser")
        cfg = parser.parse_args(argv)
        init = instantiate(parser, cfg)
        label = run_label(cfg, init.output, init.algorithm)
        run_dir = resume if resume is not None else run_folder_path(init.output, label, init.seed)

        dumped = cfg.clone()
        dumped.pop("config", None)
        dumped.output.name, dumped.output.label = run_dir.name, label
        init.output.label = label
        config = dumped.as_dict()
        folder = RunFolder.claim(
            run_dir, resume=resume is not None, overwrite=overwrite, config=config, lock=not launched()
        )
        with folder as run:
            mark("config")
            federation, loggers, fingerprint = _build_run(init, parser, dumped, config, run_dir, resume)
            run.federation = federation
            return _train(init, federation, loggers, fingerprint, run_dir)
    except RunFolderError as err:
        fail(str(err))


def _build_run(
    init: Any, parser: Any, dumped: Any, config: dict[str, Any], run_dir: Path, resume: Path | None
) -> tuple[Any, list[Any], str]:
    """Callbacks, loggers, Fabric and the federation; restores the checkpoint on resume and writes
    ``config.yaml`` (rewritten on resume: a safe key such as ``trainer.rounds`` may have changed).

    Returns:
        The federation, its loggers and the config fingerprint.
    """
    from lightning_fed.callbacks import (
        BandwidthTable,
        CentersWriter,
        Checkpoint,
        PredictionsWriter,
        ProgressBar,
        RoundsWriter,
    )
    from lightning_fed.io import write_text
    from lightning_fed.runfolder.state import read_checkpoint

    extra = list(init.callbacks or [])
    for callback in extra:
        if hasattr(callback, "setup_run_dir"):
            callback.setup_run_dir(run_dir)
    checkpoint = Checkpoint(
        run_dir / "checkpoint.pt", every=init.output.checkpoint_every, stateful=extra, config=config
    )
    callbacks = [
        ProgressBar(enabled=init.output.progress_bar),
        RoundsWriter(run_dir / "rounds.parquet"),
        CentersWriter(run_dir / "centers.parquet"),
        PredictionsWriter(run_dir / "predictions.parquet"),
        BandwidthTable(),
        checkpoint,
    ]
    loggers = init.logger.build(run_dir, config, label=init.output.label, job_type="fit")
    mark("loggers")
    marks = startup_marks()  # the debug timing hook's observers (none unless it is on)
    fabric = _fabric(init.fabric, [*marks[:1], *callbacks, *extra, *marks[1:]], loggers)
    mark("fabric")
    state = None
    if resume is not None:  # read first: the data are rebuilt at the thread count the fit built them at
        try:
            state = read_checkpoint(checkpoint.path)
        except ValueError as err:
            fail(f"--resume {run_dir}: {err}")
    federation = build_federation(init, fabric, None if state is None else state.get("data_threads"))
    if state is not None:
        try:
            start = checkpoint.restore(federation, state)
        except ValueError as err:
            fail(f"--resume {run_dir}: {err}")
        if init.trainer.rounds < start:
            fail(
                f"--resume {run_dir}: trainer.rounds={init.trainer.rounds} is below the {start} rounds the "
                f"checkpoint has trained; give --trainer.rounds >= {start} (or start a new run)"
            )
        print(f"lightning-fed: resuming {run_dir} from round {start}")
    if fabric.is_global_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text(run_dir / "config.yaml", dump_config(parser, dumped))
    return federation, loggers, checkpoint.fingerprint


def _fabric(settings: Any, callbacks: list[Any], loggers: list[Any]) -> Any:
    """A launched Fabric; a setting Fabric refuses (an unknown or absent accelerator, ...) ends here
    with one line naming the ``fabric`` group."""
    try:
        return settings.build(callbacks, loggers)
    except (ValueError, RuntimeError, TypeError, ImportError) as err:
        from lightning_fed.validation import first_line

        fail(
            f"fabric (accelerator={settings.accelerator!r}, devices={settings.devices}, "
            f"precision={settings.precision!r}): {first_line(err, limit=None)}"
        )


def _package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("lightning-fed", "torch", "lightning", "torchmetrics", "polars", "jsonargparse"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _setting(init: Any) -> dict[str, str] | None:
    """The run's setting (:func:`lightning_fed.setting.run_setting`: data source, partition,
    topology as report keys), recorded so ``report`` need not parse it back from class names;
    None where that module is not installed."""
    try:
        from lightning_fed.setting import run_setting
    except ModuleNotFoundError as err:
        if err.name != "lightning_fed.setting":
            raise
        return None
    return run_setting(init.data, init.algorithm)


def _train(init: Any, federation: Any, loggers: list[Any], fingerprint: str, run_dir: Path) -> dict[str, Any]:
    """Run the federation and write ``summary.json`` (rank 0)."""
    from lightning_fed.allocator import keep_freed_memory
    from lightning_fed.data.fingerprint import data_fingerprint
    from lightning_fed.holdout import holdout_key
    from lightning_fed.io import write_json

    fabric = federation.fabric
    say = print if fabric.is_global_zero else (lambda *_: None)
    say(
        f"lightning-fed: {type(init.algorithm).__name__} on {federation.data.num_centers} centers, "
        f"{init.trainer.rounds} rounds -> {run_dir}"
    )
    say(f"lightning-fed: training path: {federation.engine.training_path}")
    say(f"lightning-fed: {federation.threads.describe()}")
    say(f"lightning-fed: {keep_freed_memory().describe()}")
    say(f"lightning-fed: {federation.wire.describe_defence()}")
    summary = federation.fit()
    if federation.held_out is not None:  # evaluation.holdout_centers: the newcomers' evaluation
        summary.update(federation.held_out.report(federation, run_dir / "holdout.parquet"))
    summary.update(
        method=type(init.algorithm).__name__,
        label=init.output.label,
        run_dir=str(run_dir),
        versions=_package_versions(),
        config_fingerprint=fingerprint,
        data_fingerprint=data_fingerprint(federation.data),
        threads=federation.threads.threads,  # training's torch threads (a CNN's last bits follow them)
        data_threads=federation.data_threads,  # the data's build (some sources round per count)
    )
    setting = _setting(init)
    if setting is not None:
        summary["setting"] = setting
    split = getattr(init.data, "split", None)
    if getattr(split, "folds", None) is not None:  # data.split.folds: which replicate this run is
        summary.update(fold=int(split.fold), folds=int(split.folds))
    if fabric.is_global_zero:
        write_json(run_dir / "summary.json", summary)
    if federation.held_out is not None:
        say(
            f"held out: {len(federation.held_out.centers)} centers | test AUROC "
            + ", ".join(
                f"{k} steps {summary[holdout_key(k, 'test_auroc_mean')]:.4f}"
                for k in federation.held_out.settings.holdout_finetune_steps
            )
        )
    say(
        f"done: {summary['rounds']} rounds, {summary['num_centers']} centers | "
        f"test AUROC {summary['test_auroc_mean']:.4f} +/- {summary['test_auroc_std']:.4f} "
        f"({summary['test_auroc_undefined']} undefined, {summary['test_auroc_fragile']} fragile), robust "
        f"{summary['test_auroc_robust']:.4f} ({summary['test_auroc_robust_centers']} centers), "
        f"{pooled_text(summary)} | "
        f"{summary['total_mb']:.1f} MB sent | {summary['wall_seconds']:.1f} s | {run_dir}/summary.json"
    )
    if summary.get("all_diverged_rounds"):  # the model never (or seldom) trained: say so last
        say(
            f"lightning-fed: warning: every center diverged in {summary['all_diverged_rounds']} of "
            f"{summary['rounds']} rounds ({summary['diverged_center_rounds']} center-rounds rolled back): "
            "these numbers are not a trained model's; lower the learning rate"
        )
    for logger in loggers:
        logger.experiment.finish()
    mark("exit")
    return summary
