"""Build a MIMIC-IV cohort from a generated chartevents of 20+ million rows: rows/s and peak memory.

Writes a MIMIC-IV-layout root (``hosp/patients``, ``hosp/admissions``, ``hosp/diagnoses_icd``,
``icu/icustays``, ``icu/chartevents``, all ``.csv.gz`` in the real column schema) into a temporary
folder, then builds the cohort (``MimicIV(...).cohort()``: stays, Charlson flags, first-24h vitals)
in a child process and prints its wall time, chartevents rows per second and the child's peak
resident memory. Target: under 4 GiB peak.

Run: ``python benchmarks/mimic_build.py [--rows 20000000] [--stays 50000] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import gzip
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

UNITS = [
    "Cardiac Vascular Intensive Care Unit (CVICU)",
    "Coronary Care Unit (CCU)",
    "Medical Intensive Care Unit (MICU)",
    "Medical/Surgical Intensive Care Unit (MICU/SICU)",
    "Surgical Intensive Care Unit (SICU)",
    "Trauma SICU (TSICU)",
]
VITAL_ITEMS = [
    220045,
    220050,
    220179,
    220051,
    220180,
    220052,
    220181,
    225312,
    220210,
    224690,
    220277,
    223761,
    223762,
]
OTHER_ITEMS = [220739, 223900, 223901, 220228, 227443, 225664, 220615, 224639]
BASE = np.datetime64("2150-01-01T00:00:00")


def _write_gz(frame: pl.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb", compresslevel=1) as f:
        frame.write_csv(f)


def _times(seconds: np.ndarray) -> pl.Series:
    return pl.Series((BASE + seconds.astype("timedelta64[s]")).astype("datetime64[ms]")).dt.strftime(
        "%Y-%m-%d %H:%M:%S"
    )


def generate(root: Path, stays: int, rows: int, seed: int = 0) -> None:
    """Write a MIMIC-IV-layout root with ``stays`` ICU stays and ``rows`` chartevents rows."""
    rng = np.random.default_rng(seed)
    ids = np.arange(stays)
    subject, hadm, stay = 10_000_000 + ids, 20_000_000 + ids, 30_000_000 + ids
    intime = rng.integers(0, 40 * 365 * 86400, stays)
    _write_gz(
        pl.DataFrame(
            {
                "subject_id": subject,
                "gender": rng.choice(["F", "M"], stays),
                "anchor_age": rng.integers(18, 91, stays),
                "anchor_year": 2150 + intime // (365 * 86400),
                "anchor_year_group": "2017 - 2019",
                "dod": None,
            }
        ),
        root / "hosp" / "patients.csv.gz",
    )
    _write_gz(
        pl.DataFrame(
            {
                "subject_id": subject,
                "hadm_id": hadm,
                "admittime": _times(intime - 3600),
                "dischtime": _times(intime + 5 * 86400),
                "deathtime": None,
                "admission_type": rng.choice(["EW EMER.", "URGENT", "ELECTIVE"], stays),
                "admission_location": rng.choice(["EMERGENCY ROOM", "TRANSFER FROM HOSPITAL", "PACU"], stays),
                "insurance": rng.choice(["Medicare", "Medicaid", "Other"], stays),
                "race": rng.choice(["WHITE", "BLACK/AFRICAN AMERICAN", "OTHER"], stays),
                "hospital_expire_flag": (rng.random(stays) < 0.11).astype(np.int64),
            }
        ),
        root / "hosp" / "admissions.csv.gz",
    )
    _write_gz(
        pl.DataFrame(
            {
                "subject_id": subject,
                "hadm_id": hadm,
                "stay_id": stay,
                "first_careunit": rng.choice(UNITS, stays),
                "last_careunit": "same",
                "intime": _times(intime),
                "outtime": _times(intime + 3 * 86400),
                "los": 3.0,
            }
        ),
        root / "icu" / "icustays.csv.gz",
    )
    n_dx = stays * 8
    dx_owner = rng.integers(0, stays, n_dx)
    _write_gz(
        pl.DataFrame(
            {
                "subject_id": subject[dx_owner],
                "hadm_id": hadm[dx_owner],
                "seq_num": rng.integers(1, 20, n_dx),
                "icd_code": rng.choice(["4280", "I214", "E119", "C787", "4019", "N179", "J449"], n_dx),
                "icd_version": rng.choice([9, 10], n_dx),
            }
        ),
        root / "hosp" / "diagnoses_icd.csv.gz",
    )
    path = root / "icu" / "chartevents.csv.gz"
    chunk = 2_000_000
    with gzip.open(path, "wb", compresslevel=1) as f:
        for lo in range(0, rows, chunk):
            n = min(chunk, rows - lo)
            owner = rng.integers(0, stays, n)
            items = np.where(rng.random(n) < 0.5, rng.choice(VITAL_ITEMS, n), rng.choice(OTHER_ITEMS, n))
            value = rng.normal(80.0, 20.0, n).round(1)
            frame = pl.DataFrame(
                {
                    "subject_id": subject[owner],
                    "hadm_id": hadm[owner],
                    "stay_id": stay[owner],
                    "caregiver_id": rng.integers(1, 9999, n),
                    "charttime": _times(intime[owner] + rng.integers(-3600, 48 * 3600, n)),
                    "storetime": None,
                    "itemid": items,
                    "value": value.astype(str),
                    "valuenum": value,
                    "valueuom": "bpm",
                    "warning": 0,
                }
            )
            frame.write_csv(f, include_header=lo == 0)


CHILD = """
import sys, time
from lightning_fed.data import MimicIV
start = time.perf_counter()
cohort = MimicIV(root=sys.argv[1], min_center_size=1).cohort()
print(f"{time.perf_counter() - start:.2f} {cohort.height}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000, help="chartevents rows")
    parser.add_argument("--stays", type=int, default=50_000, help="ICU stays")
    parser.add_argument("--keep", type=str, default=None, help="write the root here and keep it")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="mimic-bench-"))
    try:
        start = time.perf_counter()
        generate(root, args.stays, args.rows)
        size = (root / "icu" / "chartevents.csv.gz").stat().st_size / 2**20
        print(
            f"generated {args.rows:,} chartevents rows ({size:.0f} MiB gz) "
            f"in {time.perf_counter() - start:.1f} s"
        )
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, check=True
        )
        seconds, cohort_rows = out.stdout.split()
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
        print(
            f"built cohort of {int(cohort_rows):,} stays in {float(seconds):.1f} s: "
            f"{args.rows / float(seconds):,.0f} chartevents rows/s, "
            f"peak RSS {peak_gib:.2f} GiB (target < 4 GiB)"
        )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
