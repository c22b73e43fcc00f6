"""The guide's links resolve: every relative link of README.md and docs/ names a file that exists and,
with a ``#fragment``, a heading of that file (GitHub's anchor rule), and the quickstart's commands stay."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_anchor(m.group(1)) for m in re.finditer(r"(?m)^#+ (.*)$", text)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [m.group(1) for m in LINK.finditer(text) if not m.group(1).startswith(("http://", "https://"))]


def test_anchor_rule() -> None:
    assert _anchor("ABPS Table 1 protocol on FedProx Synthetic(1, 1) (5 seeds)") == (
        "abps-table-1-protocol-on-fedprox-synthetic1-1-5-seeds"
    )
    assert _anchor("`model` (subclasses of `lightning_fed.models.CenterModule`)") == (
        "model-subclasses-of-lightning_fedmodelscentermodule"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for link in _links(page):
        path, _, fragment = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif fragment and target.suffix == ".md" and fragment not in _anchors(target):
            broken.append(f"{link}: no heading with that anchor")
    assert not broken, broken


def test_the_readme_is_a_guide_with_the_quickstart_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "pip install -e . && lightning-fed fit --config configs/quickstart.yaml" in readme
    assert 'pip install -e ".[dev]" && python -m pytest -q -n 2' in readme
    assert (ROOT / "configs" / "quickstart.yaml").is_file()
    assert len(readme.splitlines()) <= 300


def test_ci_runs_the_readmes_test_command() -> None:
    """`.ci/run` installs the dev extras and runs exactly the README's pytest command (CI runs what a
    contributor is told to run, workers included)."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert 'python -m pip install -q -e ".[dev]"' in ci
    assert "python -m pytest -q -n 2" in ci
