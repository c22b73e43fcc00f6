"""``trainer.eval_every``: which rounds evaluate, that every number stays the same, and the run folder.

The cadence by hand: with ``k = eval_every`` and ``R = rounds`` the test split is evaluated at the
0-based rounds ``r`` with ``(r + 1) % k == 0`` and at ``r = R - 1``; validation on the same rounds
unless an observer (early stopping) needs it every round.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import ABPS, FedAvg
from lightning_fed.callbacks import Callback, EarlyStopping
from lightning_fed.cli import main
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import RoundResult, TrainerConfig
from tests.conftest import make_federation

SIZES = [40, 12, 90, 25, 60, 30]


class Keep(Callback):
    """Keeps every round's result and, like the federation before ``eval_every``, evaluates both
    splits itself at the end of every round (the reference numbers)."""

    def __init__(self) -> None:
        self.results: list[RoundResult] = []
        self.fresh: list[tuple[torch.Tensor, torch.Tensor]] = []

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        self.results.append(result)
        self.fresh.append((federation.evaluate("val").auroc, federation.evaluate("test").auroc))


def _federation(
    rounds: int, eval_every: int, algorithm: Any = None, callbacks: list[Any] | None = None
) -> tuple[Federation, Keep]:
    keep = Keep()
    fabric = Fabric(accelerator="cpu", devices=1, callbacks=[keep, *(callbacks or [])])
    federation = Federation(
        make_federation(SIZES, seed=3),
        MortalityMLP(hidden=(16, 8), dropout=0.2),
        algorithm if algorithm is not None else FedAvg(),
        TrainerConfig(rounds=rounds, batch_size=16, eval_every=eval_every),
        fabric=fabric,
        seed=5,
    )
    return federation, keep


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Bit-equal tensors, NaN where the other is NaN (undefined AUROCs)."""
    if a is None or b is None:
        return a is b
    nan = torch.isnan(a)
    return a.shape == b.shape and torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan], b[~nan])


def _evaluated(keep: Keep, split: str) -> list[int]:
    return [r.round for r in keep.results if getattr(r, f"{split}_auroc") is not None]


def _without_wall(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "wall_seconds"}


# ----------------------------------------------------------------------------- the setting


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "3", None])
def test_eval_every_below_one_or_not_an_integer_is_one_line_naming_the_key(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^trainer\.eval_every must be an integer >= 1") as err:
        TrainerConfig(eval_every=bad)
    assert "\n" not in str(err.value)


def test_eval_every_accepts_integers_and_defaults_to_every_round() -> None:
    assert TrainerConfig().eval_every == 1
    assert TrainerConfig(eval_every=4).eval_every == 4
    assert TrainerConfig(eval_every=np.int64(2)).eval_every == 2


@pytest.mark.parametrize(
    ("rounds", "every", "expected"),
    [
        (10, 3, [2, 5, 8, 9]),  # every third round, and the last
        (9, 3, [2, 5, 8]),  # the last round is due anyway
        (8, 4, [3, 7]),
        (4, 7, [3]),  # k beyond the budget: the last round only
        (5, 1, [0, 1, 2, 3, 4]),  # the default: every round
    ],
)
def test_cadence_by_hand(rounds: int, every: int, expected: list[int]) -> None:
    federation, _ = _federation(rounds, every)
    assert [r for r in range(rounds) if federation.evaluates(r, "test")] == expected
    assert [r for r in range(rounds) if federation.evaluates(r, "val")] == expected  # nothing needs more
    stopping, _ = _federation(rounds, every, callbacks=[EarlyStopping(patience=50)])
    assert stopping.val_every_round
    assert [r for r in range(rounds) if stopping.evaluates(r, "val")] == list(range(rounds))
    assert [r for r in range(rounds) if stopping.evaluates(r, "test")] == expected
    with pytest.raises(ValueError, match="split"):
        federation.evaluates(0, "train")


# ----------------------------------------------------------------------------- the numbers


def test_eval_every_one_evaluates_as_before_every_round() -> None:
    """k = 1: every round carries both splits, equal bit for bit to evaluating them at the end of the
    round (what the loop did before ``eval_every``), and the loggers get every scalar."""
    federation, keep = _federation(rounds=4, eval_every=1)
    federation.fit()
    assert _evaluated(keep, "test") == _evaluated(keep, "val") == [0, 1, 2, 3]
    for result, (val, test) in zip(keep.results, keep.fresh, strict=True):
        assert _same(result.val_auroc, val) and _same(result.test_auroc, test)
        assert result.val_accuracy is not None and result.test_accuracy is not None
        head = list(Federation._round_scalars(result))[:5]
        assert head == ["round", "val_auroc_mean", "val_auroc_std", "test_auroc_mean", "test_auroc_std"]


@pytest.mark.parametrize("algorithm", [FedAvg, ABPS], ids=["fedavg", "abps"])
def test_eval_every_three_thins_the_evaluations_and_changes_no_number(algorithm: type) -> None:
    """7 rounds at k = 3: test (and validation) at rounds 2, 5, 6 only, each equal to k = 1's; the
    training, bytes and statistics of every round and the summary are k = 1's (ABPS's Shapley credit
    evaluates its own models through ``val_utility`` every round whatever k)."""
    every_round, keep1 = _federation(rounds=7, eval_every=1, algorithm=algorithm())
    thinned, keep3 = _federation(rounds=7, eval_every=3, algorithm=algorithm())
    summary1, summary3 = every_round.fit(), thinned.fit()
    assert _without_wall(summary1) == _without_wall(summary3)
    assert _evaluated(keep3, "test") == _evaluated(keep3, "val") == [2, 5, 6]
    for r1, r3 in zip(keep1.results, keep3.results, strict=True):
        assert torch.equal(r1.train_loss, r3.train_loss)
        assert torch.equal(r1.bytes_per_center, r3.bytes_per_center)
        assert r1.bytes_cumulative == r3.bytes_cumulative
        assert {k: v for k, v in r1.stats.items() if not k.startswith("seconds")} == {
            k: v for k, v in r3.stats.items() if not k.startswith("seconds")
        }
        due = r3.round in (2, 5, 6)
        for split in ("val", "test"):
            auroc3, accuracy3 = getattr(r3, f"{split}_auroc"), getattr(r3, f"{split}_accuracy")
            assert _same(auroc3, getattr(r1, f"{split}_auroc")) if due else auroc3 is None
            assert _same(accuracy3, getattr(r1, f"{split}_accuracy")) if due else accuracy3 is None
        scalars = Federation._round_scalars(r3)
        assert ("test_auroc_mean" in scalars) == due and ("val_auroc_mean" in scalars) == due
        assert "train_loss_mean" in scalars and "bytes_round" in scalars


def test_early_stopping_keeps_validation_every_round_and_stops_the_same() -> None:
    runs = []
    for every in (1, 3):
        federation, keep = _federation(rounds=8, eval_every=every, callbacks=[EarlyStopping(patience=2)])
        runs.append((_without_wall(federation.fit()), keep))
    (summary1, keep1), (summary3, keep3) = runs
    assert summary1 == summary3  # same best round, stop and restored parameters
    assert _evaluated(keep3, "val") == [r.round for r in keep3.results]
    for r1, r3 in zip(keep1.results, keep3.results, strict=True):
        assert _same(r1.val_auroc, r3.val_auroc)
    last = keep3.results[-1].round
    assert _evaluated(keep3, "test") == [r for r in range(last + 1) if (r + 1) % 3 == 0 or r == 7]


# ----------------------------------------------------------------------------- the run folder

TINY = [
    "--data.class_path=lightning_fed.data.SyntheticICU",
    "--data.init_args.num_centers=6",
    "--data.init_args.num_stays=900",
    "--model.init_args.hidden=[8, 4]",
    "--logger.enabled=false",
    "--trainer.rounds=5",
    "--trainer.eval_every=2",
]


class InterruptAt(Callback):
    """Ctrl-C at the end of round 2 (after its checkpoint) while ``LF_TEST_INTERRUPT=1``."""

    def on_round_end(self, federation: Any, result: RoundResult) -> None:
        if result.round == 2 and os.environ.get("LF_TEST_INTERRUPT") == "1":
            raise KeyboardInterrupt


def _fit(root: Path, name: str, *extra: str) -> Path:
    main(["fit", *TINY, f"--output.root={root}", f"--output.name={name}", *extra])
    return root / name


def _read(run: Path) -> tuple[pl.DataFrame, dict[str, Any]]:
    frame = pl.read_parquet(run / "rounds.parquet")
    summary = json.loads((run / "summary.json").read_text())
    for key in ("wall_seconds", "run_dir"):
        summary.pop(key)
    return frame.drop([c for c in frame.columns if c.startswith("seconds_")]), summary


@pytest.mark.cli
def test_run_folder_has_null_test_columns_and_report_test_and_resume_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """5 rounds at k = 2: ``rounds.parquet`` holds both AUROCs at rounds 1, 3, 4 and nulls (not NaN)
    elsewhere; ``report`` and ``test`` read the folder; a run interrupted after round 2 and resumed
    ends with the uninterrupted run's rounds and summary."""
    runs = tmp_path / "runs"
    same = ["--output.checkpoint_every=1", "--callbacks+=tests.engine.test_eval_every.InterruptAt"]
    whole = _fit(runs, "whole", *same)  # with the progress bar (it keeps the last validation shown)
    frame, summary = _read(whole)
    assert frame.schema["test_auroc"] == pl.Float64 and frame.schema["val_auroc"] == pl.Float64
    for column in ("test_auroc", "val_auroc"):
        present = frame.filter(pl.col(column).is_not_null())
        assert sorted(set(present["round"].to_list())) == [1, 3, 4]
        assert present.height == 3 * 6 and frame.filter(pl.col(column).is_null()).height == 2 * 6
    assert frame["train_loss"].null_count() == 0 and frame.height == 5 * 6

    monkeypatch.setenv("LF_TEST_INTERRUPT", "1")
    with pytest.raises(SystemExit) as exc:
        _fit(tmp_path / "other", "resumed", *same, "--output.progress_bar=false")
    assert exc.value.code == 130
    monkeypatch.delenv("LF_TEST_INTERRUPT")
    main(["fit", "--resume", str(tmp_path / "other" / "resumed")])
    resumed_frame, resumed_summary = _read(tmp_path / "other" / "resumed")
    assert resumed_frame.equals(frame)
    assert resumed_summary == summary

    main(["test", "--run-dir", str(whole)])
    test = json.loads((whole / "test.json").read_text())
    assert test["test_auroc_mean"] == summary["test_auroc_mean"]
    main(["report", str(runs), "--out", str(tmp_path / "report")])
    for name in ("table1.md", "runs.csv", "pareto.png"):
        assert (tmp_path / "report" / name).is_file(), name
    # FedAvg never rests a center: its isolation is 0 in every round, and no flat-zero plot is written.
    assert not (tmp_path / "report" / "isolation.png").exists()
    capsys.readouterr()


@pytest.mark.cli
def test_a_bad_eval_every_on_the_command_line_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit):
        _fit(tmp_path, "bad", "--trainer.eval_every=0")
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "trainer.eval_every must be an integer >= 1" in err[0], err
    assert not (tmp_path / "bad").exists()
