"""The commands' argument parser: jsonargparse's, with its errors as one line naming the key.

jsonargparse answers a refused option with the command's whole usage (about 40 lines for ``fit``) and
a tree of the alternatives it tried (a class-typed key is a config file path, a ``class_path`` or
None). :class:`CommandParser` ends the command instead with one line, ``lightning-fed: error: KEY:
WHAT (COMMAND --help lists ...)``, and exit code 2 (:func:`lightning_fed.processes.fail`).
"""

from __future__ import annotations

import re
from typing import Any

from jsonargparse import ArgumentParser

from lightning_fed.processes import fail

__all__ = ["CommandParser", "parse_error_line"]

#: Lines of jsonargparse's error tree that say how it searched, not what is wrong.
_PARSE_NOISE = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Errors:",
    "Given value type:",
    "Given value:",
    "Expected a <class 'NoneType'>",
)


def parse_error_line(message: str, prog: str = "lightning-fed fit") -> str | None:
    """jsonargparse's multi-line error as one line naming the key, or None when it has another form.

    ``Parser key "trainer.lr_schedule": ... Problem with given class_path 'lightning_fed.engine.Cosine':
    the following arguments are required: horizon`` (a tree of Union alternatives) becomes
    ``trainer.lr_schedule: class_path 'lightning_fed.engine.Cosine': the following arguments are
    required: horizon (...)``; the alternatives that only say the value is not None or not a config
    file path are left out. ``unrecognized arguments: --x`` becomes one line too, and argparse's own
    one-line errors (``argument --run-dir: expected one argument``) get the pointer to ``--help``.

    Args:
        message: jsonargparse's error message.
        prog: The command, named in the line's pointer to its ``--help``.
    """
    unknown = re.match(r"unrecognized arguments: (.+)", message.strip(), re.S)
    if unknown:
        given = " ".join(unknown.group(1).split())
        return f"unknown option(s) {given}: '{prog} --help' lists every option"
    keyed = re.match(r'Parser key "([^"]+)":(.*)', message.strip(), re.S)
    if keyed is None:
        if message.strip() and "\n" not in message.strip():  # argparse's own one-liners
            return f"{message.strip()} ('{prog} --help' lists every option)"
        return None
    key, tree = keyed.groups()
    reasons = []
    for raw in tree.splitlines():
        line = raw.strip().lstrip("-").strip()
        if not line or line.startswith(_PARSE_NOISE):
            continue
        if line.startswith("Expected a path but") and "not accessible or invalid" in line:
            continue  # the config-file alternative of a class-typed key
        reasons.append(line.replace("Problem with given class_path", "class_path"))
    if not reasons:
        return None
    return f"{key}: {' '.join(reasons)} ('{prog} --help' lists every option and its type)"


class CommandParser(ArgumentParser):
    """jsonargparse's ``ArgumentParser`` whose errors end the command with one line (module doc)."""

    def own_line(self, message: str) -> str | None:
        """A subclass's own wording of an error (None: fold jsonargparse's, :func:`parse_error_line`)."""
        return None

    def error(self, message: str, ex: Exception | None = None) -> Any:
        """End the command with one line and exit 2: :meth:`own_line`, else jsonargparse's error
        folded into one line naming the key; an error of another form is jsonargparse's as it
        prints it (also when the parser is not to exit on errors)."""
        if self.exit_on_error:
            line = self.own_line(message)
            if line is None:
                line = parse_error_line(message, self.prog)
            if line is not None:
                fail(line)
        return super().error(message, ex)
