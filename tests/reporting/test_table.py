"""Table 1's paired differences, the mechanism diagnostics and the runs CSV, over fake run folders."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.cli import main
from lightning_fed.reporting import (
    collect_runs,
    diagnostics_markdown,
    report,
    table1,
    to_markdown,
    write_diagnostics,
)
from lightning_fed.reporting.table import DIAGNOSTICS

# Seeds 0-4. abps - fedavg = [0.02, 0.02, -0.01, 0.04, 0.02]: d_bar 0.018, s_d/sqrt(5) = 0.008,
# t_{0.975,4} = 2.776445, CI [-0.0042, +0.0402] (within noise; tests/reporting/test_paired.py
# derives it). best = abps + 0.01: d_bar 0.028, CI [+0.0058, +0.0502] (better); worst = fedavg -
# (the same differences) - 0.01: CI [-0.0502, -0.0058] (worse).
FEDAVG = [0.80, 0.81, 0.79, 0.82, 0.80]
ABPS = [0.82, 0.83, 0.78, 0.86, 0.82]
BEST = [v + 0.01 for v in ABPS]
WORST = [2 * f - a - 0.01 for f, a in zip(FEDAVG, ABPS, strict=True)]

DIAG = {
    "partner_same_unit_rate": 0.40,
    "partner_same_unit_chance": 0.25,
    "partner_repeat_rate": 0.10,
    "posterior_mean_spread": 0.030,
    "isolation_no_candidates": 0.01,
    "isolation_no_capacity": 0.02,
    "isolation_rejected": 0.0,
    "isolation_unavailable": 0.03,
    "bytes_vs_fedavg_same_rounds": 0.40,
}


def _run(root: Path, label: str, seed: int, auroc: float, **extra: object) -> None:
    run = root / f"{label}-seed{seed}"
    run.mkdir(parents=True)
    summary = {"label": label, "method": label, "seed": seed, "test_auroc_mean": auroc}
    summary |= {"bytes_vs_fedavg": 1.0, "rounds": 10, "wall_seconds": 5.0}
    (run / "summary.json").write_text(json.dumps(summary | extra))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for seed in range(5):
        _run(root, "fedavg", seed, FEDAVG[seed])
        # abps seed s: diagnostics scaled by (1 + s/10) so their mean is 1.2x the values above.
        diag = {k: v * (1 + seed / 10) for k, v in DIAG.items()}
        _run(root, "abps", seed, ABPS[seed], restored_best=seed % 2 == 0, best_round=3 + seed, **diag)
        _run(root, "best", seed, BEST[seed])
        _run(root, "worst", seed, WORST[seed])
    _run(root, "abps", 7, 0.99)  # no fedavg run with seed 7: not paired
    _run(root, "fedavg", 9, 0.10)  # no abps run with seed 9: not paired
    _run(root, "lonely", 3, 0.7)  # one shared seed: mean difference only
    return root


def _rows(table: pl.DataFrame) -> dict[str, dict]:
    return {r["method"]: r for r in table.iter_rows(named=True)}


def test_paired_columns_against_the_hand_computation(root: Path) -> None:
    rows = _rows(table1(collect_runs(root)))  # default reference: fedavg
    abps = rows["abps"]
    assert abps["n_seeds"] == 6 and abps["n_paired"] == 5 and abps["reference"] == "fedavg"
    assert abps["diff_vs_ref"] == pytest.approx(0.018)
    half = 2.776445105 * 0.008
    assert abps["diff_ci_low"] == pytest.approx(0.018 - half) and abps["diff_ci_high"] == pytest.approx(
        0.018 + half
    )
    assert abps["vs_ref"] == "within noise"
    assert rows["best"]["vs_ref"] == "better" and rows["best"]["diff_ci_low"] == pytest.approx(0.028 - half)
    assert rows["worst"]["vs_ref"] == "worse" and rows["worst"]["diff_vs_ref"] == pytest.approx(-0.028)
    lonely = rows["lonely"]
    assert (lonely["n_paired"], lonely["vs_ref"], lonely["diff_ci_low"]) == (1, "n/a", None)
    assert lonely["diff_vs_ref"] == pytest.approx(0.7 - 0.82)
    ref = rows["fedavg"]
    assert (ref["n_paired"], ref["diff_vs_ref"], ref["vs_ref"]) == (None, None, "n/a")


def test_auroc_std_is_the_sample_std(root: Path) -> None:
    import numpy as np

    row = _rows(table1(collect_runs(root)))["best"]
    assert row["auroc_std"] == pytest.approx(np.std(BEST, ddof=1))
    assert row["auroc_mean"] == pytest.approx(np.mean(BEST))


def test_another_reference_and_an_unknown_one(root: Path) -> None:
    rows = _rows(table1(collect_runs(root), reference="abps"))
    assert (
        rows["fedavg"]["diff_vs_ref"] == pytest.approx(-0.018) and rows["fedavg"]["vs_ref"] == "within noise"
    )
    assert rows["best"]["diff_vs_ref"] == pytest.approx(0.01) and rows["best"]["vs_ref"] == "better"
    assert rows["abps"]["vs_ref"] == "n/a"
    with pytest.raises(ValueError, match=r"reference method 'fedvg' is not among .*abps, best, fedavg"):
        table1(collect_runs(root), reference="fedvg")


def test_main_markdown(root: Path) -> None:
    text = to_markdown(table1(collect_runs(root)))
    header = text.splitlines()[0]
    assert header.startswith("| method | test AUROC | seeds | bytes vs FedAvg | isolation |")
    # the columns of before keep their order; issue 29's support columns and issue 32's fault
    # counts are appended
    assert header.endswith(
        "| wall (s) | Δ AUROC vs fedavg [95 % CI] | vs fedavg | robust AUROC | pooled AUROC | accuracy "
        "| balanced acc. | undefined | fragile | robust | Δ vs fedavg by center [95 % CI] "
        "| vs fedavg by center | Δ vs fedavg by robust center [95 % CI] | vs fedavg by robust center "
        "| rejected payloads | clipped payloads | diverged center-rounds |"
    )
    # abps: 6 seeds, 5 paired; mean AUROC over its 6 runs (0.82+0.83+0.78+0.86+0.82+0.99)/6 = 0.85.
    assert "| abps | 0.850 ± " in text and "| +0.018 [-0.004, +0.040] (n=5) | within noise |" in text
    assert "| +0.028 [+0.006, +0.050] | better |" in text  # all 5 seeds paired: no (n=...)
    assert "| -0.028 [-0.050, -0.006] | worse |" in text
    assert "| -0.120 | n/a |" in text  # lonely: one shared seed
    assert "| fedavg |" in text and "| - | n/a |" in text
    assert "sample standard deviation (ddof=1)" in text
    assert "same-unit" not in text  # the diagnostics have their own table


def test_no_reference_no_paired_columns(tmp_path: Path) -> None:
    for seed in range(2):
        _run(tmp_path, "a", seed, 0.7 + seed / 100)
    table = table1(collect_runs(tmp_path))
    assert table["vs_ref"].to_list() == ["n/a"] and table["reference"].to_list() == [None]
    text = to_markdown(table)
    assert (
        text.splitlines()[0].endswith(
            "| wall (s) | robust AUROC | pooled AUROC | accuracy | balanced acc. "
            "| undefined | fragile | robust | rejected payloads | clipped payloads | diverged center-rounds |"
        )
        and "Δ" not in text
    )


def test_diagnostics_means_and_markdown(root: Path) -> None:
    runs = collect_runs(root)
    abps_runs = runs.filter(pl.col("method") == "abps")
    assert abps_runs["restored_best"].to_list() == [True, False, True, False, True, None]
    assert abps_runs["best_round"].to_list() == [3, 4, 5, 6, 7, None]
    table = table1(runs)
    rows = _rows(table)
    for name, value in DIAG.items():
        # mean of v * (1 + s/10) over s = 0..4 (seed 7 has none) = 1.2 v
        assert rows["abps"][name] == pytest.approx(1.2 * value), name
        assert rows["fedavg"][name] is None
    assert "restored_best" not in table.columns and "best_round" not in table.columns
    text = diagnostics_markdown(table)
    assert text is not None
    assert text.splitlines()[0] == (
        "| method | same-unit rate (chance) | repeat rate | posterior spread | isolated: no candidates "
        "| no capacity | rejected | unavailable | bytes vs FedAvg, same rounds |"
    )
    assert "| abps | 48.0 % (30.0 %) | 12.0 % | 0.036 | 1.2 % | 2.4 % | 0.0 % | 3.6 % | 0.48x |" in text
    assert "| fedavg | - | - | - | - | - | - | - | - |" in text


def test_report_writes_diagnostics_and_runs(root: Path, tmp_path: Path) -> None:
    written = report(root, tmp_path / "out")
    assert {"table1.md", "table1.csv", "diagnostics.md", "diagnostics.csv", "runs.csv"} <= set(written)
    assert all(p.parent == tmp_path / "out" for p in written.values())
    full = pl.read_csv(written["table1.csv"])
    for column in ("n_paired", "diff_vs_ref", "diff_ci_low", "diff_ci_high", "vs_ref", *DIAGNOSTICS):
        assert column in full.columns, column
    diag = pl.read_csv(written["diagnostics.csv"])
    assert diag.columns == ["method", "n_seeds", *DIAGNOSTICS]
    per_run = pl.read_csv(written["runs.csv"])
    assert per_run.height == 23 and {"restored_best", "best_round", *DIAGNOSTICS} <= set(per_run.columns)
    assert per_run.filter(pl.col("run") == "abps-seed4")["best_round"].item() == 7


def test_old_summaries_have_no_diagnostics(tmp_path: Path) -> None:
    for seed in range(2):
        _run(tmp_path / "runs", "fedavg", seed, 0.8 + seed / 100)
        _run(tmp_path / "runs", "local", seed, 0.7)
    table = table1(collect_runs(tmp_path / "runs"))
    assert diagnostics_markdown(table) is None and write_diagnostics(table, tmp_path / "d") is None
    assert not list(tmp_path.glob("d.*"))
    written = report(tmp_path / "runs", tmp_path / "out")
    assert "diagnostics.md" not in written and not (tmp_path / "out" / "diagnostics.md").exists()
    assert "| local | 0.700 ± 0.000 | 2 | 1.00x | - | - | 10 | 5 | -0.105 [-0.169, -0.041] | worse |" in (
        written["table1.md"].read_text()
    )


@pytest.mark.cli
def test_report_command_reference_option(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    main(["report", str(root), "--out", str(tmp_path / "out"), "--reference", "abps"])
    out = capsys.readouterr().out
    assert "Δ AUROC vs abps [95 % CI]" in out and "diagnostics.md" in out and "runs.csv" in out
    with pytest.raises(SystemExit):
        main(["report", str(root), "--reference", "nope"])
    assert "reference method 'nope' is not among" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    assert "--reference" in capsys.readouterr().out


def test_bytes_alone_write_no_diagnostics_table(tmp_path: Path) -> None:
    """EdgeDRM and gossip runs on a fixed graph record ``bytes_vs_fedavg_same_rounds`` and no
    selection diagnostic: that column repeats table1.md's bytes, so no diagnostics table is written;
    one selection diagnostic (a repeat rate) brings it back."""
    for seed in range(2):
        _run(tmp_path / "runs", "edgedrm", seed, 0.9, bytes_vs_fedavg_same_rounds=2.4)
    table = table1(collect_runs(tmp_path / "runs"))
    assert diagnostics_markdown(table) is None
    _run(tmp_path / "runs", "abps", 0, 0.9, partner_repeat_rate=0.25)
    assert "25.0 %" in diagnostics_markdown(table1(collect_runs(tmp_path / "runs")))


def test_rejected_payloads_and_diverged_centers_per_method(tmp_path: Path) -> None:
    """An attacked method's row shows what the defences refused, so it does not read as an ordinary
    weaker row (issue 32: on main table1.md and runs.csv showed neither). attacked, seeds 0 / 1:
    rejected 12 and 7 -> mean 9.5; clipped 4 and 4 -> 4; diverged 3 and 0 -> 1.5. clean: zeros, no
    norm bound (clipped absent -> null, "-"). old: a summary from before the counts -> all null."""
    for seed, (rejected, clipped, diverged) in enumerate([(12, 4, 3), (7, 4, 0)]):
        _run(
            tmp_path,
            "attacked",
            seed,
            0.70,
            rejected_payloads=rejected,
            clipped_payloads=clipped,
            diverged_center_rounds=diverged,
        )
        _run(tmp_path, "clean", seed, 0.80, rejected_payloads=0, diverged_center_rounds=0)
        _run(tmp_path, "old", seed, 0.75)
    runs = collect_runs(tmp_path)
    assert runs.columns[-3:] == ["rejected_payloads", "clipped_payloads", "diverged_center_rounds"]
    attacked = runs.filter(pl.col("method") == "attacked")
    assert attacked["rejected_payloads"].to_list() == [12, 7]
    assert runs.filter(pl.col("method") == "old")["rejected_payloads"].to_list() == [None, None]
    table = table1(runs)
    rows = _rows(table)
    assert table.columns[-3:] == ["rejected_payloads", "clipped_payloads", "diverged_center_rounds"]
    assert (rows["attacked"]["rejected_payloads"], rows["attacked"]["clipped_payloads"]) == (9.5, 4.0)
    assert rows["attacked"]["diverged_center_rounds"] == 1.5
    assert (rows["clean"]["rejected_payloads"], rows["clean"]["clipped_payloads"]) == (0.0, None)
    assert rows["old"]["rejected_payloads"] is None
    text = to_markdown(table)
    lines = {line.split(" | ")[0]: line for line in text.splitlines()}
    assert lines["| attacked"].endswith("| 9.5 | 4 | 1.5 |")
    assert lines["| clean"].endswith("| 0 | - | 0 |") and lines["| old"].endswith("| - | - | - |")
    assert "rolled back" in text
