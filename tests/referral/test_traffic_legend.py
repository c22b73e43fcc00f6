"""``referral_traffic.png``'s legend: the uniform load and the widest edge, beside the tiers."""

from __future__ import annotations

import torch

from lightning_fed.plots.referral import routing_figure


def test_legend_names_the_uniform_load_and_the_widest_edge() -> None:
    # A path 0-1-2: 12 calls over 3 clients -> a uniform load of 4 per client; edge (0, 1) carries 5.
    adjacency = torch.tensor([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=torch.bool)
    calls = torch.tensor([2, 7, 3])
    traffic = torch.tensor([[0, 5, 0], [5, 0, 2], [0, 2, 0]])
    fig = routing_figure(adjacency, calls, traffic, tiers=("small", "large", "small"))
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["small", "large", "uniform load: 4 calls per client", "widest edge: 5 moves"]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {"0: 2", "1: 7", "2: 3"} <= set(texts) and any("node area: calls" in t for t in texts)
