"""Per-center models (LightningModules the engines pack)."""

from lightning_fed.models.base import CenterModule
from lightning_fed.models.bayes_mlp import BayesianMLP
from lightning_fed.models.cnn import ImageClassifier, SmallCNN
from lightning_fed.models.mlp import MortalityMLP
from lightning_fed.models.resnet import ResNet18GN

__all__ = ["CenterModule", "ImageClassifier", "MortalityMLP", "ResNet18GN", "SmallCNN"]
__all__ += ["BayesianMLP"]
# A plain LightningModule is wrapped by lightning_fed.models.adapter (not a model to choose).
