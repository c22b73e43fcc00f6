"""Optional extras: the one error a missing optional dependency raises.

The runtime dependencies of ``pyproject.toml`` cover every import of the package but the ones a
single feature needs (scikit-learn for the ``Digits`` source); those are optional extras, imported
where the feature starts, and a missing one is a :class:`MissingExtraError` naming the extra to
install, instead of a ``ModuleNotFoundError`` traceback. ``tests/test_imports_declared.py`` walks the
package's imports and holds every third-party one to a declared dependency or such a guard.
"""

from __future__ import annotations

__all__ = ["MissingExtraError", "missing_extra"]


class MissingExtraError(ImportError, ValueError):
    """An optional dependency is not installed (a ``ValueError`` too, so the commands that turn bad
    settings into one line turn this into one line as well)."""


def missing_extra(err: ImportError, extra: str, feature: str) -> MissingExtraError:
    """The one-line error for ``feature`` needing the optional extra ``extra``.

    Args:
        err: The import error (its ``name`` is the missing module).
        extra: The ``[project.optional-dependencies]`` key that installs it.
        feature: What needs it, e.g. ``"the Digits source"``.

    Returns:
        The error to raise (``raise missing_extra(err, ...) from None``).
    """
    module = (err.name or str(err)).split(".")[0]
    return MissingExtraError(
        f"{feature} needs {module}, an optional dependency: pip install 'lightning-fed[{extra}]'",
        name=err.name,
    )
