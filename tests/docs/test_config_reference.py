"""``docs/config.md`` is what ``docs/gen_config_reference.py`` writes from the live ``fit`` parser."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    path = ROOT / "docs" / "gen_config_reference.py"
    spec = importlib.util.spec_from_file_location("gen_config_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_config_reference_is_current() -> None:
    gen = _generator()
    stale = "docs/config.md is stale: run python docs/gen_config_reference.py"
    assert gen.OUT.read_text() == gen.render(), stale


def test_the_reference_has_every_top_level_key_and_every_shipped_algorithm() -> None:
    """Every settable key of the parser has its row; every exported algorithm its section."""
    from lightning_fed import algorithms
    from lightning_fed.cli import fit_parser

    gen = _generator()
    text = gen.render()
    for action in gen._arguments(fit_parser()):
        assert f"| `{action.dest}` |" in text, action.dest
    for name in ("FedAvg", "ABPS", "EdgeDRM", "DeceFL"):
        assert f"### `algorithm`: `lightning_fed.algorithms.{name}`" in text
        assert isinstance(getattr(algorithms, name), type)
