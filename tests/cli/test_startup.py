"""The start-up path of ``fit``: the debug timing hook, the early W&B import, ``benchmarks/startup.py``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.startup import PHASES, _phases
from lightning_fed.cli import main
from lightning_fed.startup import STARTUP_LOG_ENV, logger_enabled_hint, mark, startup_marks

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--data.class_path=lightning_fed.data.SyntheticICU",
    "--data.init_args.num_centers=6",
    "--data.init_args.num_stays=900",
    "--model.init_args.hidden=[8, 4]",
    "--trainer.rounds=2",
    "--logger.enabled=false",
    "--output.progress_bar=false",
]
BOUNDARIES = [
    "main",
    "parser",
    "config",
    "loggers",
    "fabric",
    "data",
    "federation",
    "round_start",
    "round_logged",
    "round_end",
    "exit",
]


def test_the_hook_writes_every_boundary_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "marks.jsonl"
    monkeypatch.setenv(STARTUP_LOG_ENV, str(log))
    main(["fit", *TINY, f"--output.root={tmp_path}", "--output.name=run"])
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["phase"] for r in records] == BOUNDARIES  # the first round only, not the second
    times, cpus = [r["time"] for r in records], [r["cpu"] for r in records]
    assert times == sorted(times) and cpus == sorted(cpus)
    assert len({r["pid"] for r in records}) == 1
    logged = records[BOUNDARIES.index("round_logged")]
    assert 0 < logged["seconds"] <= logged["time"] - records[BOUNDARIES.index("round_start")]["time"]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["rounds"] == 2


def test_without_the_hook_nothing_is_written_or_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STARTUP_LOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert startup_marks() == []
    mark("main")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], True),  # the default logger is enabled (offline)
        (["--config", "configs/fedavg.yaml"], True),
        (["--config", "configs/fedavg.yaml", "--logger.enabled=false"], False),
        (["--logger.enabled", "False"], False),
        (["--logger.enabled=false", "--logger.enabled=true"], True),  # the last one wins
        (["--logger={enabled: false, offline: true}"], False),
        (["--config", "OFF"], False),
        (["--config", "OFF", "--logger.enabled=true"], True),
        (["--config", "configs/no_such_file.yaml"], True),  # left to the parser to report
        (["--config", "BROKEN"], False),
    ],
)
def test_the_logger_hint_reads_configs_and_options_by_hand(
    argv: list[str], expected: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "off.yaml").write_text("logger:\n  enabled: false\n")
    (tmp_path / "broken.yaml").write_text("logger: [unclosed\n")
    monkeypatch.chdir(ROOT)
    names = {"OFF": str(tmp_path / "off.yaml"), "BROKEN": str(tmp_path / "broken.yaml")}
    assert logger_enabled_hint([names.get(a, a) for a in argv]) is expected


def test_the_early_wandb_import_imports_no_torch() -> None:
    code = (
        "import sys; from lightning_fed.startup import preimport_wandb; preimport_wandb(); "
        "print('wandb.sdk.launch.inputs.internal' in sys.modules, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False"]


def test_benchmark_phases_by_hand() -> None:
    """Boundaries 1.0 s apart from a launch at t = 100 (CPU 0.5 s apart from 0.2): one second and
    half a CPU second per phase; the round's own 0.25 s comes off W&B's phase."""
    marks = {
        name: {"time": 101.0 + i, "cpu": 0.2 + 0.5 * i}
        for i, name in enumerate(["main", "parser", "config", "loggers", "fabric", "data", "federation"])
    }
    marks["round_start"] = {"time": 108.0, "cpu": 3.7}
    marks["round_logged"] = {"time": 109.0, "cpu": 4.2, "seconds": 0.25}
    marks["round_end"] = {"time": 110.0, "cpu": 4.7}
    phases = _phases(marks, launched=100.0)
    assert set(phases) == {p[0] for p in PHASES} | {"to_round_1", "to_round_1_logged"}
    assert phases["interpreter"] == (1.0, 0.2)
    for name in ("imports", "config", "loggers", "fabric", "data", "federation", "to_round", "first_write"):
        assert phases[name] == pytest.approx((1.0, 0.5)), name
    assert phases["round"][0] == 0.25 and math.isnan(phases["round"][1])
    assert phases["wandb_init"][0] == pytest.approx(0.75) and math.isnan(phases["wandb_init"][1])
    assert phases["to_round_1"] == (8.0, 3.7) and phases["to_round_1_logged"] == (10.0, 4.7)
