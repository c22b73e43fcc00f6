"""The W&B sweep spec of a ``lightning-fed sweep`` grid, generated so the two never drift.

A ``lightning-fed sweep`` file (:mod:`lightning_fed.sweep`) lists ``configs`` and ``seeds``; W&B's
agents need the same grid in W&B's own format (``program``, ``method: grid``, ``parameters``).
:func:`wandb_sweep_spec` derives it, and the shipped W&B files are this module's output::

    python -m lightning_fed.wandb_sweep configs/sweeps/table1.yaml --out configs/sweeps/wandb_table1.yaml

``tests/sweep/test_wandb_sweep.py`` regenerates every shipped W&B file from the grid its header
names and compares the text. Only plain ``configs:`` grids translate (a layered ``grids:`` run is
several ``--config`` files, which one W&B parameter cannot carry); the grid's ``overrides`` are
left out (they are ``lightning-fed sweep``'s, e.g. ``--logger.enabled=false``), and every agent run
streams to the server (``--logger.offline=false``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["render", "wandb_sweep_spec"]

#: The summary key a sweep optimises (the run summary's finals; :mod:`lightning_fed.wandb_logger`).
METRIC = "final/test_auroc_mean"

_HEADER = """\
# GENERATED from {grid} (edit the grid, then regenerate; tests/sweep/test_wandb_sweep.py
# fails when they differ):
#   python -m lightning_fed.wandb_sweep {grid} --out {out}
# The same grid for W&B sweep agents (the program is the repository-root cli.py):
#   wandb sweep {out}        # prints SWEEP_ID
#   wandb agent <entity>/<project>/<SWEEP_ID>            # one per GPU / process
# Offline here (no W&B server is reachable): use `lightning-fed sweep --config {grid}`,
# which writes offline W&B runs you can `wandb sync` later.
"""


def wandb_sweep_spec(grid: Mapping[str, Any]) -> dict[str, Any]:
    """The W&B sweep spec of a ``lightning-fed sweep`` grid (its ``configs`` x ``seeds``).

    Args:
        grid: A loaded ``lightning-fed sweep`` file.

    Returns:
        The spec: ``program: cli.py``, ``method: grid``, the metric :data:`METRIC` to maximize and
        the parameters ``config`` (the grid's configs, in order) and ``seed``; with ``folds: k``
        also ``data.split.folds`` (the value ``k``) and ``data.split.fold`` (``0 .. k - 1``).

    Raises:
        ValueError: For a layered ``grids:`` file or one without ``configs``.
    """
    if grid.get("grids"):
        raise ValueError("a layered grids: sweep has no W&B equivalent (one run is several --config files)")
    configs = [str(c) for c in grid.get("configs") or []]
    if not configs:
        raise ValueError("the sweep file lists no configs:")
    folds = grid.get("folds")
    replicate = (
        {}
        if folds is None
        else {
            "data.split.folds": {"value": int(folds)},
            "data.split.fold": {"values": list(range(int(folds)))},
        }
    )
    return {
        "program": "cli.py",
        "method": "grid",
        "metric": {"name": METRIC, "goal": "maximize"},
        "parameters": {
            "config": {"values": configs},
            "seed": {"values": [int(s) for s in grid.get("seeds", [0])]},
            **replicate,
        },
        "command": ["${env}", "python", "${program}", "fit", "${args}", "--logger.offline=false"],
    }


def render(grid_path: str | Path, out: str | Path) -> str:
    """The W&B sweep file (header comment and spec) of the grid file ``grid_path``, to be written to
    ``out`` (both paths as the header shows them: relative to the repository root)."""
    import yaml

    spec = wandb_sweep_spec(yaml.safe_load(Path(grid_path).read_text()))
    seeds = spec["parameters"]["seed"]["values"]
    spec["parameters"]["seed"]["values"] = _Flow(seeds)
    body = yaml.dump(spec, Dumper=_dumper(), sort_keys=False, default_flow_style=False, width=110)
    return _HEADER.format(grid=grid_path, out=out) + body


class _Flow(list):
    """A list dumped inline (``[11, 22, 33]``)."""


def _dumper() -> type:
    import yaml

    class Dumper(yaml.SafeDumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> Any:
            return super().increase_indent(flow, False)  # indent list items under their key

    Dumper.add_representer(
        _Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
    )
    return Dumper


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m lightning_fed.wandb_sweep GRID [--out FILE]``: print or write the W&B spec."""
    cli = argparse.ArgumentParser(
        prog="python -m lightning_fed.wandb_sweep", description=__doc__.split("\n")[0]
    )
    cli.add_argument("grid", help="a lightning-fed sweep file with configs: and seeds:")
    cli.add_argument("--out", help="write the W&B sweep file here (default: print it)")
    args = cli.parse_args(argv)
    try:
        text = render(args.grid, args.out or "<wandb sweep file>")
    except (OSError, ValueError) as err:
        sys.exit(f"lightning_fed.wandb_sweep: {args.grid}: {err}")
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
