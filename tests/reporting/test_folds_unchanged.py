"""Reports over runs without folds are byte-identical to those of before ``data.split.folds``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lightning_fed.reporting import report
from tests.reporting import test_center_paired, test_report, test_table


def _center_paired_root(root: Path) -> None:
    for seed in (0, 1):
        test_center_paired._run(root, "fedavg", seed, test_center_paired.REF[seed])
        parquet = "centers" if seed == 0 else "rounds"
        test_center_paired._run(root, "abps", seed, test_center_paired.NEW[seed], parquet=parquet)


def _report_root(root: Path) -> None:
    for method, seeds in test_report.RUNS.items():
        for seed, values in enumerate(seeds):
            test_report._write_run(root, f"{method}-seed{seed}", seed, values)


def _table_root(root: Path) -> None:
    for seed in range(5):
        test_table._run(root, "fedavg", seed, test_table.FEDAVG[seed])
        diag = {k: v * (1 + seed / 10) for k, v in test_table.DIAG.items()}
        test_table._run(root, "abps", seed, test_table.ABPS[seed], restored_best=seed % 2 == 0, **diag)


FIXTURES = {"center_paired": _center_paired_root, "report": _report_root, "table": _table_root}

#: sha256 over the report's markdown files, runs.csv and centers.csv (name, then bytes with the root
#: path replaced), computed with the code just before data.split.folds was merged (main with issue 32's
#: appended rejected / clipped / diverged columns; the same files as bcaf1fb's apart from those). A
#: deliberate change to these reports updates the digests after checking the diff. The CSVs of
#: computed means (table1.csv, diagnostics.csv) are left out: their last bits may follow the CPU's SIMD
#: level; the markdown renders the same numbers rounded.
BEFORE = {
    "center_paired": "f0d245fc0f8b1f440b6042728e7e65f5f086a12a1bd2a6c1051459fdf13ab12f",
    "report": "4cc888dcd6b0dcdff66278c383496d5143da0dd02fa4749966a1f593805e8a42",
    "table": "ce5e64b4426e687a50434bda62a7b72053dd0a1a9d0d8a9b7583a76ba1f1fb50",
}


def report_digest(build, tmp: Path, reference: str | None = "fedavg") -> str:
    """Build a fixture's runs under ``tmp``, report them and hash the text files it wrote."""
    root = tmp / "runs"
    build(root)
    written = report(root, tmp / "out", reference=reference)
    digest = hashlib.sha256()
    for name in sorted(n for n in written if n.endswith(".md") or n in ("runs.csv", "centers.csv")):
        digest.update(name.encode())
        digest.update(written[name].read_bytes().replace(str(root).encode(), b"<root>"))
    return digest.hexdigest()


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_reports_without_folds_are_unchanged(fixture: str, tmp_path: Path) -> None:
    assert report_digest(FIXTURES[fixture], tmp_path) == BEFORE[fixture]
