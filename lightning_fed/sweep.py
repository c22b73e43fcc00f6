"""Grids of runs: every config x every seed, serially or several processes at once.

A sweep file names the configs, the seeds, the output folder and optional overrides::

    configs: [configs/fedavg.yaml, configs/abps.yaml]
    seeds: [11, 22, 33, 44, 55]          # the ABPS paper's protocol (Sec. 6.3)
    output: runs/table1
    overrides: ["--trainer.rounds=50"]   # appended to every run
    processes: 2                         # runs at once (each in its own process)
    folds: 5                             # optional: 5 runs per config and seed, one per test fold
    refer: [edgedrm_fmnist]              # optional: run ``lightning-fed refer`` on these configs' runs
    refer_baselines: [local_fmnist]      # ... with these configs' runs (same seed) as --baselines

Run ``r`` of config ``C`` with seed ``s`` writes ``output/<C's stem>-seed<s>/``. A run whose folder
holds a complete run (:mod:`lightning_fed.runfolder.state`: summary, per-round parquet and
checkpoint agree on the round count and the config) is skipped; an interrupted run with a checkpoint
is resumed (``fit --resume`` with the same layers and overrides, so a changed cell config is refused
rather than mixed in); an interrupted run without one starts again (``--overwrite``). So an
interrupted sweep picks up where it stopped. Runs go seed by seed (every config of the first seed
first), so an interrupted sweep leaves whole seeds. Each run is a separate ``lightning-fed fit``
process, so runs cannot share state and a crash stays in its run (its log is ``output/<run>.log``).
Each run process is told how many run at once, so its ``trainer.threads: auto`` takes ``cores //
processes`` threads at most (the cores of its CPU affinity and cgroup quota, not the machine's;
:mod:`lightning_fed.threads`), unless ``OMP_NUM_THREADS`` is set or the runs set ``trainer.threads``.

Stopping: each run process is started in its own process group. Ctrl-C or SIGTERM on the sweep
stops scheduling, terminates the running fits (SIGTERM, then SIGKILL after 15 s; a fit exits on
SIGTERM with its files intact and its checkpoint resumable) and ends the sweep with one line saying
how to resume (exit 130 / 143). On Linux a run process also asks the kernel to send it SIGTERM when
the sweep dies, so even a SIGKILLed sweep leaves no fit running; and if one did, the run folder's
lock would refuse a second writer.

Layered grids (``grids:``): a benchmark is a product of independent choices (dataset, partition,
method, graph), each a small YAML layer; jsonargparse merges the layers of a run in order (``fit
--config A --config B ...``, later files override earlier ones, a new ``class_path`` replaces the
old class). Each grid is a list of groups ``{key: layer file}``; every combination of one key per
group is a run named by its keys joined with ``-``::

    grids:
      - [{fmnist: data/fmnist.yaml}, {spc5: part/spc5.yaml, dir03: part/dir03.yaml},
         {edgedrm: m/edgedrm.yaml, dispfl: m/dispfl.yaml}, {path: g/path.yaml, rr4: g/rr4.yaml}]
      - [{fmnist: data/fmnist.yaml}, {spc5: ..., dir03: ...}, {local: m/local.yaml}]   # no graph
    refer: [edgedrm]
    refer_baselines: {edgedrm: [local, dispfl]}

gives ``fmnist-spc5-edgedrm-path-seed<s>`` and so on. Several grids cover methods that do not take
every group (Local has no graph). A plain ``configs:`` entry is a one-layer run keyed by its stem.

Repeated evaluation (``folds: k``, :mod:`lightning_fed.data.split`): every cell and seed becomes
``k`` runs, ``output/<cell>-seed<s>-fold<i>/`` with ``--data.split.folds=k --data.split.fold=i``,
each a full fit with the same seed and the same method label (the cell name); ``report`` pools the
folds of a label and seed into one row (:mod:`lightning_fed.reporting.folds`). A referral's
baselines are the runs of the same seed and fold.

Referral (EdgeDRM): each run carrying a key listed in ``refer`` gets ``lightning-fed refer --run-dir
RUN [--baselines ...]`` (its log: ``output/<run>.refer.log``) as soon as it and its baselines are
fitted, ahead of the remaining fits, so a stopped sweep leaves whole cells; such a
run counts as finished only once its ``referral.csv`` exists, so an interrupted sweep redoes only the
missing referral. Baseline ``b`` of referral run ``R`` is the run (same seed) that carries key ``b``
and whose other keys are all among ``R``'s: for ``fmnist-spc5-edgedrm-path`` and ``b = dispfl`` that
is ``fmnist-spc5-dispfl-path``, for ``b = local`` it is ``fmnist-spc5-local``. It must be unique.
"""

from __future__ import annotations

import itertools
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from lightning_fed.processes import PARENT_ENV, RunProcesses

__all__ = ["PARENT_ENV", "Cell", "SweepRun", "expand", "plan", "run_sweep"]

#: What a grid key may be: a plain name (no path separator, no '-', which joins keys).
_PLAIN = re.compile(r"[A-Za-z0-9_.]+")

#: A grid: groups of ``{key: layer file}``, one key per group per run.
Grid = Sequence[Mapping[str, str | Path]]


@dataclass(frozen=True)
class Cell:
    """One combination of layers (seed not yet chosen): its keys and its files, in layer order."""

    keys: tuple[str, ...]
    configs: tuple[Path, ...]

    @property
    def name(self) -> str:
        return "-".join(self.keys)


@dataclass(frozen=True)
class SweepRun:
    """One cell of the grid with one seed."""

    #: Config files layered in this order (``fit --config A --config B ...``).
    configs: tuple[Path, ...]
    seed: int
    run_dir: Path
    #: Run folders passed as ``--baselines`` to ``lightning-fed refer``; None: no referral step.
    refer_baselines: tuple[Path, ...] | None = None
    #: ``(fold, folds)`` of a repeated evaluation (``data.split.fold`` / ``folds``); None: one split.
    fold: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        return self.run_dir.name

    @property
    def label(self) -> str:
        """The method label ``report`` groups by: the run's name without its seed (and fold) suffix."""
        suffix = f"-seed{self.seed}" + ("" if self.fold is None else f"-fold{self.fold[0]}")
        return self.name[: -len(suffix)] if self.name.endswith(suffix) else self.name

    @property
    def fitted(self) -> bool:
        """Whether the folder holds a complete, consistent run (never judged by ``summary.json`` alone)."""
        from lightning_fed.runfolder import folder_state
        from lightning_fed.runfolder.state import State

        return folder_state(self.run_dir).state is State.COMPLETE

    @property
    def done(self) -> bool:
        referred = self.refer_baselines is None or (self.run_dir / "referral.csv").is_file()
        return self.fitted and referred


def expand(configs: Sequence[str | Path] = (), grids: Sequence[Grid] = ()) -> list[Cell]:
    """The cells of plain configs (keyed by stem) and of every grid (all combinations, in order).

    Raises:
        FileNotFoundError: If a config or layer file does not exist.
        ValueError: On an empty grid or group, a key used twice within one grid, a key that is not a
            plain name (``-``, ``/``, ``..``: it would name a folder outside the output), or two cells
            with the same name.
    """
    missing = [str(c) for c in configs if not Path(c).is_file()]
    if missing:
        raise FileNotFoundError(f"sweep.configs: no such file: {', '.join(missing)}")
    cells = [Cell((Path(c).stem,), (Path(c),)) for c in configs]
    for g, groups in enumerate(grids):
        where = f"sweep.grids[{g}]"
        if not groups or any(not group for group in groups):
            raise ValueError(f"{where}: every grid needs at least one group and every group one key")
        keys = [k for group in groups for k in group]
        if len(set(keys)) != len(keys):
            raise ValueError(f"{where}: a key appears in two groups: {keys}")
        bad = [k for k in keys if not _PLAIN.fullmatch(k) or k in (".", "..")]
        if bad:
            raise ValueError(
                f"{where}: keys name run folders (joined by '-'): rename {bad} without '-' or '/' "
                "(letters, digits, '_' and '.' only)"
            )
        missing = sorted({f"{k}: {f}" for group in groups for k, f in group.items() if not Path(f).is_file()})
        if missing:
            raise FileNotFoundError(f"{where}: no such layer file: {', '.join(missing)}")
        for combo in itertools.product(*(list(group.items()) for group in groups)):
            cells.append(Cell(tuple(k for k, _ in combo), tuple(Path(f) for _, f in combo)))
    names = [c.name for c in cells]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"sweep: run folders are named by config stem / grid keys, which repeat: {repeated}")
    return cells


def _baseline(cell: Cell, key: str, cells: Sequence[Cell]) -> Cell:
    """The unique cell carrying ``key`` whose other keys are all among ``cell``'s (module docstring)."""
    found = [c for c in cells if key in c.keys and set(c.keys) - {key} <= set(cell.keys)]
    if len(found) != 1:
        names = [c.name for c in found] or "none"
        raise ValueError(
            f"sweep.refer_baselines: baseline {key!r} of {cell.name!r} must match exactly one run "
            f"(carrying {key!r}, other keys among {list(cell.keys)}); found {names}"
        )
    return found[0]


def plan(
    configs: Sequence[str | Path],
    seeds: Sequence[int],
    output: str | Path,
    refer: Sequence[str] = (),
    refer_baselines: Sequence[str] | Mapping[str, Sequence[str]] = (),
    grids: Sequence[Grid] = (),
    folds: int | None = None,
) -> list[SweepRun]:
    """The runs, seed-major (then cell, then fold), validated before anything runs.

    Args:
        configs: Fit configs (one layer each).
        seeds: Seeds.
        output: Folder of the run folders.
        refer: Keys (config stems or grid keys) whose runs also get ``lightning-fed refer``.
        refer_baselines: Keys whose runs (same seed) are those referrals' ``--baselines``: one list
            for every referral run, or a mapping from a referral key to its own list.
        grids: Layered grids (module docstring).
        folds: ``k`` runs per cell and seed, one per test fold (module docstring); None: one run.

    Raises:
        FileNotFoundError: If a config or layer does not exist.
        ValueError: If the sweep is empty, run names repeat, ``refer`` / ``refer_baselines`` name an
            unknown key, a baseline is not matched by exactly one run, or ``folds`` is not an
            integer >= 2.
    """
    if not (configs or grids) or not seeds:
        raise ValueError("sweep: give at least one config (configs: or grids:) and one seed (seeds:)")
    if folds is not None and (isinstance(folds, bool) or not isinstance(folds, int) or folds < 2):
        raise ValueError(f"sweep.folds must be an integer >= 2 (or left out for one split), got {folds!r}")
    cells = expand(configs, grids)
    known = {k for c in cells for k in c.keys}
    by_key = dict(refer_baselines) if isinstance(refer_baselines, Mapping) else None
    named = [*refer, *(by_key or {}), *(b for bs in (by_key or {}).values() for b in bs)]
    named += [] if by_key is not None else list(refer_baselines)
    unknown = [u for u in named if u not in known]
    if unknown:
        raise ValueError(
            f"sweep.refer / refer_baselines name configs not in the sweep: {unknown} "
            "(use config file stems or grid keys)"
        )
    output = Path(output)
    baselines: dict[str, tuple[Cell, ...] | None] = {}
    for cell in cells:
        hit = next((k for k in cell.keys if k in refer), None)
        if hit is None:
            baselines[cell.name] = None
            continue
        chosen = by_key.get(hit, ()) if by_key is not None else refer_baselines
        baselines[cell.name] = tuple(_baseline(cell, b, cells) for b in chosen)

    def run(cell: Cell, s: int, fold: int | None) -> SweepRun:
        suffix = f"-seed{int(s)}" + ("" if fold is None else f"-fold{fold}")
        base = baselines[cell.name]
        dirs = None if base is None else tuple(output / f"{b.name}{suffix}" for b in base)
        replicate = None if fold is None else (fold, int(folds))  # type: ignore[arg-type]
        return SweepRun(cell.configs, int(s), output / f"{cell.name}{suffix}", dirs, replicate)

    each = [None] if folds is None else list(range(folds))
    return [run(c, s, i) for s in seeds for c in cells for i in each]


def _cli() -> list[str]:
    return [sys.executable, "-m", "lightning_fed.cli"]


def _refer_args(run: SweepRun) -> list[str]:
    baselines = f"--baselines=[{','.join(str(b) for b in run.refer_baselines or ())}]"
    return [*_cli(), "refer", f"--run-dir={run.run_dir}", baselines]


def _fit_args(run: SweepRun, overrides: Sequence[str]) -> list[str]:
    """``lightning-fed fit`` for ``run``: a fresh fit, a resume of an interrupted one that has a
    checkpoint, or (``--overwrite``) a restart of one that has none."""
    from lightning_fed.runfolder import folder_state
    from lightning_fed.runfolder.state import State

    found = folder_state(run.run_dir).state
    start = {State.RESUMABLE: ["--resume", str(run.run_dir)], State.INTERRUPTED: ["--overwrite"]}
    return [
        *_cli(),
        "fit",
        *start.get(found, []),
        *(arg for config in run.configs for arg in ("--config", str(config))),
        f"--seed={run.seed}",
        f"--output.root={run.run_dir.parent}",
        f"--output.name={run.name}",
        f"--output.label={run.label}",
        "--output.progress_bar=false",
        *(
            []
            if run.fold is None
            else [f"--data.split.folds={run.fold[1]}", f"--data.split.fold={run.fold[0]}"]
        ),
        *overrides,
    ]


class _Scheduler:
    """Hands out work to the sweep's worker threads: a referral as soon as its run and baselines are
    fitted (so finished cells have their tables even if the sweep is stopped early), else the next fit.
    """

    def __init__(self, runs: Sequence[SweepRun], pending: Sequence[SweepRun]) -> None:
        # One look at each folder (a complete-run check reads the summary, parquet and checkpoint).
        self.fitted = {r.run_dir for r in runs if r.fitted}
        self.fits = [r for r in pending if r.run_dir not in self.fitted]
        self.refers = [r for r in pending if r.refer_baselines is not None]
        self.failed: set[Path] = set()
        self.status: dict[str, str] = {}
        self.in_flight = 0
        self.stopped = False
        self.cond = threading.Condition()

    def stop(self) -> None:
        """Hand out no more work."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def _inputs(self, run: SweepRun) -> list[Path]:
        return [run.run_dir, *(run.refer_baselines or ())]

    def take(self) -> tuple[str, SweepRun] | None:
        """The next task, waiting while a referral can only wait on fits in flight; None: all done."""
        with self.cond:
            while True:
                if self.stopped:
                    return None
                for run in list(self.refers):
                    inputs = self._inputs(run)
                    if any(d in self.failed for d in inputs):
                        self.refers.remove(run)
                        self.status[run.name] = "failed"
                    elif all(d in self.fitted for d in inputs):
                        self.refers.remove(run)
                        self.in_flight += 1
                        return "refer", run
                if self.fits:
                    self.in_flight += 1
                    return "fit", self.fits.pop(0)
                if not self.refers:
                    return None
                if self.in_flight == 0:  # inputs that no pending fit will produce
                    for run in self.refers:
                        self.status[run.name] = "failed"
                    self.refers.clear()
                    return None
                self.cond.wait()

    def finished(self, kind: str, run: SweepRun, ok: bool) -> None:
        with self.cond:
            self.in_flight -= 1
            if kind == "fit":
                (self.fitted if ok else self.failed).add(run.run_dir)
                if not ok or run.refer_baselines is None:
                    self.status[run.name] = "done" if ok else "failed"
            else:
                self.status[run.name] = "done" if ok else "failed"
            self.cond.notify_all()


def run_sweep(runs: Sequence[SweepRun], overrides: Sequence[str] = (), processes: int = 1) -> dict[str, str]:
    """Run the pending cells (``processes`` at once); returns ``{run name: done|skipped|failed}``.

    A referral starts as soon as its run and its baselines are fitted (before the remaining fits); a
    referral whose run or baseline failed is marked failed without running.

    Raises:
        KeyboardInterrupt: After Ctrl-C / SIGTERM (module docstring): scheduling has stopped and every
            run process has ended.
    """
    if processes < 1:
        raise ValueError(f"sweep.processes must be >= 1, got {processes}")
    done = {r.name for r in runs if r.done}
    status = dict.fromkeys(done, "skipped")
    pending = [r for r in runs if r.name not in done]
    scheduler = _Scheduler(runs, pending)
    children = RunProcesses()
    from tqdm.auto import tqdm

    bar = tqdm(total=len(scheduler.fits) + len(scheduler.refers), desc="sweep", unit="task")

    def work() -> None:
        while (task := scheduler.take()) is not None:
            kind, run = task
            run.run_dir.parent.mkdir(parents=True, exist_ok=True)
            if kind == "fit":
                log = run.run_dir.parent / f"{run.name}.log"
                ok = children.run(_fit_args(run, overrides), log, processes) == 0 and run.fitted
            else:
                log = run.run_dir.parent / f"{run.name}.refer.log"
                ok = children.run(_refer_args(run), log, processes) == 0 and run.done
            scheduler.finished(kind, run, ok)
            bar.update(1)

    with bar, ThreadPoolExecutor(max_workers=processes) as pool:
        futures = [pool.submit(work) for _ in range(processes)]
        try:
            for future in futures:
                future.result()
        except KeyboardInterrupt:
            scheduler.stop()
            children.terminate()
            raise
    return {**status, **scheduler.status}
