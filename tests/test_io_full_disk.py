"""A full disk during an output write (issue 32 item 5): one line naming the path and the fix, the
previous file intact, no temporary left. On main the ``OSError`` / torch's ``RuntimeError`` ended
``fit`` in a traceback."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch

import lightning_fed.io as io
from lightning_fed.cli import main
from tests.cli.test_cli import TINY


def _full_disk(obj: object, path: Path) -> None:
    """What a full disk does to ``torch.save``: some bytes reach the temporary file, then ENOSPC."""
    Path(path).write_bytes(b"PK\x03\x04 half a checkpoint")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_write_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "checkpoint.pt"
    io.save_torch(target, {"round": 1})
    before = target.read_bytes()
    monkeypatch.setattr(torch, "save", _full_disk)
    with pytest.raises(io.OutputWriteError) as err:
        io.save_torch(target, {"round": 2})
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"cannot write {target}: No space left on device;")
    assert "free space" in message
    assert target.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]
    # torch's own zip writer reports a failed write as a RuntimeError: worded the same way.
    monkeypatch.setattr(
        torch,
        "save",
        lambda *_: (_ for _ in ()).throw(RuntimeError("PytorchStreamWriter failed writing file")),
    )
    with pytest.raises(io.OutputWriteError, match=r"is the disk full\?"):
        io.save_torch(target, {"round": 2})
    assert target.read_bytes() == before


@pytest.mark.cli
def test_fit_on_a_full_disk_ends_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Round 0's checkpoint is written, round 1's hits a full disk: exit 2 with one line naming the
    checkpoint, and the round-0 checkpoint stays readable, so the run resumes from round 1."""
    real = torch.save
    calls = []

    def save(obj: object, path: Path) -> None:
        calls.append(path)
        if isinstance(obj, dict) and "federation" in obj and len(calls) > 1:
            _full_disk(obj, path)
        real(obj, path)

    monkeypatch.setattr(torch, "save", save)
    run = tmp_path / "run"
    argv = ["fit", *TINY, f"--output.root={tmp_path}", "--output.name=run", "--output.checkpoint_every=1"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--output.progress_bar=false", "--logger.enabled=false"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"lightning-fed: error: cannot write {run / 'checkpoint.pt'}: "
    )
    assert "No space left on device" in err[0] and f"fit --resume {run}" in err[0]
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert state["federation"]["round"] == 1
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")] and not (run / "summary.json").exists()
    monkeypatch.setattr(torch, "save", real)
    main(["fit", "--resume", str(run), "--output.progress_bar=false"])
    assert json.loads((run / "summary.json").read_text())["rounds"] == 2
