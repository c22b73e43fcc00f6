"""The one reader of a run tree: every run folder under a root as a frozen :class:`RunRecord`.

A run folder is any folder holding a ``summary.json`` (written by ``lightning-fed fit``), found
recursively in sorted path order. Every report table reads these records, never the folders: one
walk per report. A record carries what the tables need, each part read at most once:

- ``summary`` (read eagerly: a broken one is an error naming the file), ``label``, ``method``, ``seed``;
- ``config`` (``config.yaml``; ``{}`` without one), ``setting``
  (:func:`~lightning_fed.reporting.settings.setting_of`: ``summary["setting"]`` or the fallback
  parsing for older runs), ``lam``, ``algorithm``;
- ``referral`` (``referral.csv`` as written) and ``routers`` (the same rows with a ``router_key``
  column: the file's when it records one, else the router label, which is the key of every router
  not relabelled), ``rounds`` (``rounds.parquet``), ``checkpoint`` (its path when there is one),
  ``centers`` (``centers.parquet``: each center's final support and DeLong interval), ``holdout``
  (``holdout.parquet``: the same for the held-out centers, per fine-tuning budget) and
  ``center_test_auroc`` (each center's final test AUROC: from ``centers.parquet``, or for runs
  written before it, the rows of ``rounds.parquet`` at the round the summary evaluated: the best
  round where early stopping restored it, else the last round run), ``predictions``
  (``predictions.parquet``: each evaluated row's label and probability);
- ``fold`` / ``folds``: the replicate of a repeated evaluation (``data.split.folds``, recorded in the
  summary; None for a single split): the runs of one label and seed differ by fold, and
  :func:`~lightning_fed.reporting.folds.pool_folds` turns them into one record.

Everything but the summary is read lazily, on first use, and kept.

Labels: runs are grouped by the *method label* of their summary (``label``: ``output.label``, by
default the stems of the run's ``--config`` files, e.g. ``abps_x``; a sweep records its cell name),
never by their folder names, so folders named in any way group correctly. Only summaries written
before labels were recorded fall back to the folder name: a trailing seed suffix is removed, so
``abps_x-seed3``, ``abps_x_seed3`` and ``abps-seed0-20261129-141200`` give ``abps_x``, ``abps_x`` and
``abps``; a directory named only ``seed<N>`` (layout ``root/<label>/seed<N>/``) takes its parent's
name; when no name is left the label is ``summary["method"]`` lower-cased.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from lightning_fed.reporting.settings import run_lambda, setting_of

__all__ = ["RunRecord", "RunSource", "as_records", "method_label", "read_runs", "read_summary"]

_SEED_SUFFIX = re.compile(r"(?:^|[-_])seed\d+(?:-[\d-]+)?$")


def method_label(run_dir: Path, summary: Mapping[str, Any], root: Path | None = None) -> str:
    """Method label of a run: ``summary["label"]``; for older summaries without one, the directory
    name without a trailing seed suffix (module docstring).

    Args:
        run_dir: The run directory.
        summary: Its parsed ``summary.json`` (``method`` is the fallback).
        root: The collection root; a ``seed<N>`` directory directly under it falls back to the method.

    Returns:
        The label, e.g. ``"abps_x"`` for ``abps_x-seed2-20261129-141200``.
    """
    if summary.get("label"):
        return str(summary["label"])
    label = _SEED_SUFFIX.sub("", run_dir.name)
    if not label and run_dir.parent != root and run_dir.parent != run_dir:
        label = _SEED_SUFFIX.sub("", run_dir.parent.name)
    return label or str(summary.get("method", "unknown")).lower()


def read_summary(path: Path) -> dict:
    """A run's parsed ``summary.json``.

    Raises:
        ValueError: One line naming the file when it is unreadable or not a JSON object (a report
            over a folder with one broken run says which one, rather than failing somewhere inside).
    """
    try:
        summary = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable summary ({err}); rerun or remove that run folder") from None
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: not a summary (a JSON object expected); rerun or remove that run folder")
    return summary


@dataclass(frozen=True, eq=False)
class RunRecord:
    """One run folder as the report tables see it (module docstring).

    Attributes:
        path: The run folder.
        summary: Its parsed ``summary.json``.
        label: Its method label (:func:`method_label`).
    """

    path: Path
    summary: Mapping[str, Any]
    label: str

    @property
    def name(self) -> str:
        """The folder's name (the ``run`` column of the tables)."""
        return self.path.name

    @property
    def seed(self) -> Any:
        """``summary["seed"]`` (None when absent)."""
        return self.summary.get("seed")

    @property
    def fold(self) -> int | None:
        """``summary["fold"]``: which test fold this run held out (``data.split.fold``); None for a
        single split (runs of one label and seed differ by it)."""
        fold = self.summary.get("fold")
        return None if fold is None else int(fold)

    @property
    def folds(self) -> int | None:
        """``summary["folds"]``: ``k`` of ``data.split.folds``; None for a single split."""
        folds = self.summary.get("folds")
        return None if folds is None else int(folds)

    @property
    def method(self) -> str:
        """The algorithm key: ``summary["method"]`` (the class name) lower-cased; ``""`` without one."""
        return str(self.summary.get("method") or "").lower()

    @property
    def has_config(self) -> bool:
        """Whether the folder holds its resolved ``config.yaml``."""
        return (self.path / "config.yaml").is_file()

    @cached_property
    def config(self) -> Mapping[str, Any]:
        """The resolved ``config.yaml`` (``{}`` without one)."""
        if not self.has_config:
            return {}
        import yaml

        return yaml.safe_load((self.path / "config.yaml").read_text()) or {}

    @cached_property
    def algorithm(self) -> str:
        """The algorithm key, from the summary, else the config's ``algorithm.class_path`` lower-cased."""
        if self.method:
            return self.method
        node = self.config.get("algorithm")
        return str(node.get("class_path", "")).rsplit(".", 1)[-1].lower() if isinstance(node, dict) else ""

    @cached_property
    def setting(self) -> Mapping[str, Any]:
        """``dataset``, ``partition``, ``clients``, ``graph``, ``seed`` (computed once, see the module)."""
        return setting_of(self.config, self.summary)

    @cached_property
    def lam(self) -> float:
        """The EdgeDRM task weight ``algorithm.init_args.lam`` (0.9 when not given)."""
        return run_lambda(self.config)

    @cached_property
    def referral(self) -> pl.DataFrame | None:
        """``referral.csv`` as ``lightning-fed refer`` wrote it, or None."""
        path = self.path / "referral.csv"
        return pl.read_csv(path) if path.is_file() else None

    @cached_property
    def referral_queries(self) -> pl.DataFrame | None:
        """``referral_queries.parquet`` (one row per query, router and rule), or None (a run
        referred before the file existed, or never)."""
        path = self.path / "referral_queries.parquet"
        return pl.read_parquet(path) if path.is_file() else None

    @cached_property
    def routers(self) -> pl.DataFrame | None:
        """:attr:`referral` with its ``router_key`` column (the label where the file predates keys)."""
        table = self.referral
        if table is None or "router_key" in table.columns:
            return table
        return table.with_columns(pl.col("router").cast(pl.String).alias("router_key"))

    @cached_property
    def rounds(self) -> pl.DataFrame | None:
        """``rounds.parquet`` (every column), or None."""
        path = self.path / "rounds.parquet"
        return pl.read_parquet(path) if path.is_file() else None

    @cached_property
    def centers(self) -> pl.DataFrame | None:
        """``centers.parquet`` (one row per center: support, AUROC and its interval), or None."""
        path = self.path / "centers.parquet"
        return pl.read_parquet(path) if path.is_file() else None

    @cached_property
    def predictions(self) -> pl.DataFrame | None:
        """``predictions.parquet`` (one row per evaluated val / test row: center, split, row, source row,
        label, then logit and probability, or the lists logits and probabilities of a multi-class model),
        or None (runs written before it)."""
        path = self.path / "predictions.parquet"
        return pl.read_parquet(path) if path.is_file() else None

    @cached_property
    def holdout(self) -> pl.DataFrame | None:
        """``holdout.parquet`` (one row per held-out center and fine-tuning budget ``steps``: support,
        AUROC and its interval; ``evaluation.holdout_centers``), or None."""
        path = self.path / "holdout.parquet"
        return pl.read_parquet(path) if path.is_file() else None

    @cached_property
    def center_test_auroc(self) -> pl.DataFrame | None:
        """Each center's final test AUROC: columns ``center``, ``name``, ``test_auroc`` (NaN where
        undefined) and ``test_robust`` (null when unknown: runs before ``centers.parquet``), one row
        per center; from :attr:`centers`, else (older runs) the rows of :attr:`rounds` at
        :attr:`final_round`, the round whose parameters ``summary.json`` evaluated; None when the run
        has neither, or when that round did not evaluate the test split (``trainer.eval_every > 1``:
        the numbers of another round would not be the summary's; ``lightning-fed test --run-dir``
        writes the run's ``centers.parquet`` from its checkpoint)."""
        columns = ["center", "name", "test_auroc"]
        if self.centers is not None:
            robust = pl.col("test_robust") if "test_robust" in self.centers.columns else pl.lit(None)
            return self.centers.select(*columns, robust.cast(pl.Boolean).alias("test_robust"))
        rounds = self.rounds
        if rounds is None or not {"round", *columns} <= set(rounds.columns) or rounds.height == 0:
            return None
        final = self.final_round
        at = rounds.filter((pl.col("round") == final) & pl.col("test_auroc").is_not_null())
        if at.height == 0:
            return None
        return at.select(*columns, pl.lit(None, dtype=pl.Boolean).alias("test_robust")).sort("center")

    @property
    def final_round(self) -> int | None:
        """The 0-based round whose parameters the summary evaluated: ``best_round`` when early stopping
        restored it (``restored_best``), else ``stopped_round`` when early stopping ran, else the last
        round of ``rounds.parquet``; None without ``rounds.parquet``. (A final stage after the rounds,
        EdgeDRM's stage II, changes the parameters again; its numbers are in ``centers.parquet`` only.)
        """
        if self.summary.get("restored_best") and int(self.summary.get("best_round", -1)) >= 0:
            return int(self.summary["best_round"])
        if self.summary.get("stopped_round") is not None:
            return int(self.summary["stopped_round"])
        rounds = self.rounds
        if rounds is None or "round" not in rounds.columns or rounds.height == 0:
            return None
        return int(rounds["round"].max())

    def rounds_have(self, column: str) -> bool:
        """Whether ``rounds.parquet`` exists and has ``column`` (reads the schema only)."""
        path = self.path / "rounds.parquet"
        return path.is_file() and column in pl.read_parquet_schema(path)

    @property
    def checkpoint(self) -> Path | None:
        """The final ``checkpoint.pt``, or None."""
        path = self.path / "checkpoint.pt"
        return path if path.is_file() else None


def _walk(root: Path) -> list[RunRecord]:
    records = []
    for path in sorted(root.rglob("summary.json")):
        summary = read_summary(path)
        records.append(RunRecord(path.parent, summary, method_label(path.parent, summary, root)))
    return records


def read_runs(root: Path) -> list[RunRecord]:
    """Every run folder under ``root`` (recursively, sorted by path) as a :class:`RunRecord`.

    Raises:
        ValueError: If ``root`` is not a directory, holds no run folder, or a summary is broken.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"runs root {root} is not a directory")
    records = _walk(root)
    if not records:
        raise ValueError(f"no run directories (folders with summary.json) under {root}")
    return records


#: What a table's row reader takes: the records of one walk, or a root to walk (scripts, tests).
RunSource = Path | str | Sequence[RunRecord]


def as_records(source: RunSource) -> Sequence[RunRecord]:
    """The records of ``source``: itself when it already is records, else the walk of that root
    (``[]`` for a root without run folders: a table over it simply has no rows).

    Raises:
        ValueError: If a summary under the root is broken (:func:`read_summary`).
    """
    if isinstance(source, str | Path):
        return _walk(Path(source)) if Path(source).is_dir() else []
    return source
