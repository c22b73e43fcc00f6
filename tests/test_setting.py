"""``run_setting``: the report keys recorded at fit time equal what reports parsed from class names."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonargparse import ArgumentParser

from lightning_fed.algorithms.base import Algorithm
from lightning_fed.data import DataSource
from lightning_fed.setting import NO_GRAPH, run_setting, topology_of

try:  # the legacy parser of older runs (reporting keeps it as the fallback for their config.yaml)
    from lightning_fed.reporting.settings import legacy_setting
except ImportError:  # pragma: no cover - the layout of the starting commit
    from lightning_fed.reporting.edgedrm_tables import run_setting as _old

    def legacy_setting(config: dict[str, Any]) -> dict[str, str]:
        old = _old(config)
        return {"data": old["dataset"], "partition": old["partition"], "graph": old["graph"]}


ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "configs" / "edgedrm_bench"
SHIPPED = sorted(
    str(p.relative_to(ROOT))
    for p in [*ROOT.glob("configs/*.yaml"), *ROOT.glob("configs/notebooks/*.yaml")]
    if {"data", "algorithm"} <= set(yaml.safe_load(p.read_text()) or {})  # run configs, not sweep notes
)
GRAPH_METHODS = ["edgedrm_cpu.yaml", "dispfl_cpu.yaml", "fedspd_cpu.yaml"]


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(a)
    for k, v in b.items():
        out[k] = (
            _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
        )
    return out


def _config(*files: str | Path) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for f in files:
        config = _merge(config, yaml.safe_load((ROOT / f).read_text()) or {})
    return config


def _build(group: str, base: type, node: dict[str, Any]) -> Any:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(base, group)
    return parser.instantiate_classes(parser.parse_object({group: node}))[group]


def _data(config: dict[str, Any], tmp_path: Path) -> Any:
    """The config's data source; a CIFAR root is pointed at an empty stand-in (nothing is read)."""
    node = copy.deepcopy(config["data"])
    if node["class_path"].endswith("CIFAR"):
        variant = node.get("init_args", {}).get("variant", 10)
        (tmp_path / ("cifar-10-batches-py" if variant == 10 else "cifar-100-python")).mkdir(exist_ok=True)
        node["init_args"]["root"] = str(tmp_path)
    return _build("data", DataSource, node)


def _expected_graph(config: dict[str, Any], algorithm: Any) -> str:
    return legacy_setting(config)["graph"] if topology_of(algorithm) is not None else NO_GRAPH


@pytest.mark.parametrize("path", SHIPPED)
def test_shipped_config_setting_matches_the_legacy_parser(path: str, tmp_path: Path) -> None:
    config = _config(path)
    try:
        data = _data(config, tmp_path)
    except ValueError as err:  # a data root this machine lacks (MIMIC-IV, eICU, ISIC)
        pytest.skip(f"{path}: {err}")
    algorithm = _build("algorithm", Algorithm, config["algorithm"])
    legacy = legacy_setting(config)
    assert run_setting(data, algorithm) == {
        "data": legacy["data"],
        "partition": legacy["partition"],
        "graph": _expected_graph(config, algorithm),
    }


@pytest.mark.parametrize("partition", [None, "spc5.yaml", "spc25.yaml", "dir03.yaml"])
@pytest.mark.parametrize(
    "data", ["fmnist_cpu.yaml", "fmnist32_cpu.yaml", "cifar10_cpu.yaml", "cifar20_gpu.yaml"]
)
def test_benchmark_data_and_partitions_match_the_legacy_parser(
    data: str, partition: str | None, tmp_path: Path
) -> None:
    files = [BENCH / "data" / data] + ([BENCH / "partitions" / partition] if partition else [])
    config = _config(*files)
    source = _data(config, tmp_path)
    legacy = legacy_setting(config)
    setting = run_setting(source, None)
    assert (setting["data"], setting["partition"]) == (legacy["data"], legacy["partition"])
    assert setting["graph"] == NO_GRAPH


@pytest.mark.parametrize("graph", [None, *sorted(p.name for p in (BENCH / "graphs").glob("*.yaml"))])
@pytest.mark.parametrize("method", GRAPH_METHODS)
def test_benchmark_graph_methods_match_the_legacy_parser(method: str, graph: str | None) -> None:
    files = [BENCH / "methods" / method] + ([BENCH / "graphs" / graph] if graph else [])
    config = _config(*files)
    algorithm = _build("algorithm", Algorithm, config["algorithm"])
    assert topology_of(algorithm) is not None
    assert run_setting(None, algorithm)["graph"] == legacy_setting(config)["graph"]


@pytest.mark.parametrize("method", ["feddrm_cpu.yaml", "local_cpu.yaml"])
def test_methods_without_a_graph_are_the_reference_group(method: str) -> None:
    algorithm = _build("algorithm", Algorithm, _config(BENCH / "methods" / method)["algorithm"])
    assert topology_of(algorithm) is None and run_setting(None, algorithm)["graph"] == NO_GRAPH


def test_report_keys_of_the_parts() -> None:
    from lightning_fed.data import IID, BalancedSizes, Dirichlet, DirichletLabels, Natural, Shards
    from lightning_fed.graphs import Complete, EdgeList, HospitalTiers, RandomRegular

    assert [p.report_key() for p in (Shards(5), Shards(), DirichletLabels(0.3), BalancedSizes([3, 4]))] == [
        "5-SPC",
        "default-SPC",
        "Dir-0.3",
        "balanced",
    ]
    assert [p.report_key() for p in (Dirichlet(4, alpha=0.5), IID(3), Natural())] == [
        "Dir-0.5",
        "IID",
        "Natural",
    ]
    assert RandomRegular(3).report_key() == "RR3" and Complete().report_key() == "Complete"
    assert (
        EdgeList([[0, 1]], name="RR4").report_key() == "RR4" and EdgeList([[0, 1]]).report_key() == "EdgeList"
    )
    assert HospitalTiers().report_key() == "Tiers-layered"
    assert HospitalTiers(shortcut=True, small=4, medium=2, large=2).report_key() == "Tiers-shortcut 4/2/2"


@pytest.mark.cli
def test_setting_module_is_import_light() -> None:
    code = "import sys, lightning_fed.setting; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
