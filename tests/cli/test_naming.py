"""Runs report as their configs: labels, unique default names, ``--config`` before every option.

Before this, a W&B agent's ``--seed=11 --config=configs/abps.yaml`` trained seed 0 (the file's
``seed: 0`` won by order), default folders were ``<algorithm class>-seed<s>-<second>`` (the 8 ABPS
presets all ``abps``; two agents started in one second shared a folder), and ``report`` grouped by
folder names.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from lightning_fed.cli import fit_parser, main
from lightning_fed.commands.common import configs_first as _configs_first
from lightning_fed.commands.fit import run_label as _label
from lightning_fed.reporting import collect_runs, table1
from lightning_fed.runfolder.session import run_folder_path as _run_dir

ROOT = Path(__file__).resolve().parents[2]


def _sweep_argvs(sweep_file: Path, order: tuple[str, ...]) -> list[list[str]]:
    """Every grid point's command line as W&B's agent builds it (its own builder), ``fit`` onwards.

    ``order``: the order in which the agent lists the parameters (it is the server's, not ours)."""
    from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

    spec = yaml.safe_load(sweep_file.read_text())
    values = {name: spec["parameters"][name]["values"] for name in order}
    argvs = []
    for combo in itertools.product(*values.values()):
        args = create_sweep_command_args(
            {"args": {k: {"value": v} for k, v in zip(order, combo, strict=True)}}
        )
        command = []
        for chunk in create_sweep_command(list(spec["command"])):
            command += args["args"] if chunk == "${args}" else [chunk]
        argvs.append(command[command.index("fit") + 1 :])
    return argvs


@pytest.mark.parametrize("order", [("config", "seed"), ("seed", "config")])
def test_wandb_sweep_runs_parse_name_and_report_as_their_configs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: tuple[str, ...]
) -> None:
    """The 26 configs x 5 seeds of ``wandb_table1.yaml``, through W&B's command builder and the fit
    parser: each run gets its own seed and its config's algorithm, a folder of its own, and a report
    over them has 26 rows of 5 seeds."""
    monkeypatch.chdir(ROOT)
    argvs = _sweep_argvs(ROOT / "configs" / "sweeps" / "wandb_table1.yaml", order)
    assert len(argvs) == 26 * 5
    parser = fit_parser()
    folders = set()
    for i, argv in enumerate(argvs):
        cfg = parser.parse_args(_configs_first(argv))
        config_file = next(Path(a.split("=", 1)[1]) for a in argv if a.startswith("--config="))
        seed = int(next(a.split("=", 1)[1] for a in argv if a.startswith("--seed=")))
        assert cfg.seed == seed, argv
        written = yaml.safe_load(config_file.read_text())
        if "algorithm" in written:
            assert cfg.algorithm.class_path == written["algorithm"]["class_path"], argv
        init = parser.instantiate(cfg)
        label = _label(cfg, init.output, init.algorithm)
        assert label == config_file.stem
        monkeypatch.setenv("WANDB_RUN_ID", f"run{i:03d}")
        init.output.root = tmp_path
        run = _run_dir(init.output, label, cfg.seed)
        folders.add(run)
        run.mkdir()
        summary = {"label": label, "seed": cfg.seed, "method": "X", "test_auroc_mean": 0.5 + i / 1000}
        (run / "summary.json").write_text(json.dumps(summary))
    assert len(folders) == 26 * 5
    table = table1(collect_runs(tmp_path))
    assert table.height == 26 and set(table["n_seeds"]) == {5}
    assert set(table["method"]) == {
        Path(p).stem
        for p in yaml.safe_load((ROOT / "configs" / "sweeps" / "wandb_table1.yaml").read_text())[
            "parameters"
        ]["config"]["values"]
    }


@pytest.mark.cli
def test_config_applies_before_options_whatever_their_order(tmp_path: Path) -> None:
    config = tmp_path / "mine.yaml"
    config.write_text("seed: 0\ntrainer: {rounds: 1}\ndata:\n  init_args: {num_centers: 6, num_stays: 900}\n")
    main(
        [
            "fit",
            "--seed=11",
            "--trainer.rounds=2",
            f"--config={config}",
            "--model.init_args.hidden=[8, 4]",
            "--logger.enabled=false",
            "--output.progress_bar=false",
            f"--output.root={tmp_path / 'runs'}",
        ]
    )
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["seed"] == 11 and summary["rounds"] == 2 and summary["label"] == "mine"
    assert run.name.startswith("mine-seed11-")


def test_default_names_differ_within_one_second(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from lightning_fed.config import OutputConfig

    for var in ("WANDB_RUN_ID", "SLURM_JOB_ID", "LIGHTNING_FED_RUN_NAME"):
        monkeypatch.delenv(var, raising=False)
    output = OutputConfig(root=str(tmp_path))
    names = {_run_dir(output, "abps", 3).name for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("abps-seed3-") for n in names)


def _summary(run: Path, label: str, seed: int, auroc: float) -> None:
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"label": label, "seed": seed, "test_auroc_mean": auroc}))


def test_report_groups_by_the_recorded_label_and_seed_not_folder_names(tmp_path: Path) -> None:
    """Folders ``M-s0``..``M-s2`` of label ``M`` (seeds 0-2) are one row of 3 seeds; ``abps`` and
    ``abps_x`` folders named alike stay two rows."""
    for seed in range(3):
        _summary(tmp_path / f"M-s{seed}", "M", seed, 0.7 + seed / 100)
    _summary(tmp_path / "abps-seed0-1", "abps", 0, 0.8)
    _summary(tmp_path / "abps-seed0-2", "abps_x", 0, 0.9)
    table = table1(collect_runs(tmp_path))
    rows = {r["method"]: r for r in table.iter_rows(named=True)}
    assert set(rows) == {"M", "abps", "abps_x"} and rows["M"]["n_seeds"] == 3
    assert rows["M"]["auroc_mean"] == pytest.approx(0.71)


def test_report_refuses_two_runs_of_one_label_and_seed(tmp_path: Path) -> None:
    _summary(tmp_path / "a", "M", 1, 0.7)
    _summary(tmp_path / "b", "M", 1, 0.8)
    with pytest.raises(ValueError, match=r"are all method 'M' with seed 1"):
        collect_runs(tmp_path)
