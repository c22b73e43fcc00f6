"""The resolved config's fingerprint: what ties a checkpoint and a summary to the config that made them.

The fingerprinted config is the resolved ``fit`` config (every key, defaults included, as saved in
``config.yaml``) flattened to dotted keys, less the keys that cannot change the numbers of a run
(:data:`SAFE_TO_CHANGE`). Its fingerprint is the SHA-256 of its canonical JSON. A checkpoint stores
both (the flat dict lets a refusal name the keys that differ); ``fit --resume`` and ``test`` compare
the folder's config (plus any overrides) against the checkpoint's and refuse a difference outside
:data:`SAFE_TO_CHANGE`.

Why these keys are safe: ``trainer.rounds`` only moves the stopping point (a resume may extend a
run; the rounds already run are the same, since every draw derives from (seed, purpose, round));
``trainer.eval_every`` only chooses the rounds whose test (and validation) AUROC is recorded
(evaluation changes no state and draws nothing; being left out, it also keeps the fingerprints of
the configs written before it existed); ``trainer.robust_min_per_class`` only chooses which centers a
reported mean averages; ``trainer.threads`` only sets torch's intra-op threads (speed, as
``OMP_NUM_THREADS`` did before it; :mod:`lightning_fed.threads`);
``logger.*`` and ``output.*`` decide where and how results are shown and saved, not what they are;
``metrics`` only adds evaluated numbers (evaluation changes no state; being left out, it keeps the
fingerprints of the configs written before it, and ``test`` can re-evaluate a run with new ones);
``fabric.devices`` / ``num_nodes`` / ``strategy`` shard the centers across processes, which gives
the one-process result (:mod:`lightning_fed.distributed`). The accelerator and the precision change
the arithmetic and are fingerprinted.

Keys added after configs were first fingerprinted (:data:`ADDED_LATER`) change the numbers and are
fingerprinted, except at the value that reproduces the behaviour from before they existed: there
they are left out, so a config written before them (which resolves to that value) keeps its
fingerprint and its run can still be resumed and re-tested.

Keys that moved (:data:`MOVED`: the ``wire`` group's ``hook`` and ``faults`` were the top-level
``comm`` and ``faults``) are fingerprinted under the name they had when fingerprints began, so a
config keeps its fingerprint whichever spelling it uses, and runs written before the move can
still be resumed and re-tested; a refusal names them by their new key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ADDED_LATER",
    "MOVED",
    "PLUGIN_ALIASES",
    "SAFE_TO_CHANGE",
    "changed_keys",
    "config_fingerprint",
    "fingerprinted",
]

#: Dotted keys (a trailing ``.*`` covers a whole group) that may differ between the config of a
#: checkpoint and the config that resumes or re-tests it.
SAFE_TO_CHANGE = (
    "trainer.rounds",
    "trainer.eval_every",
    "trainer.robust_min_per_class",
    "trainer.threads",
    "logger.*",
    "output.*",
    "metrics",
    "metrics.*",
    "fabric.devices",
    "fabric.num_nodes",
    "fabric.strategy",
    "evaluation.holdout_finetune_steps",  # evaluated after training (lightning_fed.holdout)
    "evaluation.holdout_peers",
)

#: Dotted keys added after fingerprints existed, with the (flattened) value that gives the results
#: of before: left out of the fingerprint at that value, fingerprinted at any other.
ADDED_LATER: dict[str, Any] = {
    "trainer.lr_schedule": None,  # None: constant learning rate
    "trainer.reset_optimizer_each_round": False,
    "algorithm.init_args.selector": None,  # None: a peer method's own partners (its topology, WPFed's LSH)
    "algorithm.init_args.server_optimizer": None,  # None: the average (or the server_momentum alias)
    "data.init_args.partition.init_args.num_centers": None,  # None: the source's own center count
    "algorithm.init_args.selector.init_args.acceptance": None,  # None: Eq. 7's line 19 (issue 30)
    "algorithm.init_args.shapley.init_args.utility": "auroc",  # the paper's utility (issue 30)
    "data.init_args.split": None,  # None: the 80/10/10 split of before (lightning_fed.data.split)
    "data.init_args.split.folds": None,  # None: one split, no folds (issue 29)
    "data.init_args.split.fold": 0,  # the fold index, inert without folds (issue 29)
    "evaluation.holdout_centers": None,  # None: every center trains (lightning_fed.holdout)
    "data.init_args.off_concept": 0.0,  # TeacherICU without off-concept centers (issue 30)
    "algorithm.init_args.selector.init_args.acceptance.init_args.model_posterior": False,  # (issue 30)
    "trainer.centers_per_round": None,  # None: every reachable center every round (issue 34)
    "wire.norm_bound": None,  # None: the ratio test only (issue 32)
    "wire.norm_bound.init_args.min_projection_ratio": None,  # None: no projection test (issue 32)
    "algorithm.init_args.schedule": "data",  # FedSPD: every cluster with rows travels (issue 31)
    "algorithm.init_args.weighting": "counts",  # FedSPD: count-weighted cluster averages (issue 31)
    "algorithm.init_args.init": "perturb",  # FedSPD: first assignment by loss (issue 31)
    "algorithm.init_args.selector.init_args.policy.init_args.peer_effect": False,  # (issue 30)
    "algorithm.init_args.aggregator": None,  # None: the weighted mean (FedAvg, ABPS, DeceFL; issue 32)
    "trainer.dp": None,  # None: no differential privacy of training (issue 34)
    "model.init_args.optimizer": "adam",  # MortalityMLP's Adam (SGD for SCAFFOLD, issue 34)
    "trainer.max_centers_per_pass": None,  # None: all centers in one packed pass (issue 33)
}


#: Dotted key prefixes that moved -> the prefix they are fingerprinted under (their first name).
MOVED = {"wire.hook": "comm", "wire.faults": "faults"}

#: Plugins that replaced a float key, fingerprinted under that key: plugin group -> (float key, the
#: plugin's one init arg, the class paths that mean it). ``server_optimizer: ServerMomentum(beta)``
#: is fingerprinted as ``server_momentum: beta`` (its alias), so the shipped FedAvg-X / ABPS-X
#: configs converted to the plugin keep their fingerprints and their earlier runs can be resumed.
PLUGIN_ALIASES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "algorithm.init_args.server_optimizer": (
        "algorithm.init_args.server_momentum",
        "beta",
        (
            "lightning_fed.aggregation.ServerMomentum",
            "lightning_fed.aggregation.server_optimizer.ServerMomentum",
            "lightning_fed.aggregation.CenterServerMomentum",
            "lightning_fed.aggregation.center_optimizer.CenterServerMomentum",
        ),
    ),
}


def _as_alias(flat: dict[str, Any]) -> dict[str, Any]:
    """``flat`` with every :data:`PLUGIN_ALIASES` plugin spelled as its float key (when that key is
    at its default 0 and the plugin sets nothing but its one argument)."""
    for group, (alias, arg, paths) in PLUGIN_ALIASES.items():
        keys = {k for k in flat if k.startswith(f"{group}.")}
        value_key = f"{group}.init_args.{arg}"
        plugin = flat.get(f"{group}.class_path") in paths and keys == {f"{group}.class_path", value_key}
        if plugin and flat.get(alias, 0.0) == 0.0:
            value = flat[value_key]
            flat = {k: v for k, v in flat.items() if k not in keys}
            flat[alias] = value
    return flat


def _first_name(key: str) -> str:
    """``key`` under the name it had when fingerprints began (:data:`MOVED`)."""
    for new, old in MOVED.items():
        if key == new or key.startswith(f"{new}."):
            return old + key[len(new) :]
    return key


def _current_name(key: str) -> str:
    """The inverse of :func:`_first_name`: the name a refusal shows."""
    for new, old in MOVED.items():
        if key == old or key.startswith(f"{old}."):
            return new + key[len(old) :]
    return key


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        # One canonical JSON form per value (Paths and other objects as their strings).
        out[prefix] = json.loads(json.dumps(value, default=str))


def _safe(key: str) -> bool:
    return any(key == s or (s.endswith(".*") and key.startswith(s[:-1])) for s in SAFE_TO_CHANGE)


def _as_before(key: str, value: Any) -> bool:
    """Whether ``key`` is one of :data:`ADDED_LATER` at its value from before (``False`` is not ``0``)."""
    if key not in ADDED_LATER:
        return False
    old = ADDED_LATER[key]
    return type(value) is type(old) and value == old


def fingerprinted(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config flattened to dotted keys, without the :data:`SAFE_TO_CHANGE` keys (and without the
    :data:`ADDED_LATER` keys at their value from before).

    Args:
        config: The resolved config as a nested mapping (``cfg.as_dict()``); a ``config`` entry (the
            list of files it was read from) is ignored.
    """
    flat: dict[str, Any] = {}
    _flatten({k: v for k, v in config.items() if k != "config"}, "", flat)
    flat = _as_alias({_first_name(k): v for k, v in flat.items()})
    return {k: v for k, v in sorted(flat.items()) if not _safe(k) and not _as_before(k, v)}


def config_fingerprint(config: Mapping[str, Any]) -> str:
    """SHA-256 (hex, first 16 digits) of :func:`fingerprinted` ``config`` as canonical JSON."""
    text = json.dumps(fingerprinted(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def changed_keys(saved: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    """The fingerprinted keys whose values differ between ``saved`` (a :func:`fingerprinted` dict, as
    stored in a checkpoint) and ``config`` (a nested resolved config), in dotted form, sorted.

    A key present on one side only counts as changed. Moved keys are named by their current key
    (:data:`MOVED`).
    """
    now = fingerprinted(config)
    changed = (k for k in set(saved) | set(now) if saved.get(k, _MISSING) != now.get(k, _MISSING))
    return sorted(_current_name(k) for k in changed)


_MISSING = object()
