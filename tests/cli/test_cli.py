"""The command line: fit writes a complete run directory, test re-evaluates it, bad input fails early."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.callbacks import Callback
from lightning_fed.cli import main

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

TINY = [
    "--data.class_path=lightning_fed.data.SyntheticICU",
    "--data.init_args.num_centers=8",
    "--data.init_args.num_stays=1500",
    "--model.init_args.hidden=[16, 8]",
    "--trainer.rounds=2",
]


def _fit(tmp_path: Path, *extra: str) -> Path:
    main(
        [
            "fit",
            *TINY,
            f"--output.root={tmp_path}",
            "--output.name=run",
            "--output.progress_bar=false",
            *extra,
        ]
    )
    return tmp_path / "run"


def test_fit_writes_run_dir_and_test_reevaluates(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = _fit(tmp_path, "--logger.enabled=false")
    for name in ("config.yaml", "rounds.parquet", "centers.parquet", "summary.json", "checkpoint.pt"):
        assert (run / name).is_file(), name
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == 2 and summary["num_centers"] == 8 and summary["method"] == "FedAvg"
    assert summary["versions"]["torch"]
    rounds = pl.read_parquet(run / "rounds.parquet")
    assert rounds.shape[0] == 2 * 8
    assert set(rounds.columns) >= {
        "round",
        "center",
        "name",
        "val_auroc",
        "test_auroc",
        "bytes",
        "train_loss",
    }
    assert rounds["bytes"].sum() == summary["total_bytes"] * 1  # every byte touches exactly one center
    main(["test", "--run-dir", str(run)])
    again = json.loads((run / "test.json").read_text())
    assert again["test_auroc_mean"] == summary["test_auroc_mean"]
    assert "test AUROC" in capsys.readouterr().out


def test_saved_config_reruns_to_identical_numbers(tmp_path: Path) -> None:
    run = _fit(tmp_path, "--logger.enabled=false")
    main(["fit", "--config", str(run / "config.yaml"), "--output.name=rerun"])
    a = json.loads((run / "summary.json").read_text())
    b = json.loads((tmp_path / "rerun" / "summary.json").read_text())
    assert a["test_auroc_mean"] == b["test_auroc_mean"] and a["total_bytes"] == b["total_bytes"]


def test_wandb_offline_run_folder_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run = _fit(tmp_path)
    runs = list((run / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))


@pytest.mark.parametrize(
    ("arg", "needle"),
    [
        ("--trainer.rounds=0", "trainer.rounds"),
        ("--trainer.batch_size=-3", "trainer.batch_size"),
        ("--model.init_args.dropout=1.5", "model.dropout"),
        ("--fabric.precision=fp8", "fabric.precision"),
        ("--trainer.rounds=many", "trainer.rounds"),
        ("--data.init_args.num_centers=0", "num_centers"),
    ],
)
def test_bad_config_fails_before_work_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture, arg: str, needle: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fit", *TINY, f"--output.root={tmp_path}", "--logger.enabled=false", arg])
    assert exc.value.code != 0
    assert needle in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "nothing may be written for an invalid config"


def test_test_command_on_missing_run_dir_is_clear(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["test", "--run-dir", str(tmp_path / "nope")])
    assert "no config.yaml" in capsys.readouterr().err


def test_top_level_help_does_not_import_torch() -> None:
    code = "import sys; from lightning_fed.cli import main; main(['--help']); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "fit" in out and out.strip().endswith("False")


def test_root_cli_shim_runs_the_same_entry_point() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "cli.py"), "--help"], capture_output=True, text=True, check=True
    )
    assert "lightning-fed" in out.stdout


def test_data_that_cannot_be_split_fails_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit):
        main(
            [
                "fit",
                *TINY,
                "--data.init_args.num_stays=20",
                f"--output.root={tmp_path}",
                "--logger.enabled=false",
            ]
        )
    assert "error" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
#: Configs on real data: the overrides that make them small, and the folder they need.
REAL_DATA = {
    "eicu": (
        [
            f"--data.root={SHARED / 'eicu-crd-demo-2.0.1'}",
            "--data.partitioner=lightning_fed.data.IID",
            "--data.partitioner.num_centers=4",
        ],
        SHARED / "eicu-crd-demo-2.0.1",
    ),
    "mimic_abps": (
        [f"--data.root={SHARED / 'mimic-iv-demo-2.2'}", "--data.window_years=100", "--data.cache_dir=null"],
        SHARED / "mimic-iv-demo-2.2",
    ),
}


FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def _image_overrides(config: Path) -> list[str]:
    """Fashion-MNIST configs: 60 images per client, 1 local epoch, a short stage II."""
    if not FASHION_MNIST.is_dir():
        pytest.skip(f"{FASHION_MNIST} is absent (Debian package dataset-fashion-mnist)")
    text = config.read_text()
    out = ["--data.init_args.max_per_client=60", "--trainer.local_epochs=1"]
    return out + (
        ["--algorithm.init_args.stage2_epochs=3"] if "lightning_fed.algorithms.EdgeDRM" in text else []
    )


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_every_preset_runs_on_a_tiny_federation(tmp_path: Path, config: Path) -> None:
    """Each shipped config parses and runs end to end (synthetic ones shrunk to 10 centers, 2 rounds;
    image ones to 60 images per client; real-data ones on the demos in ../shared/data, skipped when
    absent)."""
    if config.stem in REAL_DATA:
        overrides, needed = REAL_DATA[config.stem]
        if not needed.is_dir():
            pytest.skip(f"{needed} is absent (real data lives beside the repository, never in it)")
    elif "lightning_fed.data.FashionMNIST" in config.read_text():
        overrides = _image_overrides(config)
    else:
        overrides = ["--data.init_args.num_centers=10", "--data.init_args.num_stays=1500"]
    main(
        [
            "fit",
            "--config",
            str(config),
            *overrides,
            "--trainer.rounds=2",
            "--logger.enabled=false",
            "--output.progress_bar=false",
            f"--output.root={tmp_path}",
            "--output.name=run",
        ]
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rounds"] >= 1 and summary["num_centers"] >= 2


class KillAt(Callback):
    """Kill the process with SIGKILL at the end of a round (after that round's checkpoint)."""

    def __init__(self, round: int = 2) -> None:
        self.round = round

    def on_round_end(self, federation, result) -> None:
        if result.round == self.round and os.environ.get("LF_TEST_KILL") == "1":
            os.kill(os.getpid(), signal.SIGKILL)


class KillInCheckpointWrite(Callback):
    """SIGKILL in the middle of the ``call``-th checkpoint write (a partial temporary file exists).

    Killers act only where ``LF_TEST_KILL=1`` (the child process): the resumed run re-reads the same
    config, callbacks included, in the test process."""

    def __init__(self, call: int = 3) -> None:
        import lightning_fed.callbacks.checkpoint as checkpoint
        from lightning_fed.io import atomic_path

        original, calls = checkpoint.save_torch, [0]

        def save_then_die(path, obj):
            calls[0] += 1
            if calls[0] == call and os.environ.get("LF_TEST_KILL") == "1":
                with atomic_path(path) as tmp:
                    tmp.write_bytes(b"half a checkpoint")
                    os.kill(os.getpid(), signal.SIGKILL)
            return original(path, obj)

        checkpoint.save_torch = save_then_die


def _run_args(config: str) -> list[str]:
    return [
        "--config",
        str(ROOT / "configs" / config),
        "--data.init_args.num_centers=12",
        "--data.init_args.num_stays=2400",
        "--trainer.rounds=6",
        "--output.checkpoint_every=1",
        "--logger.enabled=false",
        "--output.progress_bar=false",
    ]


@pytest.mark.parametrize(
    ("config", "killer"),
    [
        ("fedavg.yaml", "tests.cli.test_cli.KillAt"),
        ("abps_x.yaml", "tests.cli.test_cli.KillAt"),
        ("abps.yaml", "tests.cli.test_cli.KillInCheckpointWrite"),
    ],
)
def test_resume_after_sigkill_gives_the_uninterrupted_result(
    tmp_path: Path, config: str, killer: str
) -> None:
    """A run SIGKILLed after round 2 (or in the middle of its third checkpoint write) and resumed ends
    with the same metrics, bytes, partners and per-round table as an uninterrupted run. ABPS-X covers
    posteriors, momentum, early stopping and the bf16 ledger."""
    args = _run_args(config)
    main(["fit", *args, f"--output.root={tmp_path}", "--output.name=straight"])
    killed = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_fed.cli",
            "fit",
            *args,
            f"--output.root={tmp_path}",
            "--output.name=killed",
            f"--callbacks+={killer}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "LF_TEST_KILL": "1"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (tmp_path / "killed" / "summary.json").exists()
    main(["fit", "--resume", str(tmp_path / "killed")])
    assert not list((tmp_path / "killed").glob(".*.tmp")), "stale temporary files are cleaned on resume"
    a = json.loads((tmp_path / "straight" / "summary.json").read_text())
    b = json.loads((tmp_path / "killed" / "summary.json").read_text())
    for key in ("test_auroc_mean", "val_auroc_mean", "total_bytes", "rounds", "best_round", "mean_partners"):
        assert a.get(key) == b.get(key), key
    ra = pl.read_parquet(tmp_path / "straight" / "rounds.parquet").drop(pl.selectors.starts_with("seconds_"))
    rb = pl.read_parquet(tmp_path / "killed" / "rounds.parquet").drop(pl.selectors.starts_with("seconds_"))
    assert ra.equals(rb)


def test_resume_refuses_a_finished_or_missing_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["fit", "--resume", str(tmp_path)])
    assert "no config.yaml" in capsys.readouterr().err
