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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["fit_parser", "main"]

USAGE = """usage: lightning-fed {fit,test,refer,data,sweep,report} [options]

Decentralized federated learning across clinical centers.

commands:
  fit     train a federation: lightning-fed fit --config configs/quickstart.yaml [--trainer.rounds=5 ...]
          continue an interrupted run: lightning-fed fit --resume runs/<run>
  test    re-evaluate a run:  lightning-fed test --run-dir runs/<run>
  refer   referral (EdgeDRM): lightning-fed refer --run-dir runs/<edgedrm run> [--baselines runs/<local run>]
  data    describe a federation: lightning-fed data describe --data CLASS_PATH [--save FILE.parquet]
  sweep   configs x seeds:     lightning-fed sweep --config configs/sweeps/table1.yaml
  report  tables and plots:    lightning-fed report runs/table1 [--out DIR]

'lightning-fed fit --help' lists every config key; '--print_config' prints the resolved config.
"""


def fit_parser() -> Any:
    """The jsonargparse parser of ``fit`` (imports the package's plugin base classes)."""
    from jsonargparse import ActionConfigFile, ArgumentParser, lazy_instance

    from lightning_fed.algorithms import Algorithm, FedAvg
    from lightning_fed.callbacks import Callback
    from lightning_fed.comm import CommHook, FaultInjection, IdentityHook
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
        help="fault injection: {unavailable: {round: [centers]}, corrupt: {round: {center: nan|inf|huge}}, "
        "dropout: {center: round}}",
    )
    return parser


def _fail(message: str) -> None:
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


def _run_dir(output: Any, algorithm: Any, seed: int) -> Path:
    """The run folder's path (created only once the whole config has been validated).

    Every process of a multi-process run must agree on it: rank 0 exports the name in
    ``LIGHTNING_FED_RUN_NAME``, which the processes Fabric launches inherit and use (only a process
    with a non-zero ``LOCAL_RANK`` / ``RANK`` reads it); under SLURM the default name carries the job
    id instead of the start time (``torchrun`` users pass ``--output.name``).
    """
    import os
    import time

    launched = os.environ.get("LOCAL_RANK", "0") != "0" or os.environ.get("RANK", "0") != "0"
    stamp = (
        f"job{os.environ['SLURM_JOB_ID']}" if "SLURM_JOB_ID" in os.environ else time.strftime("%Y%m%d-%H%M%S")
    )
    inherited = os.environ.get("LIGHTNING_FED_RUN_NAME") if launched else None
    name = output.name or inherited or f"{type(algorithm).__name__.lower()}-seed{seed}-{stamp}"
    os.environ["LIGHTNING_FED_RUN_NAME"] = name
    run_dir = output.root / name
    if (run_dir / "summary.json").exists():
        _fail(f"output folder {run_dir} already holds a finished run: choose another output.name")
    return run_dir


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
        wire = Wire(hook=init.comm, faults=init.get("faults"))
        return Federation(
            data, init.model, init.algorithm, init.trainer, fabric=fabric, seed=init.seed, wire=wire
        )
    except (ValueError, TypeError, FileNotFoundError) as err:
        _fail(str(err))


def _resume_argv(argv: list[str]) -> tuple[list[str], Path | None]:
    """``--resume DIR`` becomes ``--config DIR/config.yaml`` (later options still override it)."""
    for i, arg in enumerate(argv):
        if arg == "--resume" or arg.startswith("--resume="):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[:i] + argv[i + (1 if "=" in arg else 2) :]
            run_dir = Path(value)
            for needed in ("config.yaml", "checkpoint.pt"):
                if not (run_dir / needed).is_file():
                    _fail(f"--resume {run_dir}: no {needed} there (set output.checkpoint_every >= 1)")
            if (run_dir / "summary.json").exists():
                _fail(f"--resume {run_dir}: the run already finished (summary.json exists)")
            return ["--config", str(run_dir / "config.yaml"), *rest], run_dir
    return argv, None


def fit(argv: Sequence[str]) -> dict[str, Any]:
    """``lightning-fed fit``: validate the config, build everything, then train and write the run dir.

    Nothing is written until the config, the data and the federation have been built without error.
    """
    argv, resume = _resume_argv(list(argv))
    parser = fit_parser()
    cfg = parser.parse_args(argv)
    init = _instantiate(parser, cfg)
    run_dir = resume if resume is not None else _run_dir(init.output, init.algorithm, init.seed)

    from lightning_fed.callbacks import Checkpoint, ProgressBar, RoundsWriter
    from lightning_fed.io import write_json, write_text

    dumped = cfg.clone()
    dumped.pop("config", None)
    dumped.output.name = run_dir.name
    extra = list(init.callbacks or [])
    for callback in extra:
        if hasattr(callback, "setup_run_dir"):
            callback.setup_run_dir(run_dir)
    checkpoint = Checkpoint(run_dir / "checkpoint.pt", every=init.output.checkpoint_every, stateful=extra)
    callbacks = [
        ProgressBar(enabled=init.output.progress_bar),
        RoundsWriter(run_dir / "rounds.parquet"),
        checkpoint,
    ]
    loggers = init.logger.build(run_dir, dumped.as_dict())
    fabric = init.fabric.build([*callbacks, *extra], loggers)
    federation = _build_federation(init, fabric)
    if resume is not None:
        for stale in run_dir.glob(".*.tmp"):  # half-written files of the killed run (never renamed)
            stale.unlink()
        start = checkpoint.restore(federation)
        print(f"lightning-fed: resuming {run_dir} from round {start}")
    elif fabric.is_global_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text(run_dir / "config.yaml", _dump(parser, dumped))
    say = print if fabric.is_global_zero else (lambda *_: None)
    say(
        f"lightning-fed: {type(init.algorithm).__name__} on {federation.data.num_centers} centers, "
        f"{init.trainer.rounds} rounds -> {run_dir}"
    )
    summary = federation.fit()
    summary.update(method=type(init.algorithm).__name__, run_dir=str(run_dir), versions=_package_versions())
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
    return summary


def _load_run(run_dir: Path, flag: str = "--run-dir") -> Any:
    """Rebuild a finished run's federation from ``run_dir/config.yaml`` and load its checkpoint."""
    for needed in ("config.yaml", "checkpoint.pt"):
        if not (run_dir / needed).is_file():
            _fail(f"{flag} {run_dir}: no {needed} there (is it a finished 'lightning-fed fit' folder?)")

    from lightning.fabric import Fabric

    from lightning_fed.callbacks import Checkpoint

    parser = fit_parser()
    cfg = parser.parse_args(["--config", str(run_dir / "config.yaml")])
    init = _instantiate(parser, cfg)
    federation = _build_federation(init, Fabric(accelerator="cpu", devices=1))
    Checkpoint(run_dir / "checkpoint.pt").restore(federation)
    return federation


def refer(argv: Sequence[str]) -> Any:
    """``lightning-fed refer --run-dir DIR``: routers x prediction rules on an EdgeDRM run's test queries."""
    from jsonargparse import ArgumentParser

    cli = ArgumentParser(prog="lightning-fed refer", description="Referral table of an EdgeDRM run.")
    cli.add_argument("--run-dir", "--run_dir", dest="run_dir", type=str, required=True, help="an EdgeDRM run")
    cli.add_argument(
        "--baselines", type=list[str], default=[], help="other run folders on the same data (e.g. LocalOnly)"
    )
    cli.add_argument(
        "--max-hops", "--max_hops", dest="max_hops", type=int | None, default=None, help="budget L"
    )
    cli.add_argument("--eta", type=float | None, default=None, help="move threshold (default: the run's)")
    cli.add_argument("--out", type=str | None, default=None, help="output folder (default: the run folder)")
    args = cli.parse_args(list(argv))
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
    try:
        table = refer_run(
            run_dir,
            lambda folder: _load_run(folder, "--run-dir" if folder == run_dir else "--baselines"),
            [Path(b) for b in args.baselines],
            args.max_hops,
            args.eta,
            out,
        )
    except ValueError as err:
        _fail(str(err))
    print(to_markdown(table))
    print(f"wrote {out / 'referral.csv'}, {out / 'referral.md'}, {out / 'referral_traffic.png'}")
    return table


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
    write_json(run_dir / "test.json", summary)
    print(
        f"test: {run_dir} | round {summary['rounds']} | test AUROC {summary['test_auroc_mean']:.4f} "
        f"+/- {summary['test_auroc_std']:.4f} ({summary['test_auroc_undefined']} undefined) | "
        f"pooled {summary['test_auroc_pooled']:.4f}"
    )
    return summary


def data(argv: Sequence[str]) -> Any:
    """``lightning-fed data describe``: centers, sizes, positive rates, missingness, descriptors.

    Accepts every ``fit`` option (so a fit config works as it is) plus ``--save FILE.parquet`` and
    ``--rows N``; only the ``data`` and ``seed`` settings are used.
    """
    if not argv or argv[0] != "describe":
        _fail(
            "usage: lightning-fed data describe --data CLASS_PATH [--data.init_args.KEY=VALUE] [--save FILE]"
        )
    parser = fit_parser()
    parser.prog = "lightning-fed data describe"
    parser.add_argument("--save", type=str | None, default=None, help="also write the table as parquet here")
    parser.add_argument("--rows", type=int, default=20, help="rows to print (all rows are saved)")
    cfg = parser.parse_args(list(argv[1:]))
    init = _instantiate(parser, cfg)

    import polars as pl

    from lightning_fed.data.describe import describe
    from lightning_fed.io import atomic_path

    try:
        federation = init.data.build(init.seed)
    except (ValueError, TypeError, FileNotFoundError) as err:
        _fail(str(err))
    table = describe(federation)
    total = int(table["n_train"].sum() + table["n_val"].sum() + table["n_test"].sum())
    print(f"{federation.num_centers} centers, {total} rows, {federation.num_features} features")
    shown = table.select(
        ["center", "n_train", "n_val", "n_test", "pos_rate_train", "missing_share", "v0", "v1", "v2"]
    )
    with pl.Config(tbl_rows=init.rows, tbl_width_chars=160, fmt_str_lengths=40, float_precision=3):
        print(shown)
    print("v0..v2: positive rate, log n_train, mean year / 2030; the saved table has every descriptor entry")
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
    failed = sorted(name for name, s in status.items() if s == "failed")
    counts = {kind: sum(s == kind for s in status.values()) for kind in ("done", "skipped")}
    detail = f" ({', '.join(failed)}; see their .log files)" if failed else ""
    print(f"sweep: {counts['done']} done, {counts['skipped']} skipped, {len(failed)} failed{detail}")
    if failed:
        raise SystemExit(1)
    return status


def report(argv: Sequence[str]) -> dict[str, Path]:
    """``lightning-fed report RUNS_DIR [--out DIR]``: Table 1 (md + csv), Pareto and isolation PNGs."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(prog="lightning-fed report", description="Summarize run folders.")
    parser.add_argument("runs", type=str, help="folder holding run folders (searched recursively)")
    parser.add_argument("--out", type=str | None, default=None, help="where to write (default RUNS/report)")
    args = parser.parse_args(list(argv))
    from lightning_fed.reporting import report as write_report

    try:
        written = write_report(Path(args.runs), None if args.out is None else Path(args.out))
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
    commands = {"fit": fit, "test": test, "refer": refer, "data": data, "sweep": sweep, "report": report}
    if command not in commands:
        _fail(f"unknown command {command!r}; choose one of {sorted(commands)} (see lightning-fed --help)")
    commands[command](rest)


if __name__ == "__main__":
    main()
