"""The report's tables, one spec module each (:class:`~lightning_fed.reporting.spec.TableSpec`).

:func:`specs` lists them in the order ``report`` writes them; a spec's ``gate`` says when it is
considered: ``None`` always (Table 1, diagnostics), ``"edgedrm"`` when some run has an EdgeDRM-layout
row (a referral table or a FedDRM run), ``"tiers"`` when a referral table has hospital tiers. A new
table is one module here with a ``SPEC`` added to :func:`specs` (docs/reporting.md).

- :mod:`~.table1`: ABPS Table 1 (``table1.md`` / ``.csv``); :mod:`~.centers`: the reference
  method's per-center support and intervals (``centers.md`` / ``.csv``); :mod:`~.holdout`: the
  held-out centers as they join (``holdout.md`` / ``.csv``); :mod:`~.diagnostics`: its mechanism
  diagnostics;
- :mod:`~.edgedrm`: EdgeDRM Tables 1 and 2 (``edgedrm_table.md``, ``edgedrm_settings.md``);
  :mod:`~.edgedrm_paired`: their paired orderings; :mod:`~.query_paired`: routers paired query by query;
  :mod:`~.reach`: whether walks reach the source;
  :mod:`~.checkpoints`: what the EdgeDRM checkpoints hold; :mod:`~.lambda_sweep`: Table 5;
- :mod:`~.tiers`: Table 4 with its paired contrasts.
"""

from __future__ import annotations

from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.tables import (
    centers,
    checkpoints,
    diagnostics,
    edgedrm,
    edgedrm_paired,
    holdout,
    lambda_sweep,
    query_paired,
    reach,
    table1,
    tiers,
)

__all__ = ["specs"]


def specs(reference: str | None = None) -> tuple[TableSpec, ...]:
    """Every table of the report in writing order; ``reference``: Table 1's paired comparisons."""
    return (
        table1.spec(reference),
        diagnostics.SPEC,
        centers.spec(reference),
        holdout.spec(reference),
        edgedrm.TABLE_SPEC,
        edgedrm.SETTINGS_SPEC,
        edgedrm_paired.SPEC,
        reach.SPEC,
        query_paired.SPEC,
        checkpoints.SPEC,
        lambda_sweep.SPEC,
        tiers.SPEC,
    )
