"""The GroupNorm ResNet-18 of EdgeDRM (App. D.1, D.3.1), with a stride-one stem for small images.

Architecture (He et al. 2016, BasicBlock, [2, 2, 2, 2]) with every BatchNorm replaced by GroupNorm
(Wu & He 2018) so it has no running statistics and works per center under ``torch.vmap``:

* stem: 3x3 convolution, stride 1, ``w`` channels, GroupNorm, ReLU; no max-pool (CIFAR-style);
* four stages of two BasicBlocks with ``w, 2w, 4w, 8w`` channels, strides 1, 2, 2, 2; a block computes
  ``relu(GN(conv(relu(GN(conv(x))))) + shortcut(x))``, the shortcut a 1x1 strided conv + GN when the
  shape changes, else the identity;
* global average pooling to ``8w`` features (512 for ``w = 64``), then the
  :class:`~lightning_fed.models.cnn.ImageClassifier` projection ``512 -> 256`` (LayerNorm, ReLU) and head.

The paper does not state the number of GroupNorm groups; the default is 32 (Wu & He's default).
"""

from __future__ import annotations

from torch import Tensor, nn

from lightning_fed.models.cnn import ImageClassifier, width_and_groups

__all__ = ["BasicBlockGN", "ResNet18GN"]


class BasicBlockGN(nn.Module):
    """ResNet BasicBlock with GroupNorm: two 3x3 convs and a residual connection.

    Args:
        cin: Input channels.
        cout: Output channels.
        stride: Stride of the first conv (and of the projection shortcut).
        groups: GroupNorm groups (must divide ``cout``).
    """

    def __init__(self, cin: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.GroupNorm(groups, cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.norm1(self.conv1(x)).relu()
        out = self.norm2(self.conv2(out))
        return (out + self.shortcut(x)).relu()


class ResNet18GN(ImageClassifier):
    """GroupNorm ResNet-18 with a stride-one 3x3 stem, then the EdgeDRM projection and head.

    Args:
        num_classes: Number of classes (CIFAR-10: 10, ISIC2019: 8).
        embed_dim: Projection width (paper: 256).
        width: Stem width ``w`` (64 for the standard ResNet-18; smaller for CPU runs).
        groups: GroupNorm groups (must divide ``w``).
        in_channels, lr, momentum, weight_decay: As :class:`~lightning_fed.models.cnn.ImageClassifier`.
    """

    def __init__(
        self,
        num_classes: int = 10,
        embed_dim: int = 256,
        width: int = 64,
        groups: int = 32,
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
        return 8 * self.width

    def make_encoder(self, channels: int) -> nn.Module:
        w, g = self.width, self.groups
        layers: list[nn.Module] = [
            nn.Conv2d(channels, w, 3, stride=1, padding=1, bias=False),
            nn.GroupNorm(g, w),
            nn.ReLU(),
        ]
        cin = w
        for stage, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            stride = 1 if stage == 0 else 2
            layers += [BasicBlockGN(cin, cout, stride, g), BasicBlockGN(cout, cout, 1, g)]
            cin = cout
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        return nn.Sequential(*layers)
