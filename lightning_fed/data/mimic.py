"""MIMIC-IV as a federation of care unit x 2-year window centers (ABPS Sec. 6.1 and 6.3).

:class:`MimicIV` reads a MIMIC-IV folder in PhysioNet's layout (``hosp/*.csv.gz``, ``icu/*.csv.gz``;
the full credentialed release or the open demo) with polars lazy scans and builds the ABPS cohort of
in-hospital mortality over the first 24 hours of an ICU stay:

Rows and label
    One row per ``icu/icustays`` stay whose first care unit is among ``care_units`` and whose age at
    admission ``anchor_age + (year(intime) - anchor_year)`` lies in ``[min_age, max_age]``; label
    ``admissions.hospital_expire_flag``.

Centers
    ``"<unit> <start>-<end>"``: the care unit (``first_careunit``, renamed by :data:`CARE_UNIT_NAMES`,
    e.g. "Medical/Surgical Intensive Care Unit (MICU/SICU)" -> "Medical/Surgical ICU") times a
    ``window_years`` window of the shifted ``intime`` year, windows starting at 2110 (with 2 years:
    2110-2111, 2112-2113, ...), as in the synthetic federation. The window is a partitioning device,
    not a calendar axis (dates are shifted per patient, ABPS Sec. 6.1).

Features
    ``age``; one-hot ``gender``, ``race``, ``admission_type``, ``admission_location``,
    ``insurance`` (blank = ``unknown``, levels with fewer than ``rare_count`` stays -> ``other``);
    the 12 Charlson flags from ``hosp/diagnoses_icd`` of the stay's admission
    (:mod:`lightning_fed.data.charlson`); and first-24h vitals from ``icu/chartevents``
    (``valuenum`` of the items in :data:`VITAL_ITEMS`, charted in ``[intime, intime + 24 h]``,
    Fahrenheit temperatures converted to Celsius, then the range filters and mean/min/max of
    :mod:`lightning_fed.data.vitals`). chartevents is scanned lazily, filtered on ``itemid`` and
    collected with the streaming engine, so memory stays bounded on the full 30+ GB file. Without a
    chartevents file (the demo) every vital is NaN (imputed per center) and a warning is logged.

Cache
    With ``cache_dir``, the built cohort is written (atomically) as a parquet file named by a hash of
    the source folder, its files' sizes and modification times, and the settings; later builds read
    it instead of the CSVs.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from lightning_fed.data.base import TableSource
from lightning_fed.data.center import PooledTable
from lightning_fed.data.charlson import CHARLSON_COLUMNS, charlson_flags
from lightning_fed.data.encoding import one_hot, to_pooled_table
from lightning_fed.data.partition import Partitioner
from lightning_fed.data.split import Split
from lightning_fed.data.vitals import VITAL_COLUMNS, summarize_vitals
from lightning_fed.io import atomic_path
from lightning_fed.validation import check_int

__all__ = ["CARE_UNIT_NAMES", "DEFAULT_CARE_UNITS", "REQUIRED_FILES", "VITAL_ITEMS", "MimicIV"]

_log = logging.getLogger(__name__)

#: ``first_careunit`` strings of MIMIC-IV -> the short unit names used for centers.
CARE_UNIT_NAMES: dict[str, str] = {
    "Cardiac Vascular Intensive Care Unit (CVICU)": "CVICU",
    "Coronary Care Unit (CCU)": "CCU",
    "Medical Intensive Care Unit (MICU)": "MICU",
    "Medical/Surgical Intensive Care Unit (MICU/SICU)": "Medical/Surgical ICU",
    "Surgical Intensive Care Unit (SICU)": "SICU",
    "Trauma SICU (TSICU)": "TSICU",
}
#: The six care units of the ABPS cohort (short names).
DEFAULT_CARE_UNITS: tuple[str, ...] = ("CVICU", "CCU", "MICU", "Medical/Surgical ICU", "SICU", "TSICU")
#: Files a MIMIC-IV root must hold (``icu/chartevents.csv.gz`` is used when present).
REQUIRED_FILES: tuple[str, ...] = (
    "hosp/patients.csv.gz",
    "hosp/admissions.csv.gz",
    "hosp/diagnoses_icd.csv.gz",
    "icu/icustays.csv.gz",
)
CHARTEVENTS = "icu/chartevents.csv.gz"
#: chartevents ``itemid`` -> vital (223761 is Fahrenheit, converted to Celsius).
VITAL_ITEMS: dict[int, str] = {
    220045: "heart_rate",
    220050: "sbp",
    220179: "sbp",
    220051: "dbp",
    220180: "dbp",
    220052: "mbp",
    220181: "mbp",
    225312: "mbp",
    220210: "resp_rate",
    224690: "resp_rate",
    220277: "spo2",
    223761: "temperature",
    223762: "temperature",
}
_FAHRENHEIT_ITEM = 223761
_WINDOW_ORIGIN = 2110  # first shifted year of the windows
_CACHE_VERSION = 1
_TIME = "%Y-%m-%d %H:%M:%S"
_CATEGORICAL = (
    ("gender", "gender"),
    ("race", "race"),
    ("admission_type", "admission_type"),
    ("admission_location", "admission_location"),
    ("insurance", "insurance"),
)
_META = ("site", "year", "label", "care_unit", "window_start")


def _scan(path: Path) -> pl.LazyFrame:
    return pl.scan_csv(path, infer_schema_length=0, null_values=[""])


class MimicIV(TableSource):
    """MIMIC-IV in-hospital mortality, centers = care unit x ``window_years`` window.

    Args:
        root: The MIMIC-IV folder (holding ``hosp/`` and ``icu/``).
        min_age: Youngest age at admission kept (years).
        max_age: Oldest age at admission kept (years, >= ``min_age``).
        window_years: Width of the shifted-year windows (>= 1).
        care_units: First care units kept, short names (:data:`DEFAULT_CARE_UNITS`) or raw
            ``first_careunit`` strings.
        min_center_size: Centers with fewer stays are dropped (>= 0).
        rare_count: Categorical levels with fewer stays go to ``other`` (>= 1).
        cache_dir: Folder for the parquet cache of the built cohort; ``None`` = no cache.
        partitioner: How rows become centers; ``None`` = :class:`Natural` (one per site).
        seed: If given, fixes the splits regardless of the run seed passed to :meth:`build`.
        split: Per-center train / validation / test split, stratified by label, with an optional
            ``min_per_class`` guarantee (:class:`~lightning_fed.data.split.Split`); None: 80/10/10.

    Raises:
        ValueError: On an argument out of range.
        FileNotFoundError: (at :meth:`table` / :meth:`build`) if a required file is missing.
    """

    def __init__(
        self,
        root: str,
        min_age: int = 18,
        max_age: int = 95,
        window_years: int = 2,
        care_units: Sequence[str] = DEFAULT_CARE_UNITS,
        min_center_size: int = 20,
        rare_count: int = 10,
        cache_dir: str | None = None,
        partitioner: Partitioner | None = None,
        seed: int | None = None,
        split: Split | None = None,
    ) -> None:
        if not isinstance(root, (str, Path)) or not str(root):
            raise ValueError(f"root must be a folder path, got {root!r}")
        self.root = str(root)
        self.min_age = check_int("min_age", min_age, 0)
        self.max_age = check_int("max_age", max_age, self.min_age)
        self.window_years = check_int("window_years", window_years, 1)
        if isinstance(care_units, str) or not care_units or not all(isinstance(u, str) for u in care_units):
            raise ValueError(f"care_units must be a non-empty list of unit names, got {care_units!r}")
        self.care_units = tuple(care_units)
        self.rare_count = check_int("rare_count", rare_count, 1)
        if cache_dir is not None and (not isinstance(cache_dir, (str, Path)) or not str(cache_dir)):
            raise ValueError(f"cache_dir must be a folder path or None, got {cache_dir!r}")
        self.cache_dir = None if cache_dir is None else str(cache_dir)
        self._set_common(partitioner, seed, min_center_size, split)

    def __repr__(self) -> str:
        return (
            f"MimicIV(root={self.root!r}, min_age={self.min_age}, max_age={self.max_age}, "
            f"window_years={self.window_years}, care_units={list(self.care_units)!r}, "
            f"min_center_size={self.min_center_size}, rare_count={self.rare_count}, "
            f"cache_dir={self.cache_dir!r}, partitioner={self.partitioner!r}, seed={self.seed})"
        )

    # ------------------------------------------------------------------ files
    def _files(self) -> dict[str, Path]:
        root = Path(self.root)
        layout = ", ".join(REQUIRED_FILES)
        if not root.is_dir():
            raise FileNotFoundError(
                f"MimicIV root {str(root)!r} is not a folder: point root at the MIMIC-IV folder holding "
                f"{layout} (PhysioNet layout)"
            )
        for name in REQUIRED_FILES:
            if not (root / name).is_file():
                raise FileNotFoundError(
                    f"MimicIV: {str(root / name)!r} not found; the root must hold {layout} "
                    f"(and optionally {CHARTEVENTS}) in PhysioNet's MIMIC-IV layout"
                )
        names = (*REQUIRED_FILES, CHARTEVENTS)
        return {name: root / name for name in names if (root / name).is_file()}

    def _unit(self) -> pl.Expr:
        raw = pl.col("first_careunit")
        return raw.replace(CARE_UNIT_NAMES)

    # ------------------------------------------------------------------ pieces
    def stays(self) -> pl.DataFrame:
        """Every ICU stay joined with its patient and admission, before the unit and age filters.

        Returns:
            ``stay_id, hadm_id, subject_id, care_unit, intime, year, age, label`` and the raw
            categorical columns, sorted by ``stay_id``.
        """
        files = self._files()
        stays = _scan(files["icu/icustays.csv.gz"]).select(
            pl.col("stay_id").cast(pl.Int64),
            pl.col("hadm_id").cast(pl.Int64),
            pl.col("subject_id").cast(pl.Int64),
            self._unit().alias("care_unit"),
            pl.col("intime").str.to_datetime(_TIME),
        )
        patients = _scan(files["hosp/patients.csv.gz"]).select(
            pl.col("subject_id").cast(pl.Int64),
            pl.col("gender"),
            pl.col("anchor_age").cast(pl.Float64),
            pl.col("anchor_year").cast(pl.Int64),
        )
        admissions = _scan(files["hosp/admissions.csv.gz"]).select(
            pl.col("hadm_id").cast(pl.Int64),
            pl.col("admission_type"),
            pl.col("admission_location"),
            pl.col("insurance"),
            pl.col("race"),
            pl.col("hospital_expire_flag").cast(pl.Int64).alias("label"),
        )
        return (
            stays.join(patients, on="subject_id", how="left")
            .join(admissions, on="hadm_id", how="left")
            .with_columns(pl.col("intime").dt.year().cast(pl.Int64).alias("year"))
            .with_columns((pl.col("anchor_age") + (pl.col("year") - pl.col("anchor_year"))).alias("age"))
            .drop("anchor_age", "anchor_year")
            .sort("stay_id")
            .collect()
        )

    def vitals(self, stays: pl.DataFrame) -> pl.DataFrame:
        """First-24h vitals per ``stay_id`` from chartevents (empty when the file is absent).

        Args:
            stays: Frame with ``stay_id`` and ``intime`` (datetime) of the stays wanted.
        """
        files = self._files()
        if CHARTEVENTS not in files:
            _log.warning(
                "MimicIV: %s not found under %s; every first-24h vital is NaN (imputed per center)",
                CHARTEVENTS,
                self.root,
            )
            return pl.DataFrame(
                {"stay_id": [], **{c: [] for c in VITAL_COLUMNS}},
                schema={"stay_id": pl.Int64, **dict.fromkeys(VITAL_COLUMNS, pl.Float64)},
            )
        items = list(VITAL_ITEMS)
        value = pl.col("valuenum").cast(pl.Float64, strict=False)
        value = (
            pl.when(pl.col("itemid") == _FAHRENHEIT_ITEM).then((value - 32.0) * 5.0 / 9.0).otherwise(value)
        )
        window = stays.lazy().select(pl.col("stay_id").cast(pl.Int64), pl.col("intime"))
        obs = (
            _scan(files[CHARTEVENTS])
            .select(
                pl.col("stay_id").cast(pl.Int64, strict=False),
                pl.col("itemid").cast(pl.Int64, strict=False),
                pl.col("charttime").str.to_datetime(_TIME, strict=False),
                pl.col("valuenum"),
            )
            .filter(pl.col("itemid").is_in(items))
            .join(window, on="stay_id", how="inner")
            .filter(
                (pl.col("charttime") >= pl.col("intime"))
                & (pl.col("charttime") <= pl.col("intime") + pl.duration(hours=24))
            )
            .select(
                pl.col("stay_id"),
                pl.col("itemid").replace_strict(VITAL_ITEMS, return_dtype=pl.Utf8).alias("vital"),
                value.alias("value"),
            )
            .collect(engine="streaming")
        )
        return summarize_vitals(obs, "stay_id")

    def _cache_file(self) -> Path | None:
        if self.cache_dir is None:
            return None
        files = self._files()
        stamp = {name: [path.stat().st_size, path.stat().st_mtime_ns] for name, path in sorted(files.items())}
        key = {
            "version": _CACHE_VERSION,
            "root": str(Path(self.root).resolve()),
            "files": stamp,
            "min_age": self.min_age,
            "max_age": self.max_age,
            "window_years": self.window_years,
            "care_units": list(self.care_units),
            "rare_count": self.rare_count,
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return Path(self.cache_dir) / f"mimic-iv-{digest}.parquet"

    def cohort(self) -> pl.DataFrame:
        """The encoded cohort: ``site, year, label, care_unit, window_start`` then the features.

        Read from the cache when ``cache_dir`` holds it, else built (and cached).
        """
        cache = self._cache_file()
        if cache is not None and cache.is_file():
            return pl.read_parquet(cache)
        stays = self.stays()
        kept_units = {CARE_UNIT_NAMES.get(u, u) for u in self.care_units}
        stays = stays.filter(
            pl.col("care_unit").is_in(sorted(kept_units))
            & (pl.col("age") >= self.min_age)
            & (pl.col("age") <= self.max_age)
            & pl.col("label").is_not_null()
        )
        codes = _scan(self._files()["hosp/diagnoses_icd.csv.gz"]).select(
            pl.col("hadm_id").cast(pl.Int64), pl.col("icd_code"), pl.col("icd_version").cast(pl.Int64)
        )
        flags = charlson_flags(codes.filter(pl.col("hadm_id").is_in(stays["hadm_id"].implode())))
        start = (
            pl.lit(_WINDOW_ORIGIN)
            + ((pl.col("year") - _WINDOW_ORIGIN) // self.window_years) * self.window_years
        )
        frame = (
            stays.join(flags, on="hadm_id", how="left")
            .join(self.vitals(stays), on="stay_id", how="left")
            .with_columns([pl.col(c).fill_null(0).cast(pl.Float64) for c in CHARLSON_COLUMNS])
            .with_columns(start.alias("window_start"))
            .with_columns(
                pl.format(
                    "{} {}-{}",
                    pl.col("care_unit"),
                    pl.col("window_start"),
                    pl.col("window_start") + (self.window_years - 1),
                ).alias("site")
            )
            .sort("stay_id")
        )
        names = ["age"]
        for column, prefix in _CATEGORICAL:
            frame, cols = one_hot(frame, column, prefix, min_count=self.rare_count)
            names += cols
        names += [*CHARLSON_COLUMNS, *VITAL_COLUMNS]
        frame = frame.select(
            *_META, *[pl.col(c).cast(pl.Float64) for c in names if c not in VITAL_COLUMNS], *VITAL_COLUMNS
        )
        if cache is not None:
            with atomic_path(cache) as tmp:
                frame.write_parquet(tmp)
        return frame

    # ------------------------------------------------------------------ table
    def table(self, seed: int = 0) -> PooledTable:
        """The pooled cohort in raw units (the seed is unused: building the table draws nothing).

        Returns:
            The pooled table; ``site`` is ``"<unit> <start>-<end>"`` and ``attributes`` gives each
            site's ``care_unit`` and ``window_start``.

        Raises:
            FileNotFoundError: If a required file is missing.
        """
        frame = self.cohort()
        names = [c for c in frame.columns if c not in _META]
        attrs = {
            row[0]: {"care_unit": row[1], "window_start": int(row[2])}
            for row in frame.select("site", "care_unit", "window_start").unique(subset="site").iter_rows()
        }
        return to_pooled_table(
            frame,
            features=names,
            continuous=["age", *VITAL_COLUMNS],
            label="label",
            year="year",
            site="site",
            charlson_columns=CHARLSON_COLUMNS,
            attributes=attrs,
        )
