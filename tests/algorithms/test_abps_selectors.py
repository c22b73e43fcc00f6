"""ABPS with any PartnerSelector: graph neighbours by hand, no credit for baselines, YAML, kappa warning."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from lightning_fed.algorithms import ABPS
from lightning_fed.comm import Wire
from lightning_fed.graphs import Path as PathGraph
from lightning_fed.models import MortalityMLP
from lightning_fed.selection import GraphNeighbours, RandomPartners
from lightning_fed.selection.abps import BayesianSelector
from lightning_fed.types import RoundContext
from tests.conftest import make_federation


def _setup(sizes: list[int], algo: ABPS, values: list[float]) -> tuple[MortalityMLP, dict]:
    data = make_federation(sizes)
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo.setup(data, module, seed=0)
    params = {n: torch.stack([torch.full_like(p, v) for v in values]) for n, p in module.named_parameters()}
    return module, params


def _recording_ctx(calls: list) -> RoundContext:
    def utility(params: dict, centers: torch.Tensor) -> torch.Tensor:
        calls.append(len(centers))
        return params["layers.0.bias"][:, 0].double()

    return RoundContext(round=0, seed=0, val_utility=utility)


def test_graph_neighbours_on_a_path_average_by_size_with_the_neighbours() -> None:
    """Path 0 - 1 - 2, n = (30, 10, 20), theta = (1, 5, 2):
    theta_0 = (30*1 + 10*5) / 40 = 2, theta_1 = (30*1 + 10*5 + 20*2) / 60 = 2,
    theta_2 = (10*5 + 20*2) / 30 = 3; four messages of |W| (2 edges x 2|W|)."""
    algo = ABPS(selector=GraphNeighbours(PathGraph()))
    module, params = _setup([30, 10, 20], algo, [1.0, 5.0, 2.0])
    wire = Wire()
    calls: list = []
    out = algo.aggregate(_recording_ctx(calls), params, wire)
    w = out["layers.0.weight"]
    assert [w[i].unique().tolist() for i in range(3)] == [[2.0], [2.0], [3.0]]
    size = sum(p.numel() for p in module.parameters()) * 4
    assert wire.ledger.total() == 4 * size
    assert algo.last_partners == [[1], [0, 2], [1]]
    assert calls == []  # the graph baseline learns nothing: no Shapley credit is computed


def test_shapley_credit_runs_only_for_a_selector_that_learns() -> None:
    """Same partners from a RandomPartners and a BayesianSelector: only the Bayesian one evaluates
    coalitions (val_utility) and moves its posterior; the mixed parameters are the same."""
    outs = {}
    for name, selector in (("random", RandomPartners(kappa=1)), ("bayes", BayesianSelector(kappa=1))):
        algo = ABPS(selector=selector)
        _, params = _setup([30, 10], algo, [1.0, 5.0])
        algo.selector.select = lambda round_idx: [[1], [0]]
        calls: list = []
        outs[name] = algo.aggregate(_recording_ctx(calls), params, Wire())
        assert bool(calls) == (name == "bayes")
        assert algo.round_stats()["seconds_shapley"] >= 0.0
    assert all(torch.equal(outs["random"][n], outs["bayes"][n]) for n in outs["bayes"])


@pytest.mark.parametrize(
    ("selector", "centers", "warns"),
    [
        (BayesianSelector(kappa=3), 4, True),
        (BayesianSelector(kappa=3), 5, False),
        (RandomPartners(kappa=5), 3, True),
        (GraphNeighbours(PathGraph()), 3, False),
        (GraphNeighbours(PathGraph()), 2, True),
    ],
    ids=["bayes-k3-c4", "bayes-k3-c5", "random-k5-c3", "path-c3", "path-c2"],
)
def test_kappa_covering_every_peer_warns_at_setup(
    caplog: pytest.LogCaptureFixture, selector, centers: int, warns: bool
) -> None:
    """kappa >= C - 1: every center may partner every other, so ABPS is FedAvg at (C - 1) / 2 x bytes."""
    with caplog.at_level(logging.WARNING, logger="lightning_fed.algorithms.abps"):
        _setup([30 + 10 * i for i in range(centers)], ABPS(selector=selector), [1.0] * centers)
    hits = [r for r in caplog.records if "FedAvg over everyone" in r.getMessage()]
    assert bool(hits) == warns
    if warns:
        assert f"data.num_centers - 1 = {centers - 1}" in hits[0].getMessage()


SELECTORS = {
    "bayesian": "class_path: lightning_fed.selection.abps.BayesianSelector\n      init_args: {kappa: 2}",
    "random": "class_path: lightning_fed.selection.RandomPartners\n      init_args: {kappa: 2}",
    "graph": (
        "class_path: lightning_fed.selection.GraphNeighbours\n      init_args:\n        topology:\n"
        "          class_path: lightning_fed.graphs.Cycle"
    ),
}


@pytest.mark.cli
@pytest.mark.parametrize("name", list(SELECTORS))
def test_abps_with_each_selector_runs_from_yaml_through_the_cli(tmp_path: Path, name: str) -> None:
    """``algorithm.init_args.selector.class_path`` picks the selector; the resolved config records it
    and the run exchanges bytes (kappa 2 / a cycle: at most 2 partners per center)."""
    from lightning_fed.cli import main
    from tests.cli.test_cli import TINY  # the tiny SyntheticICU of the CLI tests (8 centers, 2 rounds)

    config = tmp_path / "abps.yaml"
    config.write_text(
        "algorithm:\n  class_path: lightning_fed.algorithms.ABPS\n  init_args:\n    selector:\n"
        f"      {SELECTORS[name]}\n"
    )
    main(
        [
            "fit",
            "--config",
            str(config),
            *TINY,
            "--logger.enabled=false",
            "--output.progress_bar=false",
            f"--output.root={tmp_path}",
            "--output.name=run",
        ]
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["method"] == "ABPS" and summary["rounds"] == 2
    assert summary["total_bytes"] > 0 and 0 < summary["mean_partners"] <= 2
    resolved = (tmp_path / "run" / "config.yaml").read_text()
    assert SELECTORS[name].splitlines()[0].split(": ")[1] in resolved
    if name == "graph":
        assert summary["mean_partners"] == 2 and summary["isolation_rate"] == 0
