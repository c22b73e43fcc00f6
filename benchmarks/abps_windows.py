"""Partner diagnostics of ABPS runs over round windows (issue 30): whom centers trust, and when they rest.

Reads each run's ``rounds.parquet`` (the per-round ``partner_*`` and ``isolation_*`` scalars that
:class:`~lightning_fed.algorithms.ABPS` records, repeated on every center's row) and prints one
markdown row per run:

* the same-unit partner share over a window (default rounds 20-49, i.e. "rounds 20-50" of a 50-round
  TeacherICU run) against its chance level and their ratio;
* the off-concept partner share of in-concept receivers over a window (default rounds 30-39, the
  last 10 of a 40-round mixed run) against chance and their ratio (mixed federations only);
* the share of center-rounds resting because every candidate was refused (``isolation_rejected``)
  over the whole run, and the last round's ``rest_refuses_all`` / ``rest_refused_share`` when the
  acceptance rule records them.

Each window figure is the mean over the window's rounds of the per-round share (every round
weighs the same; the run's ``summary.json`` ``partner_off_concept_rate_from30`` weighs by slots,
and differs from it by the change in the number of in-concept slots across rounds only). Then a
mean over seeds per method (the run folder's ``config.yaml`` label, or its name without ``-seedN``).

Run: ``python benchmarks/abps_windows.py RUN_DIR [RUN_DIR ...] [--same 20 49] [--off 30 39]``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import polars as pl

__all__ = ["window_row", "window_share"]


def window_share(rounds: pl.DataFrame, column: str, first: int, last: int) -> float | None:
    """Mean over rounds ``first..last`` (inclusive, 0-based) of the per-round ``column``; None when the
    run has no such column or no round in the window."""
    if column not in rounds.columns:
        return None
    per_round = (
        rounds.group_by("round")
        .agg(pl.col(column).first())
        .filter((pl.col("round") >= first) & (pl.col("round") <= last) & pl.col(column).is_not_null())
    )
    return float(per_round[column].mean()) if per_round.height else None


def window_row(run: Path, same: tuple[int, int], off: tuple[int, int]) -> dict[str, float | str | None]:
    """One run's window diagnostics (module docstring)."""
    rounds = pl.read_parquet(run / "rounds.parquet")
    per_round = rounds.group_by("round").agg(pl.all().first()).sort("round")
    row: dict[str, float | str | None] = {"run": run.name, "method": re.sub(r"-seed\d+$", "", run.name)}
    for name, (a, b) in (("same_unit", same), ("off_concept", off)):
        rate = window_share(rounds, f"partner_{name}_rate", a, b)
        chance = window_share(rounds, f"partner_{name}_chance", a, b)
        row[f"{name}_rate"], row[f"{name}_chance"] = rate, chance
        row[f"{name}_ratio"] = rate / chance if rate is not None and chance else None
    row["isolation_rejected"] = (
        float(per_round["isolation_rejected"].mean()) if "isolation_rejected" in per_round.columns else None
    )
    for col in ("rest_refuses_all", "rest_refused_share"):
        row[col] = float(per_round[col][-1]) if col in per_round.columns else None
    summary = run / "summary.json"
    if summary.is_file():
        data = json.loads(summary.read_text())
        row["test_auroc_mean"] = data.get("test_auroc_mean")
    return row


def _fmt(x: float | str | None, digits: int = 3) -> str:
    return "-" if x is None else (x if isinstance(x, str) else f"{x:.{digits}f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (each with rounds.parquet)")
    parser.add_argument("--same", nargs=2, type=int, default=(20, 49), help="same-unit window (rounds)")
    parser.add_argument("--off", nargs=2, type=int, default=(30, 39), help="off-concept window (rounds)")
    args = parser.parse_args()
    rows = [
        window_row(r, tuple(args.same), tuple(args.off))
        for r in args.runs
        if (r / "rounds.parquet").is_file()
    ]
    cols = [
        "same_unit_rate",
        "same_unit_chance",
        "same_unit_ratio",
        "off_concept_rate",
        "off_concept_chance",
        "off_concept_ratio",
        "isolation_rejected",
        "rest_refuses_all",
        "rest_refused_share",
        "test_auroc_mean",
    ]
    print(
        f"same-unit window: rounds {args.same[0]}-{args.same[1]}; "
        f"off-concept: rounds {args.off[0]}-{args.off[1]}\n"
    )
    print("| run | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for row in rows:
        print(f"| {row['run']} | " + " | ".join(_fmt(row.get(c)) for c in cols) + " |")
    print("\nMean over seeds per method:\n")
    print("| method | runs | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 2) + "|")
    for method in sorted({str(r["method"]) for r in rows}):
        group = [r for r in rows if r["method"] == method]
        means = []
        for c in cols:
            vals = [float(r[c]) for r in group if r.get(c) is not None]  # type: ignore[arg-type]
            means.append(_fmt(sum(vals) / len(vals) if vals else None))
        print(f"| {method} | {len(group)} | " + " | ".join(means) + " |")


if __name__ == "__main__":
    main()
