"""Deferred import of torchmetrics' top-level namespace: a shorter start for ``lightning-fed`` commands.

Importing Lightning imports torchmetrics only to read its version
(``lightning.fabric.utilities.imports``: ``compare_version("torchmetrics", ...)``) and its
``Metric`` and ``MetricCollection`` classes (``lightning.pytorch``). torchmetrics' ``__init__``,
though, imports every metric family: ``torchmetrics.functional.image`` imports torchvision, whose
``ops`` import ``torch._dynamo`` (and with it sympy), and its audio and signal code imports
``scipy.signal`` and ``scipy.stats``. None of that serves a federated run of the built-in models,
and it was about a third of ``fit``'s import time (``benchmarks/startup.py --imports``).

:func:`defer_torchmetrics` registers the ``torchmetrics`` package object without running its
``__init__``: its version comes from ``torchmetrics.__about__``, ``Metric`` and ``MetricCollection``
from their own submodules, and submodules (``torchmetrics.classification`` ...) import as usual.
Any other attribute runs the real ``__init__`` in that same module object first, so
``torchmetrics.X`` and ``from torchmetrics import X`` behave as before, only later. Nothing numeric
changes: the same classes are imported, only when used.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types
from typing import Any

__all__ = ["defer_torchmetrics"]

#: Attributes served from a submodule without running ``torchmetrics/__init__.py``. ``utilities``
#: goes first, as in the package's own import order: ``torchmetrics.metric`` imports
#: ``torchmetrics.utilities.data``, whose package imports ``torchmetrics.metric`` back.
_FROM_SUBMODULE = {
    "Metric": ("torchmetrics.utilities", "torchmetrics.metric"),
    "MetricCollection": ("torchmetrics.utilities", "torchmetrics.collections"),
}


class _DeferredPackage(types.ModuleType):
    """A package module whose ``__init__`` runs at the first attribute it does not yet have."""

    _state = "deferred"  # "deferred" -> "loading" -> "loaded"

    def __getattr__(self, name: str) -> Any:
        """Serve ``Metric``/``MetricCollection`` from their submodules and ``_logger`` (which
        ``torchmetrics.utilities.prints`` imports) as the package's ``__init__`` sets it up; for
        anything else run the package's ``__init__`` (once) and look again."""
        if name == "_logger" and self._state == "deferred":
            return _package_logger()
        if name in _FROM_SUBMODULE and self._state == "deferred":
            modules = [importlib.import_module(path) for path in _FROM_SUBMODULE[name]]
            return getattr(modules[-1], name)
        if self._state == "deferred" and not name.startswith("__"):
            self._load()
            return getattr(self, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def _load(self) -> None:
        """Run the package's real ``__init__`` in this module object (which sets up its logger again:
        the handler :func:`_package_logger` added goes first, so there is one, as before)."""
        self._state = "loading"
        if _HANDLER:
            logging.getLogger("torchmetrics").removeHandler(_HANDLER.pop())
        try:
            self.__spec__.loader.exec_module(self)
        except BaseException:
            self._state = "deferred"
            raise
        self._state = "loaded"


#: The handler :func:`_package_logger` added to torchmetrics' logger (at most one).
_HANDLER: list[logging.Handler] = []


def _package_logger() -> logging.Logger:
    """torchmetrics' logger, set up as its ``__init__`` does (a stream handler, level INFO), once."""
    logger = logging.getLogger("torchmetrics")
    if not _HANDLER:
        _HANDLER.append(logging.StreamHandler())
        logger.addHandler(_HANDLER[0])
        logger.setLevel(logging.INFO)
    return logger


def defer_torchmetrics() -> bool:
    """Register ``torchmetrics`` so that its ``__init__`` runs only when a name it defines is used.

    Does nothing when torchmetrics is already imported or not installed.

    Returns:
        Whether the deferred package was registered.
    """
    if "torchmetrics" in sys.modules:
        return False
    spec = importlib.util.find_spec("torchmetrics")
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _DeferredPackage
    sys.modules["torchmetrics"] = module
    try:
        about = importlib.import_module("torchmetrics.__about__")
    except Exception:  # an unusual install: leave the ordinary import to do (and report) everything
        del sys.modules["torchmetrics"]
        return False
    module.__version__ = about.__version__
    return True
