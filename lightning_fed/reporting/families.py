"""What the report tables know about methods and routers, declared by key, never matched on display labels.

Routers are selected by their stable key (``referral.csv``'s ``router_key``,
:attr:`lightning_fed.referral.routers.Router.key`; for tables written before keys existed, the
label, which was the key of every router not relabelled), so a router relabelled with
``refer --routers`` still lands in every EdgeDRM table under its table name. Algorithms are
grouped into families (the Pareto plot's colour) by the algorithm key ``summary["method"]``
lower-cased (the config's algorithm class for a summary without one): :data:`ALGORITHM_FAMILIES`.
The goal-aware rows of the ABPS paper (Sec. 6.5) are ABPS runs too; they are declared by their
method labels in :data:`LABEL_FAMILIES` (exact labels, the config stems; ABPS-X also filters by a
goal but the paper counts it as ABPS). An algorithm not declared is ``"other"``; a new method adds
its key to :data:`ALGORITHM_FAMILIES`.
"""

from __future__ import annotations

from lightning_fed.reporting.runs import RunRecord

__all__ = [
    "ALGORITHM_FAMILIES",
    "LABEL_FAMILIES",
    "LAMBDA_ROUTERS",
    "REACH_ROUTERS",
    "ROUTER_METHODS",
    "TIER_CONDITIONS",
    "UPPER_BOUND_ALGORITHMS",
    "is_upper_bound",
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
    "scaffold": "FedAvg-like (star)",
    "ditto": "FedAvg-like (star)",
    "apfl": "FedAvg-like (star)",
    "fedrep": "FedAvg-like (star)",
    "fedbn": "FedAvg-like (star)",
    "decefl": "decentralized (graph)",
    "dfedavgm": "decentralized (graph)",
    "defta": "decentralized (graph)",
    "wpfed": "decentralized (graph)",
    "edgedrm": "decentralized (graph)",
    "dispfl": "decentralized (graph)",
    "fedspd": "decentralized (graph)",
}
#: Method label -> family, for rows whose family is not their algorithm's (exact labels only).
LABEL_FAMILIES: dict[str, str] = {
    "abps_goal_homogeneity": "goal-aware ABPS",
    "abps_goal_diversity": "goal-aware ABPS",
    "abps_goal_alignment": "goal-aware ABPS",
}
#: Algorithms that pool the data: the upper bound of a table, not a federated competitor.
UPPER_BOUND_ALGORITHMS = frozenset({"centralized"})


def baseline_method(router_key: str, rule: str) -> str | None:
    """The method of a ``refer --baselines`` row (key ``"<Algorithm> (<folder>)"``, hard terminal),
    ``LocalOnly`` read as ``Local``; None for any other row. The folder differs per seed, the method
    does not: tables that pool seeds group such rows by it."""
    if " (" in router_key and rule == "hard terminal" and not router_key.startswith(_OWN_PREFIXES):
        name = router_key.split(" (", 1)[0]
        return "Local" if name == "LocalOnly" else name
    return None


def table_method(router_key: str, rule: str) -> str | None:
    """The EdgeDRM tables' method name of a referral-table row (router key, prediction rule), or None
    for a row the tables do not show (e.g. EdgeDRM's other prediction rules). A ``--baselines`` row
    reads as its algorithm (:func:`baseline_method`)."""
    if (router_key, rule) in ROUTER_METHODS:
        return ROUTER_METHODS[(router_key, rule)]
    return baseline_method(router_key, rule)


def run_family(record: RunRecord) -> str:
    """The family of one run (module docstring): its label's in :data:`LABEL_FAMILIES`, else its
    algorithm key's in :data:`ALGORITHM_FAMILIES`, else ``"other"``."""
    return LABEL_FAMILIES.get(record.label) or ALGORITHM_FAMILIES.get(record.algorithm, "other")


def is_upper_bound(record: RunRecord) -> bool:
    """Whether the run pools the data (its algorithm key is in :data:`UPPER_BOUND_ALGORITHMS`)."""
    return record.algorithm in UPPER_BOUND_ALGORITHMS
