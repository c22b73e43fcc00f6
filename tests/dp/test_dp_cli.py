"""``trainer.dp`` through ``lightning-fed fit``: a bad value or a missing accountant ends in one line
before any work; a DP run writes ``privacy/epsilon`` to ``rounds.parquet`` and ``summary.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pytest

from lightning_fed.cli import fit_parser, main
from lightning_fed.runfolder.fingerprint import config_fingerprint, fingerprinted
from tests.cli.test_cli import TINY


@pytest.mark.cli
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.dp.noise_multiplier=0"], "trainer.dp.noise_multiplier must be > 0.0, got 0.0"),
        (["--trainer.dp.noise_multiplier=-2"], "trainer.dp.noise_multiplier must be > 0.0"),
        (
            ["--trainer.dp.level=client", "--algorithm=lightning_fed.algorithms.DeceFL"],
            "trainer.dp.level=client: DeceFL has no server",
        ),
    ],
)
def test_bad_dp_settings_end_in_one_line_before_any_work(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    if "DeceFL" in " ".join(args):
        pytest.importorskip("dp_accounting", reason="the method refusal comes after the accountant check")
    with pytest.raises(SystemExit):
        main(["fit", *TINY, f"--output.root={tmp_path}", "--logger.enabled=false", *args])
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


@pytest.mark.cli
def test_missing_dp_accounting_ends_in_one_line_naming_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    with pytest.raises(SystemExit):
        main(
            ["fit", *TINY, f"--output.root={tmp_path}", "--logger.enabled=false", "--trainer.dp.level=sample"]
        )
    err = capsys.readouterr().err
    assert "pip install 'lightning-fed[privacy]'" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())


@pytest.mark.cli
def test_a_dp_fit_writes_epsilon_per_round_and_in_the_summary(tmp_path: Path) -> None:
    pytest.importorskip("dp_accounting", reason="dp-accounting is the optional 'privacy' extra")
    main(
        [
            "fit",
            *TINY,
            f"--output.root={tmp_path}",
            "--output.name=run",
            "--logger.enabled=false",
            "--trainer.rounds=2",
            "--trainer.dp.level=client",
            "--trainer.dp.noise_multiplier=1.5",
        ]
    )
    rounds = pl.read_parquet(tmp_path / "run" / "rounds.parquet")
    eps = rounds.group_by("round").agg(pl.col("privacy/epsilon").first()).sort("round")["privacy/epsilon"]
    assert 0 < eps[0] < eps[1]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["privacy/epsilon"] == eps[1] and summary["privacy/level"] == "client"


def test_trainer_dp_leaves_old_fingerprints_alone() -> None:
    """``trainer.dp: null`` (what every older config resolves to) is left out of the fingerprint
    (``ADDED_LATER``), so runs from before the key resume; a DP setting changes it."""
    parser = fit_parser()
    now = parser.parse_args(["--config=configs/fedavg.yaml"]).as_dict()
    before = {**now, "trainer": {k: v for k, v in now["trainer"].items() if k != "dp"}}
    assert config_fingerprint(now) == config_fingerprint(before)
    assert not any(k.startswith("trainer.dp") for k in fingerprinted(parser.parse_args([]).as_dict()))
    changed = fingerprinted(parser.parse_args(["--trainer.dp.level=client"]).as_dict())
    assert changed["trainer.dp.level"] == "client" and changed["trainer.dp.noise_multiplier"] == 1.0
