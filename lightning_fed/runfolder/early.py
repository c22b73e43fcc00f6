"""The run folder a ``fit`` command line names, read before the config parse.

``fit`` parses its whole config (every plugin class imported, torch among them: seconds of CPU)
before it knows the run folder for sure. When the folder is already named on the command line,
:func:`named_run_folder` reads it from the ``output.*`` keys alone, so ``fit`` can refuse a folder
another process is writing (:meth:`RunLock.check <lightning_fed.runfolder.lock.RunLock.check>`)
before that parse. It is a fast path only: the claim after the parse
(:meth:`RunFolder.claim <lightning_fed.runfolder.session.RunFolder.claim>`) still locks and checks
the folder, so a form this reader does not follow (a default name, an ``--output`` mapping on the
command line, a config file it cannot read) merely skips the early check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_ROOT", "named_run_folder"]

#: ``output.root`` when nothing sets it (:class:`lightning_fed.config.OutputConfig`'s default; a
#: test keeps the two equal).
DEFAULT_ROOT = "runs"

_KEYS = ("root", "name")


def _from_config(path: str) -> dict[str, Any]:
    """The ``output.root`` / ``output.name`` a YAML config file sets (nothing when unreadable)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    output = data.get("output") if isinstance(data, Mapping) else None
    if not isinstance(output, Mapping):
        return {}
    return {k: output[k] for k in _KEYS if k in output}


def named_run_folder(argv: Sequence[str], resume: Path | None = None) -> Path | None:
    """The run folder ``argv`` names (``output.root / output.name``), or None when the name is not
    fixed before the parse (the default ``<label>-seed<seed>-<id>``).

    Sources are read in ``argv``'s order, a later one overriding an earlier one, as the parser does
    (``fit`` moves the ``--config`` files to the front first): ``--config FILE`` (its ``output:``
    mapping), ``--output.root V`` / ``--output.root=V`` and the same for ``output.name``.

    Args:
        argv: The ``fit`` arguments (after ``--resume`` and ``--overwrite`` were taken out).
        resume: The ``--resume`` folder, which is the run folder.
    """
    if resume is not None:
        return resume
    found: dict[str, Any] = {"root": DEFAULT_ROOT, "name": None}
    i = 0
    while i < len(argv):
        arg, value = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        key, eq, inline = arg.partition("=")
        step = 1 if eq else 2
        if key == "--config" and (eq or value is not None):
            found.update(_from_config(inline if eq else value))
        elif key in ("--output.root", "--output.name") and (eq or value is not None):
            found[key.rsplit(".", 1)[1]] = inline if eq else value
        else:
            step = 1
        i += step
    root, name = found["root"], found["name"]
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..", "null"):
        return None
    if not isinstance(root, str | Path) or not str(root):
        return None
    return Path(root) / name
