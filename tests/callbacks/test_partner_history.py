"""PartnerHistory records what ABPS decided each round; the ABPS plots draw it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import ABPS, FedAvg
from lightning_fed.callbacks import PartnerHistory
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.reporting import isolation_curve, partner_graph_plot, posterior_plot
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation


def _fit(algo, history: PartnerHistory) -> Federation:
    fed = Federation(
        make_federation([40, 30, 50, 20, 60, 35]),
        MortalityMLP(hidden=(8, 4)),
        algo,
        TrainerConfig(rounds=3, batch_size=16),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[history]),
        seed=0,
    )
    fed.fit()
    return fed


def test_history_matches_the_algorithms_decisions(tmp_path: Path) -> None:
    history = PartnerHistory()
    history.setup_run_dir(tmp_path)
    fed = _fit(ABPS(), history)
    h = torch.load(tmp_path / "partner_history.pt")
    assert h["rounds"] == [0, 1, 2] and len(h["means"]) == 3
    last = fed.algorithm.last_partners
    pairs = {(min(i, j), max(i, j)) for i, ps in enumerate(last) for j in ps}
    assert {tuple(e) for e in h["edges"][-1].tolist()} == pairs
    assert h["isolation"][-1] == pytest.approx(sum(not p for p in last) / len(last))
    torch.testing.assert_close(h["means"][-1], fed.algorithm.selector.posterior.mean().float())
    for fig, name in (
        (posterior_plot(h, tmp_path / "post.png"), "post.png"),
        (partner_graph_plot(h, 6, tmp_path / "graph.png"), "graph.png"),
        (isolation_curve(h, tmp_path / "iso.png"), "iso.png"),
    ):
        assert fig is not None and (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_history_needs_partner_selection() -> None:
    with pytest.raises(ValueError, match="PartnerHistory needs an algorithm"):
        _fit(FedAvg(), PartnerHistory(filename=None))
