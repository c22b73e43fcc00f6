"""The resolved ``config.yaml`` of a hand-made EdgeDRM run folder (Fashion-MNIST / Dir-0.3, RR4)."""

from __future__ import annotations

_TEMPLATE = """seed: {seed}
data:
  class_path: lightning_fed.data.FashionMNIST
  init_args:
    num_clients: {clients}
    partition: {{class_path: lightning_fed.data.DirichletLabels, init_args: {{alpha: 0.3}}}}
algorithm:
  class_path: lightning_fed.algorithms.EdgeDRM
  init_args:
    topology: {{class_path: lightning_fed.graphs.EdgeList, init_args: {{name: RR4, edges: [[0, 1]]}}}}
    lam: {lam}
"""


def rr4_dir03_config(seed: int, lam: float, clients: int = 8) -> str:
    """What ``lightning-fed fit`` would have written for such a run (the fields the reports read)."""
    return _TEMPLATE.format(seed=seed, lam=lam, clients=clients)
