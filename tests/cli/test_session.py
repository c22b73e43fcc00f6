"""The run-folder lifecycle as one context manager (:class:`lightning_fed.runfolder.RunFolder`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_fed.processes import signals_as_interrupts
from lightning_fed.runfolder import RunFolder, RunFolderBusyError, RunFolderError, RunLock
from lightning_fed.runfolder.lock import LOCK_NAME
from lightning_fed.runfolder.session import resume_argv


def _claim(path: Path, **kwargs: object) -> object:
    return RunFolder.claim(path, **{"resume": False, "overwrite": False, "config": {}, **kwargs})


def test_the_lock_is_released_and_created_folders_removed_on_an_exception(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "a"
    with pytest.raises(RuntimeError, match="boom"), _claim(run_dir) as run:
        assert (run_dir / LOCK_NAME).is_file() and run.path == run_dir
        with pytest.raises(RunFolderBusyError, match="is being written by pid"):
            RunLock(run_dir).acquire()
        raise RuntimeError("boom")
    assert not (tmp_path / "runs").exists()  # created by the claim, left empty: removed
    with _claim(run_dir):  # free again
        pass


def test_a_folder_that_existed_stays_and_a_written_one_is_kept(tmp_path: Path) -> None:
    with pytest.raises(ValueError), _claim(tmp_path):
        raise ValueError
    assert tmp_path.is_dir() and not (tmp_path / LOCK_NAME).exists()
    run_dir = tmp_path / "b"
    with _claim(run_dir):
        (run_dir / "config.yaml").write_text("seed: 0\n")
    assert (run_dir / "config.yaml").is_file() and not (run_dir / LOCK_NAME).exists()


def test_a_refused_claim_releases_the_lock(tmp_path: Path) -> None:
    run_dir = tmp_path / "done"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(RunFolderError, match=r"holds an interrupted run .*pass --overwrite"), _claim(run_dir):
        pytest.fail("the claim must refuse a folder holding a run")
    assert not (run_dir / LOCK_NAME).exists()
    with _claim(run_dir, overwrite=True):  # --overwrite empties it, keeping the lock
        assert [p.name for p in run_dir.iterdir()] == [LOCK_NAME]


def test_an_interrupt_ends_with_one_line_and_the_signal_code(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "r"
    with pytest.raises(SystemExit) as exc, signals_as_interrupts(), _claim(run_dir):
        raise KeyboardInterrupt
    assert exc.value.code == 130
    err = capsys.readouterr().err.strip()
    assert err == (
        "lightning-fed: interrupted after 0 rounds; no checkpoint yet: start again with --overwrite "
        "(or output.name=r elsewhere)"
    )
    assert not run_dir.exists()


def test_a_launched_rank_neither_locks_nor_checks(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"rounds": 1}))
    with _claim(tmp_path, lock=False):
        assert not (tmp_path / LOCK_NAME).exists()


def test_the_writer_names_its_flag_when_the_folder_is_busy(tmp_path: Path) -> None:
    with (
        RunFolder.writer(tmp_path, "--out"),
        pytest.raises(RunFolderError, match=rf"^--out {tmp_path}: run folder .* is being written by pid"),
        RunFolder.writer(tmp_path, "--out"),
    ):
        pass
    assert not (tmp_path / LOCK_NAME).exists()


def test_resume_becomes_the_run_folders_config(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    assert resume_argv(["--resume", str(tmp_path), "--trainer.rounds=9"]) == (
        ["--config", str(tmp_path / "config.yaml"), "--trainer.rounds=9"],
        tmp_path,
    )
    assert resume_argv(["--seed=1"]) == (["--seed=1"], None)
    with pytest.raises(RunFolderError, match=r"no config\.yaml there"):
        resume_argv([f"--resume={tmp_path / 'missing'}"])


def test_a_writer_removes_the_folder_it_created_when_left_empty(tmp_path: Path) -> None:
    """A refusal inside :meth:`RunFolder.writer` leaves no empty output folder behind (``refer --out``
    into a new folder); a folder that existed before stays."""
    new = tmp_path / "out" / "new"
    new.parent.mkdir()
    with pytest.raises(RuntimeError), RunFolder.writer(new, "--out"):
        raise RuntimeError("refused")
    assert not new.exists() and new.parent.is_dir()
    with RunFolder.writer(new, "--out"):
        (new / "table.csv").write_text("x\n")
    assert (new / "table.csv").is_file()
