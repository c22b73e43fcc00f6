"""Any table as a federation: one center per value of a center column (ABPS Sec. 6.1).

:class:`Tabular` reads a CSV (``.csv``, ``.csv.gz``) or parquet file with one row per stay, a binary
label column and one or more center columns, and builds a federation with the same per-center
treatment as the clinical loaders (:func:`~lightning_fed.data.center.build_federation`: stratified
split, median imputation and missingness indicators, standardization on each center's own train
split).

* Missing values: in a CSV every cell spelled like one of ``null_values`` (default ``""``, ``"NA"``,
  ``"NaN"``, ``"nan"``, ``"?"``) is missing, in every column; a parquet file's own nulls are missing.
* Features: ``features`` (default every column but the label, center and time columns), in the
  file's order. Columns in ``categorical`` are one-hot encoded (missing = ``unknown``, levels with
  fewer than ``rare_count`` rows -> ``other``); every other feature must be numeric (missing = NaN,
  imputed per center). A numeric column whose values are all 0/1 is left as it is; any other is
  standardized per center. A feature missing in every labelled row is refused (imputing it would
  add a constant column and an always-on missingness indicator that the model cannot learn from).
* Column names must be unique: a CSV header naming a column twice is refused (a CSV reader would
  otherwise keep one of them under the name and rename the other).
* Label: 0/1 (or true/false); rows with a missing label are dropped.
* Centers: the ``center`` column, or several joined with a space. Rows with a missing center id (in
  any of the center columns) are dropped with a warning that gives their count: they belong to no
  center (a center really named ``unknown`` is a center like any other). With ``time`` (numeric,
  e.g. a year) and ``window``, each center is further cut into windows ``[s, s + window - 1]`` with
  ``s = floor(time / window) * window`` (``"A 2014-2015"``).
* Year: the ``time`` column feeds the descriptor's mean-year entry (0 without a time column).
* Charlson prevalences: the features named like :data:`~lightning_fed.data.charlson.CHARLSON_COLUMNS`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from lightning_fed.data.base import TableSource
from lightning_fed.data.center import PooledTable
from lightning_fed.data.charlson import CHARLSON_COLUMNS
from lightning_fed.data.encoding import one_hot, to_pooled_table
from lightning_fed.data.partition import Partitioner
from lightning_fed.data.split import Split
from lightning_fed.validation import check_int

__all__ = ["Tabular"]

_log = logging.getLogger(__name__)
_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")

#: CSV cells read as missing by default (``null_values``).
DEFAULT_NULL_VALUES: tuple[str, ...] = ("", "NA", "NaN", "nan", "?")

#: Spelled-out missing markers (lower case) that :func:`_looks_missing` recognises besides punctuation.
_MISSING_WORDS = frozenset({"na", "n/a", "nan", "null", "none", "missing", "#n/a", "-nan"})


def _names(value: str | Sequence[str] | None, field: str, allow_empty: bool = True) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not all(isinstance(v, str) for v in value) or (not allow_empty and not value):
        raise ValueError(f"{field} must be a column name or a list of column names, got {value!r}")
    return tuple(value)


def _null_values(value: Sequence[str]) -> tuple[str, ...]:
    listed = isinstance(value, Sequence) and not isinstance(value, str)
    if not listed or not all(isinstance(v, str) for v in value):
        raise ValueError(
            f"data.init_args.null_values must be a list of strings (CSV cells read as missing), got {value!r}"
        )
    return tuple(value)


def _looks_missing(value: str) -> bool:
    """Whether a non-numeric cell looks like a missing-value marker (``?``, ``-``, ``.``, ``N/A``, ...)."""
    text = value.strip()
    return (len(text) <= 3 and not any(ch.isalnum() for ch in text)) or text.lower() in _MISSING_WORDS


def _all_missing(column: str, path: str) -> str:
    """The refusal of a feature that is missing in every labelled row."""
    return (
        f"Tabular: feature {column!r} is missing in every labelled row of {path!r}: drop it from the file "
        "or leave it out of features"
    )


def _not_numeric(column: pl.Series) -> str:
    """The error for a feature that does not cast to float, suggesting ``null_values`` when the
    offending cells all look like missing-value markers."""
    message = f"Tabular: feature {column.name!r} is not numeric (dtype {column.dtype})"
    try:
        text = column.drop_nulls().cast(pl.Utf8)
        bad = sorted(text.filter(text.cast(pl.Float64, strict=False).is_null()).unique().to_list())
    except pl.exceptions.PolarsError:
        bad = []
    if bad and all(_looks_missing(v) for v in bad):
        return (
            f"{message}: its non-numeric values {bad[:5]} look like missing-value markers: add them to "
            "null_values (data.init_args.null_values), or list it in categorical"
        )
    return f"{message}: list it in categorical" + (f" (values such as {bad[:3]})" if bad else "")


class Tabular(TableSource):
    """A federation from one table file.

    Args:
        path: CSV (``.csv`` / ``.csv.gz``) or parquet (``.parquet`` / ``.pq``) file.
        label: Binary label column.
        center: Center column, or a list of columns joined with a space.
        features: Feature columns; ``None`` = every other column.
        categorical: Feature columns to one-hot encode.
        time: Optional numeric time column (e.g. admission year).
        window: Width of the time windows that split each center (needs ``time``); ``None`` = no split.
        min_center_size: Centers with fewer rows are dropped (>= 0).
        rare_count: Categorical levels with fewer rows go to ``other`` (>= 1).
        partitioner: How rows become centers; ``None`` = :class:`Natural` (one per site).
        seed: If given, fixes the splits regardless of the run seed passed to :meth:`build`.
        null_values: CSV cells read as missing, in every column (exact match, case-sensitive); default
            ``["", "NA", "NaN", "nan", "?"]``. Add the file's own markers (e.g. ``"-"``, ``"."``,
            ``"NULL"``); a list replaces the default. Parquet files keep their own nulls.
        split: Per-center train / validation / test split, stratified by label, with an optional
            ``min_per_class`` guarantee (:class:`~lightning_fed.data.split.Split`); None: 80/10/10.

    Raises:
        ValueError: On an argument out of range (at :meth:`table` / :meth:`build` also on a column
            that is missing, non-numeric or a non-binary label).
        FileNotFoundError: (at :meth:`table` / :meth:`build`) if ``path`` does not exist.
    """

    def __init__(
        self,
        path: str,
        label: str,
        center: str | Sequence[str],
        features: Sequence[str] | None = None,
        categorical: Sequence[str] = (),
        time: str | None = None,
        window: int | None = None,
        min_center_size: int = 20,
        rare_count: int = 1,
        partitioner: Partitioner | None = None,
        seed: int | None = None,
        split: Split | None = None,
        null_values: Sequence[str] = DEFAULT_NULL_VALUES,
    ) -> None:
        if not isinstance(path, (str, Path)) or not str(path).lower().endswith(_SUFFIXES):
            raise ValueError(f"path must be a {'/'.join(_SUFFIXES)} file, got {path!r}")
        if not isinstance(label, str) or not label:
            raise ValueError(f"label must be a column name, got {label!r}")
        self.path = str(path)
        self.label = label
        self.center = _names(center, "center", allow_empty=False)
        if not self.center:
            raise ValueError("center must name at least one column")
        self.features = None if features is None else _names(features, "features")
        self.categorical = _names(categorical, "categorical")
        if time is not None and (not isinstance(time, str) or not time):
            raise ValueError(f"time must be a column name or None, got {time!r}")
        self.time = time
        self.window = None if window is None else check_int("window", window, 1)
        if self.window is not None and self.time is None:
            raise ValueError("window needs a time column: set time=<column> or window=None")
        self.rare_count = check_int("rare_count", rare_count, 1)
        self.null_values = _null_values(null_values)
        self._set_common(partitioner, seed, min_center_size, split)

    def __repr__(self) -> str:
        return (
            f"Tabular(path={self.path!r}, label={self.label!r}, center={list(self.center)!r}, "
            f"features={None if self.features is None else list(self.features)!r}, "
            f"categorical={list(self.categorical)!r}, time={self.time!r}, window={self.window}, "
            f"min_center_size={self.min_center_size}, rare_count={self.rare_count}, "
            f"partitioner={self.partitioner!r}, seed={self.seed}, null_values={list(self.null_values)!r})"
        )

    def _read(self) -> pl.DataFrame:
        path = Path(self.path)
        if not path.is_file():
            raise FileNotFoundError(
                f"Tabular: {self.path!r} not found: set path to an existing CSV or parquet file"
            )
        try:
            if path.name.lower().endswith((".parquet", ".pq")):
                frame = pl.read_parquet(path)
            else:
                frame = pl.read_csv(path, infer_schema_length=10000, null_values=list(self.null_values))
        except pl.exceptions.NoDataError as err:
            raise ValueError(f"Tabular: {self.path!r} is empty (no header, no rows)") from err
        except (pl.exceptions.PolarsError, OSError) as err:
            raise ValueError(f"Tabular: cannot read {self.path!r}: {str(err).splitlines()[0]}") from err
        if not path.name.lower().endswith((".parquet", ".pq")):
            self._check_unique_header(path)
        return frame

    def _check_unique_header(self, path: Path) -> None:
        """Refuse a CSV header that names a column twice (polars keeps the first under the name and
        renames the second ``<name>_duplicated_0``, so a ``features`` entry would silently read one)."""
        import csv
        import gzip

        opener = gzip.open if path.name.lower().endswith(".gz") else open
        try:
            with opener(path, "rt", newline="", encoding="utf-8", errors="replace") as handle:
                header = next(csv.reader(handle), [])
        except (OSError, csv.Error):
            return  # polars read it; nothing more to learn from the header
        seen: set[str] = set()
        for name in header:
            if name in seen:
                raise ValueError(
                    f"Tabular: column {name!r} appears {header.count(name)} times in the header of "
                    f"{self.path!r}: rename or drop the duplicates"
                )
            seen.add(name)

    def _drop_missing_centers(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Drop (with a warning) the rows whose center id is missing in any center column."""
        missing = pl.any_horizontal(
            [
                pl.col(c).is_null() | pl.col(c).is_nan() if frame[c].dtype.is_float() else pl.col(c).is_null()
                for c in self.center
            ]
        )
        n_rows = frame.height
        frame = frame.filter(~missing)
        if frame.height < n_rows:
            _log.warning(
                "Tabular: dropped %d rows without a center id %s (a missing value, see null_values)",
                n_rows - frame.height,
                list(self.center),
            )
        if frame.height == 0:
            raise ValueError(
                f"Tabular: {self.path!r} has no labelled rows with a center id in {list(self.center)}"
            )
        return frame

    def table(self, seed: int = 0) -> PooledTable:
        """The pooled table in raw units (the seed is unused: building the table draws nothing).

        Raises:
            FileNotFoundError: If the file is missing.
            ValueError: If the file is empty or unreadable, a named column is missing, there is no
                feature column or no labelled row with a center id, a feature is not numeric or holds
                infinities, or the label is not binary.
        """
        frame = self._read()
        meta = (self.label, *self.center, *((self.time,) if self.time else ()))
        for field, cols in (
            ("label", (self.label,)),
            ("center", self.center),
            ("time", (self.time,) if self.time else ()),
        ):
            for c in cols:
                if c not in frame.columns:
                    raise ValueError(
                        f"Tabular: {field} column {c!r} not in {self.path!r} (columns: {frame.columns})"
                    )
        features = (
            self.features if self.features is not None else tuple(c for c in frame.columns if c not in meta)
        )
        for field, cols in (("features", features), ("categorical", self.categorical)):
            for c in cols:
                if c not in frame.columns:
                    raise ValueError(
                        f"Tabular: {field} column {c!r} not in {self.path!r} (columns: {frame.columns})"
                    )
                if c in meta:
                    raise ValueError(
                        f"Tabular: {field} column {c!r} is also the label, a center or the time column"
                    )
        extra = set(self.categorical) - set(features)
        if extra:
            raise ValueError(f"Tabular: categorical columns {sorted(extra)} are not among the features")

        if not features:
            raise ValueError(
                f"Tabular: {self.path!r} has no feature columns besides the label, center and time columns"
            )
        n_all = frame.height
        frame = frame.filter(pl.col(self.label).is_not_null())
        if frame.height < n_all:
            _log.warning("Tabular: dropped %d rows without a label %r", n_all - frame.height, self.label)
        if frame.height == 0:
            raise ValueError(
                f"Tabular: {self.path!r} has no rows with a label {self.label!r} ({n_all} rows read)"
            )
        frame = self._drop_missing_centers(frame)
        y = frame[self.label]
        if y.dtype == pl.Boolean:
            y = y.cast(pl.Int64)
        try:
            y = y.cast(pl.Float64)
        except pl.exceptions.PolarsError as err:
            raise ValueError(
                f"Tabular: label column {self.label!r} must be 0/1, got dtype {y.dtype}"
            ) from err
        if not y.is_in([0.0, 1.0]).all():
            bad = sorted(set(y.unique().to_list()) - {0.0, 1.0})[:5]
            raise ValueError(f"Tabular: label column {self.label!r} must be 0/1, found {bad}")
        frame = frame.with_columns(y.cast(pl.Int64).alias("_label"))

        numeric = [c for c in features if c not in self.categorical]
        for c in numeric:
            try:
                frame = frame.with_columns(pl.col(c).cast(pl.Float64, strict=True))
            except pl.exceptions.PolarsError as err:
                raise ValueError(_not_numeric(frame[c])) from err
            if int((frame[c].is_null() | frame[c].is_nan()).sum()) == frame.height:
                raise ValueError(_all_missing(c, self.path))
            infinite = int(frame[c].is_infinite().sum())
            if infinite:
                raise ValueError(
                    f"Tabular: feature {c!r} has {infinite} infinite values: replace them, or leave them "
                    "blank to have them imputed per center"
                )
        if self.time is not None:
            try:
                frame = frame.with_columns(pl.col(self.time).cast(pl.Float64, strict=True).alias("_year"))
            except pl.exceptions.PolarsError as err:
                raise ValueError(f"Tabular: time column {self.time!r} must be numeric (e.g. a year)") from err
            if frame["_year"].is_null().any() or frame["_year"].is_nan().any():
                raise ValueError(
                    f"Tabular: time column {self.time!r} has missing values: fill or drop those rows"
                )
            if frame["_year"].is_infinite().any():
                raise ValueError(f"Tabular: time column {self.time!r} has infinite values")
        else:
            frame = frame.with_columns(pl.lit(0.0).alias("_year"))

        site = pl.concat_str([pl.col(c).cast(pl.Utf8) for c in self.center], separator=" ")
        if self.window is not None:
            start = (pl.col("_year") / self.window).floor().cast(pl.Int64) * self.window
            site = pl.format("{} {}-{}", site, start, start + (self.window - 1))
        frame = frame.with_columns(site.alias("_site"))

        names: list[str] = []
        continuous: list[str] = []
        for c in features:
            if c in self.categorical:
                if frame[c].null_count() == frame.height:
                    raise ValueError(_all_missing(c, self.path))
                frame, cols = one_hot(frame, c, c, min_count=self.rare_count)
                names += cols
            else:
                names.append(c)
                values = frame[c].drop_nulls().drop_nans()
                if not values.is_in([0.0, 1.0]).all():
                    continuous.append(c)
        return to_pooled_table(
            frame,
            features=names,
            continuous=continuous,
            label="_label",
            year="_year",
            site="_site",
            charlson_columns=[c for c in CHARLSON_COLUMNS if c in names],
        )
