"""A run folder loads at any thread count: the data are rebuilt at the count the fit built them at.

Some data sources round differently in the last bit at another torch thread count (Fashion-MNIST's
colour transforms: an elementwise ``pow`` takes another code path at each thread's chunk boundary).
A fit builds its data at torch's count in that process (the machine's cores), so ``refer`` /
``test --run-dir`` / ``fit --resume`` in a process with another count (another machine, a
notebook that set its threads) rebuilt other data, and the data fingerprint refused the run as if
its files had changed. The checkpoint now records the count (``data_threads``) and those commands
rebuild at it. ``ThreadSensitiveSource`` stands in for such a source: its features move by
``1e-3`` per thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import lightning_fed.threads as threads
from lightning_fed.callbacks import Callback
from lightning_fed.cli import main
from lightning_fed.commands.common import load_run
from lightning_fed.data import SyntheticICU
from lightning_fed.data.center import FederatedData
from lightning_fed.runfolder.state import read_checkpoint


class ThreadSensitiveSource(SyntheticICU):
    """``SyntheticICU`` whose training features are shifted by ``1e-3 * torch.get_num_threads()``."""

    def build(self, seed: int) -> FederatedData:
        data = super().build(seed)
        shift = 1e-3 * torch.get_num_threads()
        centers = [replace(center, x_train=center.x_train + shift) for center in data.centers]
        return replace(data, centers=centers)


@pytest.fixture
def fresh_process_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No fit of this process has set torch's threads yet; the count is restored afterwards."""
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_PROCESS_THREADS", None, raising=False)
    yield
    torch.set_num_threads(before)


def _fit(tmp_path: Path, *extra: str) -> Path:
    main(
        [
            "fit",
            "--data.class_path=tests.callbacks.test_data_threads.ThreadSensitiveSource",
            "--data.init_args.num_centers=3",
            "--data.init_args.num_stays=300",
            "--model=lightning_fed.models.MortalityMLP",
            "--algorithm=lightning_fed.algorithms.FedAvg",
            "--trainer.rounds=1",
            "--trainer.threads=1",
            "--logger.enabled=false",
            "--output.progress_bar=false",
            f"--output.root={tmp_path}",
            "--output.name=run",
            *extra,
        ]
    )
    return tmp_path / "run"


def test_a_run_built_at_two_threads_loads_in_a_one_thread_process(
    tmp_path: Path, fresh_process_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(2)  # the fit's process: its data are built at 2 threads
    run = _fit(tmp_path)
    assert read_checkpoint(run / "checkpoint.pt")["data_threads"] == 2
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["threads"], summary["data_threads"]) == (1, 2)  # training's count, the data's
    monkeypatch.setattr(threads, "_PROCESS_THREADS", None, raising=False)
    torch.set_num_threads(1)  # another process, on a 1-core machine
    federation = load_run(run)
    assert federation.data_threads == 2
    assert torch.get_num_threads() == 1  # the build's count does not leak out of it
    shift = (
        federation.data.centers[0].x_train
        - ThreadSensitiveSource(num_centers=3, num_stays=300).build(0).centers[0].x_train
    )
    torch.testing.assert_close(shift, torch.full_like(shift, 1e-3), rtol=0, atol=1e-6)  # built at 2, not 1


def test_an_older_checkpoint_without_the_count_names_it_in_the_refusal(
    tmp_path: Path,
    fresh_process_threads: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    torch.set_num_threads(2)
    run = _fit(tmp_path)
    state = read_checkpoint(run / "checkpoint.pt")
    del state["data_threads"]
    torch.save(state, run / "checkpoint.pt")
    monkeypatch.setattr(threads, "_PROCESS_THREADS", None, raising=False)
    torch.set_num_threads(1)
    with pytest.raises(SystemExit):
        load_run(run)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "built now at 1 torch thread" in err[0] and "torch.set_num_threads" in err[0]


class _StoppedError(RuntimeError):
    pass


class StopAfterFirstRound(Callback):
    """Raise at the end of round 0 (after its checkpoint) while ``armed``: an interrupted run."""

    armed = False

    def on_round_end(self, federation: object, result: object) -> None:
        if StopAfterFirstRound.armed:
            StopAfterFirstRound.armed = False
            raise _StoppedError


def test_a_resume_in_a_process_with_another_count_rebuilds_the_fits_data(
    tmp_path: Path, fresh_process_threads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(2)
    monkeypatch.setattr(StopAfterFirstRound, "armed", True)
    with pytest.raises(_StoppedError):
        _fit(
            tmp_path,
            "--trainer.rounds=2",
            "--output.checkpoint_every=1",
            "--callbacks+=tests.callbacks.test_data_threads.StopAfterFirstRound",
        )
    run = tmp_path / "run"
    assert not (run / "summary.json").exists()
    monkeypatch.setattr(threads, "_PROCESS_THREADS", None, raising=False)
    torch.set_num_threads(1)
    main(["fit", "--resume", str(run)])
    state = read_checkpoint(run / "checkpoint.pt")
    assert state["federation"]["round"] == 2 and state["data_threads"] == 2
