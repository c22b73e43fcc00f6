"""What the report tables know about methods and routers, declared by key, never matched on display labels.

Routers are selected by their stable key (``referral.csv``'s ``router_key``,
:attr:`lightning_fed.referral.routers.Router.key`; for tables written before keys existed, the
label, which was the key of every router not relabelled), so a router relabelled with
``refer --routers`` still lands in every EdgeDRM table under its table name. Algorithms are
grouped into families (the Pareto plot's colour) by the algorithm key ``summary["method"]``
lower-cased, plus one config fact: an ABPS run whose selector filters by a goal
(:class:`~lightning_fed.selection.abps.GoalFilter`) is goal-aware. Only a run without a method key
falls back to :func:`label_family`, today's reading of its label.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_fed.reporting.runs import RunRecord

__all__ = [
    "ALGORITHM_FAMILIES",
    "LAMBDA_ROUTERS",
    "REACH_ROUTERS",
    "ROUTER_METHODS",
    "TIER_CONDITIONS",
    "UPPER_BOUND_ALGORITHMS",
    "is_upper_bound",
    "label_family",
    "run_family",
    "table_method",
]

#: (router key, prediction rule) -> the EdgeDRM tables' method name.
ROUTER_METHODS: dict[tuple[str, str], str] = {
    ("EdgeDRM", "weighted history"): "EdgeDRM",
    ("EdgeDRM-NR", "hard terminal"): "EdgeDRM-NR",
    ("oracle router on EdgeDRM experts", "weighted history"): "Oracle router",
    ("FedDRM (centralized)", "weighted history"): "Oracle router",  # the oracle's key before the rename
    ("DFedAvgM (stage I)", "hard terminal"): "DFedAvgM",
}
#: Router keys of EdgeDRM itself and its ablations (never read as a ``--baselines`` row).
_OWN_PREFIXES = ("EdgeDRM", "FedDRM", "DFedAvgM", "oracle router")
#: Table 4's conditions: router key -> condition name, in the paper's order.
TIER_CONDITIONS: dict[str, str] = {
    "EdgeDRM-NR": "EdgeDRM-NR",
    "EdgeDRM w/o prior": "History, no prior",
    "EdgeDRM": "History + prior",
}
#: Routers of the reach table, in column order (router keys, shown under these names).
REACH_ROUTERS: tuple[str, ...] = ("EdgeDRM", "EdgeDRM w/o prior", "count-only", "random")
#: The two routers of the lambda sweep (Table 5): EdgeDRM and its no-referral control.
LAMBDA_ROUTERS: tuple[str, str] = ("EdgeDRM", "EdgeDRM-NR")

#: Algorithm key -> family (a key of :data:`lightning_fed.plots.pareto.FAMILY_COLORS`).
ALGORITHM_FAMILIES: dict[str, str] = {
    "localonly": "no exchange",
    "centralized": "no exchange",
    "abps": "ABPS",
    "fedavg": "FedAvg-like (star)",
    "fedprox": "FedAvg-like (star)",
    "feddyn": "FedAvg-like (star)",
    "moon": "FedAvg-like (star)",
    "bnnfedavg": "FedAvg-like (star)",
    "feddrm": "FedAvg-like (star)",
    "decefl": "decentralized (graph)",
    "dfedavgm": "decentralized (graph)",
    "defta": "decentralized (graph)",
    "wpfed": "decentralized (graph)",
    "edgedrm": "decentralized (graph)",
    "dispfl": "decentralized (graph)",
    "fedspd": "decentralized (graph)",
}
#: Algorithms that pool the data: the upper bound of a table, not a federated competitor.
UPPER_BOUND_ALGORITHMS = frozenset({"centralized"})


def table_method(router_key: str, rule: str) -> str | None:
    """The EdgeDRM tables' method name of a referral-table row (router key, prediction rule), or None
    for a row the tables do not show (e.g. EdgeDRM's other prediction rules). A ``--baselines`` row
    (key ``"<Algorithm> (<folder>)"``, hard terminal) reads as its algorithm, ``LocalOnly`` as ``Local``."""
    if (router_key, rule) in ROUTER_METHODS:
        return ROUTER_METHODS[(router_key, rule)]
    if " (" in router_key and rule == "hard terminal" and not router_key.startswith(_OWN_PREFIXES):
        name = router_key.split(" (", 1)[0]
        return "Local" if name == "LocalOnly" else name
    return None


def label_family(label: str) -> str:
    """The family read from a method label (the fallback for runs without a method key), first match:
    ``local``/``central`` no exchange, ``goal`` goal-aware ABPS, ``abps`` ABPS, ``fedavg``/``fedprox``/
    ``feddyn``/``moon``/``bnn``/``scaffold``/``star`` FedAvg-like, ``decefl``/``defta``/``wpfed``/
    ``dfedavgm`` decentralized, else other."""
    s = label.lower()
    if "local" in s or "central" in s:
        return "no exchange"
    if "goal" in s:
        return "goal-aware ABPS"
    if "abps" in s:
        return "ABPS"
    if any(k in s for k in ("fedavg", "fedprox", "feddyn", "moon", "bnn", "scaffold", "star")):
        return "FedAvg-like (star)"
    if any(k in s for k in ("decefl", "defta", "wpfed", "dfedavgm")):
        return "decentralized (graph)"
    return "other"


def _filters_by_goal(config: Mapping[str, Any]) -> bool:
    def args(node: Any) -> dict[str, Any]:
        return (node.get("init_args") or {}) if isinstance(node, dict) else {}

    found = args(args(config.get("algorithm")).get("selector")).get("filter") or {}
    return isinstance(found, dict) and str(found.get("class_path", "")).endswith("GoalFilter")


def run_family(record: RunRecord) -> str:
    """The family of one run (module docstring)."""
    if not record.method:
        return label_family(record.label)
    family = ALGORITHM_FAMILIES.get(record.method, "other")
    return "goal-aware ABPS" if family == "ABPS" and _filters_by_goal(record.config) else family


def is_upper_bound(record: RunRecord) -> bool:
    """Whether the run pools the data (Centralized; a run without a method key: ``central`` in its label)."""
    if not record.method:
        return "central" in record.label.lower()
    return record.method in UPPER_BOUND_ALGORITHMS
