"""A run folder has one writer and one config: locks, fingerprints, safe checkpoints, interrupts.

Each test reproduces a way main (before the run-folder work) lost or falsified results: two fits
writing one folder, a resume or a re-test under another config, a checkpoint that ran code on
load, a default run that could not be resumed, wall time that forgot the first segment, and
tracebacks where one line was due.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lightning_fed.callbacks import Callback
from lightning_fed.cli import main
from lightning_fed.runfolder import folder_state
from lightning_fed.runfolder.state import State

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--data.class_path=lightning_fed.data.SyntheticICU",
    "--data.init_args.num_centers=6",
    "--data.init_args.num_stays=900",
    "--model.init_args.hidden=[8, 4]",
    "--logger.enabled=false",
    "--output.progress_bar=false",
]


class Slow(Callback):
    """Sleep ``seconds`` at the start of every round (a run that lasts long enough to be caught)."""

    def __init__(self, seconds: float = 0.3) -> None:
        self.seconds = seconds

    def on_round_start(self, federation, r) -> None:
        time.sleep(self.seconds)


class InterruptAt(Callback):
    """Ctrl-C (KeyboardInterrupt) at the end of round ``round``, after that round's checkpoint.

    Acts only while ``LF_TEST_INTERRUPT=1``, so the resumed run (same config) goes through."""

    def __init__(self, round: int = 2) -> None:
        self.round = round

    def on_round_end(self, federation, result) -> None:
        if result.round == self.round and os.environ.get("LF_TEST_INTERRUPT") == "1":
            raise KeyboardInterrupt


def _fit_args(root: Path, name: str, *extra: str) -> list[str]:
    return ["fit", *TINY, f"--output.root={root}", f"--output.name={name}", *extra]


def _interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> Path:
    """An in-process fit of 4 rounds interrupted (Ctrl-C) after round 2, checkpointing every round."""
    monkeypatch.setenv("LF_TEST_INTERRUPT", "1")
    args = _fit_args(tmp_path, "run", "--trainer.rounds=4", "--output.checkpoint_every=1", *extra)
    with pytest.raises(SystemExit) as exc:
        main([*args, "--callbacks+=tests.cli.test_run_folder.InterruptAt"])
    monkeypatch.delenv("LF_TEST_INTERRUPT")
    assert exc.value.code == 130
    return tmp_path / "run"


def _error_line(capsys: pytest.CaptureFixture) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("lightning-fed: error:"), err
    return err[0]


def _wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _holder_pid(run_dir: Path) -> int | None:
    try:
        text = (run_dir / ".lock").read_text().split()
    except OSError:
        return None
    return int(text[1]) if len(text) >= 2 and text[0] == "pid" else None


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited


def test_a_second_writer_fails_at_once_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """While one fit writes ``run``, a second fit on it fails with the holder's pid; SIGTERM then ends
    the first with exit 143 and a resumable folder, and the resume finishes the run."""
    args = _fit_args(tmp_path, "run", "--trainer.rounds=40", "--output.checkpoint_every=1")
    first = subprocess.Popen(
        [sys.executable, "-m", "lightning_fed.cli", *args, "--callbacks+=tests.cli.test_run_folder.Slow"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run = tmp_path / "run"
        _wait_for(lambda: (run / "checkpoint.pt").exists())
        assert _holder_pid(run) == first.pid
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 2
        line = _error_line(capsys)
        assert f"is being written by pid {first.pid}" in line
        first.send_signal(signal.SIGTERM)
        stderr = first.communicate(timeout=60)[1]
    finally:
        first.kill()
    assert first.returncode == 143, stderr[-2000:]
    assert f"resume with: lightning-fed fit --resume {run}" in stderr
    assert "Traceback" not in stderr
    assert folder_state(run).state is State.RESUMABLE
    assert not list(run.glob(".*.tmp")) and not (run / ".lock").exists()
    main(["fit", "--resume", str(run), "--trainer.rounds=3"])  # fewer rounds than already run: stops now
    assert folder_state(run).state is State.COMPLETE


def test_resume_refuses_another_method_or_an_edited_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run = _interrupted(tmp_path, monkeypatch)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["fit", "--resume", str(run), "--algorithm=lightning_fed.algorithms.LocalOnly"])
    assert "algorithm.class_path" in _error_line(capsys)
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace("seed: 0", "seed: 7"))
    with pytest.raises(SystemExit):
        main(["fit", "--resume", str(run)])
    assert "differs from the one the checkpoint was trained with in seed" in _error_line(capsys)
    (run / "config.yaml").write_text(config)
    main(["fit", "--resume", str(run), "--trainer.rounds=6"])  # extending a run is safe
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 6 and "rounds: 6" in (run / "config.yaml").read_text()


def test_test_refuses_a_config_that_is_not_the_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    main(_fit_args(tmp_path, "run", "--trainer.rounds=2"))
    run = tmp_path / "run"
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("seed: 0", "seed: 3"))
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["test", "--run-dir", str(run)])
    assert "in seed" in _error_line(capsys)
    assert not (run / "test.json").exists()


def test_a_new_fit_refuses_an_interrupted_folder_unless_told_to_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run = _interrupted(tmp_path, monkeypatch)
    capsys.readouterr()
    args = _fit_args(tmp_path, "run", "--trainer.rounds=2")
    with pytest.raises(SystemExit):
        main(args)
    line = _error_line(capsys)
    assert "holds an interrupted run" in line and "--resume" in line and "--overwrite" in line
    main([*args, "--overwrite"])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 2 and folder_state(run).state is State.COMPLETE
    with pytest.raises(SystemExit):
        main(args)
    assert "already holds a finished run" in _error_line(capsys)


class _RunsCode:
    """Unpickling this calls ``open(marker, "w")``: what a crafted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("command", ["test", "resume"])
def test_a_malicious_checkpoint_is_refused_without_running_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, command: str
) -> None:
    run = _interrupted(tmp_path, monkeypatch) if command == "resume" else tmp_path / "run"
    if command == "test":
        main(_fit_args(tmp_path, "run", "--trainer.rounds=1"))
    marker = tmp_path / "pwned"
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    state["federation"]["payload"] = _RunsCode(marker)
    torch.save(state, run / "checkpoint.pt")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["test", "--run-dir", str(run)] if command == "test" else ["fit", "--resume", str(run)])
    assert "refused" in _error_line(capsys)
    assert not marker.exists(), "unpickling ran code"


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"half a checkpoint", "truncated or corrupt"),
        (None, "not a lightning-fed checkpoint"),
        (b"", "truncated or corrupt"),
    ],
)
def test_a_broken_or_foreign_checkpoint_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, content: bytes | None, needle: str
) -> None:
    main(_fit_args(tmp_path, "run", "--trainer.rounds=1"))
    path = tmp_path / "run" / "checkpoint.pt"
    if content is None:
        torch.save({"weights": torch.zeros(2)}, path)  # a valid torch file of someone else's
    else:
        path.write_bytes(content)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["test", "--run-dir", str(tmp_path / "run")])
    assert exc.value.code == 2 and needle in _error_line(capsys)


def test_the_default_config_resumes_after_sigkill(tmp_path: Path) -> None:
    """No checkpoint setting given: a run SIGKILLed after round 5 resumes and ends as an uninterrupted
    run (main's default checkpointed only at the end, so this run had nothing to resume from)."""
    args = _fit_args(tmp_path, "killed", "--trainer.rounds=7")
    kill = '--callbacks=[{"class_path": "tests.cli.test_cli.KillAt", "init_args": {"round": 5}}]'
    killed = subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", *args, kill],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "LF_TEST_KILL": "1"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    config = (tmp_path / "killed" / "config.yaml").read_text()
    assert "checkpoint_every: 5" in config
    main(["fit", "--resume", str(tmp_path / "killed")])
    main([*_fit_args(tmp_path, "straight", "--trainer.rounds=7"), kill])
    a, b = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("straight", "killed"))
    assert a["test_auroc_mean"] == b["test_auroc_mean"] and a["total_bytes"] == b["total_bytes"]
    assert b["rounds"] == 7


def test_wall_seconds_add_up_over_a_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each round sleeps 0.3 s; interrupted after round 2 (3 rounds, 0.9 s, checkpointed) and resumed
    for round 3 (0.3 s): the summary counts both segments, >= 1.2 s (main counted 0.3 s)."""
    run = _interrupted(tmp_path, monkeypatch, "--callbacks+=tests.cli.test_run_folder.Slow")
    main(["fit", "--resume", str(run)])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 4 and summary["wall_seconds"] >= 1.2


def test_sweep_termination_leaves_no_live_child_and_the_sweep_resumes(tmp_path: Path) -> None:
    """SIGTERM on a sweep ends its fit (exit 143, one line on how to resume); a SIGKILLed sweep's fit
    dies with it; the third sweep resumes the interrupted run and finishes it."""
    config = tmp_path / "slow.yaml"
    config.write_text(
        "data:\n  init_args: {num_centers: 6, num_stays: 900}\nmodel:\n  init_args: {hidden: [8, 4]}\n"
        "trainer: {rounds: 30}\noutput: {checkpoint_every: 1}\nlogger: {enabled: false}\n"
        "callbacks:\n  - class_path: tests.cli.test_run_folder.Slow\n"
    )
    sweep_file = tmp_path / "sweep.yaml"
    out = tmp_path / "runs"
    sweep_file.write_text(json.dumps({"configs": [str(config)], "seeds": [1], "output": str(out)}))
    run = out / "slow-seed1"
    cmd = [sys.executable, "-m", "lightning_fed.cli", "sweep", "--config", str(sweep_file)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        sweep = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        try:
            before = _holder_pid(run)
            _wait_for(lambda b=before: (p := _holder_pid(run)) is not None and p != b and _alive(p))
            _wait_for(lambda: (run / "checkpoint.pt").exists())
            child = _holder_pid(run)
            sweep.send_signal(sig)
            stderr = sweep.communicate(timeout=60)[1]
        finally:
            sweep.kill()
        assert sweep.returncode == (143 if sig == signal.SIGTERM else -signal.SIGKILL), stderr[-2000:]
        if sig == signal.SIGTERM:
            assert "Run the same command again to resume" in stderr and "Traceback" not in stderr
        _wait_for(lambda c=child: not _alive(c), timeout=30)
        assert folder_state(run).state is State.RESUMABLE
    main(["sweep", "--config", str(sweep_file)])
    assert folder_state(run).state is State.COMPLETE
    assert "resuming" in (out / "slow-seed1.log").read_text()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fabric.accelerator=bogus"], "fabric (accelerator='bogus'"),
        (["--output.root=FILE"], "is a file, not a folder"),
        (["--resume", "DIR", "--overwrite"], "give one of them"),
    ],
)
def test_bad_settings_end_in_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, args: list[str], needle: str
) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    (tmp_path / "DIR").mkdir()
    (tmp_path / "DIR" / "config.yaml").write_text("seed: 0\n")
    args = [a.replace("FILE", str(a_file)).replace("DIR", str(tmp_path / "DIR")) for a in args]
    root = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main([*_fit_args(root, "run"), *args])
    assert exc.value.code == 2 and needle in _error_line(capsys)
    assert not root.exists(), "nothing may be written"


def test_data_describe_save_to_a_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["data", "describe", *TINY[:3], f"--save={tmp_path}"])
    assert "is a folder: give a file name" in _error_line(capsys)


def test_report_names_the_broken_summary(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    main(_fit_args(tmp_path, "good", "--trainer.rounds=1"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "summary.json").write_text('{"rounds": 3, ')
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["report", str(tmp_path)])
    assert str(tmp_path / "broken" / "summary.json") in _error_line(capsys)


def test_a_summary_that_disagrees_with_its_folder_is_not_finished(tmp_path: Path) -> None:
    """The reproduced two-writer folder: a 10-round summary beside a 2-round parquet and checkpoint
    is not complete (main's sweep skipped it as finished), so a fit refuses it and a sweep redoes it."""
    main(_fit_args(tmp_path, "run", "--trainer.rounds=2"))
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "rounds": 10}))
    found = folder_state(run)
    assert found.state is State.INTERRUPTED and "10 rounds" in found.reason
    from lightning_fed.sweep import SweepRun

    assert not SweepRun((tmp_path / "x.yaml",), 0, run).fitted
