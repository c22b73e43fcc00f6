"""Docstrings cite the design inside the repository: ``docs/architecture.md, decision N`` with N one of
its numbered decisions, never a document a user of the package cannot see."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "lightning_fed").rglob("*.py"))
CITATION = re.compile(r"docs/architecture\.md, decisions? (\d+)(?: and (\d+))?")


def _decisions() -> set[int]:
    """The numbers of the decisions ``docs/architecture.md`` lists (``N. **Title.**`` items)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    return {int(n) for n in re.findall(r"(?m)^(\d+)\. \*\*", text)}


def test_the_architecture_page_keeps_decisions_1_to_17() -> None:
    assert _decisions() == set(range(1, 18))


def test_no_docstring_cites_a_document_outside_the_repository() -> None:
    stale = re.compile(r"PERFORMANCE_NOTES|ARCHITECTURE\.md|architecture decisions? \d")
    offenders = [str(p.relative_to(ROOT)) for p in SOURCES if stale.search(p.read_text())]
    assert not offenders, f"cite 'docs/architecture.md, decision N' instead in {offenders}"


def test_every_cited_decision_exists() -> None:
    decisions = _decisions()
    cited = {
        (str(p.relative_to(ROOT)), int(n))
        for p in SOURCES
        for m in CITATION.finditer(p.read_text())
        for n in m.groups()
        if n is not None
    }
    assert cited, "no docstring cites docs/architecture.md"
    assert not [c for c in cited if c[1] not in decisions], cited
