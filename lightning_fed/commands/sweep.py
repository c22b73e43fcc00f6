"""``lightning-fed sweep``: every config x every seed, skipping finished runs (:mod:`lightning_fed.sweep`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from lightning_fed.processes import fail, interrupt_code

__all__ = ["sweep"]


def sweep(argv: Sequence[str]) -> dict[str, str]:
    """``lightning-fed sweep --config SWEEP.yaml``: every config x every seed, skipping finished runs."""
    from jsonargparse import ActionConfigFile

    from lightning_fed.commands.parser import CommandParser

    parser = CommandParser(prog="lightning-fed sweep", description="Run a grid of configs x seeds.")
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
        "--folds",
        type=int | None,
        default=None,
        help="k runs per config and seed, one per test fold (data.split.folds); null: one split",
    )
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
    from pathlib import Path

    from lightning_fed.runfolder.lock import RunFolderBusyError, RunLock

    lock = RunLock(Path(args.output))
    try:
        lock.acquire()  # one sweep per output folder: a second one would run and log the same cells
    except RunFolderBusyError:
        fail(
            f"sweep: another sweep ({RunLock.holder(args.output)}) is writing {args.output}; wait for it to "
            "finish or give another --output"
        )
    try:
        return _run(args)
    finally:
        lock.release()


def _run(args: Any) -> dict[str, str]:
    """Plan and run the sweep of the parsed ``args`` (the output folder's lock is held)."""
    from lightning_fed.sweep import plan, run_sweep

    try:
        runs = plan(
            args.configs, args.seeds, args.output, args.refer, args.refer_baselines, args.grids, args.folds
        )
        pending = sum(not r.done for r in runs)
        print(f"sweep: {len(runs)} runs ({len(runs) - pending} already done) -> {args.output}")
        status = run_sweep(runs, args.overrides, args.processes)
    except (ValueError, FileNotFoundError) as err:
        fail(str(err))
    except KeyboardInterrupt:
        print(
            "sweep: stopped; the running fits were ended with their checkpoints intact. Run the same "
            "command again to resume (finished runs are skipped, interrupted ones resume)",
            file=sys.stderr,
        )
        raise SystemExit(interrupt_code()) from None
    failed = sorted(name for name, s in status.items() if s == "failed")
    counts = {kind: sum(s == kind for s in status.values()) for kind in ("done", "skipped")}
    detail = f" ({', '.join(failed)}; see their .log files)" if failed else ""
    print(f"sweep: {counts['done']} done, {counts['skipped']} skipped, {len(failed)} failed{detail}")
    if failed:
        raise SystemExit(1)
    return status
