"""``lightning-fed data describe``: the per-center table of a data source."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_fed.commands.common import configs_first, instantiate
from lightning_fed.processes import fail

__all__ = ["DATA_USAGE", "data"]


DATA_USAGE = """usage: lightning-fed data describe [--config FILE] [--data CLASS_PATH]
                                 [--data.init_args.KEY=VALUE] [--seed N] [--rows N] [--save FILE.parquet]

Print the federation a data source builds, one row per center: sizes, label balance (positive
rate for binary labels; classes present and majority share for image federations), share of
imputed values and the metadata descriptors. 'lightning-fed data describe --help' lists every key.
"""


def data(argv: Sequence[str]) -> Any:
    """``lightning-fed data describe``: centers, sizes, label balance, missingness, descriptors.

    Accepts every ``fit`` option (so a fit config works as it is) plus ``--save FILE.parquet`` and
    ``--rows N``; only the ``data`` and ``seed`` settings are used.
    """
    if list(argv[:1]) in (["-h"], ["--help"]):
        print(DATA_USAGE)
        return None
    if not argv or argv[0] != "describe":
        fail("usage: lightning-fed data describe [--config FILE] [--data CLASS_PATH] [--save FILE]")
    from lightning_fed.fit_parser import fit_parser

    parser = fit_parser()
    parser.prog = "lightning-fed data describe"
    parser.description = "Describe the federation a data source builds (only data and seed are used)."
    parser.add_argument("--save", type=str | None, default=None, help="also write the table as parquet here")
    parser.add_argument("--rows", type=int, default=20, help="rows to print (all rows are saved)")
    cfg = parser.parse_args(configs_first(list(argv[1:])))
    init = instantiate(parser, cfg)
    if init.save and (Path(init.save).is_dir() or str(init.save).endswith("/")):
        fail(f"--save {init.save} is a folder: give a file name, e.g. {Path(init.save) / 'centers.parquet'}")

    import polars as pl

    from lightning_fed.data.describe import describe, shown_columns
    from lightning_fed.io import atomic_path

    try:
        federation = init.data.build(init.seed)
    except (ValueError, TypeError, FileNotFoundError) as err:
        fail(str(err))
    table = describe(federation)
    total = int(table["n_train"].sum() + table["n_val"].sum() + table["n_test"].sum())
    kind = "binary label" if federation.num_classes <= 2 else f"{federation.num_classes} classes"
    print(
        f"{type(init.data).__name__}: {federation.num_centers} centers, {total} rows, "
        f"{federation.num_features} features, {kind}"
    )
    with pl.Config(
        tbl_rows=init.rows,
        tbl_cols=-1,
        tbl_width_chars=200,
        fmt_str_lengths=40,
        float_precision=3,
        tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
    ):
        print(table.select(shown_columns(table, federation)))
    d = len(federation.centers[0].metadata)
    more = "; --save writes them all" if d > 3 else ""
    print(f"{d} descriptor entries per center ({min(d, 3)} shown{more})")
    if init.save:
        with atomic_path(init.save) as tmp:
            table.write_parquet(tmp)
        print(f"wrote {init.save}")
    return table
