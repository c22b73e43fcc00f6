"""``lightning-fed report``: tables and plots over run folders (:mod:`lightning_fed.reporting`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lightning_fed.processes import fail

__all__ = ["report"]


def report(argv: Sequence[str]) -> dict[str, Path]:
    """``lightning-fed report RUNS_DIR [--out DIR] [--reference LABEL]``: the tables and plots.

    Writes, under ``--out``: ``table1.md`` / ``table1.csv`` (per method: test AUROC mean ± sample
    SD over seeds (ddof=1), seeds, paired difference to the ``--reference`` method over shared
    seeds with its 95 % Student-t CI and a verdict, bytes vs FedAvg, isolation, E|P_i|, rounds,
    wall; then robust and pooled AUROC, accuracy, balanced accuracy, undefined / fragile / robust
    counts and the difference paired by center with a hierarchical bootstrap CI),
    ``diagnostics.md`` / ``diagnostics.csv`` (ABPS mechanism diagnostics, when any run has
    them), ``runs.csv`` (one row per run), ``pareto.png``, ``isolation.png`` and the referral files
    (see :func:`lightning_fed.reporting.report`).
    """
    from lightning_fed.commands.parser import CommandParser

    parser = CommandParser(
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
            "method label the paired differences compare to, over the seeds both have and center by "
            "center within them (default: fedavg when the runs have it, else no comparison, said in "
            "table1.md's legend; a label no run has is an error naming the labels)"
        ),
    )
    args = parser.parse_args(list(argv))
    from lightning_fed.reporting import report as write_report

    try:
        written = write_report(
            Path(args.runs), None if args.out is None else Path(args.out), reference=args.reference
        )
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    table = written.get("table1.md")
    if table is not None:
        print(Path(table).read_text())
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return written
