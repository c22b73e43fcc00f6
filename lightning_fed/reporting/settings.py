"""A run's setting (dataset, partition, graph, clients) and its EdgeDRM task weight, read once per run.

New runs record their setting at fit time: ``summary["setting"]`` holds ``data``, ``partition`` and
``graph``, the display keys each data source, partitioner and topology gives itself
(``report_key()``, :func:`lightning_fed.setting.run_setting`). :func:`legacy_setting` recovers the
same keys from the resolved ``config.yaml`` for runs written before that (the fallback for older
runs; its strings are the contract ``report_key()`` matches, so it does not change):

- dataset: the data class name, ``CIFAR-<variant>`` for CIFAR;
- partition: ``5-SPC`` for ``Shards(per_client=5)``, ``Dir-0.3`` for ``DirichletLabels(alpha=0.3)``,
  ``balanced`` for ``BalancedSizes``, else the partitioner's class name (``default`` without one);
- graph: a topology's ``name`` when it has one (the fixed RR4 ``EdgeList(name="RR4")``), ``RR<k>``
  for ``RandomRegular(degree=k)`` (the default topology), ``Tiers-layered`` / ``Tiers-shortcut`` for
  ``HospitalTiers``, else the topology's class name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["PRIMARY_LAMBDA", "REFERENCE_GROUP", "graph_order", "legacy_setting", "run_lambda", "setting_of"]

#: EdgeDRM's primary task weight (Sec. 5: lambda = 0.9); the Table 5 sweep varies it.
PRIMARY_LAMBDA = 0.9
#: The graph of methods that have none (FedDRM: one number per setting), the tables' "Reference" group.
REFERENCE_GROUP = "Reference"


def _class_name(node: Any) -> str:
    return str(node.get("class_path", "")).rsplit(".", 1)[-1] if isinstance(node, dict) else ""


def _init_args(node: Any) -> dict[str, Any]:
    return (node.get("init_args") or {}) if isinstance(node, dict) else {}


def _tiers_graph(args: Mapping[str, Any]) -> str:
    """``Tiers-layered`` or ``Tiers-shortcut`` (the ``shortcut`` flag), with ``small/medium/large``
    appended when the tier sizes are not the paper's 16/8/8, so two tier graphs never share a row."""
    sizes = tuple(int(args.get(k, d)) for k, d in (("small", 16), ("medium", 8), ("large", 8)))
    name = "Tiers-shortcut" if args.get("shortcut") else "Tiers-layered"
    return name if sizes == (16, 8, 8) else f"{name} {'/'.join(map(str, sizes))}"


def legacy_setting(config: Mapping[str, Any]) -> dict[str, str]:
    """``data``, ``partition``, ``graph`` recovered from a resolved config (module docstring): the
    fallback for runs whose ``summary.json`` predates ``summary["setting"]``."""
    data = config.get("data") or {}
    args = _init_args(data)
    dataset = _class_name(data)
    if dataset == "CIFAR":
        dataset = f"CIFAR-{args.get('variant', 10)}"
    part = args.get("partition") or {}
    pargs = _init_args(part)
    partition = {
        "Shards": f"{pargs.get('per_client') or 'default'}-SPC",
        "DirichletLabels": f"Dir-{pargs.get('alpha', 0.3)}",
        "BalancedSizes": "balanced",
    }.get(_class_name(part), _class_name(part) or "default")
    topo = _init_args(config.get("algorithm")).get("topology") or {}
    targs = _init_args(topo)
    graph = targs.get("name") or _class_name(topo) or "RandomRegular"
    if graph == "RandomRegular":
        graph = f"RR{targs.get('degree', 4)}"
    elif graph == "HospitalTiers":
        graph = _tiers_graph(targs)
    return {"data": dataset, "partition": partition, "graph": graph}


def setting_of(config: Mapping[str, Any], summary: Mapping[str, Any]) -> dict[str, Any]:
    """The tables' setting columns of one run: ``dataset``, ``partition``, ``clients``, ``graph``, ``seed``.

    ``summary["setting"]`` (recorded at fit time) when it is there, else :func:`legacy_setting`;
    ``clients`` is the config's client count (8 when not given), ``seed`` the config's seed.
    """
    recorded = summary.get("setting")
    keys = recorded if isinstance(recorded, Mapping) and recorded.get("data") else legacy_setting(config)
    args = _init_args(config.get("data"))
    clients = int(args.get("num_clients") or args.get("num_centers") or 8)
    return {
        "dataset": str(keys["data"]),
        "partition": str(keys["partition"]),
        "clients": clients,
        "graph": str(keys["graph"]),
        "seed": config.get("seed"),
    }


def run_lambda(config: Mapping[str, Any]) -> float:
    """The run's EdgeDRM task weight ``algorithm.init_args.lam`` (the primary 0.9 when not given)."""
    return float(
        _init_args(config.get("algorithm") if isinstance(config, Mapping) else None).get(
            "lam", PRIMARY_LAMBDA
        )
    )


def graph_order(graph: str) -> tuple[int, str]:
    """Sort key of a graph: the reference group first, then sparse to dense as the paper lists them
    (Path, Cycle, RR-k, Complete), then the rest by name."""
    fixed = {REFERENCE_GROUP: -1, "Path": 0, "Cycle": 1, "Complete": 3}
    return fixed.get(graph, 2 if graph.startswith("RR") else 4), graph
