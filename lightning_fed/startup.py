"""Start-up instrumentation of ``lightning-fed fit``: the debug timing hook and the early W&B import.

Kept out of :mod:`lightning_fed.cli` so the CLI module stays about commands. Everything here is
cheap to import (no torch): :func:`mark` costs one environment lookup when the hook is off.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["STARTUP_LOG_ENV", "logger_enabled_hint", "mark", "preimport_wandb", "startup_marks"]

#: Debug timing hook: when this environment variable names a file, ``fit`` appends one JSON line
#: per start-up phase boundary to it (``{"phase", "time", "cpu", "pid"}``: ``time.time()``, this
#: process's CPU seconds, its pid; see :func:`mark`). ``benchmarks/startup.py`` sets it. Unset
#: (the default) a boundary costs one environment lookup and nothing is written.
STARTUP_LOG_ENV = "LIGHTNING_FED_STARTUP_LOG"


def mark(phase: str, **extra: float) -> None:
    """Append a start-up phase boundary to the file named by :data:`STARTUP_LOG_ENV`, if set.

    Boundaries of ``fit``, in order: ``main`` (interpreter and ``lightning_fed.cli`` imported),
    ``parser`` (the plugin classes imported: torch, Lightning, ...), ``config`` (parsed, validated,
    run folder claimed), ``loggers`` (W&B logger objects; the W&B run itself starts at the first
    log), ``fabric``, ``data`` (the federation's data generated or read), ``federation`` (the
    federation and its engine set up), ``round_start`` (the first round begins), ``round_logged``
    (that round trained, evaluated and sent to the loggers: W&B starts here; ``seconds`` holds the
    round's own wall time), ``round_end`` (the other observers ran: ``rounds.parquet`` written) and
    ``exit`` (summary written, loggers finished).
    """
    import os

    path = os.environ.get(STARTUP_LOG_ENV)
    if not path:
        return
    import json
    import time

    record = {"phase": phase, "time": time.time(), "cpu": time.process_time(), "pid": os.getpid(), **extra}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def startup_marks() -> list[Any]:
    """Observers marking the first round's boundaries for :func:`mark` (none unless the hook is on):
    one to go first among the callbacks, one to go last."""
    import os

    if not os.environ.get(STARTUP_LOG_ENV):
        return []
    from lightning_fed.callbacks.base import Callback

    class _FirstRound(Callback):
        def __init__(self, first: bool) -> None:
            self.first, self.done = first, False

        def on_round_start(self, federation: Any, round_idx: int) -> None:
            if self.first and not self.done:
                mark("round_start")

        def on_round_end(self, federation: Any, result: Any) -> None:
            if not self.done:
                mark("round_logged" if self.first else "round_end", seconds=float(result.seconds))
                self.done = True

    return [_FirstRound(first=True), _FirstRound(first=False)]


def logger_enabled_hint(argv: Sequence[str]) -> bool:
    """Whether this fit will log to W&B, read cheaply before the full parse: ``logger.enabled`` as
    the last ``--config`` file or ``--logger.enabled`` / ``--logger`` option on the command line
    sets it (default: enabled). Only decides what :func:`preimport_wandb` imports early: a wrong
    answer costs start-up time, never changes a result (the real parse decides the logger)."""
    import yaml

    enabled: Any = True
    i = 0
    while i < len(argv):
        key, eq, value = argv[i].partition("=")
        step = 1
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value, step = argv[i + 1], 2
        try:
            if key == "--config" and Path(value).is_file():
                group = (yaml.safe_load(Path(value).read_text()) or {}).get("logger") or {}
                enabled = group.get("enabled", enabled) if isinstance(group, dict) else enabled
            elif key == "--logger.enabled":
                enabled = yaml.safe_load(value)
            elif key == "--logger":
                group = yaml.safe_load(value)
                enabled = group.get("enabled", enabled) if isinstance(group, dict) else enabled
        except (OSError, ValueError, AttributeError, yaml.YAMLError):
            return False  # unreadable: leave it to the parser, which reports it
        i += step
    return enabled not in (False, 0, None)


def preimport_wandb() -> None:
    """Import W&B, and the launch-job modules its run start imports, before torch (start-up time).

    W&B's run start (the first ``fabric.log_dict``) imports ``wandb.sdk.launch``, whose pydantic
    models look up their own source: ``inspect.getmodule`` scans ``sys.modules`` once per field,
    which with torch and Lightning loaded (about 4,000 modules) makes the run start cost 1.2-1.7 CPU
    seconds. Imported first (about 0.8 CPU seconds, most of it W&B's own import, due anyway), the run
    start costs about 0.15: on a 2-core machine about 0.6 CPU seconds and 1 s of wall time less
    until the first round is logged, of which about 0.8 s moves before the first round
    (``benchmarks/startup.py``). Nothing is configured here (W&B reads its settings when a run
    starts); a missing or different W&B is left to the logger's own import to report.
    """
    try:
        import wandb.sdk.launch.inputs.internal  # noqa: F401  (imports wandb itself first)
    except Exception:  # any import problem: the logger's own import reports it later
        return
