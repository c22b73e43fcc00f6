"""Grids of runs: every config x every seed, serially or several processes at once.

A sweep file names the configs, the seeds, the output folder and optional overrides::

    configs: [configs/fedavg.yaml, configs/abps.yaml]
    seeds: [11, 22, 33, 44, 55]          # the ABPS paper's protocol (Sec. 6.3)
    output: runs/table1
    overrides: ["--trainer.rounds=50"]   # appended to every run
    processes: 2                         # runs at once (each in its own process)
    refer: [edgedrm_fmnist]              # optional: run ``lightning-fed refer`` on these configs' runs
    refer_baselines: [local_fmnist]      # ... with these configs' runs (same seed) as --baselines

Run ``r`` of config ``C`` with seed ``s`` writes ``output/<C's stem>-seed<s>/``; a run whose folder
already holds ``summary.json`` is skipped, so an interrupted sweep picks up where it stopped. Each
run is a separate ``lightning-fed fit`` process, so runs cannot share state and a crash stays in
its run (its log is ``output/<run>.log``). Each run process gets ``cores // processes`` OpenMP threads
unless ``OMP_NUM_THREADS`` is set.

Referral (EdgeDRM): after every fit is done, each run of a config listed in ``refer`` gets
``lightning-fed refer --run-dir RUN [--baselines ...]`` (its log: ``output/<run>.refer.log``); such a
run counts as finished only once its ``referral.csv`` exists, so an interrupted sweep redoes only the
missing referral.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SweepRun", "plan", "run_sweep"]


@dataclass(frozen=True)
class SweepRun:
    """One cell of the grid."""

    config: Path
    seed: int
    run_dir: Path
    #: Run folders passed as ``--baselines`` to ``lightning-fed refer``; None: no referral step.
    refer_baselines: tuple[Path, ...] | None = None

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def fitted(self) -> bool:
        return (self.run_dir / "summary.json").is_file()

    @property
    def done(self) -> bool:
        referred = self.refer_baselines is None or (self.run_dir / "referral.csv").is_file()
        return self.fitted and referred


def plan(
    configs: Sequence[str | Path],
    seeds: Sequence[int],
    output: str | Path,
    refer: Sequence[str] = (),
    refer_baselines: Sequence[str] | Mapping[str, Sequence[str]] = (),
) -> list[SweepRun]:
    """The grid, config-major, validated before anything runs.

    Args:
        configs: Fit configs.
        seeds: Seeds.
        output: Folder of the run folders.
        refer: Config stems whose runs also get ``lightning-fed refer``.
        refer_baselines: Config stems whose runs (same seed) are those referrals' ``--baselines``:
            one list for every referral run, or a mapping from a referral config's stem to its own
            list (e.g. the DisPFL and FedSPD runs on the same graph).

    Raises:
        FileNotFoundError: If a config does not exist.
        ValueError: If the grid is empty, two configs share a file name, or ``refer`` names an
            unknown config.
    """
    configs = [Path(c) for c in configs]
    if not configs or not seeds:
        raise ValueError("sweep: give at least one config (configs:) and one seed (seeds:)")
    missing = [str(c) for c in configs if not c.is_file()]
    if missing:
        raise FileNotFoundError(f"sweep.configs: no such file: {', '.join(missing)}")
    stems = [c.stem for c in configs]
    if len(set(stems)) != len(stems):
        raise ValueError(f"sweep.configs: run folders are named by config file name, which repeat: {stems}")
    by_config = dict(refer_baselines) if isinstance(refer_baselines, Mapping) else None
    named = [*refer, *(by_config or {}), *(b for bs in (by_config or {}).values() for b in bs)]
    named += [] if by_config is not None else list(refer_baselines)
    unknown = [u for u in named if u not in stems]
    if unknown:
        raise ValueError(
            f"sweep.refer / refer_baselines name configs not in the sweep: {unknown} (use file stems)"
        )
    output = Path(output)

    def cell(c: Path, s: int) -> SweepRun:
        baselines = None
        if c.stem in refer:
            chosen = by_config.get(c.stem, ()) if by_config is not None else refer_baselines
            baselines = tuple(output / f"{b}-seed{int(s)}" for b in chosen)
        return SweepRun(c, int(s), output / f"{c.stem}-seed{int(s)}", baselines)

    return [cell(c, s) for c in configs for s in seeds]


def _refer(run: SweepRun, threads: int) -> int:
    baselines = [f"--baselines=[{','.join(str(b) for b in run.refer_baselines or ())}]"]
    args = [sys.executable, "-m", "lightning_fed.cli", "refer", f"--run-dir={run.run_dir}", *baselines]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if "OMP_NUM_THREADS" not in os.environ else None
    with open(run.run_dir.parent / f"{run.name}.refer.log", "w") as log:
        return subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, check=False, env=env).returncode


def _fit(run: SweepRun, overrides: Sequence[str], threads: int) -> int:
    if run.fitted:  # only its referral is missing
        return 0
    args = [
        sys.executable,
        "-m",
        "lightning_fed.cli",
        "fit",
        "--config",
        str(run.config),
        f"--seed={run.seed}",
        f"--output.root={run.run_dir.parent}",
        f"--output.name={run.name}",
        "--output.progress_bar=false",
        *overrides,
    ]
    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
    # Each run gets its share of the cores: several 2-thread OpenMP processes on 2 cores wait on each
    # other and run many times slower than the same runs one at a time.
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if "OMP_NUM_THREADS" not in os.environ else None
    with open(run.run_dir.parent / f"{run.name}.log", "w") as log:
        return subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, check=False, env=env).returncode


def run_sweep(runs: Sequence[SweepRun], overrides: Sequence[str] = (), processes: int = 1) -> dict[str, str]:
    """Run the pending cells (``processes`` at once); returns ``{run name: done|skipped|failed}``."""
    if processes < 1:
        raise ValueError(f"sweep.processes must be >= 1, got {processes}")
    status = {r.name: "skipped" for r in runs if r.done}
    pending = [r for r in runs if not r.done]
    threads = max(1, (os.cpu_count() or 1) // processes)
    from tqdm.auto import tqdm

    with (
        ThreadPoolExecutor(max_workers=processes) as pool,
        tqdm(total=len(pending), desc="sweep", unit="run") as bar,
    ):
        for run, code in zip(pending, pool.map(lambda r: _fit(r, overrides, threads), pending), strict=True):
            status[run.name] = "done" if code == 0 and run.fitted else "failed"
            bar.update(1)
        # Referral after every fit: a referral reads its baselines' finished runs.
        referrals = [r for r in pending if r.refer_baselines is not None and status[r.name] == "done"]
        for run, code in zip(referrals, pool.map(lambda r: _refer(r, threads), referrals), strict=True):
            status[run.name] = "done" if code == 0 and run.done else "failed"
    return status
