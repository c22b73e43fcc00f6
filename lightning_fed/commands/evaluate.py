"""``lightning-fed test``: rebuild a finished run from its config and re-evaluate it.

Writes ``test.json`` (the summary of the re-evaluation), ``centers.parquet`` (each center's support
and DeLong interval, :func:`~lightning_fed.callbacks.centers.write_centers`, the same writer as the
fit's) and ``predictions.parquet`` (:func:`~lightning_fed.callbacks.predictions.write_predictions`),
all atomically under the run folder's lock: a run written before these files existed gains them,
from the checkpoint's parameters (the ones ``summary.json`` evaluated). A run with
``evaluation.holdout_centers`` evaluates its held-out centers again too (``holdout/...`` keys,
``holdout.parquet``; :mod:`lightning_fed.holdout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_fed.commands.common import load_run, pooled_text
from lightning_fed.processes import fail

__all__ = ["test"]


def test(argv: Sequence[str]) -> dict[str, Any]:
    """``lightning-fed test --run-dir DIR``: rebuild the run from its config and re-evaluate."""
    from lightning_fed.callbacks.centers import write_centers
    from lightning_fed.callbacks.predictions import write_predictions
    from lightning_fed.commands.parser import CommandParser
    from lightning_fed.io import write_json
    from lightning_fed.runfolder.session import RunFolder, RunFolderError

    cli = CommandParser(prog="lightning-fed test", description="Re-evaluate a finished run directory.")
    cli.add_argument(
        "--run-dir", "--run_dir", dest="run_dir", type=str, required=True, help="a fit run folder"
    )
    args = cli.parse_args(list(argv))
    run_dir = Path(args.run_dir)
    federation = load_run(run_dir)

    summary = federation.summary()
    try:
        with RunFolder.writer(run_dir, "--run-dir"):
            if federation.held_out is not None:  # evaluation.holdout_centers: the newcomers again
                summary.update(federation.held_out.report(federation, run_dir / "holdout.parquet"))
            write_json(run_dir / "test.json", summary)
            write_centers(run_dir / "centers.parquet", federation)
            write_predictions(run_dir / "predictions.parquet", federation)
    except RunFolderError as err:
        fail(str(err))
    if federation.fabric.is_global_zero:
        from lightning_fed.wandb_logger import log_job

        log_job(run_dir, "test", summary)  # job_type test, in the fit's W&B group (if it logged)
    print(
        f"test: {run_dir} | round {summary['rounds']} | test AUROC {summary['test_auroc_mean']:.4f} "
        f"+/- {summary['test_auroc_std']:.4f} ({summary['test_auroc_undefined']} undefined) | "
        f"{pooled_text(summary)}"
    )
    return summary
