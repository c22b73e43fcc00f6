"""A run's setting as report keys, computed once at fit time and written to ``summary.json``.

``report`` groups runs by dataset, partition and graph. Each part names itself: a data source's
``report_key()`` (``FashionMNIST``, ``CIFAR-10``) and ``partition_key()`` (its partitioner's
``report_key()``: ``5-SPC``, ``Dir-0.3``, ``balanced``; ``default`` when none was configured), and a
topology's ``report_key()`` (``RR4``, ``Path``, ``Tiers-layered``; an ``EdgeList``'s ``name``).
These are the strings the EdgeDRM tables recovered from class names before runs recorded them
(``lightning_fed.reporting``'s legacy parser, kept for older runs), so old and new runs share rows.

Import-light: nothing here imports torch; it only asks the built objects for their keys.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_GRAPH", "run_setting", "topology_of"]

#: The graph key of a method that exchanges over no graph (star methods, FedDRM): the reports'
#: "Reference" group.
NO_GRAPH = "Reference"


def topology_of(algorithm: Any) -> Any | None:
    """The algorithm's communication topology, or None for a method without one.

    A peer method holds it as ``algorithm.topology`` (DisPFL, FedSPD) or through its partner
    selector (``algorithm.selector.topology``: :class:`~lightning_fed.selection.GraphNeighbours`,
    the default selector of DeceFL, DFedAvgM, DeFTA, WPFed and EdgeDRM).
    """
    topology = getattr(algorithm, "topology", None)
    if topology is None:
        topology = getattr(getattr(algorithm, "selector", None), "topology", None)
    return topology


def _key(obj: Any) -> str:
    """``obj.report_key()``, or the class name of an object without one (a user's own class)."""
    key = getattr(obj, "report_key", None)
    return str(key()) if callable(key) else type(obj).__name__


def run_setting(data: Any, algorithm: Any) -> dict[str, str]:
    """The run's setting: ``{"data": ..., "partition": ..., "graph": ...}`` as report keys.

    Args:
        data: The run's data source (a :class:`~lightning_fed.data.DataSource`).
        algorithm: The run's algorithm.

    Returns:
        ``data``: the source's ``report_key()``; ``partition``: its ``partition_key()`` (``default``
        for a source without one); ``graph``: the topology's ``report_key()`` (:func:`topology_of`),
        :data:`NO_GRAPH` for a method without a topology.
    """
    partition = getattr(data, "partition_key", None)
    topology = topology_of(algorithm)
    return {
        "data": _key(data),
        "partition": str(partition()) if callable(partition) else "default",
        "graph": NO_GRAPH if topology is None else _key(topology),
    }
