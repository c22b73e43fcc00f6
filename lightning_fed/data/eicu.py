"""The eICU Collaborative Research Database as a federation: one center per hospital (ABPS Sec. 6.1).

:class:`EICU` reads an eICU-CRD folder (the full v2.0 release or the open demo v2.0.1; the
``*.csv.gz`` files of PhysioNet side by side) with polars lazy scans and builds the ABPS schema of
in-hospital mortality over the first 24 hours of an ICU unit stay:

Rows and label
    One row per ``patient.patientunitstayid``; label ``hospitaldischargestatus == "Expired"``
    (1) versus ``"Alive"`` (0); stays without a status are dropped.

Centers
    ``center="hospital"``: one center per ``hospitalid`` (``"hospital 73"``);
    ``center="hospital_unit"``: hospital x ``unittype`` (``"hospital 73 MICU"``). Centers with
    fewer than ``min_center_size`` stays are dropped by
    :func:`~lightning_fed.data.center.build_federation` (``FederatedData.dropped_centers``).

Features
    * ``age``: ``"> 89"`` -> 90, otherwise the number (blank -> NaN);
    * one-hot ``gender``, ``ethnicity``, ``unit_type``, ``unit_admit_source``,
      ``hospital_admit_source`` (blank = ``unknown``; levels with fewer than ``rare_count`` stays
      go to ``other``);
    * the 12 Charlson flags (:mod:`lightning_fed.data.charlson`), the union of
      (a) ``diagnosis.icd9code`` over the whole stay: the field holds comma-separated codes, usually
      an ICD-9-CM / ICD-10-CM pair (``"428.0, I50.9"``); a code starting with a digit, with ``V``, or
      with ``E`` followed by three digits (ICD-9 E-codes, ``E849.0``) is read as ICD-9, any other
      code starting with a letter as ICD-10; and
      (b) ``pastHistory.pasthistorypath`` entries under "Organ Systems" (:data:`PAST_HISTORY`):
      Myocardial Infarction -> mi, Congestive Heart Failure -> chf, Peripheral Vascular Disease ->
      pvd, Strokes / TIA(s) -> cvd, Dementia -> dementia, COPD / Asthma / Restrictive Disease ->
      copd, Rheumatoid Arthritis / SLE / Scleroderma -> rheum, Peptic Ulcer Disease -> pud,
      Cirrhosis -> liver, (Non-)Insulin Dependent Diabetes -> diabetes, Renal Failure / Renal
      Insufficiency / s/p Renal Transplant -> renal, Cancer (primary site, metastases,
      hematologic malignancy; not "Cancer Therapy") -> malignancy;
    * first-24h vitals (offsets 0 to 1440 minutes from unit admission) as mean/min/max over every
      observation found (:mod:`lightning_fed.data.vitals`, with its range filters):
      ``vitalPeriodic`` (heartrate, systemicsystolic/diastolic/mean, respiration, sao2,
      temperature) when the file exists (the demo lacks it); ``vitalAperiodic`` non-invasive
      systolic/diastolic/mean BP; ``physicalExam`` "Vital Sign and Physiological Data" HR,
      BP (systolic), BP (diastolic), O2 Sat% and Resp Rate (Current / Lowest / Highest, each one
      observation) when the file exists; and ``apacheApsVar`` heartrate, meanbp, respiratoryrate,
      temperature (APACHE IV's worst value of the first day, ``-1`` = missing), each counted as one
      observation at the stay's first day, so without periodic vitals the APACHE worst value
      enters the min or max it stands for and pulls the mean toward it. Temperature comes only
      from vitalPeriodic and APACHE. A vital never observed is NaN (imputed per center).

Year
    ``hospitaldischargeyear`` (2014 / 2015), the descriptor's mean-year entry.
"""

from __future__ import annotations

import logging
from pathlib import Path

import polars as pl

from lightning_fed.data.base import TableSource
from lightning_fed.data.center import PooledTable
from lightning_fed.data.charlson import CHARLSON_COLUMNS, charlson_flags
from lightning_fed.data.encoding import one_hot, to_pooled_table
from lightning_fed.data.partition import Partitioner
from lightning_fed.data.split import Split
from lightning_fed.data.vitals import VITAL_COLUMNS, summarize_vitals
from lightning_fed.validation import check_int

__all__ = ["CENTER_MODES", "EICU", "PAST_HISTORY", "REQUIRED_FILES", "icd_version_of"]

_log = logging.getLogger(__name__)

#: Files an eICU root must hold (``vitalPeriodic`` and ``physicalExam`` are used when present).
REQUIRED_FILES: tuple[str, ...] = (
    "patient.csv.gz",
    "diagnosis.csv.gz",
    "pastHistory.csv.gz",
    "vitalAperiodic.csv.gz",
    "apacheApsVar.csv.gz",
)
_OPTIONAL_FILES = ("vitalPeriodic.csv.gz", "physicalExam.csv.gz")
#: Accepted values of ``center``.
CENTER_MODES: tuple[str, ...] = ("hospital", "hospital_unit")
#: pastHistory path segments (between slashes) -> Charlson column.
PAST_HISTORY: dict[str, str] = {
    "Myocardial Infarction": "charlson_mi",
    "Congestive Heart Failure": "charlson_chf",
    "Peripheral Vascular Disease": "charlson_pvd",
    "Strokes": "charlson_cvd",
    "TIA(s)": "charlson_cvd",
    "Dementia": "charlson_dementia",
    "COPD": "charlson_copd",
    "Asthma": "charlson_copd",
    "Restrictive Disease": "charlson_copd",
    "Rheumatoid Arthritis": "charlson_rheum",
    "SLE": "charlson_rheum",
    "Scleroderma": "charlson_rheum",
    "Peptic Ulcer Disease": "charlson_pud",
    "Cirrhosis": "charlson_liver",
    "Insulin Dependent Diabetes": "charlson_diabetes",
    "Non-Insulin Dependent Diabetes": "charlson_diabetes",
    "Renal Failure": "charlson_renal",
    "Renal Insufficiency": "charlson_renal",
    "s/p Renal Transplant": "charlson_renal",
    "Cancer": "charlson_malignancy",
}
_WINDOW_MIN = 1440  # first 24 hours, in minutes from unit admission
_ID = "patientunitstayid"
_PE_VITALS = {
    "HR": "heart_rate",
    "BP (systolic)": "sbp",
    "BP (diastolic)": "dbp",
    "O2 Sat%": "spo2",
    "Resp Rate": "resp_rate",
}


def icd_version_of(code: pl.Expr) -> pl.Expr:
    """9 or 10 from the shape of an eICU ``icd9code`` entry (see the module docstring); null if blank."""
    c = code.str.strip_chars().str.to_uppercase()
    return (
        pl.when(c.is_null() | (c == ""))
        .then(None)
        .when(c.str.contains(r"^(?:\d|V|E\d{3})"))
        .then(pl.lit(9))
        .when(c.str.contains(r"^[A-Z]"))
        .then(pl.lit(10))
        .otherwise(None)
        .cast(pl.Int64)
    )


def _scan(path: Path) -> pl.LazyFrame:
    return pl.scan_csv(path, infer_schema_length=0, null_values=[""])


def _num(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.Float64, strict=False)


class EICU(TableSource):
    """eICU-CRD in-hospital mortality, one center per hospital (or hospital x unit type).

    Args:
        root: Folder holding the eICU ``*.csv.gz`` files (:data:`REQUIRED_FILES`).
        center: ``"hospital"`` or ``"hospital_unit"``.
        min_center_size: Centers with fewer stays are dropped (>= 0).
        rare_count: Categorical levels with fewer stays go to ``other`` (>= 1).
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
        center: str = "hospital",
        min_center_size: int = 20,
        rare_count: int = 10,
        partitioner: Partitioner | None = None,
        seed: int | None = None,
        split: Split | None = None,
    ) -> None:
        if not isinstance(root, (str, Path)) or not str(root):
            raise ValueError(f"root must be a folder path, got {root!r}")
        if center not in CENTER_MODES:
            raise ValueError(f"center must be one of {list(CENTER_MODES)}, got {center!r}")
        self.root = str(root)
        self.center = center
        self.rare_count = check_int("rare_count", rare_count, 1)
        self._set_common(partitioner, seed, min_center_size, split)

    def __repr__(self) -> str:
        return (
            f"EICU(root={self.root!r}, center={self.center!r}, min_center_size={self.min_center_size}, "
            f"rare_count={self.rare_count}, partitioner={self.partitioner!r}, seed={self.seed})"
        )

    # ------------------------------------------------------------------ files
    def _files(self) -> dict[str, Path]:
        root = Path(self.root)
        if not root.is_dir():
            raise FileNotFoundError(
                f"EICU root {str(root)!r} is not a folder: point root at the eICU-CRD folder holding "
                f"{', '.join(REQUIRED_FILES)} side by side (PhysioNet layout)"
            )
        for name in REQUIRED_FILES:
            if not (root / name).is_file():
                raise FileNotFoundError(
                    f"EICU: {str(root / name)!r} not found; the root must hold {', '.join(REQUIRED_FILES)} "
                    "side by side (PhysioNet eICU-CRD layout, files gzip-compressed)"
                )
        return {name: root / name for name in (*REQUIRED_FILES, *_OPTIONAL_FILES) if (root / name).is_file()}

    # ------------------------------------------------------------------ pieces
    def cohort(self) -> pl.DataFrame:
        """Labelled stays with the raw patient columns: id, hospital, unit type, label, year, ..."""
        files = self._files()
        status = pl.col("hospitaldischargestatus").str.strip_chars()
        age = pl.col("age").str.strip_chars()
        return (
            _scan(files["patient.csv.gz"])
            .filter(status.is_in(["Expired", "Alive"]))
            .select(
                pl.col(_ID).cast(pl.Int64),
                pl.col("hospitalid").cast(pl.Int64),
                pl.col("unittype"),
                (status == "Expired").cast(pl.Int64).alias("label"),
                pl.col("hospitaldischargeyear").cast(pl.Int64).alias("year"),
                pl.when(age == "> 89")
                .then(pl.lit(90.0))
                .otherwise(age.cast(pl.Float64, strict=False))
                .alias("age"),
                pl.col("gender"),
                pl.col("ethnicity"),
                pl.col("unitadmitsource"),
                pl.col("hospitaladmitsource"),
            )
            .sort(_ID)
            .collect()
        )

    def charlson(self) -> pl.DataFrame:
        """Charlson flags per stay having any diagnosis or past-history row (see the module docstring)."""
        files = self._files()
        codes = (
            _scan(files["diagnosis.csv.gz"])
            .select(pl.col(_ID).cast(pl.Int64), pl.col("icd9code").str.split(",").alias("code"))
            .explode("code")
            .with_columns(pl.col("code").str.strip_chars())
            .with_columns(icd_version_of(pl.col("code")).alias("version"))
            .filter(pl.col("version").is_not_null())
        )
        from_dx = charlson_flags(codes, id_column=_ID, code_column="code", version_column="version")
        path = pl.col("pasthistorypath")
        hist_exprs = []
        for cat in CHARLSON_COLUMNS:
            segments = [seg for seg, c in PAST_HISTORY.items() if c == cat]
            hit = pl.lit(False)
            for seg in segments:
                hit = hit | path.str.contains(f"/{seg}/", literal=True)
            hist_exprs.append(
                (path.str.contains("/Organ Systems/", literal=True) & hit).fill_null(False).alias(cat)
            )
        from_hist = (
            _scan(files["pastHistory.csv.gz"])
            .select(pl.col(_ID).cast(pl.Int64), *hist_exprs)
            .group_by(_ID)
            .agg([pl.col(c).any().cast(pl.Int8) for c in CHARLSON_COLUMNS])
            .collect()
        )
        both = pl.concat([from_dx, from_hist], how="vertical_relaxed")
        return both.group_by(_ID).agg([pl.col(c).max().cast(pl.Int8) for c in CHARLSON_COLUMNS]).sort(_ID)

    def vitals(self) -> pl.DataFrame:
        """First-24h vitals mean/min/max per stay (stays with any valid observation)."""
        files = self._files()
        in_window = (pl.col("offset") >= 0) & (pl.col("offset") <= _WINDOW_MIN)
        parts: list[pl.LazyFrame] = []

        def long(lf: pl.LazyFrame, offset: str, columns: dict[str, str]) -> pl.LazyFrame:
            wide = lf.select(
                pl.col(_ID).cast(pl.Int64), _num(offset).alias("offset"), *[_num(c) for c in columns]
            )
            return (
                wide.filter(in_window)
                .unpivot(index=[_ID, "offset"], on=list(columns), variable_name="source", value_name="value")
                .with_columns(pl.col("source").replace_strict(columns, return_dtype=pl.Utf8).alias("vital"))
                .select(_ID, "vital", "value")
            )

        if "vitalPeriodic.csv.gz" in files:
            periodic = {
                "heartrate": "heart_rate",
                "systemicsystolic": "sbp",
                "systemicdiastolic": "dbp",
                "systemicmean": "mbp",
                "respiration": "resp_rate",
                "sao2": "spo2",
                "temperature": "temperature",
            }
            parts.append(long(_scan(files["vitalPeriodic.csv.gz"]), "observationoffset", periodic))
        aperiodic = {"noninvasivesystolic": "sbp", "noninvasivediastolic": "dbp", "noninvasivemean": "mbp"}
        parts.append(long(_scan(files["vitalAperiodic.csv.gz"]), "observationoffset", aperiodic))
        if "physicalExam.csv.gz" in files:
            vital = pl.lit(None, dtype=pl.Utf8)
            path = pl.col("physicalexampath")
            for seg, name in _PE_VITALS.items():
                pattern = f"Vital Sign and Physiological Data/{seg}/"
                vital = pl.when(path.str.contains(pattern, literal=True)).then(pl.lit(name)).otherwise(vital)
            parts.append(
                _scan(files["physicalExam.csv.gz"])
                .select(
                    pl.col(_ID).cast(pl.Int64),
                    _num("physicalexamoffset").alias("offset"),
                    vital.alias("vital"),
                    _num("physicalexamtext").alias("value"),
                )
                .filter(in_window & pl.col("vital").is_not_null())
                .select(_ID, "vital", "value")
            )
        apache = {
            "heartrate": "heart_rate",
            "meanbp": "mbp",
            "respiratoryrate": "resp_rate",
            "temperature": "temperature",
        }
        parts.append(
            long(
                _scan(files["apacheApsVar.csv.gz"]).with_columns(pl.lit(0).alias("_offset")),
                "_offset",
                apache,
            )
        )
        return summarize_vitals(pl.concat(parts, how="vertical_relaxed"), _ID)

    # ------------------------------------------------------------------ table
    def table(self, seed: int = 0) -> PooledTable:
        """The pooled cohort in raw units (the seed is unused: building the table draws nothing).

        Returns:
            The pooled table; ``site`` is ``"hospital <id>"`` (or ``"hospital <id> <unit type>"``)
            and ``attributes`` gives each site's ``hospitalid`` (and ``unittype``).

        Raises:
            FileNotFoundError: If a required file is missing.
        """
        cohort = self.cohort()
        charlson = self.charlson()
        vitals = self.vitals()
        frame = (
            cohort.join(charlson, on=_ID, how="left")
            .join(vitals, on=_ID, how="left")
            .with_columns([pl.col(c).fill_null(0).cast(pl.Float64) for c in CHARLSON_COLUMNS])
            .sort(_ID)
        )
        if self.center == "hospital":
            site = pl.format("hospital {}", pl.col("hospitalid"))
        else:
            site = pl.format("hospital {} {}", pl.col("hospitalid"), pl.col("unittype").fill_null("unknown"))
        frame = frame.with_columns(site.alias("site"), pl.col("unittype").alias("_unit"))
        names: list[str] = ["age"]
        for column, prefix in (
            ("gender", "gender"),
            ("ethnicity", "ethnicity"),
            ("unittype", "unit_type"),
            ("unitadmitsource", "unit_admit_source"),
            ("hospitaladmitsource", "hospital_admit_source"),
        ):
            frame, cols = one_hot(frame, column, prefix, min_count=self.rare_count)
            names += cols
        names += [*CHARLSON_COLUMNS, *VITAL_COLUMNS]
        attrs: dict[str, dict[str, object]] = {}
        for row in frame.select("site", "hospitalid", "_unit").unique(subset="site").iter_rows():
            attrs[row[0]] = {"hospitalid": int(row[1])}
            if self.center == "hospital_unit":
                attrs[row[0]]["unittype"] = row[2]
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
