"""Image classifiers for EdgeDRM: encoder -> task projection -> local classifier head (App. D.1, D.3.1).

:class:`ImageClassifier` is the shared shape of the image models: ``encoder`` maps images
``[n, C, H, W]`` to features ``[n, F]``; ``projection`` = Linear(F, d) -> LayerNorm(d) -> ReLU gives the
task representation ``z = encode(x)`` of width ``d = embed_dim`` (paper: 256); ``head`` = Linear(d, K)
gives the logits. The loss is multi-class cross-entropy per row,
``l(x, y) = -log softmax(head(z))_y``, and the optimizer SGD with momentum 0.9 and weight decay
``5e-4`` (App. D.2.1 / D.3.2; the learning-rate schedule belongs to the trainer).

:class:`SmallCNN` is a three-conv GroupNorm encoder for CPU runs (28x28 grey, 32x32 RGB, 8x8 digits).
"""

from __future__ import annotations

from abc import abstractmethod

import torch
from torch import Tensor, nn

from lightning_fed.models.base import CenterModule
from lightning_fed.validation import check_int, check_number

__all__ = ["ImageClassifier", "SmallCNN", "width_and_groups"]


def width_and_groups(width: int, groups: int) -> tuple[int, int]:
    """Validated ``(model.width, model.groups)``: GroupNorm needs ``groups`` to divide every layer
    width, which are multiples of ``width``."""
    width, groups = check_int("model.width", width, 1), check_int("model.groups", groups, 1)
    if width % groups:
        raise ValueError(f"model.groups={groups} must divide model.width={width} (and so every layer width)")
    return width, groups


class ImageClassifier(CenterModule):
    """Base of the image models: ``encoder``, ``projection`` to ``embed_dim``, ``head`` to ``num_classes``.

    Subclasses implement :meth:`make_encoder` and :attr:`feature_dim`, and call ``super().__init__``.

    Args:
        num_classes: Number of classes ``K``.
        embed_dim: Width ``d`` of the projected representation (paper: 256).
        in_channels: Input channels; None takes them from the data (``set_num_features``).
        lr: SGD learning rate.
        momentum: SGD momentum (paper: 0.9).
        weight_decay: SGD L2 weight decay (paper: 5e-4).
    """

    def __init__(
        self,
        num_classes: int = 10,
        embed_dim: int = 256,
        in_channels: int | None = None,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        super().__init__()
        self.num_classes = check_int("model.num_classes", num_classes, 2)
        self.embed_dim = check_int("model.embed_dim", embed_dim, 1)
        self.lr = check_number("model.lr", lr, 0.0, strict=True)
        self.momentum = check_number("model.momentum", momentum, 0.0, strict=False)
        if self.momentum >= 1.0:
            raise ValueError(f"model.momentum must be in [0, 1), got {momentum}")
        self.weight_decay = check_number("model.weight_decay", weight_decay, 0.0, strict=False)
        self.in_channels: int | None = None
        self.encoder: nn.Module = nn.Identity()  # replaced (same registration slot) by set_num_features
        self.projection = nn.Sequential(
            nn.Linear(self.feature_dim, self.embed_dim), nn.LayerNorm(self.embed_dim), nn.ReLU()
        )
        self.head = nn.Linear(self.embed_dim, self.num_classes)
        if in_channels is not None:
            self.set_num_features(in_channels)

    @property
    @abstractmethod
    def feature_dim(self) -> int:
        """Width ``F`` of the encoder's output."""

    @abstractmethod
    def make_encoder(self, channels: int) -> nn.Module:
        """The encoder for ``channels`` input channels: ``[n, channels, H, W] -> [n, feature_dim]``."""

    def set_num_features(self, num_features: int) -> None:
        """Build the encoder for ``num_features`` input channels (error if built for another number)."""
        if self.in_channels is not None:
            if self.in_channels != num_features:
                raise ValueError(
                    f"model.in_channels={self.in_channels} but the data has {num_features} channels: "
                    "remove model.in_channels or set it to the data's channel count"
                )
            return
        self.in_channels = check_int("model.in_channels", num_features, 1)
        self.encoder = self.make_encoder(self.in_channels)

    def encode(self, x: Tensor) -> Tensor:
        """Task representation ``z = ReLU(LayerNorm(W encoder(x) + b))``, shape ``[n, embed_dim]``."""
        if self.in_channels is None:
            raise ValueError(
                "the model has no encoder yet: call set_num_features(channels) or set model.in_channels"
            )
        return self.projection(self.encoder(x))

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[n, num_classes]`` for images ``[n, C, H, W]``."""
        return self.head(self.encode(x))

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        """``layers=1``: the classifier head; ``layers=2``: the projection (Linear, LayerNorm) and head."""
        if layers not in (1, 2):
            raise ValueError(f"head layers must be 1 (head) or 2 (projection + head), got {layers}")
        prefixes = ("head.",) if layers == 1 else ("projection.", "head.")
        return tuple(n for n, _ in self.named_parameters() if n.startswith(prefixes))

    def loss_rows(self, logits: Tensor, y: Tensor) -> Tensor:
        """Per-row cross-entropy ``-log softmax(logits)_y``, shaped like ``y``.

        ``logits [..., K]`` and class ids ``y [...]`` (any dtype; e.g. ``[k, B, K]`` and ``[k, B]`` from
        the packed engine).
        """
        rows = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1).long(), reduction="none"
        )
        return rows.reshape(y.shape)

    def forward_features(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Logits ``[n, K]`` and the representation ``z = encode(x)`` ``[n, embed_dim]`` the head reads."""
        z = self.encode(x)
        return self.head(z), z

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """SGD with momentum and L2 weight decay (App. D.2.1, D.3.2)."""
        return torch.optim.SGD(
            self.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay
        )


def conv_gn_relu(cin: int, cout: int, groups: int) -> list[nn.Module]:
    """3x3 convolution (padding 1, no bias) -> GroupNorm(groups) -> ReLU."""
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(groups, cout), nn.ReLU()]


class SmallCNN(ImageClassifier):
    """Three 3x3 conv -> GroupNorm -> ReLU blocks (widths w, 2w, 4w; 2x2 max-pool after the first two),
    global average pooling, then the projection and head of :class:`ImageClassifier`.

    Args:
        width: Channels ``w`` of the first block (default 32: feature width 128).
        groups: GroupNorm groups (must divide ``w``).
        num_classes, embed_dim, in_channels, lr, momentum, weight_decay: As :class:`ImageClassifier`.
    """

    def __init__(
        self,
        num_classes: int = 10,
        embed_dim: int = 256,
        width: int = 32,
        groups: int = 8,
        in_channels: int | None = None,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        self.width, self.groups = width_and_groups(width, groups)
        super().__init__(num_classes, embed_dim, in_channels, lr, momentum, weight_decay)
        self.save_hyperparameters()

    @property
    def feature_dim(self) -> int:
        return 4 * self.width

    def make_encoder(self, channels: int) -> nn.Module:
        w, g = self.width, self.groups
        return nn.Sequential(
            *conv_gn_relu(channels, w, g),
            nn.MaxPool2d(2),
            *conv_gn_relu(w, 2 * w, g),
            nn.MaxPool2d(2),
            *conv_gn_relu(2 * w, 4 * w, g),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
