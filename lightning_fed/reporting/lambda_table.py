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
Student-t interval and verdict (:func:`~lightning_fed.reporting.paired.paired_comparison`), and the
referral gain's own interval (gain > 0: referral helps at that ``lambda``).

Table 5 has no mechanism column; :func:`lambda_markdown` adds one where the referral tables record it:
``Reached``, the % of EdgeDRM's walks that visit the query's source client (``source_reached``), so a
change of accuracy with ``lambda`` reads as routing that finds the source more or less often.
:func:`lambda_plot` draws the table (``lambda_table.png``): EdgeDRM and EdgeDRM-NR accuracy +/- SD
against ``lambda`` in one panel, calls per query and the share of walks reaching the source in two more.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from lightning_fed.reporting.paired import PairedDifference, by_seed, format_interval, paired_comparison
from lightning_fed.reporting.referral import referral_runs
from lightning_fed.reporting.seed_summary import mean_sd_by, mean_sd_cell

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "lambda_markdown",
    "lambda_paired",
    "lambda_paired_markdown",
    "lambda_plot",
    "lambda_rows",
    "lambda_table",
]

_SETTING = ["dataset", "partition", "clients", "graph"]


def lambda_rows(root: Path, rule: str = "weighted history") -> pl.DataFrame:
    """One row per EdgeDRM run under ``root``: ``run``, the setting columns, ``lam``, ``seed``,
    ``edgedrm``, ``nr`` (accuracy in percent with prediction rule ``rule``), ``gain``, ``calls`` and
    ``reached`` (EdgeDRM's ``source_reached`` in percent; null where the table predates it)."""
    from lightning_fed.reporting.edgedrm_tables import run_lambda, run_setting

    rows = []
    for run, config, referrals in referral_runs(root):
        table = referrals.filter(pl.col("prediction_rule") == rule)
        found = {
            r["router"]: r for r in table.iter_rows(named=True) if r["router"] in ("EdgeDRM", "EdgeDRM-NR")
        }
        if len(found) < 2:
            continue
        edgedrm, nr = 100.0 * found["EdgeDRM"]["accuracy"], 100.0 * found["EdgeDRM-NR"]["accuracy"]
        rows.append(
            {
                "run": run.name,
                **run_setting(config),
                "lam": run_lambda(config),
                "edgedrm": edgedrm,
                "nr": nr,
                "gain": edgedrm - nr,
                "calls": float(found["EdgeDRM"]["calls_per_query"]),
                "reached": _maybe_float(found["EdgeDRM"].get("source_reached")),
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
    head = "| lambda | " + " | ".join(names) + " | Seeds |\n|" + "---|" * (len(names) + 2)
    blocks = []
    for key, part in table.group_by(["dataset", "partition", "clients", "graph"], maintain_order=True):
        dataset, partition, clients, graph = key
        lines = [f"{dataset} / {partition}, {clients} clients, {graph}:", "", head]
        for r in part.sort("lam").iter_rows(named=True):
            values = [f"{r['lam']:.2f}", *(mean_sd_cell(r, c) for c in columns), str(r["seeds"])]
            lines.append("| " + " | ".join(values) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def lambda_plot(table: pl.DataFrame, path: str | Path | None = None) -> Figure:
    """Table 5 as a figure: per setting (a line style each), EdgeDRM and EdgeDRM-NR accuracy (mean ± SD
    over seeds) against ``lambda``; calls per query; the % of EdgeDRM walks reaching the source.

    Raises:
        ValueError: If ``table`` has no rows.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from lightning_fed.reporting.plots import _save

    if table.height == 0:
        raise ValueError("lambda_plot: the lambda table has no rows (no EdgeDRM run with a referral.csv)")
    fig = Figure(figsize=(11.0, 3.4))
    FigureCanvasAgg(fig)
    acc, calls, reached = (fig.add_subplot(1, 3, k) for k in (1, 2, 3))
    styles = ("-", "--", ":", "-.")
    for k, (key, part) in enumerate(
        table.group_by(["dataset", "partition", "clients", "graph"], maintain_order=True)
    ):
        part = part.sort("lam")
        tag, ls, lam = f"{key[1]}, {key[2]} clients, {key[3]}", styles[k % len(styles)], part["lam"].to_list()
        for column, label, colour in (("edgedrm", "EdgeDRM", "C0"), ("nr", "EdgeDRM-NR", "C1")):
            sd = part[f"{column}_sd"].fill_null(0.0).to_list()
            acc.errorbar(
                lam,
                part[f"{column}_mean"].to_list(),
                yerr=sd,
                ls=ls,
                color=colour,
                marker="o",
                ms=3,
                capsize=2,
                label=f"{label} ({tag})",
            )
        calls.plot(lam, part["calls_mean"].to_list(), ls=ls, color="C0", marker="o", ms=3, label=tag)
        if part["reached_mean"].drop_nulls().len():
            reached.plot(lam, part["reached_mean"].to_list(), ls=ls, color="C2", marker="o", ms=3, label=tag)
    acc.set(xlabel="lambda", ylabel="accuracy (%)", title="accuracy (mean ± SD)")
    calls.set(xlabel="lambda", ylabel="classifier calls / query", title="EdgeDRM calls")
    reached.set(xlabel="lambda", ylabel="walks reaching the source (%)", title="EdgeDRM reaches the source")
    for ax in (acc, calls, reached):
        ax.grid(alpha=0.3)
    acc.legend(fontsize=6)
    fig.tight_layout()
    if path is not None:
        _save(fig, Path(path))
    return fig


def _ci(d: PairedDifference) -> str:
    text = format_interval(d.mean, d.ci_low, d.ci_high)
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
    from lightning_fed.reporting.edgedrm_tables import PRIMARY_LAMBDA

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
    head = (
        f"| lambda | EdgeDRM minus lambda {reference:g} (pp) | EdgeDRM-NR minus lambda {reference:g} (pp) "
        "| referral gain (pp) | Seeds |\n|---|---|---|---|---|"
    )
    blocks = []
    for key, part in paired.group_by(_SETTING, maintain_order=True):
        dataset, partition, clients, graph = key
        lines = [
            f"{dataset} / {partition}, {clients} clients, {graph}, paired by seed (95 % t interval):",
            "",
            head,
        ]
        for r in part.sort("lam").iter_rows(named=True):
            cells = [
                _ci(
                    PairedDifference(
                        r["seeds"], r[f"{c}_diff"], r[f"{c}_low"], r[f"{c}_high"], r[f"{c}_verdict"]
                    )
                )
                for c in ("edgedrm", "nr", "gain")
            ]
            lines.append(f"| {r['lam']:.2f} | " + " | ".join(cells) + f" | {r['seeds']} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"
