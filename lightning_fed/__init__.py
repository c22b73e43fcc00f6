"""lightning-fed: decentralized federated learning across clinical centers on Lightning Fabric.

Import-light on purpose: ``import lightning_fed`` does not import torch or lightning, so the CLI's
``--help`` answers at once. Import what you need from the subpackages::

    from lightning_fed.data import SyntheticICU
    from lightning_fed.models import MortalityMLP
    from lightning_fed.algorithms import FedAvg
    from lightning_fed.federation import Federation
"""

__version__ = "0.1.0"
