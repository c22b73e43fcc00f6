"""The ``lightning-fed`` command line (jsonargparse).

Commands:
    fit            train a federation from a config; writes a run directory.
    test           re-evaluate a finished run directory from its checkpoint.
    refer          inference-time referral table and routing picture of an EdgeDRM run.
    data describe  print (and optionally save as parquet) the per-center table of a data source.
    sweep          run a grid of configs x seeds (several processes at once), skipping finished runs.
    report         Table 1 (markdown + CSV), accuracy-vs-bandwidth Pareto and isolation plots (PNG).

Config groups: ``data``, ``model``, ``algorithm``, ``comm`` (the wire's encode/decode hook) and
``callbacks`` (class_path/init_args), ``trainer`` (rounds, local epochs, batch size, engine),
``fabric`` (passed to Fabric), ``logger`` (W&B), ``output``, and ``seed``.
``lightning-fed --help`` answers without importing torch; ``fit --help`` lists every key.
Values given after ``--config`` override it (``--trainer.rounds=5``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from lightning_fed.startup import (
    STARTUP_LOG_ENV,
    logger_enabled_hint,
    mark,
    preimport_wandb,
    startup_marks,
)

__all__ = ["STARTUP_LOG_ENV", "fit_parser", "main"]


USAGE = """usage: lightning-fed {fit,test,refer,data,sweep,report} [options]

Decentralized federated learning across clinical centers.

commands:
  fit     train a federation: lightning-fed fit --config configs/quickstart.yaml [--trainer.rounds=5 ...]
          continue an interrupted run: lightning-fed fit --resume runs/<run>
  test    re-evaluate a run:  lightning-fed test --run-dir runs/<run>
  refer   referral (EdgeDRM): lightning-fed refer --run-dir runs/<edgedrm run> [--baselines RUN [RUN ...]]
  data    describe a federation: lightning-fed data describe [--config FILE] [--save FILE.parquet]
  sweep   configs x seeds:     lightning-fed sweep --config configs/sweeps/table1.yaml
  report  tables and plots:    lightning-fed report runs/table1 [--out DIR] [--reference fedavg]

'lightning-fed fit --help' lists every config key; '--print_config' prints the resolved config.
"""


def fit_parser() -> Any:
    """The jsonargparse parser of ``fit`` (imports the package's plugin base classes)."""
    from jsonargparse import ActionConfigFile, ArgumentParser, lazy_instance

    from lightning_fed.algorithms import Algorithm, FedAvg
    from lightning_fed.callbacks import Callback
    from lightning_fed.comm import CommHook, FaultInjection, IdentityHook
    from lightning_fed.comm.wire import MAX_NORM_RATIO
    from lightning_fed.config import FabricConfig, LoggerConfig, OutputConfig
    from lightning_fed.data import DataSource, SyntheticICU
    from lightning_fed.models import CenterModule, MortalityMLP
    from lightning_fed.types import TrainerConfig

    parser = ArgumentParser(prog="lightning-fed fit", description="Train a federation.", exit_on_error=True)
    parser.add_argument("--config", action=ActionConfigFile, help="YAML config file")
    parser.add_argument("--seed", type=int, default=0, help="run seed: every random draw derives from it")
    parser.add_subclass_arguments(DataSource, "data", default=lazy_instance(SyntheticICU), required=False)
    parser.add_subclass_arguments(CenterModule, "model", default=lazy_instance(MortalityMLP), required=False)
    parser.add_subclass_arguments(Algorithm, "algorithm", default=lazy_instance(FedAvg), required=False)
    parser.add_class_arguments(TrainerConfig, "trainer")
    parser.add_class_arguments(FabricConfig, "fabric")
    parser.add_class_arguments(LoggerConfig, "logger")
    parser.add_class_arguments(OutputConfig, "output")
    parser.add_subclass_arguments(CommHook, "comm", default=lazy_instance(IdentityHook), required=False)
    parser.add_argument(
        "--callbacks",
        type=list[Callback] | None,
        default=None,
        help="extra observer callbacks by class_path, e.g. lightning_fed.callbacks.EarlyStopping",
    )
    parser.add_argument(
        "--faults",
        type=FaultInjection | None,
        default=None,
        help="fault injection: {unavailable: {round: [centers]}, corrupt: {round: {center: "
        "nan|inf|huge|{scale: X}}}, dropout: {center: round}}",
    )
    parser.add_argument(
        "--wire.max_norm_ratio",
        type=float,
        default=MAX_NORM_RATIO,
        help="reject a received message whose norm exceeds this times its reference (the receiver's own "
        "norm; the server: the median upload norm); honest ratios of the shipped configs stay within 0.6-1.7",
    )
    return parser


def _fail(message: str) -> NoReturn:
    print(f"lightning-fed: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _one_line(message: str) -> str:
    """The line that names the setting, out of jsonargparse's multi-line Union report."""
    reasons = [
        line.strip()[2:]
        for line in message.splitlines()
        if line.strip().startswith("- ") and "Expected a <class 'NoneType'>" not in line
    ]
    return reasons[0] if message.startswith("Does not validate") and reasons else message


def _dump(parser: Any, cfg: Any) -> str:
    """The resolved config as YAML, None values included (``skip_none`` is deprecated in jsonargparse
    4.49 in favour of ``skip_unset``; both keep them when False)."""
    import inspect
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keep = {"skip_unset": False} if "skip_unset" in inspect.signature(parser.dump).parameters else {}
        return parser.dump(cfg, **(keep or {"skip_none": False}))


def _instantiate(parser: Any, cfg: Any) -> Any:
    """Instantiate every group, turning constructor errors into one clear line."""
    # jsonargparse >= 4.49 names it ``instantiate`` (and warns about the old name).
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
    try:
        return instantiate(cfg)
    except (ValueError, TypeError, FileNotFoundError) as err:
        _fail(_one_line(str(err)))


def _launched() -> bool:
    """Whether this process is a non-zero rank started by a launcher (it neither locks nor writes)."""
    import os

    return os.environ.get("LOCAL_RANK", "0") != "0" or os.environ.get("RANK", "0") != "0"


def _label(cfg: Any, output: Any, algorithm: Any) -> str:
    """The run's method label (``output.label``; default: the ``--config`` stems joined by ``+``, else
    the algorithm's class name lower-cased), recorded in ``summary.json`` for ``report``."""
    if output.label:
        return output.label
    stems = [Path(str(path)).stem for path in (cfg.get("config") or []) if path is not None]
    return "+".join(stems) if stems else type(algorithm).__name__.lower()


def _run_dir(output: Any, label: str, seed: int) -> Path:
    """The run folder's path (created only once the whole config has been validated).

    The default name is ``<label>-seed<seed>-<id>``: the id is the W&B run id under a W&B sweep
    agent, the job id under SLURM, else the start time plus four random hex digits (two agents
    started in the same second get two folders). Every process of a multi-process run must agree
    on it: rank 0 exports the name in ``LIGHTNING_FED_RUN_NAME``, which the processes Fabric
    launches inherit and use (only a process with a non-zero ``LOCAL_RANK`` / ``RANK`` reads it);
    ``torchrun`` users pass ``--output.name``.
    """
    import os
    import secrets
    import time

    if "WANDB_RUN_ID" in os.environ:
        stamp = os.environ["WANDB_RUN_ID"]
    elif "SLURM_JOB_ID" in os.environ:
        stamp = f"job{os.environ['SLURM_JOB_ID']}"
    else:
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    inherited = os.environ.get("LIGHTNING_FED_RUN_NAME") if _launched() else None
    name = output.name or inherited or f"{label}-seed{seed}-{stamp}"
    os.environ["LIGHTNING_FED_RUN_NAME"] = name
    if output.root.exists() and not output.root.is_dir():
        _fail(f"output.root {output.root} is a file, not a folder: choose a folder for the run folders")
    return output.root / name


def _configs_first(argv: list[str]) -> list[str]:
    """``argv`` with every ``--config FILE`` / ``--config=FILE`` moved to the front (in their order).

    Options override the config files whatever their order on the command line: W&B sweep agents
    pass ``--seed=11 --config=configs/abps.yaml`` in an order of their own, and the file's
    ``seed: 0`` must not win.
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


def _check_config(run_dir: Path, config: dict[str, Any], flag: str) -> None:
    """Refuse ``config`` when its fingerprinted keys differ from those stored in ``run_dir``'s checkpoint."""
    from lightning_fed.runfolder import SAFE_TO_CHANGE, changed_keys
    from lightning_fed.runfolder.state import read_checkpoint

    try:
        state = read_checkpoint(run_dir / "checkpoint.pt", mmap=True)
    except ValueError as err:
        _fail(f"{flag} {run_dir}: {err}")
    saved = state.get("config")
    if saved is None:
        print(
            f"lightning-fed: warning: {run_dir}/checkpoint.pt has no config fingerprint (an older run): "
            "cannot check that config.yaml is the config it was trained with",
            file=sys.stderr,
        )
        return
    changed = changed_keys(saved, config)
    if changed:
        shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
        _fail(
            f"{flag} {run_dir}: the config differs from the one the checkpoint was trained with in {shown}; "
            f"only {', '.join(SAFE_TO_CHANGE)} may change (start a new run for another config)"
        )


def _claim(run_dir: Path, resume: bool, overwrite: bool, config: dict[str, Any]) -> tuple[Any, Path | None]:
    """Lock ``run_dir`` for this fit and check that it may be written; returns the lock and the
    topmost folder this created (None: ``run_dir`` existed), which :func:`_release` removes again if
    the fit ends before writing anything.

    A new fit takes an absent or empty folder; one that holds a finished or interrupted run only
    with ``--overwrite`` (which empties it). ``--resume`` takes only a resumable folder whose
    checkpoint was trained with this config (up to the keys safe to change).
    """
    import shutil

    from lightning_fed.runfolder import RunFolderBusyError, RunLock, clean_stale_temporaries, folder_state
    from lightning_fed.runfolder.state import State

    missing = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    created = missing[-1] if missing else None
    lock = RunLock(run_dir)
    try:
        lock.acquire()
    except RunFolderBusyError as err:
        _fail(str(err))
    except OSError as err:
        _fail(f"cannot create the run folder {run_dir}: {err.strerror} (check output.root)")
    try:
        found = folder_state(run_dir)
        if resume:
            if found.state is State.COMPLETE:
                _fail(f"--resume {run_dir}: the run already finished (summary.json exists)")
            if found.state is not State.RESUMABLE:
                _fail(f"--resume {run_dir}: cannot resume: {found.reason}; start it again with --overwrite")
            _check_config(run_dir, config, "--resume")
        elif found.state is State.COMPLETE and not overwrite:
            _fail(
                f"output folder {run_dir} already holds a finished run: choose another output.name "
                "(or pass --overwrite to replace it)"
            )
        elif found.state is not State.ABSENT and not overwrite:
            how = (
                f"resume it with 'lightning-fed fit --resume {run_dir}', or "
                if found.state is State.RESUMABLE
                else ""
            )
            _fail(
                f"output folder {run_dir} holds an interrupted run ({found.reason}): {how}pass --overwrite "
                "to start it again, or choose another output.name"
            )
        elif found.state is not State.ABSENT:  # --overwrite: empty the folder, keep our lock
            for path in run_dir.iterdir():
                if path.name != lock.path.name:
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        clean_stale_temporaries(run_dir)
    except SystemExit:
        _release(lock, run_dir, created)
        raise
    return lock, created


def _release(lock: Any, run_dir: Path, created: Path | None) -> None:
    """Drop the folder lock; remove the folders this fit created (up to ``created``) while empty."""
    lock.release()
    if created is None:
        return
    for folder in (run_dir, *run_dir.parents):
        if not folder.is_dir() or any(folder.iterdir()):
            break
        folder.rmdir()
        if folder == created:
            break


def _pop_flag(argv: list[str], flag: str) -> tuple[list[str], bool]:
    """``argv`` without the bare ``flag``, and whether it was there."""
    return [a for a in argv if a != flag], flag in argv


def _package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("lightning-fed", "torch", "lightning", "torchmetrics", "polars", "jsonargparse"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _build_federation(init: Any, fabric: Any) -> Any:
    """Build the data and the federation; bad data or model settings end here with one clear line."""
    from lightning_fed.comm import Wire
    from lightning_fed.federation import Federation

    try:
        data = init.data.build(init.seed)
        mark("data")
        wire = Wire(hook=init.comm, faults=init.get("faults"), max_norm_ratio=init.wire.max_norm_ratio)
        federation = Federation(
            data, init.model, init.algorithm, init.trainer, fabric=fabric, seed=init.seed, wire=wire
        )
        mark("federation")
        return federation
    except (ValueError, TypeError, FileNotFoundError) as err:
        _fail(str(err))


def _resume_argv(argv: list[str]) -> tuple[list[str], Path | None]:
    """``--resume DIR`` becomes ``--config DIR/config.yaml`` (later options may only change the keys
    that are safe to change on resume; see :mod:`lightning_fed.runfolder.fingerprint`)."""
    for i, arg in enumerate(argv):
        if arg == "--resume" or arg.startswith("--resume="):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[:i] + argv[i + (1 if "=" in arg else 2) :]
            run_dir = Path(value)
            if not (run_dir / "config.yaml").is_file():
                _fail(f"--resume {run_dir}: no config.yaml there (is it a 'lightning-fed fit' run folder?)")
            return ["--config", str(run_dir / "config.yaml"), *rest], run_dir
    return argv, None


def _interrupt_exit(run_dir: Path, federation: Any) -> NoReturn:
    """One line on Ctrl-C / SIGTERM during ``fit`` (files stay intact: every write is atomic)."""
    from lightning_fed.runfolder import folder_state
    from lightning_fed.runfolder.state import State

    reached = getattr(federation, "round", 0)
    if folder_state(run_dir).state is State.RESUMABLE:
        how = f"resume with: lightning-fed fit --resume {run_dir}"
    else:
        how = f"no checkpoint yet: start again with --overwrite (or output.name={run_dir.name} elsewhere)"
    print(f"lightning-fed: interrupted after {reached} rounds; {how}", file=sys.stderr)
    raise SystemExit(_SIGNAL_EXIT.get("code", 130))


def fit(argv: Sequence[str]) -> dict[str, Any]:
    """``lightning-fed fit``: validate the config, build everything, then train and write the run dir.

    Nothing is written until the config, the data and the federation have been built without error.
    The fit holds the run folder's lock from the first check to the last write
    (:mod:`lightning_fed.runfolder`): a second writer fails at once, naming this one.
    """
    argv, overwrite = _pop_flag(_configs_first(list(argv)), "--overwrite")
    argv, resume = _resume_argv(argv)
    if resume is not None and overwrite:
        _fail("--resume continues a run and --overwrite starts it again: give one of them")
    if not _launched() and logger_enabled_hint(argv):  # rank 0 alone logs
        preimport_wandb()
    parser = fit_parser()
    mark("parser")
    cfg = parser.parse_args(argv)
    init = _instantiate(parser, cfg)
    label = _label(cfg, init.output, init.algorithm)
    run_dir = resume if resume is not None else _run_dir(init.output, label, init.seed)

    dumped = cfg.clone()
    dumped.pop("config", None)
    dumped.output.name, dumped.output.label = run_dir.name, label
    init.output.label = label
    config = dumped.as_dict()
    lock, created = (None, None) if _launched() else _claim(run_dir, resume is not None, overwrite, config)
    mark("config")
    federation = None
    try:
        federation, loggers, fingerprint = _build_run(init, parser, dumped, config, run_dir, resume)
        return _train(init, federation, loggers, fingerprint, run_dir)
    except KeyboardInterrupt:
        _interrupt_exit(run_dir, federation)
    finally:
        if lock is not None:
            _release(lock, run_dir, created)


def _build_run(
    init: Any, parser: Any, dumped: Any, config: dict[str, Any], run_dir: Path, resume: Path | None
) -> tuple[Any, list[Any], str]:
    """Callbacks, loggers, Fabric and the federation; restores the checkpoint on resume and writes
    ``config.yaml`` (rewritten on resume: a safe key such as ``trainer.rounds`` may have changed).

    Returns:
        The federation, its loggers and the config fingerprint.
    """
    from lightning_fed.callbacks import BandwidthTable, Checkpoint, ProgressBar, RoundsWriter
    from lightning_fed.io import write_text

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
        BandwidthTable(),
        checkpoint,
    ]
    loggers = init.logger.build(run_dir, config)
    mark("loggers")
    marks = startup_marks()  # the debug timing hook's observers (none unless it is on)
    fabric = _fabric(init.fabric, [*marks[:1], *callbacks, *extra, *marks[1:]], loggers)
    mark("fabric")
    federation = _build_federation(init, fabric)
    if resume is not None:
        try:
            start = checkpoint.restore(federation)
        except ValueError as err:
            _fail(f"--resume {run_dir}: {err}")
        print(f"lightning-fed: resuming {run_dir} from round {start}")
    if fabric.is_global_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text(run_dir / "config.yaml", _dump(parser, dumped))
    return federation, loggers, checkpoint.fingerprint


def _fabric(settings: Any, callbacks: list[Any], loggers: list[Any]) -> Any:
    """A launched Fabric; a setting Fabric refuses (an unknown or absent accelerator, ...) ends here
    with one line naming the ``fabric`` group."""
    try:
        return settings.build(callbacks, loggers)
    except (ValueError, RuntimeError, TypeError, ImportError) as err:
        from lightning_fed.validation import first_line

        _fail(
            f"fabric (accelerator={settings.accelerator!r}, devices={settings.devices}, "
            f"precision={settings.precision!r}): {first_line(err, limit=None)}"
        )


def _train(init: Any, federation: Any, loggers: list[Any], fingerprint: str, run_dir: Path) -> dict[str, Any]:
    """Run the federation and write ``summary.json`` (rank 0)."""
    from lightning_fed.io import write_json

    fabric = federation.fabric
    say = print if fabric.is_global_zero else (lambda *_: None)
    say(
        f"lightning-fed: {type(init.algorithm).__name__} on {federation.data.num_centers} centers, "
        f"{init.trainer.rounds} rounds -> {run_dir}"
    )
    summary = federation.fit()
    summary.update(
        method=type(init.algorithm).__name__,
        label=init.output.label,
        run_dir=str(run_dir),
        versions=_package_versions(),
        config_fingerprint=fingerprint,
    )
    if fabric.is_global_zero:
        write_json(run_dir / "summary.json", summary)
    say(
        f"done: {summary['rounds']} rounds, {summary['num_centers']} centers | "
        f"test AUROC {summary['test_auroc_mean']:.4f} +/- {summary['test_auroc_std']:.4f} "
        f"({summary['test_auroc_undefined']} undefined), pooled {summary['test_auroc_pooled']:.4f} | "
        f"{summary['total_mb']:.1f} MB sent | {summary['wall_seconds']:.1f} s | {run_dir}/summary.json"
    )
    for logger in loggers:
        logger.experiment.finish()
    mark("exit")
    return summary


def _load_run(run_dir: Path, flag: str = "--run-dir") -> Any:
    """Rebuild a finished run's federation from ``run_dir/config.yaml`` and load its checkpoint.

    The config must be the one the checkpoint was trained with (up to the keys safe to change):
    an edited ``config.yaml`` (another seed, other data) is refused before anything is built.
    """
    for needed in ("config.yaml", "checkpoint.pt"):
        if not (run_dir / needed).is_file():
            _fail(f"{flag} {run_dir}: no {needed} there (is it a finished 'lightning-fed fit' folder?)")

    from lightning.fabric import Fabric

    from lightning_fed.callbacks import Checkpoint

    parser = fit_parser()
    cfg = parser.parse_args(["--config", str(run_dir / "config.yaml")])
    cfg.pop("config", None)
    _check_config(run_dir, cfg.as_dict(), flag)
    init = _instantiate(parser, cfg)
    federation = _build_federation(init, Fabric(accelerator="cpu", devices=1))
    try:
        Checkpoint(run_dir / "checkpoint.pt").restore(federation)
    except ValueError as err:
        _fail(f"{flag} {run_dir}: {err}")
    return federation


def refer(argv: Sequence[str]) -> Any:
    """``lightning-fed refer --run-dir DIR``: routers x prediction rules on an EdgeDRM run's queries."""
    from typing import Literal

    from jsonargparse import ArgumentParser

    from lightning_fed.referral.routers import Router

    cli = ArgumentParser(prog="lightning-fed refer", description="Referral table of an EdgeDRM run.")
    cli.add_argument("--run-dir", "--run_dir", dest="run_dir", type=str, required=True, help="an EdgeDRM run")
    cli.add_argument(
        "--baselines",
        type=list[str],
        default=[],
        help="other run folders on the same data (e.g. LocalOnly): --baselines A B, or repeated",
    )
    cli.add_argument(
        "--max-hops", "--max_hops", dest="max_hops", type=int | None, default=None, help="budget L"
    )
    cli.add_argument("--eta", type=float | None, default=None, help="move threshold (default: the run's)")
    cli.add_argument("--out", type=str | None, default=None, help="output folder (default: the run folder)")
    cli.add_argument(
        "--routers",
        type=list[Router] | None,
        default=None,
        help="routers by class_path, e.g. [{class_path: lightning_fed.referral.EdgeDRMRouter, init_args: "
        "{prior: false, label: mine}}] (default: the six of the table, in order)",
    )
    cli.add_argument(
        "--queries",
        type=Literal["test", "every-entry", "panel"] | None,
        default=None,
        help="test: the clients' test rows, each at one non-source entry; every-entry: each test row at "
        "every client (the ISIC2019 protocol, pooled balanced accuracy); panel: the tier experiment's "
        "fixed panel (the config's lightning_fed.referral.panel.QueryPanel, else 200 images x 64 "
        "arrivals); default: the config's",
    )
    args = cli.parse_args(_gather_list(list(argv), "--baselines"))
    routers = _instantiate(cli, args).routers
    if args.max_hops is not None and args.max_hops < 0:
        _fail(f"--max-hops must be >= 0, got {args.max_hops}")
    for folder in args.baselines:
        for needed in ("config.yaml", "checkpoint.pt"):
            if not (Path(folder) / needed).is_file():
                _fail(
                    f"--baselines {folder}: no {needed} there (is it a finished 'lightning-fed fit' folder?)"
                )

    from lightning_fed.referral.refer import to_markdown
    from lightning_fed.referral.run import refer_run

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out is not None else run_dir
    with _writer(out, "--out" if args.out is not None else "--run-dir"):
        table = _refer_table(refer_run, run_dir, args, out, routers)
    print(to_markdown(table))
    print(f"wrote {out / 'referral.csv'}, {out / 'referral.md'}, {out / 'referral_traffic.png'}")
    return table


def _gather_list(argv: list[str], flag: str) -> list[str]:
    """``argv`` with every ``flag A B ...``, repeated ``flag A``, and ``flag=[A,B]`` merged into one
    ``flag=[...]`` (JSON), which the list-typed option parses."""
    import json

    values: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == flag:
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
            continue
        if arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1].strip()
            listed = value.startswith("[") and value.endswith("]")
            values += [v.strip() for v in value[1:-1].split(",") if v.strip()] if listed else [value]
        else:
            rest.append(arg)
        i += 1
    return [*rest, f"{flag}={json.dumps(values)}"] if values else rest


def _refer_table(refer_run: Any, run_dir: Path, args: Any, out: Path, routers: Any) -> Any:
    try:
        return refer_run(
            run_dir,
            lambda folder: _load_run(folder, "--run-dir" if folder == run_dir else "--baselines"),
            [Path(b) for b in args.baselines],
            args.max_hops,
            args.eta,
            out,
            routers=routers,
            queries=args.queries,
        )
    except ValueError as err:
        _fail(str(err))


@contextmanager
def _writer(folder: Path, flag: str) -> Iterator[None]:
    """Hold ``folder``'s run-folder lock while a command writes into it (one writer per folder)."""
    from lightning_fed.runfolder import RunFolderBusyError, RunLock

    lock = RunLock(folder)
    try:
        lock.acquire()
    except RunFolderBusyError as err:
        _fail(f"{flag} {folder}: {err}")
    except OSError as err:
        _fail(f"{flag} {folder}: cannot write there ({err.strerror})")
    try:
        yield
    finally:
        lock.release()


def test(argv: Sequence[str]) -> dict[str, Any]:
    """``lightning-fed test --run-dir DIR``: rebuild the run from its config and re-evaluate."""
    from jsonargparse import ArgumentParser

    cli = ArgumentParser(prog="lightning-fed test", description="Re-evaluate a finished run directory.")
    cli.add_argument(
        "--run-dir", "--run_dir", dest="run_dir", type=str, required=True, help="a fit run folder"
    )
    args = cli.parse_args(list(argv))
    run_dir = Path(args.run_dir)
    federation = _load_run(run_dir)

    from lightning_fed.io import write_json

    summary = federation.summary()
    with _writer(run_dir, "--run-dir"):
        write_json(run_dir / "test.json", summary)
    print(
        f"test: {run_dir} | round {summary['rounds']} | test AUROC {summary['test_auroc_mean']:.4f} "
        f"+/- {summary['test_auroc_std']:.4f} ({summary['test_auroc_undefined']} undefined) | "
        f"pooled {summary['test_auroc_pooled']:.4f}"
    )
    return summary


DATA_USAGE = """usage: lightning-fed data describe [--config FILE] [--data CLASS_PATH]
                                 [--data.init_args.KEY=VALUE] [--seed N] [--rows N] [--save FILE.parquet]

Print the federation a data source builds, one row per center: sizes, label balance (positive
rate for binary labels; classes present and majority share for image federations), share of
imputed values and the metadata descriptors. 'lightning-fed data describe --help' lists every key.
"""


def data(argv: Sequence[str]) -> Any:
    """``lightning-fed data describe``: centers, sizes, label balance, missingness, descriptors.

    Accepts every ``fit`` option (so a fit config works as it is) plus ``--save FILE.parquet`` and
    ``--rows N``; only the ``data`` and ``seed`` settings are used.
    """
    if list(argv[:1]) in (["-h"], ["--help"]):
        print(DATA_USAGE)
        return None
    if not argv or argv[0] != "describe":
        _fail("usage: lightning-fed data describe [--config FILE] [--data CLASS_PATH] [--save FILE]")
    parser = fit_parser()
    parser.prog = "lightning-fed data describe"
    parser.description = "Describe the federation a data source builds (only data and seed are used)."
    parser.add_argument("--save", type=str | None, default=None, help="also write the table as parquet here")
    parser.add_argument("--rows", type=int, default=20, help="rows to print (all rows are saved)")
    cfg = parser.parse_args(_configs_first(list(argv[1:])))
    init = _instantiate(parser, cfg)
    if init.save and (Path(init.save).is_dir() or str(init.save).endswith("/")):
        _fail(f"--save {init.save} is a folder: give a file name, e.g. {Path(init.save) / 'centers.parquet'}")

    import polars as pl

    from lightning_fed.data.describe import describe, shown_columns
    from lightning_fed.io import atomic_path

    try:
        federation = init.data.build(init.seed)
    except (ValueError, TypeError, FileNotFoundError) as err:
        _fail(str(err))
    table = describe(federation)
    total = int(table["n_train"].sum() + table["n_val"].sum() + table["n_test"].sum())
    kind = "binary label" if federation.num_classes <= 2 else f"{federation.num_classes} classes"
    print(
        f"{type(init.data).__name__}: {federation.num_centers} centers, {total} rows, "
        f"{federation.num_features} features, {kind}"
    )
    with pl.Config(
        tbl_rows=init.rows,
        tbl_cols=-1,
        tbl_width_chars=200,
        fmt_str_lengths=40,
        float_precision=3,
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
    ):
        print(table.select(shown_columns(table, federation)))
    d = len(federation.centers[0].metadata)
    more = "; --save writes them all" if d > 3 else ""
    print(f"{d} descriptor entries per center ({min(d, 3)} shown{more})")
    if init.save:
        with atomic_path(init.save) as tmp:
            table.write_parquet(tmp)
        print(f"wrote {init.save}")
    return table


def sweep(argv: Sequence[str]) -> dict[str, str]:
    """``lightning-fed sweep --config SWEEP.yaml``: every config x every seed, skipping finished runs."""
    from jsonargparse import ActionConfigFile, ArgumentParser

    from lightning_fed.sweep import plan, run_sweep

    parser = ArgumentParser(prog="lightning-fed sweep", description="Run a grid of configs x seeds.")
    parser.add_argument("--config", action=ActionConfigFile, help="sweep YAML (see lightning_fed/sweep.py)")
    parser.add_argument("--configs", type=list[str], default=[], help="fit configs, one run folder each")
    parser.add_argument(
        "--grids",
        type=list[list[dict[str, str]]],
        default=[],
        help="layered grids: lists of groups {key: layer file}, every combination is a run",
    )
    parser.add_argument("--seeds", type=list[int], default=[11, 22, 33, 44, 55], help="seeds (paper: 11..55)")
    parser.add_argument("--output", type=str, default="runs/sweep", help="folder of the run folders")
    parser.add_argument("--overrides", type=list[str], default=[], help="fit options appended to every run")
    parser.add_argument("--processes", type=int, default=1, help="runs at once")
    parser.add_argument(
        "--refer", type=list[str], default=[], help="config stems / grid keys whose runs get 'refer'"
    )
    parser.add_argument(
        "--refer_baselines",
        type=list[str] | dict[str, list[str]],
        default=[],
        help="stems / keys passed as refer --baselines (a list, or a map: referral key -> list)",
    )
    args = parser.parse_args(list(argv))
    try:
        runs = plan(args.configs, args.seeds, args.output, args.refer, args.refer_baselines, args.grids)
        pending = sum(not r.done for r in runs)
        print(f"sweep: {len(runs)} runs ({len(runs) - pending} already done) -> {args.output}")
        status = run_sweep(runs, args.overrides, args.processes)
    except (ValueError, FileNotFoundError) as err:
        _fail(str(err))
    except KeyboardInterrupt:
        print(
            "sweep: stopped; the running fits were ended with their checkpoints intact. Run the same "
            "command again to resume (finished runs are skipped, interrupted ones resume)",
            file=sys.stderr,
        )
        raise SystemExit(_SIGNAL_EXIT.get("code", 130)) from None
    failed = sorted(name for name, s in status.items() if s == "failed")
    counts = {kind: sum(s == kind for s in status.values()) for kind in ("done", "skipped")}
    detail = f" ({', '.join(failed)}; see their .log files)" if failed else ""
    print(f"sweep: {counts['done']} done, {counts['skipped']} skipped, {len(failed)} failed{detail}")
    if failed:
        raise SystemExit(1)
    return status


def report(argv: Sequence[str]) -> dict[str, Path]:
    """``lightning-fed report RUNS_DIR [--out DIR] [--reference LABEL]``: the tables and plots.

    Writes, under ``--out``: ``table1.md`` / ``table1.csv`` (per method: test AUROC mean ± sample
    SD over seeds (ddof=1), seeds, paired difference to the ``--reference`` method over shared
    seeds with its 95 % Student-t CI and a verdict, bytes vs FedAvg, isolation, E|P_i|, rounds,
    wall), ``diagnostics.md`` / ``diagnostics.csv`` (ABPS mechanism diagnostics, when any run has
    them), ``runs.csv`` (one row per run), ``pareto.png``, ``isolation.png`` and the referral files
    (see :func:`lightning_fed.reporting.report`).
    """
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(
        prog="lightning-fed report",
        description=(
            "Summarize run folders into table1.md/.csv (AUROC mean ± sample SD over seeds, paired "
            "difference to a reference method with a 95% Student-t CI and a verdict: better, worse, "
            "within noise, n/a), diagnostics.md/.csv (ABPS mechanism diagnostics, when recorded), "
            "runs.csv (one row per run), pareto.png and isolation.png."
        ),
    )
    parser.add_argument("runs", type=str, help="folder holding run folders (searched recursively)")
    parser.add_argument("--out", type=str | None, default=None, help="where to write (default RUNS/report)")
    parser.add_argument(
        "--reference",
        type=str | None,
        default=None,
        help=(
            "method label the paired differences compare to, over the seeds both have (default: "
            "fedavg when the runs have it, else no comparison; a label no run has is an error)"
        ),
    )
    args = parser.parse_args(list(argv))
    from lightning_fed.reporting import report as write_report

    try:
        written = write_report(
            Path(args.runs), None if args.out is None else Path(args.out), reference=args.reference
        )
    except (ValueError, FileNotFoundError) as err:
        _fail(str(err))
    table = written.get("table1.md")
    if table is not None:
        print(Path(table).read_text())
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return written


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``lightning-fed`` console script and the root ``cli.py``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    command, rest = argv[0], argv[1:]
    mark("main")
    commands = {"fit": fit, "test": test, "refer": refer, "data": data, "sweep": sweep, "report": report}
    if command not in commands:
        _fail(f"unknown command {command!r}; choose one of {sorted(commands)} (see lightning-fed --help)")
    _die_with_sweep()
    with _signals_as_interrupts():
        try:
            commands[command](rest)
        except KeyboardInterrupt:  # a command without its own interrupt handling (fit has one)
            print(f"lightning-fed: {command} interrupted", file=sys.stderr)
            raise SystemExit(_SIGNAL_EXIT.get("code", 130)) from None


def _die_with_sweep() -> None:
    """In a run process started by ``sweep``: ask Linux for SIGTERM when the sweep dies (even by
    SIGKILL), and stop at once if it is already gone, so no fit outlives its sweep."""
    import os

    from lightning_fed.sweep import PARENT_ENV

    parent = os.environ.get(PARENT_ENV)
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != parent:
        print("lightning-fed: the sweep that started this run has ended; not starting", file=sys.stderr)
        raise SystemExit(143)


#: The exit code of the signal that interrupted the command (130 = SIGINT, 143 = SIGTERM).
_SIGNAL_EXIT: dict[str, int] = {}


@contextmanager
def _signals_as_interrupts() -> Iterator[None]:
    """SIGTERM interrupts a command the way Ctrl-C does (so ``finally`` blocks release the run folder
    lock and remove half-written temporaries); the exit code follows the signal (128 + signum)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: Any) -> None:
        _SIGNAL_EXIT["code"] = 128 + signum
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    _SIGNAL_EXIT.clear()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    main()
