"""Held-out centers as they join (``holdout.md`` / ``holdout.csv``; ``evaluation.holdout_centers``).

A run with ``evaluation.holdout_centers`` trains without some centers and evaluates each of them on
its own test split with the model it receives when it joins, after ``k`` local fine-tuning steps for
each ``k`` of ``evaluation.holdout_finetune_steps`` (:mod:`lightning_fed.holdout`). Its
``holdout.parquet`` has one row per held-out center and ``k``; the rows here are those rows of every
run that has one, with ``method``, ``seed`` and ``run`` first and the run's pooled AUROC at that ``k``
(``holdout/steps_<k>/test_auroc_pooled`` of its summary: pooling needs the predictions, which the
parquet does not hold).

The markdown has two parts.

1. One row per method and ``k``: seeds; held-out centers per run; their test rows and events (mean
   per run); the test AUROC averaged three ways, each as mean ± SD over seeds of the per-run figure:
   the mean over defined centers, the robust mean (centers with at least
   ``trainer.robust_min_per_class`` test rows of each class) and the pooled AUROC; the undefined and
   fragile counts (mean per run over seeds); and the comparison with the reference method at the
   same ``k``, two ways:

   * **paired by center** within each seed
     (:func:`~lightning_fed.reporting.stats.center_paired_comparison`, seeds-then-centers
     bootstrap): a count of held-out centers is drawn from the run seed among the built centers, so
     runs of one seed hold out the same centers whatever the method, and each center defined for both
     gives one paired difference;
   * **paired by seed** (:func:`~lightning_fed.reporting.stats.paired_comparison`, a t interval over
     the per-run means), the comparison Table 1 also shows.

2. Each held-out center of the reference's lowest seed (or, without the reference, the first
   method's): train and test rows, deaths and survivors of the test split, its support class
   (robust / fragile / undefined), and every method's test AUROC at each ``k`` with its DeLong (1988)
   95 % interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import polars as pl

from lightning_fed.holdout_keys import holdout_key
from lightning_fed.render import markdown_table, mean_sd, number
from lightning_fed.reporting.runs import RunRecord
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import center_paired_comparison, mean_sd_by, paired_comparison
from lightning_fed.reporting.tables.centers import SUPPORT_COLUMNS
from lightning_fed.reporting.tables.table1 import DEFAULT_REFERENCE

__all__ = ["holdout_markdown", "holdout_rows", "spec"]

_COLUMNS = ("center", "name", "steps", *SUPPORT_COLUMNS)


def holdout_rows(records: Sequence[RunRecord]) -> pl.DataFrame:
    """Every run's ``holdout.parquet`` rows with ``method``, ``seed``, ``run`` first and ``pooled``
    (the run's pooled test AUROC over its held-out centers at that ``steps``); empty without one."""
    frames = []
    for r in records:
        if r.holdout is None:
            continue
        rows = r.holdout.select([c for c in _COLUMNS if c in r.holdout.columns])
        pooled = [
            _float(r.summary.get(holdout_key(int(k), "test_auroc_pooled"))) for k in rows["steps"].to_list()
        ]
        frames.append(
            rows.select(
                pl.lit(r.label).alias("method"),
                pl.lit(r.seed).alias("seed"),
                pl.lit(r.name).alias("run"),
                pl.all(),
            ).with_columns(pl.Series("pooled", pooled, dtype=pl.Float64))
        )
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def _float(value: object) -> float | None:
    """A summary number as a float; None for a missing, non-numeric or NaN value."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


#: The per-run averages shown as mean ± SD over seeds (``_per_run`` columns).
_AVERAGES = ("auroc_mean", "auroc_robust", "pooled")


def _per_run(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per run and ``steps``: the held-out centers' figures of that run (module docstring)."""
    defined = pl.col("test_auroc").is_not_nan() & pl.col("test_auroc").is_not_null()
    robust = defined & pl.col("test_robust")
    return (
        rows.group_by(["method", "seed", "run", "steps"])
        .agg(
            pl.len().alias("centers"),
            pl.col("test_n").sum().alias("test_n"),
            pl.col("test_positives").sum().alias("events"),
            pl.col("test_auroc").filter(defined).mean().alias("auroc_mean"),
            pl.col("test_auroc").filter(robust).mean().alias("auroc_robust"),
            robust.sum().alias("robust_centers"),
            pl.col("pooled").first().alias("pooled"),
            (~defined).sum().alias("undefined"),
            (defined & pl.col("test_auroc_fragile")).sum().alias("fragile"),
        )
        .sort(["method", "steps", "seed", "run"])
    )


def _mean(values: Sequence[float]) -> str:
    mean = sum(values) / len(values)
    return f"{mean:.0f}" if float(mean).is_integer() else f"{mean:.1f}"


def _signed(mean: float | None, low: float | None, high: float | None, n: int, verdict: str) -> str:
    """``+0.012 [-0.004, +0.030] (n=14) within noise``; ``-`` without a difference."""
    if mean is None:
        return "-"
    cell = f"{mean:+.3f}"
    if low is not None and high is not None:
        cell += f" [{low:+.3f}, {high:+.3f}]"
    return f"{cell} (n={n}) {verdict}"


def _by_center(rows: pl.DataFrame, method: str, steps: int) -> dict[int, dict[str, float]]:
    """Seed -> {held-out center: test AUROC} of ``method`` after ``steps`` fine-tuning steps."""
    out: dict[int, dict[str, float]] = {}
    for r in rows.filter((pl.col("method") == method) & (pl.col("steps") == steps)).iter_rows(named=True):
        if r["seed"] is not None:
            out.setdefault(int(r["seed"]), {})[str(r["name"])] = r["test_auroc"]
    return out


def _comparisons(rows: pl.DataFrame, runs: pl.DataFrame, method: str, steps: int, ref: str) -> list[str]:
    """The center-paired and the seed-paired cells of ``method`` against ``ref`` at ``steps``."""
    center = center_paired_comparison(_by_center(rows, method, steps), _by_center(rows, ref, steps))

    def seed_means(m: str) -> dict[int, float | None]:
        chosen = runs.filter(
            (pl.col("method") == m) & (pl.col("steps") == steps) & pl.col("seed").is_not_null()
        )
        return dict(zip(chosen["seed"].to_list(), chosen["auroc_mean"].to_list(), strict=True))

    seed = paired_comparison(seed_means(method), seed_means(ref))
    return [
        _signed(center.mean, center.ci_low, center.ci_high, center.n_pairs, center.verdict),
        _signed(seed.mean, seed.ci_low, seed.ci_high, seed.n_paired, seed.verdict),
    ]


def _summary_part(rows: pl.DataFrame, ref: str | None) -> str:
    runs = _per_run(rows)
    header = ["method", "steps k", "seeds", "held-out centers", "test rows (events)", "test AUROC mean"]
    header += ["robust mean (centers)", "pooled AUROC", "undefined", "fragile"]
    header += [f"Δ vs {ref}, by center", f"Δ vs {ref}, by seed"] if ref else []
    body = []
    for (method, steps), group in runs.group_by(["method", "steps"], maintain_order=True):
        stats = mean_sd_by(group, ["method", "steps"], _AVERAGES).row(0, named=True)
        cells = [
            str(method),
            str(steps),
            str(group["seed"].n_unique()),
            _mean(group["centers"].to_list()),
            f"{_mean(group['test_n'].to_list())} ({_mean(group['events'].to_list())})",
            mean_sd(stats, "auroc_mean", ".3f"),
            f"{mean_sd(stats, 'auroc_robust', '.3f')} ({_mean(group['robust_centers'].to_list())})",
            mean_sd(stats, "pooled", ".3f"),
            _mean(group["undefined"].to_list()),
            _mean(group["fragile"].to_list()),
        ]
        if ref:
            cells += ["-", "-"] if method == ref else _comparisons(rows, runs, str(method), int(steps), ref)
        body.append(cells)
    legend = (
        "Held-out centers (evaluation.holdout_centers) evaluated with the model they receive on joining"
        " (steps k = 0) and after k local fine-tuning steps. AUROC cells: mean ± SD over seeds of each run's"
        " figure over its held-out centers (mean over defined centers; robust: centers with at least"
        " trainer.robust_min_per_class test rows of each class, their count in brackets; pooled: one AUROC"
        " over all held-out rows). Counts: mean per run. Δ by center: paired center by center within each"
        " seed (the same centers are held out for every method of a seed), mean over seeds of the mean"
        " difference with a seeds-then-centers bootstrap 95 % interval, n = center pairs; Δ by seed: paired"
        " t interval over the per-run means, n = seeds. Verdict: better / worse when the interval excludes"
        " 0, within noise otherwise."
    )
    if not ref:
        legend += f" No paired columns: no run with held-out centers is labelled {DEFAULT_REFERENCE!r}."
    return markdown_table(header, body, legend)


def _auroc_cell(r: dict) -> str:
    cell = number(r["test_auroc"], ".3f")
    if cell != "-" and number(r["test_auroc_low"], ".3f") != "-":
        cell += f" [{r['test_auroc_low']:.3f}, {r['test_auroc_high']:.3f}]"
    return cell


def _centers_part(rows: pl.DataFrame, ref: str | None) -> str:
    anchor = ref if ref is not None else str(rows["method"].min())
    seeds = rows.filter(pl.col("method") == anchor)["seed"].drop_nulls()
    seed = seeds.min() if seeds.len() else None
    chosen = rows.filter(pl.col("seed") == seed) if seed is not None else rows
    methods = sorted(set(chosen["method"].to_list()))
    support = (
        chosen.filter(pl.col("method") == anchor)
        .unique(["name", "steps"])
        .sort(["steps", "test_n", "name"], descending=[False, True, False])
    )
    header = ["center", "steps k", "train rows", "test rows", "deaths", "survivors", "support", *methods]
    cells = {
        (m, str(r["name"]), int(r["steps"])): _auroc_cell(r)
        for m in methods
        for r in chosen.filter(pl.col("method") == m).iter_rows(named=True)
    }
    body = []
    for r in support.iter_rows(named=True):
        defined = number(r["test_auroc"], ".3f") != "-"
        kind = "robust" if r["test_robust"] else "fragile" if r["test_auroc_fragile"] else ""
        key = (str(r["name"]), int(r["steps"]))
        body.append(
            [
                str(r["name"]),
                str(r["steps"]),
                str(r["n_train"]),
                str(r["test_n"]),
                str(r["test_positives"]),
                str(r["test_negatives"]),
                kind if defined else "undefined",
                *[cells.get((m, *key), "-") for m in methods],
            ]
        )
    legend = (
        f"Seed {seed}: each held-out center's test split (deaths, survivors) and every method's test AUROC"
        " with its DeLong (1988) 95 % interval (none where a class has fewer than two rows). Every seed's"
        " rows are in holdout.csv."
    )
    return markdown_table(header, body, legend)


def holdout_markdown(rows: pl.DataFrame, reference: str | None = None) -> str:
    """``holdout.md`` from :func:`holdout_rows` (module docstring); ``""`` without rows."""
    if rows.height == 0:
        return ""
    methods = set(rows["method"].to_list())
    ref = reference if reference is not None else DEFAULT_REFERENCE
    ref = ref if ref in methods else None
    return _summary_part(rows, ref) + "\n" + _centers_part(rows, ref)


def spec(reference: str | None = None) -> TableSpec:
    """``holdout.md`` / ``holdout.csv`` (runs with ``evaluation.holdout_centers`` only)."""
    return TableSpec(
        "holdout.md",
        holdout_rows,
        lambda rows: holdout_markdown(rows, reference),
        "Held-out centers as they join: support, AUROC as received and after fine-tuning, paired with the "
        "reference by center and by seed",
        csv=lambda rows: rows,
    )
