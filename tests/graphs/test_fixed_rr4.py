"""Fair EdgeDRM controls (issue 15): the fixed RR4 EdgeList layers (one adjacency for every run seed,
as the paper's App. D.1) and ``consensus_steps: 0`` in every paper-protocol config, read the way the
sweep reads them (``plan`` for the run stacks, the ``fit`` parser to merge each stack's layers)."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import pytest
import torch
import yaml

from lightning_fed.cli import fit_parser
from lightning_fed.graphs import EdgeList, RandomRegular, Topology
from lightning_fed.graphs.gossip import build_graph
from lightning_fed.reporting.edgedrm_tables import run_setting
from lightning_fed.sweep import plan

ROOT = Path(__file__).resolve().parents[2]
GRAPHS = ROOT / "configs" / "edgedrm_bench" / "graphs"
SWEEPS = ROOT / "configs" / "sweeps"
SEEDS = (2025, 2026, 2027)
#: The paper's 8-client RR4 neighbourhoods (EdgeDRM App. D.1, clients numbered 1..8).
PAPER_RR4_8 = {
    1: {2, 3, 4, 5},
    2: {1, 3, 6, 7},
    3: {1, 2, 4, 8},
    4: {1, 3, 5, 7},
    5: {1, 4, 6, 8},
    6: {2, 5, 7, 8},
    7: {2, 4, 6, 8},
    8: {3, 5, 6, 7},
}
#: Sweeps that claim the paper's protocol, and the fixed RR4 layer each one's ``rr4`` key must name.
PAPER_SWEEPS = {
    "edgedrm_table1_cpu": "rr4_fixed8.yaml",
    "edgedrm_table1_gpu": "rr4_fixed8.yaml",
    "edgedrm_table1_cifar10_cpu": "rr4_fixed8.yaml",
    "edgedrm_lambda_cpu": "rr4_fixed8.yaml",
    "edgedrm_table2_cpu": "rr4_fixed32.yaml",
    "edgedrm_table2_gpu": "rr4_fixed32.yaml",
}
#: The decentralized methods of the EdgeDRM sweeps (grid keys).
METHODS = ("edgedrm", "dispfl", "fedspd")
#: Standalone configs that claim the paper's protocol (stage I + stage II, no extra consensus).
PAPER_CONFIGS = [
    "configs/edgedrm_bench/methods/edgedrm_cpu.yaml",
    "configs/edgedrm_bench/methods/edgedrm_gpu.yaml",
    "configs/edgedrm_bench/methods/edgedrm_isic_gpu.yaml",
    "configs/edgedrm_fmnist.yaml",
    "configs/edgedrm_fmnist_path.yaml",
    "configs/edgedrm_fmnist_cycle.yaml",
    "configs/edgedrm_fmnist_complete.yaml",
]


@pytest.fixture(scope="module")
def parser():
    return fit_parser()


def _layer_edges(name: str) -> list[list[int]]:
    topo = yaml.safe_load((GRAPHS / name).read_text())["algorithm"]["init_args"]["topology"]
    assert topo["class_path"] == "lightning_fed.graphs.EdgeList"
    assert topo["init_args"]["name"] == "RR4"
    return topo["init_args"]["edges"]


@pytest.mark.parametrize(("name", "clients"), [("rr4_fixed8.yaml", 8), ("rr4_fixed32.yaml", 32)])
def test_fixed_rr4_is_4_regular_connected_simple(name: str, clients: int) -> None:
    edges = _layer_edges(name)
    assert len(edges) == 2 * clients  # n * k / 2 with k = 4: 16 and 64
    assert all(len(e) == 2 and e[0] != e[1] for e in edges)  # no self-loops
    assert len({tuple(sorted(e)) for e in edges}) == len(edges)  # no duplicates, either orientation
    assert {v for e in edges for v in e} == set(range(clients))
    g = EdgeList(edges, name="RR4").build(clients, seed=0)
    assert g.num_edges == 2 * clients
    assert g.degree.tolist() == [4] * clients
    assert g.is_connected
    assert not bool(g.adjacency.diagonal().any())


def test_the_8_client_graph_is_the_papers_adjacency() -> None:
    """rr4_fixed8.yaml is App. D.1's N(1)..N(8), renumbered 1..8 -> 0..7 (diameter 2)."""
    paper = {tuple(sorted((u - 1, v - 1))) for u, ns in PAPER_RR4_8.items() for v in ns}
    assert all(u in PAPER_RR4_8[v] for u, ns in PAPER_RR4_8.items() for v in ns)  # symmetric as printed
    assert {tuple(sorted(e)) for e in _layer_edges("rr4_fixed8.yaml")} == paper
    assert EdgeList(_layer_edges("rr4_fixed8.yaml")).build(8).diameter == 2


def test_the_isic_rr3_graph_is_the_papers_edge_set() -> None:
    """rr3_isic6.yaml is App. D.3.1's E(RR3) renumbered 1..6 -> 0..5: 3-regular, connected, 9 edges."""
    paper = {(1, 2), (1, 5), (1, 6), (2, 3), (2, 4), (3, 5), (3, 6), (4, 5), (4, 6)}
    topo = yaml.safe_load((GRAPHS / "rr3_isic6.yaml").read_text())["algorithm"]["init_args"]["topology"]
    assert topo["class_path"] == "lightning_fed.graphs.EdgeList" and topo["init_args"]["name"] == "RR3"
    edges = topo["init_args"]["edges"]
    assert {(u + 1, v + 1) for u, v in edges} == paper and len(edges) == 9
    g = EdgeList(edges, name="RR3").build(6, seed=0)
    assert g.degree.tolist() == [3] * 6 and g.is_connected


def test_the_32_client_graph_is_the_seed_82025_draw_written_out() -> None:
    """rr4_fixed32.yaml is RandomRegular(4, seed=82025) on 32 nodes (rr4_82025.yaml's graph): 64 edges,
    diameter four, as the paper describes its seed-82025 graph."""
    g = EdgeList(_layer_edges("rr4_fixed32.yaml")).build(32)
    assert torch.equal(g.edges, RandomRegular(4, seed=82025).build(32, seed=0).edges)
    assert g.diameter == 4


def _topology(node) -> Topology:
    """Instantiate a parsed ``class_path`` / ``init_args`` topology namespace."""
    module, name = node.class_path.rsplit(".", 1)
    args = node.init_args.as_dict() if node.get("init_args") is not None else {}
    return getattr(import_module(module), name)(**args)


def _plan(sweep: str, seeds=SEEDS) -> list:
    spec = yaml.safe_load((SWEEPS / f"{sweep}.yaml").read_text())
    return plan(
        spec.get("configs", []),
        list(seeds),
        "out",
        spec.get("refer", []),
        spec.get("refer_baselines", []),
        spec.get("grids", []),
    )


@pytest.mark.parametrize("sweep", sorted(PAPER_SWEEPS))
def test_every_rr4_run_of_a_paper_sweep_builds_one_graph_for_every_seed(
    sweep: str, parser, monkeypatch
) -> None:
    """Every ``rr4`` cell (EdgeDRM, DisPFL, FedSPD; every data set and partition) names the fixed layer,
    and the merged config (one cell per method: parsing is the slow part) builds the same adjacency for
    seeds 2025, 2026 and 2027, the fixed one."""
    monkeypatch.chdir(ROOT)
    runs = [r for r in _plan(sweep) if "-rr4" in r.name]
    assert {r.seed for r in runs} == set(SEEDS)
    fixed = PAPER_SWEEPS[sweep]
    expected = EdgeList(_layer_edges(fixed)).build(8 if fixed == "rr4_fixed8.yaml" else 32)
    assert all(fixed in {c.name for c in r.configs} for r in runs)
    per_method = {m: next((r.configs for r in runs if f"-{m}-" in r.name), None) for m in METHODS}
    assert per_method["edgedrm"] is not None
    for configs in filter(None, per_method.values()):
        cfg = parser.parse_args([a for c in configs for a in ("--config", str(c))])
        topology = _topology(cfg.algorithm.init_args.topology)
        assert isinstance(topology, EdgeList)
        n = int(cfg.data.init_args.num_clients)
        adjacency = [build_graph(topology, n, seed).adjacency for seed in SEEDS]
        assert all(torch.equal(a, expected.adjacency) for a in adjacency), configs
        setting = run_setting(yaml.safe_load(parser.dump(cfg)))
        assert (setting["graph"], setting["clients"]) == ("RR4", n)  # still the RR4 row of the tables


def test_the_old_per_seed_layer_redraws_the_graph() -> None:
    """Why the fixed layers: rr4.yaml's RandomRegular(4) without a seed gives each run seed its own graph."""
    draws = {tuple(RandomRegular(4).build(8, seed=s).edges.flatten().tolist()) for s in SEEDS}
    assert len(draws) > 1


@pytest.mark.parametrize("sweep", [*sorted(PAPER_SWEEPS), "edgedrm_fmnist"])
def test_paper_sweeps_resolve_to_no_extra_consensus(sweep: str, parser, monkeypatch) -> None:
    """Every EdgeDRM run of a paper-protocol sweep merges to ``consensus_steps == 0`` (App. D.2.1: "no
    additional consensus phase is applied")."""
    monkeypatch.chdir(ROOT)
    stacks = {r.configs for r in _plan(sweep, seeds=SEEDS[:1]) if "edgedrm" in r.name}
    checked = 0
    for configs in stacks:
        cfg = parser.parse_args([a for c in configs for a in ("--config", str(c))])
        if cfg.algorithm.class_path.endswith(".EdgeDRM"):
            assert cfg.algorithm.init_args.consensus_steps == 0, configs
            checked += 1
    assert checked


@pytest.mark.parametrize("config", PAPER_CONFIGS)
def test_paper_protocol_configs_set_consensus_steps_0(config: str, parser) -> None:
    layer = yaml.safe_load((ROOT / config).read_text())
    assert layer["algorithm"]["init_args"]["consensus_steps"] == 0
    cfg = parser.parse_args(["--config", str(ROOT / config)])
    assert cfg.algorithm.class_path.endswith(".EdgeDRM")
    assert cfg.algorithm.init_args.consensus_steps == 0


def test_an_unnamed_edge_list_reads_as_edgelist_in_the_tables() -> None:
    base = {"data": {"init_args": {"num_clients": 8}}, "algorithm": {"init_args": {}}}
    topo = {"class_path": "lightning_fed.graphs.EdgeList", "init_args": {"edges": [[0, 1]], "name": None}}
    base["algorithm"]["init_args"]["topology"] = topo
    assert run_setting(base)["graph"] == "EdgeList"
    topo["init_args"]["name"] = "RR4"
    assert run_setting(base)["graph"] == "RR4"
    rr = {"class_path": "lightning_fed.graphs.RandomRegular", "init_args": {"degree": 3}}
    base["algorithm"]["init_args"]["topology"] = rr
    assert run_setting(base)["graph"] == "RR3"
