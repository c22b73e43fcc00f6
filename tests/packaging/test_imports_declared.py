"""Every third-party import of ``lightning_fed/`` is a declared runtime dependency, or an optional
extra's import guarded by ``except ImportError`` (:mod:`lightning_fed.extras`)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from lightning_fed.extras import MissingExtraError

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lightning_fed"

#: Import names whose distribution is spelled otherwise.
DISTRIBUTION = {"PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {k: {_name(r) for r in v} for k, v in project.get("optional-dependencies", {}).items()}
    return {_name(r) for r in project["dependencies"]}, extras


def _guards_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names)


def _imports(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """``(top-level module, line, guarded)`` of every absolute import in ``tree``."""
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Try):
            inner = guarded or any(_guards_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, inner)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded)
            return
        if isinstance(node, ast.Import):
            found.extend((a.name.split(".")[0], node.lineno, guarded) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node.lineno, guarded))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return found


def _third_party() -> list[tuple[str, str, bool]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, line, guarded in _imports(ast.parse(path.read_text(), str(path))):
            if module in sys.stdlib_module_names or module == "lightning_fed":
                continue
            out.append((f"{path.relative_to(ROOT)}:{line}", module, guarded))
    return out


def test_every_runtime_import_is_declared_or_guarded() -> None:
    required, extras = _declared()
    optional = set().union(*extras.values())
    bad = []
    for where, module, guarded in _third_party():
        dist = DISTRIBUTION.get(module, module).lower().replace("_", "-")
        if dist in required or (guarded and dist in optional):
            continue
        bad.append(f"{where}: {module} ({dist}) is {'an undeclared extra' if guarded else 'not declared'}")
    assert not bad, "\n".join(bad)


def test_the_walk_sees_lazy_and_guarded_imports() -> None:
    """The walker reads imports inside functions and tells a guarded one from a plain one."""
    tree = ast.parse(
        "def f():\n    import torch\n    try:\n        import sklearn\n    except ImportError:\n"
        "        import numpy\n"
    )
    assert _imports(tree) == [("torch", 2, False), ("sklearn", 4, True), ("numpy", 6, False)]
    assert ("lightning_fed/data/images.py", "sklearn", True) in {
        (w.split(":")[0], m, g) for w, m, g in _third_party()
    }


def test_digits_without_scikit_learn_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_fed.data import Digits

    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(MissingExtraError) as info:
        Digits(num_clients=2).pooled()
    message = str(info.value)
    assert "\n" not in message and "pip install 'lightning-fed[digits]'" in message, message
    assert "scikit-learn" in _declared()[1]["digits"]
    assert isinstance(info.value, ValueError)  # the commands' one-line handlers catch it
