"""A config jsonargparse refuses ends ``fit`` with one line naming the key, not its usage dump.

jsonargparse prints the whole usage (about 40 lines) and a tree of the Union alternatives it tried;
``FitParser.error`` folds the tree into one line (:func:`lightning_fed.fit_parser.parse_error_line`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_fed.cli import main
from lightning_fed.commands.parser import parse_error_line

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


@pytest.mark.parametrize(
    ("option", "wanted"),
    [
        (
            "--algorithm=lightning_fed.algorithms.Nope",
            "algorithm: class_path 'lightning_fed.algorithms.Nope': module 'lightning_fed.algorithms' "
            "has no attribute 'Nope'",
        ),
        (
            "--trainer.lr_schedule=Cosine",
            "trainer.lr_schedule: class_path 'lightning_fed.engine.Cosine': the following arguments are "
            "required: horizon",
        ),
        ("--trainer.rounds=abc", "trainer.rounds: Expected a <class 'int'>. Got value: abc"),
        ("--trainer.roundz=3", "unknown option(s) --trainer.roundz=3"),
    ],
)
def test_a_refused_option_is_one_line_naming_the_key(
    option: str, wanted: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", str(QUICKSTART), option, f"--output.root={tmp_path}"])
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lightning-fed: error: {wanted}"), captured.err
    assert "usage:" not in captured.out + captured.err
    assert not list(tmp_path.iterdir())  # refused before any work


def test_an_error_of_another_form_is_left_to_jsonargparse() -> None:
    assert parse_error_line("Configuration check failed:\n  something else") is None
    assert parse_error_line("Parser key \"seed\":\n  - Expected a <class 'NoneType'>") is None


def test_argparses_one_line_errors_get_the_pointer_to_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["test", "--run-dir"])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "lightning-fed: error: argument --run-dir/--run_dir: expected one argument "
        "('lightning-fed test --help' lists every option)"
    ]
