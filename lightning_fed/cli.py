"""The ``lightning-fed`` command line (jsonargparse): dispatch to one module per command.

Commands (:mod:`lightning_fed.commands`):
    fit            train a federation from a config; writes a run directory.
    test           re-evaluate a finished run directory from its checkpoint.
    refer          inference-time referral table and routing picture of an EdgeDRM run.
    data describe  print (and optionally save as parquet) the per-center table of a data source.
    sweep          run a grid of configs x seeds (several processes at once), skipping finished runs.
    report         Table 1 (markdown + CSV), accuracy-vs-bandwidth Pareto and isolation plots (PNG).

Config groups (:mod:`lightning_fed.fit_parser`): ``data``, ``model``, ``algorithm`` and
``callbacks`` (class_path/init_args), ``trainer`` (rounds, local epochs, batch size, engine),
``fabric`` (passed to Fabric), ``logger`` (W&B), ``output``, ``wire`` (the encode/decode hook, the
fault plan, the norm defence) and ``seed``. ``lightning-fed --help`` answers without importing
torch; ``fit --help`` lists every key. Values given after ``--config`` override it
(``--trainer.rounds=5``). The run folder's lifecycle lives in :mod:`lightning_fed.runfolder.session`,
exits and signals in :mod:`lightning_fed.processes`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any

from lightning_fed.io import OutputWriteError
from lightning_fed.processes import die_with_sweep, fail, interrupt_code, signals_as_interrupts
from lightning_fed.startup import STARTUP_LOG_ENV, mark

__all__ = ["STARTUP_LOG_ENV", "data", "fit", "fit_parser", "main", "refer", "report", "sweep", "test"]


USAGE = """usage: lightning-fed {fit,test,refer,data,sweep,report} [options]

Decentralized federated learning across clinical centers.

commands:
  fit     train a federation: lightning-fed fit --config configs/quickstart.yaml [--trainer.rounds=5 ...]
          continue an interrupted run: lightning-fed fit --resume runs/<run>
  test    re-evaluate a run:  lightning-fed test --run-dir runs/<run>
  refer   referral (EdgeDRM): lightning-fed refer --run-dir runs/<edgedrm run> [--baselines RUN [RUN ...]]
  data    describe a federation: lightning-fed data describe [--config FILE] [--save FILE.parquet]
  sweep   configs x seeds:     lightning-fed sweep --config configs/sweeps/table1.yaml
  report  tables and plots:    lightning-fed report runs/table1 [--out DIR] [--reference fedavg]

'lightning-fed fit --help' lists every config key; '--print_config' prints the resolved config.
"""

#: Command -> (module of :mod:`lightning_fed.commands`, function), imported only when run.
COMMANDS = {
    "fit": ("fit", "fit"),
    "test": ("evaluate", "test"),
    "refer": ("refer", "refer"),
    "data": ("describe", "data"),
    "sweep": ("sweep", "sweep"),
    "report": ("report", "report"),
}


def fit_parser() -> Any:
    """The jsonargparse parser of ``fit`` (:func:`lightning_fed.fit_parser.fit_parser`)."""
    from lightning_fed.fit_parser import fit_parser as build

    return build()


def command(name: str) -> Callable[[Sequence[str]], Any]:
    """The function of command ``name`` (its module is imported now)."""
    module, function = COMMANDS[name]
    return getattr(import_module(f"lightning_fed.commands.{module}"), function)


def _lazy(name: str) -> Callable[[Sequence[str]], Any]:
    """A module-level ``name(argv)`` that imports its command module only when called.

    Keeps ``from lightning_fed.cli import fit, refer`` (notebooks, scripts) working while
    ``lightning-fed --help`` stays free of torch.
    """

    def run(argv: Sequence[str]) -> Any:
        return command(name)(argv)

    run.__name__ = run.__qualname__ = name
    module, function = COMMANDS[name]
    run.__doc__ = f"``lightning-fed {name}`` (:func:`lightning_fed.commands.{module}.{function}`)."
    return run


fit = _lazy("fit")
test = _lazy("test")
test.__test__ = False  # type: ignore[attr-defined]  # not a pytest test when imported
refer = _lazy("refer")
data = _lazy("data")
sweep = _lazy("sweep")
report = _lazy("report")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``lightning-fed`` console script and the root ``cli.py``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    name, rest = argv[0], argv[1:]
    mark("main")
    if name not in COMMANDS:
        fail(f"unknown command {name!r}; choose one of {sorted(COMMANDS)} (see lightning-fed --help)")
    die_with_sweep()
    with signals_as_interrupts():
        try:
            command(name)(rest)
        except KeyboardInterrupt:  # a command without its own interrupt handling (fit has one)
            print(f"lightning-fed: {name} interrupted", file=sys.stderr)
            raise SystemExit(interrupt_code()) from None
        except OutputWriteError as err:  # a full disk or a read-only folder: one line, outputs intact
            fail(str(err))


if __name__ == "__main__":
    main()
