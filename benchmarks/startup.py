"""Start-up time of ``lightning-fed fit``: from process start to the first round, phase by phase.

Runs ``python -m lightning_fed.cli fit --config CONFIG --trainer.rounds=1 --trainer.local_steps=1``
in a fresh subprocess ``--runs`` times (after one untimed warm-up run, so the disk cache is warm;
one local step keeps the first round short: nothing before it depends on the round's length, and
``--full-round`` trains the config's own round), with the CLI's debug
timing hook on (:data:`lightning_fed.startup.STARTUP_LOG_ENV`: the CLI appends a JSON line per phase
boundary), and prints, per phase, the median wall seconds and the median and smallest CPU seconds
of the fit process over the runs:

* ``interpreter``   process start to ``main()`` (Python, site, ``lightning_fed.cli``);
* ``imports``       the plugin classes ``fit_parser`` imports (torch, Lightning, the package);
* ``config``        parse and validate the config, claim the run folder;
* ``loggers``       build the W&B logger objects (offline; the W&B run starts at the first log);
* ``fabric``        build and launch Fabric;
* ``data``          generate the federation's data (``data.build``);
* ``federation``    set up the federation and its engine;
* ``to_round``      write ``config.yaml``, ``on_fit_start``, up to the first ``on_round_start``;
* ``round``         the first round's training, aggregation and evaluation (its own timer);
* ``wandb_init``    the rest of the first ``fabric.log_dict``: W&B's run start (0 with the logger off);
* ``first_write``   the first round's observers (``rounds.parquet`` written, ...);

then ``to_round_1`` (process start to the first round's start: everything before training) and
``to_round_1_logged`` (process start until the first round has been trained, logged and written).
The one-minute load average is printed before and after: on a shared machine wall seconds grow with
the load while CPU seconds move much less (the smallest CPU time of several runs least), so compare
CPU seconds across loads.

``--imports`` adds one run under ``python -X importtime`` and prints the top-level packages by
their own import time (self time, summed over their modules).

Run: ``python benchmarks/startup.py [--runs 5] [--config configs/fedavg.yaml] [--logger offline|off]
[--full-round] [--imports] [-- EXTRA FIT OPTIONS]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The CLI's debug timing hook (``lightning_fed.startup.STARTUP_LOG_ENV``; not imported, so this script
#: never imports torch itself).
STARTUP_LOG_ENV = "LIGHTNING_FED_STARTUP_LOG"
#: ``(name, from boundary, to boundary)``; ``None`` as the start is the process start.
PHASES: tuple[tuple[str, str | None, str], ...] = (
    ("interpreter", None, "main"),
    ("imports", "main", "parser"),
    ("config", "parser", "config"),
    ("loggers", "config", "loggers"),
    ("fabric", "loggers", "fabric"),
    ("data", "fabric", "data"),
    ("federation", "data", "federation"),
    ("to_round", "federation", "round_start"),
    ("round", None, ""),  # from the round_logged record's own seconds
    ("wandb_init", "round_start", "round_logged"),  # minus the round's seconds
    ("first_write", "round_logged", "round_end"),
)


def _phases(marks: dict[str, dict[str, float]], launched: float) -> dict[str, tuple[float, float]]:
    """``{phase: (wall seconds, cpu seconds)}`` of one run from its boundary records."""
    out: dict[str, tuple[float, float]] = {}
    round_seconds = float(marks["round_logged"].get("seconds", 0.0))
    for name, start, end in PHASES:
        if name == "round":
            out[name] = (round_seconds, float("nan"))
            continue
        t0 = launched if start is None else marks[start]["time"]
        c0 = 0.0 if start is None else marks[start]["cpu"]
        wall, cpu = marks[end]["time"] - t0, marks[end]["cpu"] - c0
        if name == "wandb_init":
            wall -= round_seconds
            cpu = float("nan")  # the round's CPU time is not separated from W&B's
        out[name] = (wall, cpu)
    out["to_round_1"] = (marks["round_start"]["time"] - launched, marks["round_start"]["cpu"])
    out["to_round_1_logged"] = (marks["round_end"]["time"] - launched, marks["round_end"]["cpu"])
    return out


def _command(args: argparse.Namespace, root: Path, name: str, importtime: bool = False) -> list[str]:
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "lightning_fed.cli", "fit"]
    cmd += ["--config", args.config, "--trainer.rounds=1", f"--output.root={root}", f"--output.name={name}"]
    cmd += ["--output.progress_bar=false", *([] if args.full_round else ["--trainer.local_steps=1"])]
    if args.logger == "off":
        cmd.append("--logger.enabled=false")
    return cmd + list(args.extra)


def run_once(args: argparse.Namespace, root: Path, name: str) -> dict[str, tuple[float, float]]:
    """One timed ``fit`` subprocess; its phases."""
    log = root / f"{name}.marks.jsonl"
    env = {**os.environ, STARTUP_LOG_ENV: str(log)}
    launched = time.time()
    done = subprocess.run(_command(args, root, name), cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"fit failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    pid = records[0]["pid"]  # the fit process (W&B's service process writes nothing here)
    marks = {r["phase"]: r for r in records if r["pid"] == pid}
    return _phases(marks, launched)


def import_breakdown(args: argparse.Namespace, root: Path, top: int = 12) -> list[tuple[str, float]]:
    """Top-level packages by summed self import time (seconds) in one ``-X importtime`` run."""
    done = subprocess.run(
        _command(args, root, "importtime", importtime=True), cwd=ROOT, capture_output=True, text=True
    )
    totals: dict[str, float] = {}
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match:
            package = match.group(2).split(".")[0]
            totals[package] = totals.get(package, 0.0) + int(match.group(1)) / 1e6
    return sorted(totals.items(), key=lambda kv: -kv[1])[:top]


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run the warm-up and the timed runs, print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs (after one warm-up)")
    parser.add_argument("--config", default="configs/fedavg.yaml", help="fit config (repository-relative)")
    parser.add_argument("--logger", choices=("offline", "off"), default="offline", help="W&B offline or off")
    parser.add_argument("--full-round", action="store_true", help="train the config's own first round")
    parser.add_argument("--imports", action="store_true", help="also break the imports down by package")
    parser.add_argument("extra", nargs="*", help="further fit options (after --)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        raise SystemExit("--runs must be >= 1")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lf-startup-") as tmp:
        root = Path(tmp)
        run_once(args, root, "warmup")
        runs = [run_once(args, root, f"run{i}") for i in range(args.runs)]
        imports = import_breakdown(args, root) if args.imports else []
    load_after = os.getloadavg()[0]

    print(
        f"lightning-fed fit --config {args.config} --trainer.rounds=1"
        f"{'' if args.full_round else ' --trainer.local_steps=1'} (W&B {args.logger}), "
        f"{args.runs} runs after a warm-up; load average (1 min) {load_before:.2f} before, "
        f"{load_after:.2f} after, on {os.cpu_count()} CPUs"
    )
    print(f"{'phase':<18} {'wall s':>8} {'cpu s':>8} {'min cpu':>8}   (medians, smallest)")
    for name in [p[0] for p in PHASES] + ["to_round_1", "to_round_1_logged"]:
        wall = statistics.median(r[name][0] for r in runs)
        cpus = [r[name][1] for r in runs if r[name][1] == r[name][1]]
        cpu = f"{statistics.median(cpus):8.2f} {min(cpus):8.2f}" if cpus else f"{'-':>8} {'-':>8}"
        if name == "to_round_1":
            print("-" * 47)
        print(f"{name:<18} {wall:8.2f} {cpu}")
    if imports:
        print("import self time by top-level package (one -X importtime run, seconds):")
        print("  " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in imports))


if __name__ == "__main__":
    main()
