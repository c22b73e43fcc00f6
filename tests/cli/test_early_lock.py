"""A second ``fit`` on a busy run folder is refused before the config parse (issue 32 item 5: on main
the refusal came after the full parse, about 8 CPU-seconds of imports and plugin classes)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lightning_fed.fit_parser
from lightning_fed.cli import main
from lightning_fed.config import OutputConfig
from lightning_fed.runfolder.early import DEFAULT_ROOT, named_run_folder
from lightning_fed.runfolder.lock import RunLock

ROOT = Path(__file__).resolve().parents[2]


def _no_parse(*_: object) -> None:
    raise AssertionError("the config was parsed before the busy folder was refused")


@pytest.mark.parametrize("how", ["options", "config", "resume"])
def test_a_busy_folder_is_refused_before_the_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, how: str
) -> None:
    run = tmp_path / "runs" / "tab"
    (run).mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    monkeypatch.setattr(lightning_fed.fit_parser, "fit_parser", _no_parse)
    config = tmp_path / "out.yaml"
    config.write_text(f"output:\n  root: {tmp_path / 'runs'}\n  name: tab\n")
    argv = {
        "options": [f"--output.root={tmp_path / 'runs'}", "--output.name", "tab"],
        "config": ["--trainer.rounds=2", "--config", str(config)],
        "resume": ["--resume", str(run)],
    }[how]
    # another writer's lock (flock conflicts across open file descriptions, even in one process)
    with RunLock(run), pytest.raises(SystemExit) as exit_:
        main(["fit", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"run folder {run} is being written by pid " in err[0]
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml"]  # nothing created or removed


def test_the_named_folder_follows_the_parser_precedence(tmp_path: Path) -> None:
    """Config files first (fit moves them to the front), then options in order; a later source wins.
    Without output.name the default name is not known before the parse: no early check."""
    config = tmp_path / "c.yaml"
    config.write_text("output: {root: from_file, name: file_name}\n")
    assert named_run_folder(["--config", str(config)]) == Path("from_file/file_name")
    assert named_run_folder([f"--config={config}", "--output.name=cli"]) == Path("from_file/cli")
    assert named_run_folder(["--output.name", "x", "--output.root", "r"]) == Path("r/x")
    assert named_run_folder(["--seed=3"]) is None
    assert named_run_folder(["--output.name=a/b"]) is None  # the parser refuses it, with its message
    assert named_run_folder(["--output.name=x"], resume=tmp_path) == tmp_path
    assert inspect.signature(OutputConfig).parameters["root"].default == DEFAULT_ROOT


@pytest.mark.cli
def test_the_refusal_does_not_import_torch(tmp_path: Path) -> None:
    """In a fresh interpreter the refusal imports neither torch nor jsonargparse and takes a small
    fraction of a parse (the holder here is this test process)."""
    run = tmp_path / "tab"
    code = (
        "import sys\nfrom lightning_fed.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
        "    print(e.code, 'torch' in sys.modules, 'jsonargparse' in sys.modules)\n"
    )
    with RunLock(run):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", code, "fit", f"--output.root={tmp_path}", "--output.name=tab"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        seconds = time.perf_counter() - start
    assert done.stdout.split() == ["2", "False", "False"], done.stderr
    assert "is being written by pid" in done.stderr and seconds < 5
