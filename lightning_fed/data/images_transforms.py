"""Deterministic per-client colour transforms (EdgeDRM App. D.1), applied once when a federation is built.

EdgeDRM makes clients differ in *appearance* as well as in label mix: every client's images pass
through one fixed colour transform before normalization. A :class:`ColourTransform` applies, in this
order, to images in ``[0, 1]`` of shape ``[n, C, H, W]``:

1. gamma correction ``x <- x ** gamma`` (as torchvision ``adjust_gamma`` with gain 1);
2. RGB: hue shift ``h <- (h + hue) mod 1`` in HSV (:func:`shift_hue`, equal to torchvision ``adjust_hue``
   up to float rounding and several times faster on CPU);
   grey: additive brightness ``x <- clip(x + brightness, 0, 1)`` (the additive analogue of the hue shift);
3. RGB: saturation ``x <- clip(s x + (1 - s) grey(x), 0, 1)`` (torchvision ``adjust_saturation``);
   grey: contrast ``x <- clip(c x + (1 - c) mean(x), 0, 1)`` with the per-image mean (``adjust_contrast``);
4. optional posterization to ``bits`` bits per channel (on the 8-bit image).

The client families (client ``i``, 0-based, gets entry ``i mod len(family)``):

* :func:`rgb_eight` (App. D.1, eight-client benchmark): gamma {0.6, 1.4} x hue {-0.1, +0.1} x
  saturation {0.5, 1.5}, gamma varying slowest.
* :func:`rgb_thirty_two` (App. D.1, thirty-two-client scaling): gamma {0.6, 1.0, 1.4} x hue
  {-0.15, 0, 0.15} x saturation {0.4, 1.0, 1.6} for clients 1-27 (1-based), and two-bit
  posterization for clients 28-32. The paper does not say what else clients 28-32 get; here client
  ``27 + j`` (j = 1..5) gets grid entry ``j`` composed with the posterization, so the five differ.
* :func:`grey_eight` / :func:`grey_thirty_two`: the grey-scale analogue for Fashion-MNIST and digits,
  with brightness offsets in place of hue shifts and contrast in place of saturation, at the same
  levels: gamma {0.6, 1.4} x brightness {-0.1, +0.1} x contrast {0.5, 1.5}, and gamma {0.6, 1.0, 1.4}
  x brightness {-0.15, 0, 0.15} x contrast {0.4, 1.0, 1.6} plus two-bit posterization for 28-32.

:func:`client_transforms` picks the eight-client family for up to eight clients and the thirty-two
one otherwise.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torchvision.transforms.functional as TF
from torch import Tensor

__all__ = [
    "ColourTransform",
    "client_transforms",
    "grey_eight",
    "grey_thirty_two",
    "rgb_eight",
    "rgb_thirty_two",
    "shift_hue",
]


def shift_hue(x: Tensor, shift: float) -> Tensor:
    """Rotate the HSV hue of RGB images ``[n, 3, H, W]`` in ``[0, 1]`` by ``shift`` turns.

    With ``v = max(r, g, b)``, ``c = v - min(r, g, b)`` (chroma) and hue ``h`` in turns (the usual
    piecewise formula: ``((g - b) / c mod 6) / 6`` when ``v = r``, ``((b - r) / c + 2) / 6`` when
    ``v = g``, else ``((r - g) / c + 4) / 6``), the shifted hue ``h' = (h + shift) mod 1`` maps back by
    the closed form ``f(m) = v - c * clamp(min(k_m, 4 - k_m), 0, 1)`` with ``k_m = (m + 6 h') mod 6``
    for ``m = 5, 3, 1`` (red, green, blue). Grey pixels (``c = 0``) are unchanged.
    """
    r, g, b = x.unbind(1)
    v = x.amax(1)
    c = v - x.amin(1)
    safe = torch.where(c > 0, c, torch.ones_like(c))
    h = torch.where(
        v == r,
        torch.remainder((g - b) / safe, 6.0),
        torch.where(v == g, (b - r) / safe + 2.0, (r - g) / safe + 4.0),
    )
    h6 = torch.remainder(h + 6.0 * shift, 6.0).unsqueeze(1)
    m = torch.tensor([5.0, 3.0, 1.0], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    k = torch.remainder(m + h6, 6.0)
    return v.unsqueeze(1) - c.unsqueeze(1) * torch.minimum(k, 4.0 - k).clamp(0.0, 1.0)


@dataclass(frozen=True)
class ColourTransform:
    """One client's fixed colour transform (see the module docstring for the order of the steps).

    Attributes:
        gamma: Gamma exponent (> 0); 1 leaves the image.
        hue: Hue shift in turns, in [-0.5, 0.5] (RGB only).
        saturation: Saturation factor (>= 0; RGB only).
        brightness: Additive brightness offset (grey only).
        contrast: Contrast factor (>= 0; grey only).
        posterize_bits: Bits kept per channel (1-8), or None for no posterization.
    """

    gamma: float = 1.0
    hue: float = 0.0
    saturation: float = 1.0
    brightness: float = 0.0
    contrast: float = 1.0
    posterize_bits: int | None = None

    def __post_init__(self) -> None:
        if not self.gamma > 0:
            raise ValueError(f"ColourTransform.gamma must be > 0, got {self.gamma}")
        if not -0.5 <= self.hue <= 0.5:
            raise ValueError(f"ColourTransform.hue must be in [-0.5, 0.5], got {self.hue}")
        if self.saturation < 0 or self.contrast < 0:
            raise ValueError("ColourTransform.saturation and contrast must be >= 0")
        if self.posterize_bits is not None and not 1 <= self.posterize_bits <= 8:
            raise ValueError(f"ColourTransform.posterize_bits must be in 1..8, got {self.posterize_bits}")

    def __call__(self, images: Tensor) -> Tensor:
        """Transform float images in ``[0, 1]`` of shape ``[n, C, H, W]`` (C = 1 or 3); same shape out."""
        if images.ndim != 4 or images.shape[1] not in (1, 3):
            raise ValueError(f"ColourTransform expects [n, 1 or 3, H, W] images, got {tuple(images.shape)}")
        x = images.float()
        if x.shape[0] == 0:
            return x
        rgb = x.shape[1] == 3
        if self.gamma != 1.0:
            x = x.clamp(0.0, 1.0).pow(self.gamma)
        if rgb:
            if self.hue != 0.0:
                x = shift_hue(x, self.hue)
            if self.saturation != 1.0:
                x = TF.adjust_saturation(x, self.saturation)
        if self.brightness != 0.0:
            x = (x + self.brightness).clamp(0.0, 1.0)
        if self.contrast != 1.0:
            x = TF.adjust_contrast(x, self.contrast)
        if self.posterize_bits is not None:
            x = TF.posterize((x * 255.0).round().to(torch.uint8), self.posterize_bits).float() / 255.0
        return x

    def describe(self) -> str:
        """A short label such as ``"gamma=0.6 hue=-0.1 saturation=0.5"`` (identity steps left out)."""
        parts = [f"gamma={self.gamma:g}"] if self.gamma != 1.0 else []
        defaults = {"hue": 0.0, "saturation": 1.0, "brightness": 0.0, "contrast": 1.0}
        parts += [f"{k}={getattr(self, k):g}" for k, v in defaults.items() if getattr(self, k) != v]
        if self.posterize_bits is not None:
            parts.append(f"posterize={self.posterize_bits}")
        return " ".join(parts) or "identity"


def _grid(gammas: tuple[float, ...], shifts: tuple[float, ...], scales: tuple[float, ...], rgb: bool):
    out = []
    for g, a, b in itertools.product(gammas, shifts, scales):
        if rgb:
            out.append(ColourTransform(gamma=g, hue=a, saturation=b))
        else:
            out.append(ColourTransform(gamma=g, brightness=a, contrast=b))
    return out


def _with_posterized(grid: list[ColourTransform], extra: int) -> tuple[ColourTransform, ...]:
    """``grid`` followed by grid entries 1..extra (0-based) with two-bit posterization added."""
    more = [
        ColourTransform(t.gamma, t.hue, t.saturation, t.brightness, t.contrast, 2)
        for t in grid[1 : 1 + extra]
    ]
    return (*grid, *more)


def rgb_eight() -> tuple[ColourTransform, ...]:
    """The eight RGB client transforms: gamma {0.6, 1.4} x hue {-0.1, 0.1} x saturation {0.5, 1.5}."""
    return tuple(_grid((0.6, 1.4), (-0.1, 0.1), (0.5, 1.5), rgb=True))


def rgb_thirty_two() -> tuple[ColourTransform, ...]:
    """The 32 RGB transforms: the 27-entry 3x3x3 grid, then entries 1..5 with two-bit posterization."""
    return _with_posterized(_grid((0.6, 1.0, 1.4), (-0.15, 0.0, 0.15), (0.4, 1.0, 1.6), rgb=True), 5)


def grey_eight() -> tuple[ColourTransform, ...]:
    """The eight grey transforms: gamma {0.6, 1.4} x brightness {-0.1, 0.1} x contrast {0.5, 1.5}."""
    return tuple(_grid((0.6, 1.4), (-0.1, 0.1), (0.5, 1.5), rgb=False))


def grey_thirty_two() -> tuple[ColourTransform, ...]:
    """The 32 grey transforms: the 3x3x3 grid of gamma/brightness/contrast, then 5 posterized entries."""
    return _with_posterized(_grid((0.6, 1.0, 1.4), (-0.15, 0.0, 0.15), (0.4, 1.0, 1.6), rgb=False), 5)


def client_transforms(channels: int, num_clients: int) -> tuple[ColourTransform, ...]:
    """One transform per client: the eight-client family for <= 8 clients, else the 32-client family.

    Client ``i`` gets entry ``i mod len(family)``.

    Args:
        channels: 3 (RGB families) or 1 (grey families).
        num_clients: Number of clients.
    """
    if channels not in (1, 3):
        raise ValueError(f"client colour transforms need 1 or 3 channels, got {channels}")
    if channels == 3:
        family = rgb_eight() if num_clients <= 8 else rgb_thirty_two()
    else:
        family = grey_eight() if num_clients <= 8 else grey_thirty_two()
    return tuple(family[i % len(family)] for i in range(num_clients))
