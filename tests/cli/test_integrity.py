"""Run integrity (issue 32): data that changed under a run, rounds below the checkpoint, sweep keys
that escape the output folder, and two sweeps on one output. Each fails on main before the change:
main re-tested a flipped table (AUROC 0.788 -> 0.244, exit 0), resumed on it, accepted
``--trainer.rounds`` below the checkpoint (a 5-round summary beside a 3-round config), wrote a
``grids:`` key ``../../escaped`` outside ``output`` and let two sweeps overwrite each other's logs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lightning_fed.cli import main
from lightning_fed.runfolder.lock import RunLock
from lightning_fed.sweep import expand

pytestmark = pytest.mark.cli  # drives the CLI end to end

TINY = ["--logger.enabled=false", "--output.progress_bar=false", "--model.init_args.hidden=[8, 4]"]


def _table(path: Path, flip: bool = False) -> Path:
    rng = np.random.default_rng(0)
    n = 240
    x = rng.normal(size=(n, 3))
    y = (x[:, 0] + rng.normal(scale=0.5, size=n) > 0).astype(int)
    frame = pl.DataFrame(
        {"site": np.repeat(["a", "b", "c"], n // 3), "f0": x[:, 0], "f1": x[:, 1], "f2": x[:, 2]}
    ).with_columns(died=pl.Series(1 - y if flip else y))
    frame.write_csv(path)
    return path


def _interrupted(run: Path) -> Path:
    """The folder as a kill after the last checkpoint leaves it (no summary.json yet)."""
    (run / "summary.json").unlink()
    return run


def _fit(tmp_path: Path, rounds: int = 2) -> Path:
    csv = _table(tmp_path / "cohort.csv")
    main(
        [
            "fit",
            "--data.class_path=lightning_fed.data.Tabular",
            f"--data.init_args.path={csv}",
            "--data.init_args.label=died",
            "--data.init_args.center=site",
            "--data.init_args.min_center_size=0",
            f"--trainer.rounds={rounds}",
            "--trainer.batch_size=32",
            f"--output.root={tmp_path / 'runs'}",
            "--output.name=tab",
            *TINY,
        ]
    )
    return tmp_path / "runs" / "tab"


def test_test_and_resume_refuse_data_that_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _fit(tmp_path)
    summary = (run / "summary.json").read_text()
    assert '"data_fingerprint"' in summary
    main(["test", "--run-dir", str(run)])  # unchanged data: re-evaluates
    _table(tmp_path / "cohort.csv", flip=True)
    for argv in (
        ["test", "--run-dir", str(run)],
        ["fit", "--resume", str(_interrupted(run)), "--trainer.rounds=3"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "was trained on other data" in err[0]


def test_resume_below_the_checkpoint_round_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _fit(tmp_path, rounds=3)
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--resume", str(_interrupted(run)), "--trainer.rounds=2"])
    assert exit_.value.code == 2
    assert "trainer.rounds=2 is below the 3 rounds" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["../../escaped", "a/b", "..", "with-dash", ""])
def test_sweep_keys_that_are_not_plain_names_are_refused(tmp_path: Path, key: str) -> None:
    layer = tmp_path / "layer.yaml"
    layer.write_text("seed: 0\n")
    with pytest.raises(ValueError, match=r"letters, digits, '_' and '\.' only"):
        expand(grids=[[{key: str(layer)}]])


def test_a_second_sweep_on_one_output_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    config = tmp_path / "quick.yaml"
    config.write_text("seed: 0\n")
    with RunLock(out), pytest.raises(SystemExit) as exit_:
        main(["sweep", f"--configs=[{config}]", "--seeds=[1]", f"--output={out}"])
    assert exit_.value.code == 2
    assert "another sweep" in capsys.readouterr().err
