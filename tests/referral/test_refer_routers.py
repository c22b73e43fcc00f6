"""``refer_run(routers=...)``: the routers are a plugin list; None keeps today's six in today's order."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from lightning_fed.algorithms.edgedrm import EdgeDRM
from lightning_fed.federation import Federation
from lightning_fed.graphs.topology import Path as PathGraph
from lightning_fed.referral.refer import default_routers
from lightning_fed.referral.routers import CountOnlyRouter, EdgeDRMRouter, Router
from lightning_fed.referral.run import refer_run
from lightning_fed.types import TrainerConfig

from .test_algorithms import toy_federation
from .toy import ToyModule

SIX = [
    "EdgeDRM",
    "EdgeDRM w/o prior",
    "count-only",
    "random",
    "EdgeDRM-NR",
    "oracle router on EdgeDRM experts",
]


@pytest.fixture(scope="module")
def edgedrm_run() -> Federation:
    """A finished 3-client EdgeDRM federation (1 stage-I round, 5 stage-II epochs)."""
    fed = Federation(
        toy_federation(),
        ToyModule(),
        EdgeDRM(topology=PathGraph(), stage2_epochs=5),
        TrainerConfig(rounds=1, local_epochs=1, batch_size=64),
    )
    fed.fit()
    return fed


def test_custom_routers_give_exactly_their_rows(tmp_path: Path, edgedrm_run: Federation) -> None:
    routers = [CountOnlyRouter(), EdgeDRMRouter(prior=False, label="mine")]
    table = refer_run(tmp_path, lambda _folder: edgedrm_run, routers=routers)
    assert table["router"].unique(maintain_order=True).to_list() == [
        "count-only",
        "mine",
        "DFedAvgM (stage I)",
    ]
    assert table.height == 2 * 3 + 1  # three prediction rules per router, the stage-I row at its entry
    assert pl.read_csv(tmp_path / "referral.csv")["router"].to_list() == table["router"].to_list()


def test_default_routers_are_todays_six_in_order(tmp_path: Path, edgedrm_run: Federation) -> None:
    assert [r.label for r in default_routers()] == SIX
    table = refer_run(tmp_path, lambda _folder: edgedrm_run)
    assert table["router"].unique(maintain_order=True).to_list() == [*SIX, "DFedAvgM (stage I)"]


def test_two_routers_with_one_label_are_refused(tmp_path: Path, edgedrm_run: Federation) -> None:
    with pytest.raises(ValueError, match="count-only"):
        refer_run(tmp_path, lambda _folder: edgedrm_run, routers=[CountOnlyRouter(), CountOnlyRouter()])


def test_routers_parse_from_class_path_entries() -> None:
    """The CLI's ``--routers`` type: a list of Router class_path entries with init_args."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--routers", type=list[Router] | None, default=None)
    cfg = parser.parse_args(
        [
            "--routers=[{class_path: lightning_fed.referral.NoReferral},"
            " {class_path: lightning_fed.referral.EdgeDRMRouter, init_args: {prior: false, label: bare}}]"
        ]
    )
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # jsonargparse >= 4.49
    routers = instantiate(cfg).routers
    assert [r.label for r in routers] == ["EdgeDRM-NR", "bare"] and routers[1].prior is False
