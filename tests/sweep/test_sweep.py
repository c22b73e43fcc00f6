"""Sweeps: the grid, skipping finished runs, failures reported, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_fed.cli import main
from lightning_fed.sweep import plan

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--data.init_args.num_centers=6",
    "--data.init_args.num_stays=900",
    "--trainer.rounds=1",
    "--model.init_args.hidden=[8, 4]",
    "--logger.enabled=false",
]


def test_plan_names_runs_by_config_and_seed(tmp_path: Path) -> None:
    runs = plan([ROOT / "configs" / "fedavg.yaml", ROOT / "configs" / "local.yaml"], [11, 22], tmp_path)
    assert [r.name for r in runs] == ["fedavg-seed11", "fedavg-seed22", "local-seed11", "local-seed22"]
    with pytest.raises(FileNotFoundError, match=r"sweep.configs: no such file"):
        plan([tmp_path / "nope.yaml"], [1], tmp_path)
    with pytest.raises(ValueError, match="at least one"):
        plan([], [1], tmp_path)


def test_sweep_runs_the_grid_in_two_processes_then_skips_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sweep_file = tmp_path / "sweep.yaml"
    out = tmp_path / "runs"
    sweep_file.write_text(
        json.dumps(
            {
                "configs": [str(ROOT / "configs" / "fedavg.yaml"), str(ROOT / "configs" / "local.yaml")],
                "seeds": [1, 2],
                "output": str(out),
                "overrides": TINY,
                "processes": 2,
            }
        )
    )
    status = main_sweep(["--config", str(sweep_file)])
    assert sorted(status) == ["fedavg-seed1", "fedavg-seed2", "local-seed1", "local-seed2"]
    assert set(status.values()) == {"done"}
    seeds = {json.loads((out / name / "summary.json").read_text())["seed"] for name in status}
    assert seeds == {1, 2}
    again = main_sweep(["--config", str(sweep_file)])
    assert set(again.values()) == {"skipped"}
    assert "4 skipped" in capsys.readouterr().out


def test_a_failing_run_is_reported_and_the_sweep_exits_nonzero(tmp_path: Path) -> None:
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(
        json.dumps(
            {
                "configs": [str(ROOT / "configs" / "fedavg.yaml")],
                "seeds": [1],
                "output": str(tmp_path),
                "overrides": [*TINY, "--trainer.rounds=0"],
            }
        )
    )
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--config", str(sweep_file)])
    assert exc.value.code == 1
    assert "trainer.rounds" in (tmp_path / "fedavg-seed1.log").read_text()


def main_sweep(args: list[str]) -> dict[str, str]:
    from lightning_fed.cli import sweep

    return sweep(args)


def test_report_command_writes_table_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for name in ("fedavg-seed1", "local-seed1"):
        config = ROOT / "configs" / f"{name.split('-')[0]}.yaml"
        main(
            [
                "fit",
                "--config",
                str(config),
                *TINY,
                f"--output.root={tmp_path}",
                f"--output.name={name}",
                "--output.progress_bar=false",
            ]
        )
    main(["report", str(tmp_path), "--out", str(tmp_path / "report")])
    out = capsys.readouterr().out
    assert "| fedavg |" in out and "| local |" in out
    for name in ("table1.md", "table1.csv", "pareto.png"):
        assert (tmp_path / "report" / name).stat().st_size > 0
    with pytest.raises(SystemExit):
        main(["report", str(tmp_path / "nothing-here")])


def test_plan_marks_referral_runs_and_their_baselines(tmp_path: Path) -> None:
    a, b = tmp_path / "local_x.yaml", tmp_path / "edgedrm_x.yaml"
    a.write_text("seed: 0\n")
    b.write_text("seed: 0\n")
    runs = plan([a, b], [1, 2], tmp_path / "out", refer=["edgedrm_x"], refer_baselines=["local_x"])
    by_name = {r.name: r for r in runs}
    assert by_name["local_x-seed1"].refer_baselines is None
    assert by_name["edgedrm_x-seed2"].refer_baselines == (tmp_path / "out" / "local_x-seed2",)
    # A fitted referral run is not done until its referral table exists.
    run = by_name["edgedrm_x-seed1"]
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "summary.json").write_text("{}")
    assert run.fitted and not run.done
    (run.run_dir / "referral.csv").write_text("router\n")
    assert run.done
    with pytest.raises(ValueError, match="not in the sweep"):
        plan([a, b], [1], tmp_path / "out", refer=["nope"])


def test_plan_maps_baselines_per_referral_config(tmp_path: Path) -> None:
    stems = ["local_x", "dispfl_path", "edgedrm_path", "edgedrm_cycle"]
    for s in stems:
        (tmp_path / f"{s}.yaml").write_text("seed: 0\n")
    runs = plan(
        [tmp_path / f"{s}.yaml" for s in stems],
        [3],
        tmp_path / "out",
        refer=["edgedrm_path", "edgedrm_cycle"],
        refer_baselines={"edgedrm_path": ["local_x", "dispfl_path"], "edgedrm_cycle": ["local_x"]},
    )
    by_name = {r.name: r for r in runs}
    out = tmp_path / "out"
    assert by_name["edgedrm_path-seed3"].refer_baselines == (out / "local_x-seed3", out / "dispfl_path-seed3")
    assert by_name["edgedrm_cycle-seed3"].refer_baselines == (out / "local_x-seed3",)
    with pytest.raises(ValueError, match="not in the sweep"):
        plan([tmp_path / "local_x.yaml"], [1], out, refer=["local_x"], refer_baselines={"local_x": ["nope"]})
