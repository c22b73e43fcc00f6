"""The DFedAvgM row of ``refer_run`` with and without EdgeDRM's encoder consensus (issue 15, fair
controls): the row reads the stage-I heads on the same encoders EdgeDRM uses (post-consensus), and a
run with ``consensus_steps > 0`` adds the stage-I model as trained as a separate pre-consensus row."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import lightning_fed.referral.run as run_module
from lightning_fed.algorithms.edgedrm import EdgeDRM
from lightning_fed.federation import Federation
from lightning_fed.graphs.topology import Path as PathGraph
from lightning_fed.referral.routers import CountOnlyRouter
from lightning_fed.referral.run import refer_run
from lightning_fed.reporting.edgedrm_tables import table_method
from lightning_fed.types import TrainerConfig

from .test_algorithms import toy_federation
from .toy import ToyModule

PRE = "DFedAvgM (stage I, pre-consensus)"


def _fitted(consensus_steps: int) -> Federation:
    fed = Federation(
        toy_federation(),
        ToyModule(),
        EdgeDRM(topology=PathGraph(), stage2_epochs=3, consensus_steps=consensus_steps),
        TrainerConfig(rounds=1, local_epochs=1, batch_size=64),
    )
    fed.fit()
    return fed


@pytest.fixture(scope="module")
def with_consensus() -> Federation:
    return _fitted(4)


@pytest.fixture(scope="module")
def without_consensus() -> Federation:
    return _fitted(0)


def _recorded(monkeypatch, tmp_path: Path, fed: Federation) -> tuple[dict[str, dict], list[str]]:
    """The params every ``refer_frames`` call of ``refer_run`` got, by its (single) router label."""
    seen: dict[str, dict] = {}
    real = run_module.refer_frames

    def spy(out, module, params, data, routers=None, **kwargs):
        if routers is not None and len(routers) == 1:
            seen[routers[0].label] = {n: t.detach().clone() for n, t in params.items()}
        return real(out, module, params, data, routers=routers, **kwargs)

    monkeypatch.setattr(run_module, "refer_frames", spy)
    table = refer_run(tmp_path, lambda _folder: fed, routers=[CountOnlyRouter()])
    return seen, table["router"].unique(maintain_order=True).to_list()


def test_consensus_run_reads_dfedavgm_on_the_post_consensus_encoders(
    monkeypatch, tmp_path: Path, with_consensus: Federation
) -> None:
    fed, alg = with_consensus, with_consensus.algorithm
    seen, routers = _recorded(monkeypatch, tmp_path, fed)
    assert routers == ["count-only", "DFedAvgM (stage I)", PRE]
    final = fed.center_params()  # EdgeDRM's model: post-consensus encoders, stage-II heads
    fair, pre = seen["DFedAvgM (stage I)"], seen[PRE]
    # The consensus really moved the encoders, so the two rows differ.
    assert not torch.equal(alg.stage1_head["proj.weight"], final["proj.weight"])
    # The table's DFedAvgM row: EdgeDRM's own encoders with the stage-I heads.
    assert torch.equal(fair["proj.weight"], final["proj.weight"])
    for n in ("head.weight", "head.bias"):
        assert torch.equal(fair[n], alg.stage1_head[n])
        assert torch.equal(pre[n], alg.stage1_head[n])
    # The pre-consensus row: the stage-I model exactly as trained.
    assert torch.equal(pre["proj.weight"], alg.stage1_head["proj.weight"])


def test_without_consensus_the_one_row_is_the_stage1_model(
    monkeypatch, tmp_path: Path, without_consensus: Federation
) -> None:
    fed, alg = without_consensus, without_consensus.algorithm
    assert set(alg.stage1_head) == {"head.weight", "head.bias"}  # nothing else changed in stage II
    seen, routers = _recorded(monkeypatch, tmp_path, fed)
    assert routers == ["count-only", "DFedAvgM (stage I)"]
    final, row = fed.center_params(), seen["DFedAvgM (stage I)"]
    assert torch.equal(row["proj.weight"], final["proj.weight"])
    assert torch.equal(row["head.weight"], alg.stage1_head["head.weight"])


def test_the_tables_read_the_fair_row_only() -> None:
    """Tables 1/2 take ``DFedAvgM (stage I)`` as DFedAvgM; the pre-consensus row stays in referral.csv."""
    assert table_method("DFedAvgM (stage I)", "hard terminal") == "DFedAvgM"
    assert table_method(PRE, "hard terminal") is None
