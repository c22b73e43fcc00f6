"""The task-routing weight sweep in the EdgeDRM paper's Table 5 layout (App. D.2.3).

Table 5 reports, per ``lambda``, EdgeDRM's accuracy, EdgeDRM-NR's (the same stage-II heads, no
referral), the referral gain (EdgeDRM minus NR) and EdgeDRM's classifier calls per query, each as
mean +/- sample SD over the training seeds. Here every EdgeDRM run folder with a ``referral.csv``
contributes one row per run (its ``algorithm.init_args.lam``, seed and setting), read with one
prediction rule (default: weighted history, the paper's primary rule). The gain is computed per run
and then averaged, so its SD is the SD of the paired differences, not a difference of SDs.
:func:`lambda_markdown` is written by ``lightning-fed report`` as ``lambda_table.md`` when the runs
under the root span more than one ``lambda`` (``configs/sweeps/edgedrm_lambda_cpu.yaml``).

Whether ``lambda`` matters beyond the seed noise is read from :func:`lambda_paired`: per ``lambda``,
EdgeDRM's and EdgeDRM-NR's accuracy minus those of the primary ``lambda`` (0.9) run of the same seed
and setting (the two share the stage-I model, so the difference is the stage-II fit's), with a 95 %
Student-t interval and verdict (:func:`~lightning_fed.reporting.stats.paired_comparison`), and the
referral gain's own interval (gain > 0: referral helps at that ``lambda``).

Table 5 has no mechanism column; :func:`lambda_markdown` adds one where the referral tables record it:
``Reached``, the % of EdgeDRM's walks that visit the query's source client (``source_reached``), so a
change of accuracy with ``lambda`` reads as routing that finds the source more or less often.
:func:`lightning_fed.plots.lambda_sweep.lambda_plot` draws the table (``lambda_table.png``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from lightning_fed.render import interval, markdown_table, mean_sd
from lightning_fed.reporting.families import LAMBDA_ROUTERS
from lightning_fed.reporting.runs import RunSource, as_records
from lightning_fed.reporting.settings import PRIMARY_LAMBDA
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import PairedDifference, by_seed, mean_sd_by, paired_comparison

__all__ = [
    "SPEC",
    "lambda_markdown",
    "lambda_paired",
    "lambda_paired_markdown",
    "lambda_rows",
    "lambda_table",
]

_SETTING = ["dataset", "partition", "clients", "graph"]


def lambda_rows(source: RunSource, rule: str = "weighted history") -> pl.DataFrame:
    """One row per EdgeDRM referral run: ``run``, the setting columns, ``lam``, ``seed``, ``edgedrm``,
    ``nr`` (accuracy in percent with prediction rule ``rule``), ``gain``, ``calls`` and ``reached``
    (EdgeDRM's ``source_reached`` in percent; null where the table predates it)."""
    records = as_records(source)
    ours, control = LAMBDA_ROUTERS
    rows = []
    for record in records:
        if record.routers is None or not record.has_config:
            continue
        table = record.routers.filter(pl.col("prediction_rule") == rule)
        found = {r["router_key"]: r for r in table.iter_rows(named=True) if r["router_key"] in LAMBDA_ROUTERS}
        if len(found) < 2:
            continue
        edgedrm, nr = 100.0 * found[ours]["accuracy"], 100.0 * found[control]["accuracy"]
        rows.append(
            {
                "run": record.name,
                **record.setting,
                "lam": record.lam,
                "edgedrm": edgedrm,
                "nr": nr,
                "gain": edgedrm - nr,
                "calls": float(found[ours]["calls_per_query"]),
                "reached": _maybe_float(found[ours].get("source_reached")),
            }
        )
    return pl.DataFrame(rows, schema_overrides={"reached": pl.Float64()}) if rows else pl.DataFrame()


def _maybe_float(value: object) -> float | None:
    return None if value is None else float(value)


def lambda_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean and sample SD (``<column>_mean`` / ``<column>_sd``) per (setting, ``lam``), with ``seeds``."""
    return mean_sd_by(rows, [*_SETTING, "lam"], ("edgedrm", "nr", "gain", "calls", "reached"))


def lambda_markdown(table: pl.DataFrame) -> str:
    """:func:`lambda_table` as Table 5 (one block per setting; ``mean ± SD``), then ``Reached (%)``
    when any run records it; "" without rows."""
    if table.height == 0:
        return ""

    columns = ["edgedrm", "nr", "gain", "calls"]
    names = ["EdgeDRM", "EdgeDRM-NR", "Referral gain", "Calls"]
    if table["reached_mean"].drop_nulls().len():
        columns, names = [*columns, "reached"], [*names, "Reached (%)"]
    blocks = []
    for key, part in table.group_by(["dataset", "partition", "clients", "graph"], maintain_order=True):
        dataset, partition, clients, graph = key
        rows = [
            [f"{r['lam']:.2f}", *(mean_sd(r, c) for c in columns), str(r["seeds"])]
            for r in part.sort("lam").iter_rows(named=True)
        ]
        table_text = markdown_table(["lambda", *names, "Seeds"], rows).rstrip("\n")
        blocks.append(f"{dataset} / {partition}, {clients} clients, {graph}:\n\n" + table_text)
    return "\n\n".join(blocks) + "\n"


def _ci(d: PairedDifference) -> str:
    text = interval(d.mean, d.ci_low, d.ci_high)
    return text if d.mean is None else f"{text} ({d.verdict})"


def lambda_paired(rows: pl.DataFrame, reference: float | None = None) -> pl.DataFrame:
    """Per (setting, ``lam``): EdgeDRM and EdgeDRM-NR minus the reference ``lambda`` run of the same
    seed, and the referral gain against 0, each with a 95 % t interval (module docstring).

    Args:
        rows: :func:`lambda_rows`.
        reference: The ``lambda`` compared against; default the primary 0.9.

    Returns:
        Columns: the setting, ``lam``, ``seeds``, and for ``edgedrm`` / ``nr`` / ``gain`` the
        ``<c>_diff``, ``<c>_low``, ``<c>_high``, ``<c>_verdict``; empty without the reference runs.
    """
    reference = PRIMARY_LAMBDA if reference is None else float(reference)
    if rows.height == 0 or reference not in set(rows["lam"]):
        return pl.DataFrame()
    out = []
    for key, part in rows.group_by(_SETTING, maintain_order=True):
        base = part.filter(pl.col("lam") == reference)
        if base.height == 0:
            continue
        for lam in sorted(set(part["lam"])):
            here = part.filter(pl.col("lam") == lam)
            row = {**dict(zip(_SETTING, key, strict=True)), "lam": lam, "seeds": here["seed"].n_unique()}
            ours = {c: by_seed(here["seed"], here[c]) for c in ("edgedrm", "nr", "gain")}
            diffs = {
                "edgedrm": paired_comparison(ours["edgedrm"], by_seed(base["seed"], base["edgedrm"])),
                "nr": paired_comparison(ours["nr"], by_seed(base["seed"], base["nr"])),
                "gain": paired_comparison(ours["gain"], dict.fromkeys(ours["gain"], 0.0)),
            }
            for c, d in diffs.items():
                row |= {
                    f"{c}_diff": d.mean,
                    f"{c}_low": d.ci_low,
                    f"{c}_high": d.ci_high,
                    f"{c}_verdict": d.verdict,
                }
            out.append(row)
    return pl.DataFrame(out)


def lambda_paired_markdown(paired: pl.DataFrame, reference: float = 0.9) -> str:
    """:func:`lambda_paired` as markdown, one block per setting; "" without rows."""
    if paired.height == 0:
        return ""
    head = [
        "lambda",
        f"EdgeDRM minus lambda {reference:g} (pp)",
        f"EdgeDRM-NR minus lambda {reference:g} (pp)",
    ]
    head += ["referral gain (pp)", "Seeds"]
    blocks = []
    for key, part in paired.group_by(_SETTING, maintain_order=True):
        dataset, partition, clients, graph = key
        rows = []
        for r in part.sort("lam").iter_rows(named=True):
            cells = [
                _ci(
                    PairedDifference(
                        r["seeds"], r[f"{c}_diff"], r[f"{c}_low"], r[f"{c}_high"], r[f"{c}_verdict"]
                    )
                )
                for c in ("edgedrm", "nr", "gain")
            ]
            rows.append([f"{r['lam']:.2f}", *cells, str(r["seeds"])])
        title = f"{dataset} / {partition}, {clients} clients, {graph}, paired by seed (95 % t interval):"
        blocks.append(title + "\n\n" + markdown_table(head, rows).rstrip("\n"))
    return "\n\n".join(blocks) + "\n"


def _sweep_markdown(rows: pl.DataFrame) -> str:
    """Table 5 then its paired block, when the runs span more than one ``lambda`` (else "")."""
    if rows["lam"].n_unique() < 2:
        return ""
    paired = lambda_paired_markdown(lambda_paired(rows))
    return lambda_markdown(lambda_table(rows)) + ("\n" + paired if paired else "")


def _draw(rows: pl.DataFrame, path: Path) -> None:
    """``lambda_table.png``: :func:`lightning_fed.plots.lambda_sweep.lambda_plot` of the table."""
    from lightning_fed.plots.lambda_sweep import lambda_plot

    lambda_plot(lambda_table(rows), path)


#: ``lambda_table.md`` and its figure ``lambda_table.png``.
SPEC = TableSpec(
    "lambda_table.md",
    lambda_rows,
    _sweep_markdown,
    "EdgeDRM Table 5: accuracy, referral gain and calls per lambda, then each lambda against 0.9 by seed",
    gate="edgedrm",
    figure=("lambda_table.png", _draw),
)
