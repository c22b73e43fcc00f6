"""What stage I and stage II leave in an EdgeDRM checkpoint (``edgedrm_checkpoints.md``).

The referral tables say *that* routing moves a query or not; these three numbers, read from each
EdgeDRM run's final ``checkpoint.pt``, say *why* (EdgeDRM Sec. 3, App. D.2):

- **encoder gap**: the density-ratio potentials compare representations across neighbours, which is
  only meaningful when the neighbours' encoders agree. With ``phi_i`` client ``i``'s encoder and
  projection parameters flattened and ``E`` the graph's edges (the distinct pairs in the wire's
  byte ledger),

      gap = mean_{(i, j) in E} ||phi_i - phi_j|| / mean_i ||phi_i||

  (0 on the complete graph, where gossip is an exact average);
- **head shift**: how far stage II moved the task heads from the stage-I heads, over all clients'
  head weights stacked, ``||W - W_I||_F / ||W_I||_F``. The task loss carries ``lambda``, so under
  the paper's SGD stage II a smaller ``lambda`` moves the heads less (under full-batch Adam it would
  not matter, :mod:`lightning_fed.algorithms.edgedrm.stage2`);
- **potential norm**: ``mean_i ||theta_i||``, the size of the learned routing directions (the edge
  losses carry ``kappa = m (1 - lambda) / (2|E|)``; at ``lambda = 1`` they are never trained and
  ``theta = 0``, leaving the count prior alone).

Rows are grouped per (setting, graph, ``lambda``) with mean +/- sample SD over the seeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from lightning_fed.render import markdown_table, mean_sd
from lightning_fed.reporting.runs import RunSource, as_records
from lightning_fed.reporting.spec import TableSpec
from lightning_fed.reporting.stats import mean_sd_by

__all__ = [
    "SHARED_PREFIXES",
    "SPEC",
    "checkpoint_markdown",
    "checkpoint_rows",
    "checkpoint_stats",
    "checkpoint_table",
]

#: Parameter-name prefixes of the encoder and projection (the representation the potentials read).
SHARED_PREFIXES = ("encoder.", "projection.")
_KEYS = ["dataset", "partition", "clients", "graph", "lam"]
_COLUMNS = ("encoder_gap", "head_shift", "theta_norm")


def checkpoint_stats(federation: Mapping[str, Any]) -> dict[str, float | None]:
    """The module docstring's three numbers from a checkpoint's ``federation`` state.

    Args:
        federation: ``checkpoint["federation"]``: ``engine.params`` (stacked per client, first
            dimension the client), ``ledger.u`` / ``ledger.v`` (the exchanged pairs) and, for
            EdgeDRM, ``algorithm.stage1_head`` and ``algorithm.potentials.theta``.

    Returns:
        ``encoder_gap`` (``None`` without encoder parameters or ledger pairs), ``head_shift``
        (``None`` without a stored stage-I head) and ``theta_norm`` (``None`` without potentials).
    """
    import torch

    params = federation["engine"]["params"]
    algorithm = federation.get("algorithm") or {}
    ledger = federation.get("ledger") or {}
    shared = [v.reshape(v.shape[0], -1).double() for k, v in params.items() if k.startswith(SHARED_PREFIXES)]
    u, v = ledger.get("u"), ledger.get("v")
    exchanged = [] if u is None or v is None else zip(u.tolist(), v.tolist(), strict=True)
    pairs = sorted({(min(a, b), max(a, b)) for a, b in exchanged if a != b})
    gap = None
    if shared and pairs:
        flat = torch.cat(shared, dim=1)
        scale = float(flat.norm(dim=1).mean())
        gap = sum(float((flat[i] - flat[j]).norm()) for i, j in pairs) / len(pairs) / scale if scale else 0.0
    stage1 = (algorithm.get("stage1_head") or {}).get("head.weight")
    shift = None
    if stage1 is not None and "head.weight" in params:
        base = stage1.double()
        shift = float((params["head.weight"].double() - base).norm() / base.norm())
    theta = (algorithm.get("potentials") or {}).get("theta")
    norm = None if theta is None else float(theta.double().norm(dim=1).mean())
    return {"encoder_gap": gap, "head_shift": shift, "theta_norm": norm}


def checkpoint_rows(source: RunSource) -> pl.DataFrame:
    """One row per EdgeDRM referral run with a ``checkpoint.pt``: ``run``, the setting columns,
    ``lam``, ``seed`` and :func:`checkpoint_stats`."""
    records = as_records(source)
    from lightning_fed.runfolder.state import read_checkpoint

    rows = []
    for record in records:
        path = record.checkpoint
        if record.referral is None or not record.has_config or path is None:
            continue
        federation = read_checkpoint(path, mmap=True)["federation"]
        if "stage1_head" not in (federation.get("algorithm") or {}):
            continue  # not an EdgeDRM checkpoint
        rows.append(
            {
                "run": record.name,
                **record.setting,
                "lam": record.lam,
                **checkpoint_stats(federation),
            }
        )
    schema = {c: pl.Float64() for c in _COLUMNS}
    return pl.DataFrame(rows, schema_overrides=schema) if rows else pl.DataFrame()


def checkpoint_table(rows: pl.DataFrame) -> pl.DataFrame:
    """Mean and sample SD (``<column>_mean`` / ``_sd``) per (setting, graph, ``lam``), with ``seeds``."""
    return mean_sd_by(rows, _KEYS, _COLUMNS)


def checkpoint_markdown(table: pl.DataFrame) -> str:
    """:func:`checkpoint_table` as one markdown table (``-`` where a value is missing); "" without rows."""
    if table.height == 0:
        return ""

    header = ["dataset", "partition", "clients", "graph", "lambda", "encoder gap", "head shift"]
    header += ["potential norm", "seeds"]
    rows = []
    for r in table.iter_rows(named=True):
        cells = [r["dataset"], r["partition"], str(r["clients"]), r["graph"], f"{r['lam']:.2f}"]
        cells += [mean_sd(r, "encoder_gap", ".4f"), mean_sd(r, "head_shift", ".3f")]
        rows.append([*cells, mean_sd(r, "theta_norm", ".2f"), str(r["seeds"])])
    legend = (
        "Encoder gap: mean over edges of ||phi_i - phi_j|| / mean_i ||phi_i|| (encoder + projection); head"
        " shift: ||W - W_I|| / ||W_I|| (stage-II heads against stage-I heads); potential norm: mean_i"
        " ||theta_i||. Mean ± sample SD over seeds."
    )
    return markdown_table(header, rows, legend)


#: ``edgedrm_checkpoints.md``.
SPEC = TableSpec(
    "edgedrm_checkpoints.md",
    checkpoint_rows,
    lambda rows: checkpoint_markdown(checkpoint_table(rows)),
    "encoder gap, stage-II head shift and potential norm per setting, graph and lambda",
    gate="edgedrm",
)
