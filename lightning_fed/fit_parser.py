"""The ``fit`` parser: every config group, and the ``wire`` group with its deprecated aliases.

Config groups: ``data``, ``model``, ``algorithm`` (class_path/init_args), ``trainer``, ``fabric``,
``logger``, ``output``, ``callbacks``, ``metrics`` (torchmetrics classes per center), ``seed`` and
``wire``, whose keys are exactly the arguments of :class:`~lightning_fed.comm.Wire` (less its
ledger): ``wire.hook`` (the encode/decode hook), ``wire.faults`` (the fault plan) and
``wire.max_norm_ratio`` (the norm defence).

Deprecated aliases, accepted for one release with a one-line notice on stderr: the top-level
``comm`` (now ``wire.hook``) and ``faults`` (now ``wire.faults``). Both spellings name one setting,
so a later source overrides an earlier one whichever spelling each uses (the sources in order: the
``--config`` files, then the command line; ``lightning-fed fit --config configs/abps.yaml
--comm=lightning_fed.comm.BFloat16Hook`` still sends bfloat16). One source giving both spellings is
a one-line error. :meth:`FitParser.parse_args` folds the aliases into the ``wire`` group, so the
parsed config (and the ``config.yaml`` a run writes) holds the new keys only; the fingerprint of a
config does not depend on the spelling (:mod:`lightning_fed.runfolder.fingerprint`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from lightning_fed.commands.parser import CommandParser
from lightning_fed.processes import fail

__all__ = ["WIRE_ALIASES", "FitParser", "fit_parser", "fold_wire_aliases", "wire_from"]

#: Deprecated top-level key -> its key in the ``wire`` group.
WIRE_ALIASES = {"comm": "hook", "faults": "faults"}

#: ``wire.hook`` when neither it nor ``comm`` is given (what the old ``comm`` default resolved to).
_DEFAULT_HOOK = "lightning_fed.comm.IdentityHook"


def _spelled(source: Mapping[str, Any]) -> dict[str, set[str]]:
    """Per alias, the spellings (``"old"``, ``"new"``) a config mapping sets."""
    wire = source.get("wire")
    wire = wire if isinstance(wire, Mapping) else {}
    return {
        old: {name for name, hit in (("old", old in source), ("new", new in wire)) if hit}
        for old, new in WIRE_ALIASES.items()
    }


def _command_line(argv: Sequence[str]) -> dict[str, Any]:
    """The top-level keys the options of ``argv`` set (``--comm.init_args.x=1`` sets ``comm``;
    ``--wire.hook=...`` sets ``wire: {hook}``); ``--config`` values are left out."""
    import yaml

    out: dict[str, Any] = {"wire": {}}
    for arg in argv:
        if not arg.startswith("--") or arg.startswith("--config"):
            continue
        key, _, value = arg[2:].partition("=")
        head, _, rest = key.partition(".")
        if head != "wire":
            out[head] = True
        elif rest:
            out["wire"][rest.split(".")[0]] = True
        else:  # --wire={hook: ..., faults: ...}
            with contextlib.suppress(yaml.YAMLError):
                group = yaml.safe_load(value)
                out["wire"].update(group if isinstance(group, Mapping) else {})
    return out


def _sources(argv: Sequence[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """``(name, top-level mapping)`` of every source of ``argv`` in the order it applies: each
    ``--config`` file (or YAML string), then the command line's own options."""
    import yaml

    sources: list[tuple[str, Mapping[str, Any]]] = []
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--config="):
            value = arg.split("=", 1)[1]
        else:
            continue
        path = Path(value)
        try:
            loaded = yaml.safe_load(path.read_text() if path.is_file() else value)
        except (OSError, yaml.YAMLError):
            continue  # unreadable: the parser has reported it
        sources.append((f"config {value}", loaded if isinstance(loaded, Mapping) else {}))
    sources.append(("the command line", _command_line(argv)))
    return sources


def fold_wire_aliases(cfg: Any, argv: Sequence[str]) -> Any:
    """Move the deprecated ``comm`` / ``faults`` values of a parsed config into ``wire`` (in place).

    The spelling of the last source that sets a setting wins (module docstring).

    Args:
        cfg: A ``jsonargparse.Namespace`` parsed by :func:`fit_parser`.
        argv: The arguments it was parsed from (their ``--config`` files are read again, cheaply,
            to tell which source set what).

    Returns:
        ``cfg``, without the alias keys, with ``wire.hook`` set (the identity hook by default).

    Raises:
        ValueError: When one source gives an alias and its ``wire`` key both (one line naming both).
    """
    sources = _sources(argv)
    for old, new in WIRE_ALIASES.items():
        value = cfg.pop(old, None) if old in cfg else None
        last = None
        for name, source in sources:
            spelled = _spelled(source)[old]
            if len(spelled) == 2:
                raise ValueError(
                    f"{name} sets both {old} and wire.{new}: keep wire.{new} only "
                    f"({old} is its deprecated alias)"
                )
            last = next(iter(spelled), last)
        if last is None and value is not None:  # parsed from no source this reads (an object)
            last = "old"
        if last == "old" and value is not None:
            print(
                f"lightning-fed: note: config key '{old}' is deprecated: write it as 'wire.{new}' "
                "(accepted for one more release)",
                file=sys.stderr,
            )
        if last == "old":
            cfg.wire[new] = value
    if cfg.wire.get("hook") is None:
        cfg.wire.hook = Namespace(class_path=_DEFAULT_HOOK)
    return cfg


def wire_from(init: Any) -> Any:
    """The :class:`~lightning_fed.comm.Wire` of an instantiated config (a fresh ledger each call)."""
    from lightning_fed.comm import Wire

    return Wire(
        hook=init.wire.hook,
        faults=init.wire.faults,
        max_norm_ratio=init.wire.max_norm_ratio,
        norm_bound=init.wire.get("norm_bound"),
    )


class FitParser(CommandParser):
    """The ``fit`` parser; :meth:`parse_args` folds the deprecated wire aliases
    (:func:`fold_wire_aliases`), so every caller (``fit``, ``test``, ``refer``, ``data describe``,
    scripts) sees the ``wire`` group only."""

    def own_line(self, message: str) -> str | None:
        """The errors :mod:`lightning_fed` words itself: an ``aggregator`` key on a method without one
        (:func:`~lightning_fed.algorithms.aggregator_key.unaccepted_aggregator`)."""
        from lightning_fed.algorithms.aggregator_key import unaccepted_aggregator

        return unaccepted_aggregator(message)

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        """Parse as jsonargparse does, then fold the aliases (a conflict: one line, exit 2)."""
        cfg = super().parse_args(*args, **kwargs)
        if "wire" not in cfg:  # a nested parser jsonargparse made of this class (a plugin's own group)
            return cfg
        argv = kwargs.get("args", args[0] if args else None)
        try:
            return fold_wire_aliases(cfg, list(sys.argv[1:] if argv is None else argv))
        except ValueError as err:
            fail(str(err))


def cwd_importable() -> None:
    """Put the working directory at the front of ``sys.path`` (once) so config class paths resolve there."""
    import os
    import sys

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def fit_parser() -> Any:
    """The jsonargparse parser of ``fit`` (imports the package's plugin base classes).

    The working directory is put on ``sys.path`` first, so ``class_path: mymodels.Net`` finds
    ``./mymodels.py`` as Lightning's own CLI users expect (no ``PYTHONPATH=.``).
    """
    import lightning as L
    from jsonargparse import ActionConfigFile, lazy_instance

    cwd_importable()

    from lightning_fed.algorithms import Algorithm, FedAvg
    from lightning_fed.callbacks import Callback
    from lightning_fed.comm import CommHook, FaultInjection, NormBound
    from lightning_fed.comm.wire import MAX_NORM_RATIO
    from lightning_fed.config import FabricConfig, LoggerConfig, OutputConfig
    from lightning_fed.data import DataSource, SyntheticICU
    from lightning_fed.holdout import HoldoutSettings
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig

    parser = FitParser(prog="lightning-fed fit", description="Train a federation.", exit_on_error=True)
    parser.add_argument("--config", action=ActionConfigFile, help="YAML config file")
    parser.add_argument("--seed", type=int, default=0, help="run seed: every random draw derives from it")
    parser.add_subclass_arguments(DataSource, "data", default=lazy_instance(SyntheticICU), required=False)
    # Any LightningModule: a plain one is wrapped (lightning_fed.models.adapter) by the federation.
    parser.add_subclass_arguments(
        L.LightningModule, "model", default=lazy_instance(MortalityMLP), required=False
    )
    parser.add_subclass_arguments(Algorithm, "algorithm", default=lazy_instance(FedAvg), required=False)
    parser.add_class_arguments(TrainerConfig, "trainer")
    parser.add_class_arguments(FabricConfig, "fabric")
    parser.add_class_arguments(LoggerConfig, "logger")
    parser.add_class_arguments(OutputConfig, "output")
    parser.add_class_arguments(HoldoutSettings, "evaluation")  # held-out centers (lightning_fed.holdout)
    parser.add_argument(
        "--metrics",
        type=list[str | dict[str, Any]] | None,
        default=None,
        help="torchmetrics metrics evaluated per center on val and test beside the built-in AUROC / "
        "accuracy / balanced accuracy, each a class path or {class_path, init_args}, e.g. "
        "torchmetrics.classification.BinaryAveragePrecision (NaN where a center's split cannot define "
        "one; summary test_<name>_mean/_std/_defined, rounds.parquet test_<name>; docs/metrics.md)",
    )
    parser.add_argument(
        "--callbacks",
        type=list[Callback] | None,
        default=None,
        help="extra observer callbacks by class_path, e.g. lightning_fed.callbacks.EarlyStopping",
    )
    faults_help = (
        "fault injection: {unavailable: {round: [centers]}, corrupt: {round: {center: "
        "nan|inf|huge|{scale: X}}}, dropout: {center: round}}"
    )
    # The wire group: exactly Wire.__init__'s arguments (its ledger is the federation's own).
    parser.add_subclass_arguments(
        CommHook,
        "wire.hook",
        default=None,
        required=False,
        help="the wire's encode/decode hook by class_path, e.g. lightning_fed.comm.BFloat16Hook "
        f"(default: {_DEFAULT_HOOK})",
    )
    parser.add_argument("--wire.faults", type=FaultInjection | None, default=None, help=faults_help)
    parser.add_argument(
        "--wire.max_norm_ratio",
        type=float,
        default=MAX_NORM_RATIO,
        help="reject a received message whose norm exceeds this times its reference (the receiver's own "
        "norm; the server: the median upload norm); honest ratios of the shipped configs stay within 0.6-1.7",
    )
    parser.add_argument(
        "--wire.norm_bound",
        type=NormBound | None,
        default=lazy_instance(NormBound),
        help="bound each message's update (message minus the round-start model) by a windowed median of "
        "the round's update norms, and its component along that model: lightning_fed.comm.NormBound "
        "(the default; null: the ratio test only, as before issue 32)",
    )
    # Deprecated aliases (one release): folded into wire.* by FitParser.parse_args.
    parser.add_subclass_arguments(
        CommHook, "comm", default=None, required=False, help="deprecated alias of wire.hook"
    )
    parser.add_argument(
        "--faults", type=FaultInjection | None, default=None, help="deprecated alias of wire.faults"
    )
    return parser
