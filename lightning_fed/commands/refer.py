"""``lightning-fed refer``: routers x prediction rules on an EdgeDRM run's queries."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_fed.commands.common import instantiate, load_run
from lightning_fed.processes import fail

__all__ = ["refer", "split_listed"]


def split_listed(values: Sequence[str]) -> list[str]:
    """The paths of ``--baselines`` values: each a path, or a bracketed list ``[A,B]``.

    jsonargparse's ``nargs="+"`` with ``action="extend"`` takes ``--baselines A B``, a repeated
    ``--baselines A``, and ``--baselines=A``; a bracketed value (``--baselines=[A,B]``, what ``sweep``
    and the docs write) arrives as one string, which this splits.
    """
    out: list[str] = []
    for value in values:
        value = value.strip()
        listed = value.startswith("[") and value.endswith("]")
        out += [v.strip() for v in value[1:-1].split(",") if v.strip()] if listed else [value]
    return out


def _parser() -> Any:
    from typing import Literal

    from lightning_fed.commands.parser import CommandParser
    from lightning_fed.referral.routers import Router

    cli = CommandParser(prog="lightning-fed refer", description="Referral table of an EdgeDRM run.")
    cli.add_argument("--run-dir", "--run_dir", dest="run_dir", type=str, required=True, help="an EdgeDRM run")
    cli.add_argument(
        "--baselines",
        type=str,
        nargs="+",
        action="extend",
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
    return cli


def refer(argv: Sequence[str]) -> Any:
    """``lightning-fed refer --run-dir DIR``: routers x prediction rules on an EdgeDRM run's queries."""
    from lightning_fed.runfolder.session import RunFolder, RunFolderError

    cli = _parser()
    args = cli.parse_args(list(argv))
    args.baselines = split_listed(args.baselines)
    routers = instantiate(cli, args).routers
    if args.max_hops is not None and args.max_hops < 0:
        fail(f"--max-hops must be >= 0, got {args.max_hops}")
    # Every named folder is checked before anything is created (the output lock makes --out).
    for flag, folder in [("--run-dir", args.run_dir), *(("--baselines", b) for b in args.baselines)]:
        for needed in ("config.yaml", "checkpoint.pt"):
            if not (Path(folder) / needed).is_file():
                fail(f"{flag} {folder}: no {needed} there (is it a finished 'lightning-fed fit' folder?)")

    from lightning_fed.referral.run import refer_run

    run_dir = Path(args.run_dir)
    out = Path(args.out) if args.out is not None else run_dir
    try:
        with RunFolder.writer(out, "--out" if args.out is not None else "--run-dir"):
            table = _refer_table(refer_run, run_dir, args, out, routers)
    except RunFolderError as err:
        fail(str(err))
    from lightning_fed.wandb_logger import log_job

    log_job(run_dir, "refer", {}, table=("referral/table", table), save_dir=out)  # the fit's W&B group
    print((out / "referral.md").read_text(), end="")
    written = ", ".join(str(out / f) for f in ("referral.csv", "referral.md", "referral_queries.parquet"))
    print(f"wrote {written}, {out / 'referral_traffic.png'}")
    return table


def _refer_table(refer_run: Any, run_dir: Path, args: Any, out: Path, routers: Any) -> Any:
    try:
        return refer_run(
            run_dir,
            lambda folder: load_run(folder, "--run-dir" if folder == run_dir else "--baselines"),
            [Path(b) for b in args.baselines],
            args.max_hops,
            args.eta,
            out,
            routers=routers,
            queries=args.queries,
        )
    except ValueError as err:
        fail(str(err))
