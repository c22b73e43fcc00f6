"""Sweeps: the grid, skipping finished runs, failures reported, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_fed.cli import main
from lightning_fed.sweep import plan

pytestmark = pytest.mark.cli  # drives the CLI end to end or spawns a process

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--data.init_args.num_centers=6",
    "--data.init_args.num_stays=900",
    "--trainer.rounds=1",
    "--model.init_args.hidden=[8, 4]",
    "--logger.enabled=false",
]


def test_plan_names_runs_by_config_and_seed(tmp_path: Path) -> None:
    """Seed-major: an interrupted sweep leaves whole seeds."""
    runs = plan([ROOT / "configs" / "fedavg.yaml", ROOT / "configs" / "local.yaml"], [11, 22], tmp_path)
    assert [r.name for r in runs] == ["fedavg-seed11", "local-seed11", "fedavg-seed22", "local-seed22"]
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
    from lightning_fed.commands.sweep import sweep

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


def fake_complete_run(run_dir: Path, rounds: int = 0) -> None:
    """The files of a finished run of ``rounds`` rounds (0: no per-round table), fingerprint-free."""
    import torch

    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "summary.json").write_text(json.dumps({"rounds": rounds, "config_fingerprint": None}))
    torch.save(
        {"federation": {"round": rounds}, "callbacks": [], "fingerprint": None}, run_dir / "checkpoint.pt"
    )


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
    fake_complete_run(run.run_dir)
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


def _layers(tmp_path: Path, *names: str) -> dict[str, str]:
    out = {}
    for n in names:
        (tmp_path / f"{n}.yaml").write_text("seed: 0\n")
        out[n] = str(tmp_path / f"{n}.yaml")
    return out


def test_grids_expand_to_every_combination_and_match_baselines_by_keys(tmp_path: Path) -> None:
    """Two grids: (data x method x graph) and (data x local). EdgeDRM on (spc, path) gets the DisPFL
    run on the same data and graph and the Local run on the same data (which has no graph key)."""
    data, graphs = _layers(tmp_path, "spc", "dir"), _layers(tmp_path, "path", "rr4")
    methods, local = _layers(tmp_path, "edgedrm", "dispfl"), _layers(tmp_path, "local")
    runs = plan(
        [],
        [7, 8],
        tmp_path / "out",
        refer=["edgedrm"],
        refer_baselines={"edgedrm": ["local", "dispfl"]},
        grids=[[data, methods, graphs], [data, local]],
    )
    assert len(runs) == 2 * (2 * 2 * 2 + 2)
    by_name = {r.name: r for r in runs}
    run = by_name["dir-edgedrm-rr4-seed8"]
    assert run.configs == tuple(Path(f) for f in (data["dir"], methods["edgedrm"], graphs["rr4"]))
    out = tmp_path / "out"
    assert run.refer_baselines == (out / "dir-local-seed8", out / "dir-dispfl-rr4-seed8")
    assert by_name["spc-dispfl-path-seed7"].refer_baselines is None
    with pytest.raises(ValueError, match="exactly one run"):  # two Local runs match: ambiguous
        plan([], [1], out, ["edgedrm"], ["local"], grids=[[data, methods], [data, local], [local]])
    with pytest.raises(ValueError, match="appears in two groups"):
        plan([], [1], out, grids=[[data, {"spc": data["spc"]}]])
    with pytest.raises(ValueError, match="without '-'"):
        plan([], [1], out, grids=[[{"a-b": data["spc"]}]])
    with pytest.raises(FileNotFoundError, match=r"grids\[0\]: no such layer file: x"):
        plan([], [1], out, grids=[[{"x": str(tmp_path / "missing.yaml")}]])


def test_a_layered_grid_runs_from_the_cli(tmp_path: Path) -> None:
    """The quickstart config with a layer that swaps the algorithm class (FedAvg -> LocalOnly) and
    one that changes the rounds: the run's resolved config holds both."""
    (tmp_path / "local.yaml").write_text("algorithm:\n  class_path: lightning_fed.algorithms.LocalOnly\n")
    (tmp_path / "short.yaml").write_text("trainer:\n  rounds: 1\n")
    sweep_file = tmp_path / "sweep.yaml"
    out = tmp_path / "runs"
    sweep_file.write_text(
        json.dumps(
            {
                "grids": [
                    [
                        {"fedavg": str(ROOT / "configs" / "fedavg.yaml")},
                        {"local": str(tmp_path / "local.yaml")},
                        {"short": str(tmp_path / "short.yaml")},
                    ]
                ],
                "seeds": [4],
                "output": str(out),
                "overrides": TINY[:2] + TINY[3:],
            }
        )
    )
    status = main_sweep(["--config", str(sweep_file)])
    assert status == {"fedavg-local-short-seed4": "done"}
    summary = json.loads((out / "fedavg-local-short-seed4" / "summary.json").read_text())
    assert summary["method"] == "LocalOnly" and summary["rounds"] == 1 and summary["seed"] == 4


def test_scheduler_refers_as_soon_as_inputs_are_fitted_and_skips_failed_inputs(tmp_path: Path) -> None:
    """One worker, order a-ref(a, b), b, c, d-ref(d, c): after a and b are fitted the referral of a runs
    before c is fitted; c fails, so d's referral is marked failed without running."""
    from lightning_fed.sweep import SweepRun, _Scheduler

    def run(name: str, baselines: tuple[str, ...] | None = None) -> SweepRun:
        dirs = None if baselines is None else tuple(tmp_path / b for b in baselines)
        return SweepRun((tmp_path / "x.yaml",), 1, tmp_path / name, dirs)

    runs = [run("a", ("b",)), run("b"), run("c"), run("d", ("c",))]
    scheduler = _Scheduler(runs, runs)
    order = []
    while (task := scheduler.take()) is not None:
        kind, r = task
        order.append(f"{kind} {r.name}")
        scheduler.finished(kind, r, ok=r.name != "c")
    assert order == ["fit a", "fit b", "refer a", "fit c", "fit d"]
    assert scheduler.status == {"a": "done", "b": "done", "c": "failed", "d": "failed"}


def test_folds_expand_every_cell_and_seed_into_k_runs_with_one_label(tmp_path: Path) -> None:
    """``folds: 3``: three runs per config and seed, named ``-fold<i>``, labelled by the config stem,
    each fit told its fold; without ``folds`` the plan is unchanged."""
    from lightning_fed.sweep import _fit_args

    runs = plan([ROOT / "configs" / "fedavg.yaml"], [11], tmp_path, folds=3)
    assert [r.name for r in runs] == ["fedavg-seed11-fold0", "fedavg-seed11-fold1", "fedavg-seed11-fold2"]
    assert {r.label for r in runs} == {"fedavg"}
    args = _fit_args(runs[2], [])
    assert "--data.split.folds=3" in args and "--data.split.fold=2" in args and "--seed=11" in args
    single = plan([ROOT / "configs" / "fedavg.yaml"], [11], tmp_path)
    assert not any(a.startswith("--data.split") for a in _fit_args(single[0], []))
    with pytest.raises(ValueError, match=r"sweep\.folds must be an integer >= 2"):
        plan([ROOT / "configs" / "fedavg.yaml"], [11], tmp_path, folds=1)
