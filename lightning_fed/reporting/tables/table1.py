"""The ABPS paper's Table 1 (Sec. 6.3-6.4): one row per method label, ``table1.md`` / ``table1.csv``.

Every run (:class:`~lightning_fed.reporting.runs.RunRecord`) gives one row of :func:`runs_frame`
(``runs.csv``). Per method label, :func:`table1` gives the mean and sample standard deviation
(ddof=1) of the runs' test AUROC over seeds, the paired difference to a reference method over the
seeds both have (same seed, same data) with a 95 % Student-t interval and a verdict
(:mod:`lightning_fed.reporting.stats`), the means of bandwidth, isolation, E|P_i|, rounds and wall
time, and the means of the mechanism diagnostics ABPS runs record (:data:`DIAGNOSTICS`; null for
methods that record none). :func:`to_markdown` renders the main table; the diagnostics table is
:mod:`lightning_fed.reporting.tables.diagnostics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from lightning_fed.render import markdown_table, number, percent, write_pair
from lightning_fed.reporting.runs import RunRecord, read_runs
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import (
    BOOTSTRAP_RESAMPLES,
    NOT_APPLICABLE,
    center_paired_comparison,
    paired_comparison,
)

__all__ = [
    "DEFAULT_REFERENCE",
    "DIAGNOSTICS",
    "FAULTS",
    "SUPPORT",
    "check_reference",
    "collect_runs",
    "runs_frame",
    "runs_with_centers",
    "spec",
    "table1",
    "to_markdown",
    "write_runs",
    "write_table",
]

#: The method label paired differences compare to when no other is named (and the runs have it).
DEFAULT_REFERENCE = "fedavg"

#: Mechanism diagnostics a ``summary.json`` may hold (floats; ABPS writes them, other methods
#: leave them out): the share of partnerships within one care unit and its chance level, the share
#: of repeated partners, the spread of the posterior means, the share of center-rounds isolated by
#: each cause, and the bytes relative to FedAvg run for the same number of rounds.
DIAGNOSTICS: tuple[str, ...] = (
    "partner_same_unit_rate",
    "partner_same_unit_chance",
    "partner_repeat_rate",
    "posterior_mean_spread",
    "isolation_no_candidates",
    "isolation_no_capacity",
    "isolation_rejected",
    "isolation_unavailable",
    "bytes_vs_fedavg_same_rounds",
)

#: What stands behind a run's mean AUROC, from its ``summary.json`` (null for runs written before
#: a key existed): accuracy, balanced accuracy, the pooled, robust and size-weighted AUROC, the
#: centers whose AUROC is undefined, fragile (one case of a class) or robust (at least
#: ``robust_min_per_class`` of each class), and the number of centers.
SUPPORT: tuple[str, ...] = (
    "test_accuracy_mean",
    "test_balanced_accuracy_mean",
    "test_auroc_pooled",
    "test_auroc_robust",
    "test_auroc_weighted",
    "test_auroc_undefined",
    "test_auroc_fragile",
    "test_auroc_robust_centers",
    "num_centers",
)

#: What the wire and the engine refused over a run, from its ``summary.json`` (null for runs written
#: before a key existed; ``clipped_payloads`` only with ``wire.norm_bound``): payloads rejected by
#: the receivers' checks, payloads clipped by the norm bound, and center-rounds whose local training
#: diverged (NaN / Inf) and was rolled back. A nonzero count marks a run under faults or attack, so
#: it does not read as an ordinary weaker row.
FAULTS: tuple[str, ...] = ("rejected_payloads", "clipped_payloads", "diverged_center_rounds")

_RUN_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String(),
    "method": pl.String(),
    "seed": pl.Int64(),
    "test_auroc_mean": pl.Float64(),
    "bytes_vs_fedavg": pl.Float64(),
    "isolation_rate": pl.Float64(),
    "mean_partners": pl.Float64(),
    "rounds": pl.Int64(),
    "wall_seconds": pl.Float64(),
    "total_bytes": pl.Int64(),
    **{name: pl.Float64() for name in DIAGNOSTICS},
    "restored_best": pl.Boolean(),
    "best_round": pl.Int64(),
    "path": pl.String(),
    **{name: pl.Float64() for name in SUPPORT},
    **{name: pl.Int64() for name in FAULTS},
}


def _number(value: object) -> float | None:
    return None if value is None else float(value)


def _integer(value: object) -> int | None:
    return None if value is None else int(value)


def _flag(value: object) -> bool | None:
    return None if value is None else bool(value)


def runs_frame(records: Sequence[RunRecord]) -> pl.DataFrame:
    """One row per run record (``runs.csv``).

    Returns:
        Columns ``run`` (directory name), ``method`` (label), ``seed``, ``test_auroc_mean``,
        ``bytes_vs_fedavg``, ``isolation_rate`` and ``mean_partners`` (null when the summary has none,
        e.g. FedAvg), ``rounds``, ``wall_seconds``, ``total_bytes``, the :data:`DIAGNOSTICS`,
        ``restored_best`` and ``best_round`` (early stopping; all null when absent), ``path``, the
        :data:`SUPPORT` columns (null for older runs), the :data:`FAULTS` counts (null where the
        summary has none), then the ``metrics:`` columns of the runs that have them, then ``fold`` and
        ``folds`` when a run has them (``data.split.folds``; a run of
        :func:`~lightning_fed.reporting.folds.pool_folds` has ``folds`` and no ``fold``); sorted by
        method, seed (fold) and run.

    Raises:
        ValueError: If two runs share a method label, a seed and a fold (a table counts each seed
            once).
    """
    rows, metric_rows = [], []
    for record in records:
        summary = record.summary
        metric_rows.append(_metric_fields(summary))
        rows.append(
            {
                "run": record.name,
                "method": record.label,
                "seed": summary.get("seed"),
                "test_auroc_mean": _number(summary.get("test_auroc_mean")),
                "bytes_vs_fedavg": _number(summary.get("bytes_vs_fedavg")),
                "isolation_rate": _number(summary.get("isolation_rate")),
                "mean_partners": _number(summary.get("mean_partners")),
                "rounds": summary.get("rounds"),
                "wall_seconds": _number(summary.get("wall_seconds")),
                "total_bytes": summary.get("total_bytes"),
                **{name: _number(summary.get(name)) for name in DIAGNOSTICS},
                "restored_best": _flag(summary.get("restored_best")),
                "best_round": _integer(summary.get("best_round")),
                "path": str(record.path),
                **{name: _number(summary.get(name)) for name in SUPPORT},
                **{name: _integer(summary.get(name)) for name in FAULTS},
            }
        )
    runs = pl.DataFrame(rows, schema=_RUN_SCHEMA)
    if any(metric_rows):  # the runs' ``metrics:`` (torchmetrics per center), after the fixed columns
        runs = pl.concat([runs, pl.DataFrame(metric_rows, infer_schema_length=None)], how="horizontal")
    replicate = _replicate_columns(records)
    if replicate is not None:
        runs = pl.concat([runs, replicate], how="horizontal")
    key = ["method", "seed", *(["fold"] if replicate is not None else [])]
    runs = runs.sort(*key, "run")
    twice = runs.filter(pl.struct(key).is_duplicated())
    if twice.height:
        first = twice.row(0, named=True)
        same = twice.filter(pl.all_horizontal(pl.col(k).eq_missing(first[k]) for k in key))
        fold = "" if replicate is None or first["fold"] is None else f" fold {first['fold']}"
        raise ValueError(
            f"runs {', '.join(same['path'])} are all method {first['method']!r} with seed "
            f"{first['seed']}{fold}: a table counts each seed once, so remove the extra runs or report "
            "them separately"
        )
    return runs


def _replicate_columns(records: Sequence[RunRecord]) -> pl.DataFrame | None:
    """``fold`` and ``folds`` (``data.split.folds``) per record, appended to :func:`runs_frame`; None
    when no record has them (the frame of single-split runs is unchanged)."""
    if all(r.fold is None and r.folds is None for r in records):
        return None
    return pl.DataFrame(
        {"fold": [r.fold for r in records], "folds": [r.folds for r in records]},
        schema={"fold": pl.Int64, "folds": pl.Int64},
    )


def runs_with_centers(records: Sequence[RunRecord]) -> pl.DataFrame:
    """:func:`runs_frame` plus each run's final per-center test AUROCs, for the center-paired
    comparison: list columns ``center_names``, ``center_aurocs`` and ``center_robust`` (null where
    unknown)
    (:attr:`RunRecord.center_test_auroc <lightning_fed.reporting.runs.RunRecord.center_test_auroc>`;
    empty lists for a run without ``centers.parquet`` or ``rounds.parquet``)."""
    runs = runs_frame(records)
    by_path = {str(r.path): r.center_test_auroc for r in records}
    names, aurocs, robust = [], [], []
    for path in runs["path"].to_list():
        frame = by_path.get(path)
        names.append([] if frame is None else [str(n) for n in frame["name"].to_list()])
        robust.append([] if frame is None else frame["test_robust"].to_list())
        aurocs.append(
            [] if frame is None else [float(a) for a in frame["test_auroc"].fill_null(float("nan"))]
        )
    return runs.with_columns(
        pl.Series("center_names", names, dtype=pl.List(pl.String)),
        pl.Series("center_aurocs", aurocs, dtype=pl.List(pl.Float64)),
        pl.Series("center_robust", robust, dtype=pl.List(pl.Boolean)),
    )


def _metric_fields(summary: dict[str, object]) -> dict[str, float | None]:
    """The summary's ``metrics:`` numbers (``test_<name>_mean`` / ``_std`` / ``_defined``,
    ``val_<name>_mean``) as floats, for the names its ``metrics`` entry lists."""
    keys = ("test_{}_mean", "test_{}_std", "test_{}_defined", "val_{}_mean")
    names = summary.get("metrics") or []
    return {k.format(n): _number(summary.get(k.format(n))) for n in names for k in keys}


def collect_runs(root: Path) -> pl.DataFrame:
    """:func:`runs_frame` of every run folder under ``root`` (:func:`lightning_fed.reporting.read_runs`).

    Raises:
        ValueError: If ``root`` is not a directory, holds no run directory, or two runs share a
            method label and a seed.
    """
    return runs_frame(read_runs(root))


#: Table 1's name of each :data:`SUPPORT` mean.
_SUPPORT_NAMES = {
    "test_accuracy_mean": "accuracy",
    "test_balanced_accuracy_mean": "balanced_accuracy",
    "test_auroc_pooled": "auroc_pooled",
    "test_auroc_robust": "auroc_robust",
    "test_auroc_weighted": "auroc_weighted",
    "test_auroc_undefined": "undefined",
    "test_auroc_fragile": "fragile",
    "test_auroc_robust_centers": "robust_centers",
    "num_centers": "num_centers",
}


def missing_reference_note(methods: Sequence[str]) -> str:
    """Why Table 1 has no paired columns: no run carries the default reference label, with the labels
    that exist (those containing ``fedavg`` first) and the flag that picks one."""
    near = [m for m in methods if DEFAULT_REFERENCE in m.lower()]
    others = [m for m in sorted(methods) if m not in near]
    return (
        f"No paired comparison: no run is labelled {DEFAULT_REFERENCE!r} (the default reference); the labels "
        f"are {', '.join([*near, *others])}: pass --reference LABEL with one of them."
    )


def check_reference(labels: Sequence[str], reference: str | None) -> None:
    """Refuse a ``reference`` that no run's method label matches, naming the labels that exist.

    Raises:
        ValueError: ``reference method 'x' is not among the runs' methods (a, b); name one of them``.
    """
    _resolve_reference(sorted(set(labels)), reference)


def _resolve_reference(methods: list[str], reference: str | None) -> str | None:
    if reference is None:
        return DEFAULT_REFERENCE if DEFAULT_REFERENCE in methods else None
    if reference not in methods:
        raise ValueError(
            f"reference method {reference!r} is not among the runs' methods ({', '.join(sorted(methods))}); "
            "name one of them"
        )
    return reference


def _by_seed(runs: pl.DataFrame, method: str) -> dict[int, float | None]:
    rows = runs.filter((pl.col("method") == method) & pl.col("seed").is_not_null())
    return dict(zip(rows["seed"].to_list(), rows["test_auroc_mean"].to_list(), strict=True))


def _paired(runs: pl.DataFrame, methods: list[str], reference: str | None) -> pl.DataFrame:
    """``method``, ``n_paired``, ``diff_vs_ref``, ``diff_ci_low``/``high``, ``vs_ref``, ``reference``."""
    rows = []
    ref = _by_seed(runs, reference) if reference is not None else None
    for method in methods:
        row = {"method": method, "n_paired": None, "diff_vs_ref": None, "diff_ci_low": None}
        row |= {"diff_ci_high": None, "vs_ref": NOT_APPLICABLE, "reference": reference}
        if ref is not None and method != reference:
            cmp = paired_comparison(_by_seed(runs, method), ref)
            row |= {"n_paired": cmp.n_paired, "diff_vs_ref": cmp.mean, "diff_ci_low": cmp.ci_low}
            row |= {"diff_ci_high": cmp.ci_high, "vs_ref": cmp.verdict}
        rows.append(row)
    schema = {"method": pl.String, "n_paired": pl.Int64, "diff_vs_ref": pl.Float64}
    schema |= {"diff_ci_low": pl.Float64, "diff_ci_high": pl.Float64, "vs_ref": pl.String}
    return pl.DataFrame(rows, schema=schema | {"reference": pl.String})


def _centers_by_seed(runs: pl.DataFrame, method: str, robust: bool = False) -> dict[int, dict[str, float]]:
    """Seed -> {center: test AUROC} of ``method``'s runs; ``robust``: the robust centers only."""
    rows = runs.filter((pl.col("method") == method) & pl.col("seed").is_not_null())
    flags = rows["center_robust"].to_list() if "center_robust" in rows.columns else [None] * rows.height
    out: dict[int, dict[str, float]] = {}
    for seed, names, aurocs, keep in zip(
        rows["seed"].to_list(),
        rows["center_names"].to_list(),
        rows["center_aurocs"].to_list(),
        flags,
        strict=True,
    ):
        keep = keep if keep is not None else [None] * len(names)
        out[int(seed)] = {n: a for n, a, k in zip(names, aurocs, keep, strict=True) if not robust or k}
    return out


_CENTER_SCHEMA = {
    f"{prefix}{name}": dtype
    for prefix in ("center_", "robust_center_")
    for name, dtype in (
        ("pairs", pl.Int64),
        ("diff", pl.Float64),
        ("ci_low", pl.Float64),
        ("ci_high", pl.Float64),
        ("vs_ref", pl.String),
    )
}


def _center_paired(runs: pl.DataFrame, methods: list[str], reference: str | None) -> pl.DataFrame:
    """``center_pairs``, ``center_diff``, ``center_ci_low`` / ``high``, ``center_vs_ref`` per method,
    and the same with ``robust_`` over the centers robust in both runs (the robust mean's centers)."""
    rows = []
    have = "center_aurocs" in runs.columns and reference is not None
    for method in methods:
        row: dict[str, object] = dict.fromkeys(_CENTER_SCHEMA)
        row |= {"center_vs_ref": NOT_APPLICABLE, "robust_center_vs_ref": NOT_APPLICABLE}
        if have and method != reference:
            for prefix, robust in (("center_", False), ("robust_center_", True)):
                cmp = center_paired_comparison(
                    _centers_by_seed(runs, method, robust), _centers_by_seed(runs, reference, robust)
                )
                row |= {f"{prefix}pairs": cmp.n_pairs, f"{prefix}diff": cmp.mean}
                row |= {f"{prefix}ci_low": cmp.ci_low, f"{prefix}ci_high": cmp.ci_high}
                row |= {f"{prefix}vs_ref": cmp.verdict}
        rows.append(row)
    return pl.DataFrame(rows, schema=_CENTER_SCHEMA)


def table1(runs: pl.DataFrame, reference: str | None = None) -> pl.DataFrame:
    """Aggregate runs per method label, Table 1 style.

    Args:
        runs: The output of :func:`collect_runs`.
        reference: Method label the paired differences compare to; ``None``: :data:`DEFAULT_REFERENCE`
            when the runs have it, else no paired differences (all ``n/a``).

    Returns:
        One row per method: ``auroc_mean`` (mean over seeds of the per-run mean test AUROC),
        ``auroc_std`` (sample std over seeds, ddof=1; null with one seed), ``n_seeds``; the paired
        comparison to the reference over the seeds both have (same seed, same data; a seed either
        lacks, or with no AUROC, is left out): ``n_paired``, ``diff_vs_ref`` (mean of method minus
        reference), ``diff_ci_low``/``diff_ci_high`` (95 % Student-t interval,
        d_bar -/+ t_{0.975,n-1} s_d/sqrt(n)), ``vs_ref`` (``better``/``worse`` when the interval
        excludes 0, ``within noise`` when it contains 0, ``n/a`` below 2 shared seeds, for the
        reference itself, or without a reference; the numbers are null then too, except the mean
        difference with one shared seed), ``reference`` (its label, null without one); then the
        means over seeds of ``bytes_vs_fedavg``, ``isolation_rate``, ``mean_partners`` (E|P_i|),
        ``rounds``, ``wall_seconds`` and the :data:`DIAGNOSTICS` (nulls ignored; null when no run of
        the method has the value); then, appended, the means over seeds of the :data:`SUPPORT`
        columns (``accuracy``, ``balanced_accuracy``, ``auroc_pooled``, ``auroc_robust``,
        ``auroc_weighted``, ``undefined``, ``fragile``, ``robust_centers``, ``num_centers``) and the
        comparison to the reference paired by center within each shared seed (with the runs'
        ``center_aurocs``, :func:`runs_with_centers`; otherwise null): ``center_pairs``,
        ``center_diff``, ``center_ci_low`` / ``center_ci_high`` (hierarchical bootstrap, centers
        within seeds, :func:`~lightning_fed.reporting.stats.center_paired_comparison`) and
        ``center_vs_ref``, then the same ``robust_center_*`` over the robust centers only; then the
        means over seeds of the :data:`FAULTS` counts (``rejected_payloads``, ``clipped_payloads``,
        ``diverged_center_rounds``; null when no run of the method records one); with repeated
        evaluation (runs pooled by :func:`~lightning_fed.reporting.folds.pool_folds`, whose per-center
        AUROCs are the out-of-fold ones) a last column ``folds`` (``k``, null for a method run on one
        split). Sorted by ``auroc_mean`` descending (ties by method).

    Raises:
        ValueError: If ``reference`` is given but no run has that method label.
    """
    missing = [
        name for name in (*DIAGNOSTICS, *SUPPORT, *FAULTS) if name not in runs.columns
    ]  # built by hand
    runs = runs.with_columns(pl.lit(None, dtype=pl.Float64).alias(n) for n in missing)
    table = (
        runs.group_by("method")
        .agg(
            pl.col("test_auroc_mean").mean().alias("auroc_mean"),
            pl.col("test_auroc_mean").std(ddof=1).alias("auroc_std"),
            pl.len().cast(pl.Int64).alias("n_seeds"),
            pl.col("bytes_vs_fedavg").mean(),
            pl.col("isolation_rate").mean(),
            pl.col("mean_partners").mean(),
            pl.col("rounds").mean(),
            pl.col("wall_seconds").mean(),
            *(pl.col(name).mean() for name in DIAGNOSTICS),
            *(pl.col(name).mean().alias(_SUPPORT_NAMES[name]) for name in SUPPORT),
            *(pl.col(name).mean() for name in FAULTS),
        )
        .sort(["auroc_mean", "method"], descending=[True, False], nulls_last=True)
    )
    methods = table["method"].to_list()
    resolved = _resolve_reference(methods, reference)
    paired = _paired(runs, methods, resolved)
    front = table.select("method", "auroc_mean", "auroc_std", "n_seeds")
    support = list(_SUPPORT_NAMES.values())
    out = pl.concat(
        [
            front,
            paired.drop("method"),
            table.drop(*front.columns, *support, *FAULTS),
            table.select(support),
            _center_paired(runs, methods, resolved),
            table.select(FAULTS),
        ],
        how="horizontal",
    )
    if "folds" not in runs.columns:
        return out
    folds = runs.group_by("method").agg(pl.col("folds").max())
    return out.join(folds, on="method", how="left", maintain_order="left")


def _reference(table: pl.DataFrame) -> str | None:
    if "reference" not in table.columns:
        return None
    names = table["reference"].drop_nulls()
    return names[0] if names.len() else None


def _diff_cell(r: dict) -> str:
    if r["diff_vs_ref"] is None:
        return "-"
    cell = f"{r['diff_vs_ref']:+.3f}"
    if r["diff_ci_low"] is not None and r["diff_ci_high"] is not None:
        cell += f" [{r['diff_ci_low']:+.3f}, {r['diff_ci_high']:+.3f}]"
    if r["n_paired"] != r["n_seeds"]:
        cell += f" (n={r['n_paired']})"
    return cell


def _count(value: float | None, total: float | None) -> str:
    """A mean count over seeds, ``9`` or ``8.5``, with ``/ 58`` centers when known; ``-`` when null."""
    if value is None:
        return "-"
    cell = f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    if total is not None:
        cell += f" / {total:.0f}" if float(total).is_integer() else f" / {total:.1f}"
    return cell


def _center_diff_cell(r: dict, prefix: str = "center_") -> str:
    if r.get(f"{prefix}diff") is None:
        return "-"
    cell = f"{r[f'{prefix}diff']:+.3f}"
    if r[f"{prefix}ci_low"] is not None and r[f"{prefix}ci_high"] is not None:
        cell += f" [{r[f'{prefix}ci_low']:+.3f}, {r[f'{prefix}ci_high']:+.3f}]"
    return cell + f" (n={r[f'{prefix}pairs']})"


def to_markdown(table: pl.DataFrame) -> str:
    """Render :func:`table1`'s output as the main markdown table (``table1.md``), then a legend.

    Cells: AUROC ``0.823 ± 0.010`` (mean ± sample std over seeds, ddof=1; no ``±`` with one seed),
    bandwidth ``1.50x``, isolation ``2.2 %``, E|P_i| ``0.98``, rounds ``50``, wall ``33`` seconds,
    and, when the table has a reference method, the paired difference to it
    ``+0.018 [-0.004, +0.040]`` (mean [95 % CI]; ``(n=3)`` added when fewer seeds were paired than
    the method has) and the verdict (``better``, ``worse``, ``within noise``, ``n/a``); ``-`` where
    undefined. Appended after these (the columns of earlier versions keep their order): the robust
    mean AUROC, pooled AUROC, accuracy and balanced accuracy (means over seeds), the undefined,
    fragile and robust center counts (mean over seeds ``/`` centers), and with a reference the
    center-paired difference ``+0.012 [+0.004, +0.020] (n=540)`` (n: center pairs) and its verdict;
    last, the rejected and clipped payloads and the diverged center-rounds (means over seeds; ``-``
    where no run of the method records them). The diagnostics are in :func:`diagnostics_markdown`.
    """
    reference = _reference(table)
    header = [
        "method",
        "test AUROC",
        "seeds",
        "bytes vs FedAvg",
        "isolation",
        "E\\|P_i\\|",
        "rounds",
        "wall (s)",
    ]
    if reference is not None:
        header += [f"Δ AUROC vs {reference} [95 % CI]", f"vs {reference}"]
    header += ["robust AUROC", "pooled AUROC", "accuracy", "balanced acc.", "undefined", "fragile", "robust"]
    if reference is not None:
        header += [f"Δ vs {reference} by center [95 % CI]", f"vs {reference} by center"]
        header += [f"Δ vs {reference} by robust center [95 % CI]", f"vs {reference} by robust center"]
    header += ["rejected payloads", "clipped payloads", "diverged center-rounds"]
    rows = []
    for r in table.iter_rows(named=True):
        auroc = number(r["auroc_mean"], ".3f")
        if r["auroc_std"] is not None and auroc != "-":
            auroc += f" ± {r['auroc_std']:.3f}"
        cells = [
            r["method"],
            auroc,
            str(r["n_seeds"]),
            number(r["bytes_vs_fedavg"], ".2f", "x"),
            percent(r["isolation_rate"]),
            number(r["mean_partners"], ".2f"),
            number(r["rounds"], ".0f"),
            number(r["wall_seconds"], ".0f"),
        ]
        if reference is not None:
            cells += [_diff_cell(r), r["vs_ref"]]
        total = r.get("num_centers")
        cells += [
            number(r.get("auroc_robust"), ".3f"),
            number(r.get("auroc_pooled"), ".3f"),
            number(r.get("accuracy"), ".3f"),
            number(r.get("balanced_accuracy"), ".3f"),
            _count(r.get("undefined"), total),
            _count(r.get("fragile"), total),
            _count(r.get("robust_centers"), total),
        ]
        if reference is not None:
            cells += [_center_diff_cell(r), r.get("center_vs_ref") or NOT_APPLICABLE]
            cells += [_center_diff_cell(r, "robust_center_"), r.get("robust_center_vs_ref") or NOT_APPLICABLE]
        cells += [_count(r.get(name), None) for name in FAULTS]
        rows.append(cells)
    legend = "test AUROC: mean ± sample standard deviation (ddof=1) over seeds."
    if reference is not None:
        legend += (
            f" Δ AUROC vs {reference}: mean over the seeds both methods have of the per-seed difference,"
            " with the 95 % Student-t interval d̄ ± t(0.975, n-1)·s_d/√n; within noise: the interval"
            " contains 0; n/a: fewer than 2 shared seeds, or the reference itself."
        )
    legend += (
        " test AUROC: mean over the centers whose AUROC is defined; robust AUROC: mean over the centers"
        " with at least trainer.robust_min_per_class (default 2) test rows of each class; pooled AUROC:"
        " all centers' test rows as one set; accuracy, balanced acc.: means over centers. undefined:"
        " centers with one class in their test split; fragile: AUROC resting on one case of a class;"
        " robust: centers in the robust mean (each: mean over seeds / centers)."
    )
    if reference is not None:
        legend += (
            f" Δ vs {reference} by center: mean over shared seeds of the mean over centers (AUROC defined"
            " in both runs) of the per-center difference on the same test split, 95 % hierarchical"
            f" bootstrap interval (seeds, then centers within seeds; {BOOTSTRAP_RESAMPLES} resamples,"
            " seeded); n: center pairs. By robust center: the same over the centers with at least"
            " robust_min_per_class test rows of each class (runs with centers.parquet only)."
        )
    legend += (
        " rejected / clipped payloads: messages the wire's checks (wire.max_norm_ratio, wire.norm_bound)"
        " rejected / clipped over the run; diverged center-rounds: local trainings that diverged (NaN or"
        " Inf) and were rolled back (each: mean over seeds; -: not recorded). Nonzero counts mark a run"
        " under faults or attack, not an ordinary weaker one."
    )
    if "folds" in table.columns and table["folds"].drop_nulls().len():
        k = ", ".join(str(v) for v in sorted(set(table["folds"].drop_nulls().to_list())))
        legend += (
            f" Repeated evaluation (data.split.folds = {k}): a seed is its k fold runs pooled; each center's"
            " test AUROC, and every figure above built from it, comes from its out-of-fold test predictions"
            " (k test folds covering the center's rows, each scored by the fold's own model); bandwidth,"
            " rounds and wall time are means over the folds; each fold's own numbers are in folds.csv."
        )
    if reference is None and table.height > 1:
        legend += " " + missing_reference_note(table["method"].to_list())
    return markdown_table(header, rows, legend)


def write_table(df: pl.DataFrame, path_stem: str | Path) -> tuple[Path, Path]:
    """Write ``<stem>.md`` (see :func:`to_markdown`) and ``<stem>.csv`` (every column), atomically.

    Args:
        df: The output of :func:`table1`.
        path_stem: Destination without suffix, e.g. ``runs/report/table1``.

    Returns:
        The markdown and CSV paths.
    """
    return write_pair(to_markdown(df), df, path_stem)


def spec(reference: str | None = None) -> TableSpec:
    """``table1.md`` / ``table1.csv`` with the paired differences to ``reference`` (:func:`table1`).

    Expects the records after :func:`~lightning_fed.reporting.folds.pool_folds` (``report`` pools
    them once for every table)."""
    return TableSpec(
        "table1.md",
        runs_with_centers,
        lambda runs: to_markdown(table1(runs, reference)),
        "ABPS Table 1: per method test AUROC mean ± SD over seeds, paired difference to the reference, "
        "bandwidth, isolation, E|P_i|, rounds, wall; then robust and pooled AUROC, accuracy, balanced "
        "accuracy, undefined / fragile / robust centers and the difference paired by center",
        csv=lambda runs: table1(runs, reference),
    )


def write_runs(runs: pl.DataFrame, path: str | Path) -> Path:
    """Write the per-run table (:func:`collect_runs`, every column, e.g. ``restored_best`` and
    ``best_round``) as CSV, atomically.

    Args:
        runs: The output of :func:`collect_runs`.
        path: Destination, e.g. ``runs/report/runs.csv``.

    Returns:
        ``path``.
    """
    from lightning_fed.io import write_text

    return write_text(path, runs.write_csv())
