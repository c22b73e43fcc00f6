"""``lightning-fed refer``: the referral table of a finished EdgeDRM run, plus baseline rows.

The EdgeDRM run folder gives the trained clients (stage-II heads), the graph and the routing
potentials (restored from its checkpoint); every router and prediction rule of
:func:`~lightning_fed.referral.refer.refer` runs on its queries (below). Two baseline rows join the
same table, on the same queries and entry clients:

- ``DFedAvgM (stage I)``: the same run's stage-I heads (kept by
  :class:`~lightning_fed.algorithms.EdgeDRM`) on the encoders EdgeDRM itself uses, answering at the
  entry client. Without ``consensus_steps`` (the paper's protocol) that is exactly the stage-I
  DFedAvgM model. With ``consensus_steps > 0`` EdgeDRM's encoders had extra gossip steps after stage
  I; this row reads the same post-consensus encoders, so the comparison does not hand EdgeDRM
  communication the control lacks, and ``DFedAvgM (stage I, pre-consensus)`` adds the stage-I model
  as trained (encoders before consensus; in ``referral.csv``, not in the EdgeDRM tables);
- one row per ``--baselines`` run folder (e.g. a ``LocalOnly`` run on the same data): its models
  answering at the entry client. Its data must be the same federation (same test labels), which
  is checked.

The queries are the run's test rows, or the fixed diagnostic panel of the hospital-tier experiment
(:class:`~lightning_fed.referral.panel.QueryPanel`) when the run's config lists one under
``callbacks:`` or ``queries="panel"`` asks for it; the panel is drawn from the run's data rebuilt
without client transforms (:func:`~lightning_fed.referral.panel.untransformed_data`) and every row
of the table (routers, stage I, baselines) answers the same arrival records.

The routers are a plugin list (``routers``: :class:`~lightning_fed.referral.routers.Router`
objects, each built from its own parameters and labelled by ``Router.label``; default: the six of
:func:`~lightning_fed.referral.refer.default_routers`); the two kinds of baseline rows are added
whatever the list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import torch

from lightning_fed.referral.panel import EveryEntry, QueryPanel, config_queries, untransformed_data
from lightning_fed.referral.prediction import HardTerminal
from lightning_fed.referral.refer import refer_frames, referral_header, split_queries, write_referral
from lightning_fed.referral.routers import NoReferral, Router

__all__ = ["refer_run"]


def _same_queries(main: Any, other: Any, where: Path) -> None:
    a, b = main.data.centers, other.data.centers
    if len(a) != len(b) or any(not torch.equal(x.y_test, y.y_test) for x, y in zip(a, b, strict=True)):
        raise ValueError(
            f"--baselines {where}: its federation differs from the EdgeDRM run's (other clients or test "
            "splits); train it with the same data config and data seed"
        )


def _query_mode(
    run_dir: Path, queries: str | QueryPanel | EveryEntry | None
) -> QueryPanel | EveryEntry | None:
    """The queries ``refer`` asks for (None: the test splits); the config's mode when not given."""
    if isinstance(queries, QueryPanel | EveryEntry):
        return queries
    if queries not in (None, "test", "panel", "every-entry"):
        raise ValueError(f"--queries must be test, every-entry or panel, got {queries!r}")
    if queries == "test":
        return None
    if queries == "every-entry":
        return EveryEntry()
    found = config_queries(run_dir)
    if queries == "panel":
        return found if isinstance(found, QueryPanel) else QueryPanel()
    return found


def refer_run(
    run_dir: Path,
    load: Callable[[Path], Any],
    baselines: Sequence[Path] = (),
    max_hops: int | None = None,
    eta: float | None = None,
    out: Path | None = None,
    routers: Sequence[Router] | None = None,
    queries: str | QueryPanel | EveryEntry | None = None,
) -> pl.DataFrame:
    """Evaluate referral for ``run_dir`` (an EdgeDRM run) and write the table and picture to ``out``.

    Args:
        run_dir: The EdgeDRM run folder.
        load: ``load(folder) -> Federation`` restored from that folder's config and checkpoint.
        baselines: Other run folders on the same data, reported with their entry client's model.
        max_hops: Movement budget L (default: the run's ``algorithm.max_hops``).
        eta: Move threshold (default: the run's ``algorithm.eta``).
        out: Output folder (default ``run_dir``).
        routers: The routers of the table, each built from its own parameters and labelled by its
            :attr:`~lightning_fed.referral.routers.Router.label` (default: the six of
            :func:`~lightning_fed.referral.refer.default_routers`). The stage-I and ``baselines`` rows
            are added whatever the routers.
        queries: ``"test"`` (the test splits, each at one non-source entry), ``"every-entry"`` (each
            test row at every client, the ISIC2019 protocol of App. D.3), ``"panel"`` (the config's
            :class:`~lightning_fed.referral.panel.QueryPanel`, else the paper's 200 x 64), a
            :class:`~lightning_fed.referral.panel.QueryPanel`, or None: the config's panel if it lists
            one, else the test splits.

    Raises:
        ValueError: If ``run_dir`` holds no routing potentials, a baseline's data differ, two
            routers share a label, ``queries`` is unknown or the panel does not fit the data.
    """
    fed = load(run_dir)
    alg = fed.algorithm
    if getattr(alg, "potentials", None) is None:
        raise ValueError(
            f"--run-dir {run_dir}: no routing potentials in its checkpoint (trained with "
            f"{type(alg).__name__}; refer needs an EdgeDRM run that finished stage II). Evaluate other "
            "methods as --baselines of an EdgeDRM run"
        )
    out = Path(out) if out is not None else Path(run_dir)
    hops = alg.max_hops if max_hops is None else int(max_hops)
    threshold = alg.eta if eta is None else float(eta)
    common = {
        "graph": alg.graph,
        "potentials": alg.potentials,
        "seed": fed.seed,
        "max_hops": hops,
        "eta": threshold,
    }
    mode = _query_mode(run_dir, queries)
    if isinstance(mode, QueryPanel):
        raw = alg.prepare(untransformed_data(run_dir, fed.data, fed.seed))
        common["queries"] = mode.queries(raw, fed.seed)
    elif mode is not None:
        common["queries"] = mode.queries(fed.data, fed.seed)
    else:
        common["queries"] = split_queries(fed.data, fed.seed)
    params = fed.center_params()
    parts = [
        refer_frames(out, fed.module, params, fed.data, routers=routers, write=False, picture=True, **common)
    ]
    entry_only = {"rules": [HardTerminal()], "write": False}
    if alg.stage1_head is not None:
        # The stage-I heads on EdgeDRM's own (post-consensus) encoders; the saved stage-I encoders, kept
        # when consensus_steps > 0, give the pre-consensus row (module docstring).
        heads = {n: t for n, t in alg.stage1_head.items() if n.startswith("head.")}
        rows = [("DFedAvgM (stage I)", heads)]
        if len(heads) < len(alg.stage1_head):
            rows.append(("DFedAvgM (stage I, pre-consensus)", alg.stage1_head))
        for label, saved in rows:
            stage1 = {**params, **{n: t.to(params[n]) for n, t in saved.items()}}
            parts.append(
                refer_frames(
                    out,
                    fed.module,
                    stage1,
                    fed.data,
                    routers=[NoReferral(label=label, key=label)],
                    **common,
                    **entry_only,
                )
            )
    for folder in baselines:
        other = load(Path(folder))
        _same_queries(fed, other, Path(folder))
        label = f"{type(other.algorithm).__name__} ({Path(folder).name})"
        parts.append(
            refer_frames(
                out,
                other.module,
                other.center_params(),
                other.data,
                routers=[NoReferral(label=label, key=label)],
                **common,
                **entry_only,
            )
        )
    table = pl.concat([p.table for p in parts], how="vertical")
    per_query = pl.concat([p.queries for p in parts], how="vertical")
    topology = getattr(getattr(alg, "selector", None), "topology", None)
    name = topology.report_key() if topology is not None else None
    header = referral_header(
        Path(run_dir).name, alg.graph, fed.seed, hops, threshold, common["queries"], graph_name=name
    )
    write_referral(table, out, queries=per_query, header=header)
    return table
