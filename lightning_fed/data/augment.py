"""Train-time image augmentation drawn from the run seed (EdgeDRM App. D.1: random-resized crop).

An :class:`Augment` maps a batch of images ``[..., C, H, W]`` and uniform draws ``[..., D]`` (``D =
draws_per_image`` per image) to augmented images. The engines own the draws: in round ``r`` the model
with global id ``c`` draws one float64 table ``[steps, batch_size, D]`` from its own generator
``(seed, "augment", r, c)`` (:meth:`Augment.round_draws`), and the image in slot ``j`` of its step-``s``
batch uses row ``[s, j]`` (padded slots of a short batch draw too, and are then ignored). So a
center's augmented batches depend only on the seed, the round and its id, never on which other
centers it is packed or sharded with, and the packed and the sequential engine see the same images.

Augmentation is a data-side option (``augment`` of the image sources, carried on
:attr:`FederatedData.train_augment <lightning_fed.data.center.FederatedData.train_augment>`); it
touches training batches only, never the validation or test splits.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = ["Augment", "RandomResizedCrop", "check_image_size"]

_FIELD = "data.init_args.augment.init_args"
#: Tries of the crop sampler before it falls back to a centre crop (torchvision's constant).
TRIES = 10


class Augment(ABC):
    """A random batch transform of images whose randomness comes in as uniform draws."""

    #: Uniform draws each image consumes.
    draws_per_image: int

    @abstractmethod
    def __call__(self, x: Tensor, u: Tensor) -> Tensor:
        """Augmented images ``[..., C, H', W']`` of ``x [..., C, H, W]`` with draws ``u [..., D]``."""

    @abstractmethod
    def describe(self) -> str:
        """A short human-readable description (for logs and run folders)."""

    def round_draws(self, seed: int, round_idx: int, center: int, steps: int, width: int) -> Tensor:
        """One model's draws of a round: float64 ``[steps, width, D]`` in ``[0, 1)``.

        Args:
            seed: The run seed.
            round_idx: The round.
            center: The model's global id (center, or training group).
            steps: Its optimizer steps in the round.
            width: Slots per batch (the batch size; padded slots draw too).
        """
        gen = torch_generator(seed, "augment", round_idx, center)
        return torch.rand(steps, width, self.draws_per_image, generator=gen, dtype=torch.float64)


def _pair(name: str, value: object, kind: type, positive: bool = True) -> tuple:
    """``value`` as a validated pair of ``kind`` (an int ``size`` becomes a square)."""
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{_FIELD}.{name} must be a pair of numbers, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and not isinstance(v, int)):
            raise ValueError(f"{_FIELD}.{name} must hold {kind.__name__} values, got {value!r}")
        if not math.isfinite(v) or (positive and v <= 0):
            raise ValueError(f"{_FIELD}.{name} must hold positive finite values, got {value!r}")
        out.append(kind(v))
    return tuple(out)


class RandomResizedCrop(Augment):
    """Random-resized crop (+ optional horizontal flip) of each image, vectorized over the batch.

    The box follows torchvision's ``RandomResizedCrop.get_params``: for up to ten tries, draw an area
    fraction ``a ~ U(scale)`` and a log-uniform aspect ratio ``rho = exp(U(log ratio))``, set ``w =
    round(sqrt(a H W rho))`` and ``h = round(sqrt(a H W / rho))``, and keep the first try with ``0 < h <=
    H`` and ``0 < w <= W``; if none fits, take the centre crop of the largest box whose aspect ratio
    is clamped into ``ratio``. The top-left corner is uniform over the valid positions, ``top = floor(u
    (H - h + 1))``. The same distribution as torchvision, not its draws: torchvision's transforms draw
    from torch's global generator, these from the uniform draws ``u`` handed in (23 per image: ten
    area and ten ratio tries, top, left, flip). The box is then resized to ``size`` with bilinear
    interpolation on pixel centres (``align_corners=False``, no antialiasing, samples clamped inside
    the box: ``F.interpolate`` of the crop), written as two index selections and ``lerp``s, so a full
    box at the same size is exactly the identity and every image's result is independent of its batch.
    With ``flip``, an image is mirrored left-right with probability 1/2.

    The image sources apply their client colour transforms and normalization once, when the data is
    built, so this crop acts on the already transformed pixels; the released code (App. D.1) crops
    first and colour-transforms after. The per-pixel transforms (gamma, hue, saturation) commute with
    cropping exactly and with the bilinear resize only approximately (interpolation mixes
    neighbouring pixels before rather than after the non-linear colour map).

    Args:
        size: Output ``(height, width)``, or one int for a square (CIFAR: 32).
        scale: Range of the box area as a fraction of the image area, ``0 < lo <= hi <= 1``.
        ratio: Range of the box aspect ratio ``w / h``, ``0 < lo <= hi``.
        flip: Mirror each image left-right with probability 1/2.
    """

    draws_per_image = 2 * TRIES + 3

    def __init__(
        self,
        size: int | tuple[int, int] = 32,
        scale: tuple[float, float] = (0.9, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        flip: bool = True,
    ) -> None:
        self.size: tuple[int, int] = _pair("size", size, int)
        self.scale: tuple[float, float] = _pair("scale", scale, float)
        self.ratio: tuple[float, float] = _pair("ratio", ratio, float)
        if not self.scale[0] <= self.scale[1] <= 1.0:
            raise ValueError(f"{_FIELD}.scale must satisfy 0 < lo <= hi <= 1, got {scale!r}")
        if not self.ratio[0] <= self.ratio[1]:
            raise ValueError(f"{_FIELD}.ratio must satisfy 0 < lo <= hi, got {ratio!r}")
        if not isinstance(flip, bool):
            raise ValueError(f"{_FIELD}.flip must be true or false, got {flip!r}")
        self.flip = flip

    def describe(self) -> str:
        h, w = self.size
        return (
            f"RandomResizedCrop({h}x{w}, scale={self.scale[0]:g}-{self.scale[1]:g}, "
            f"ratio={self.ratio[0]:.4g}-{self.ratio[1]:.4g}, flip={self.flip})"
        )

    def __repr__(self) -> str:
        return self.describe()

    def boxes(self, u: Tensor, height: int, width: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Crop boxes of images ``height x width`` from draws ``u [..., 23]`` (float64).

        Returns:
            int64 ``top``, ``left``, ``h``, ``w`` and bool ``flip``, each of shape ``u.shape[:-1]``.
        """
        u = u.to(torch.float64)
        area = float(height * width)
        lo, hi = self.scale
        target = area * (lo + (hi - lo) * u[..., :TRIES])
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = torch.exp(log_lo + (log_hi - log_lo) * u[..., TRIES : 2 * TRIES])
        w_try = torch.round(torch.sqrt(target * aspect)).to(torch.int64)
        h_try = torch.round(torch.sqrt(target / aspect)).to(torch.int64)
        ok = (w_try > 0) & (w_try <= width) & (h_try > 0) & (h_try <= height)
        first = torch.argmax(ok.to(torch.int8), dim=-1, keepdim=True)  # the first try that fits
        found = ok.any(-1)
        # torchvision's fallback: the centre crop with the aspect ratio clamped into ``ratio``.
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            fb_w, fb_h = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            fb_w, fb_h = round(height * self.ratio[1]), height
        else:
            fb_w, fb_h = width, height
        h = torch.where(found, h_try.gather(-1, first).squeeze(-1), fb_h)
        w = torch.where(found, w_try.gather(-1, first).squeeze(-1), fb_w)
        top = torch.minimum(torch.floor(u[..., 2 * TRIES] * (height - h + 1)).to(torch.int64), height - h)
        left = torch.minimum(torch.floor(u[..., 2 * TRIES + 1] * (width - w + 1)).to(torch.int64), width - w)
        top = torch.where(found, top, (height - fb_h) // 2)
        left = torch.where(found, left, (width - fb_w) // 2)
        flip = u[..., 2 * TRIES + 2] < 0.5 if self.flip else torch.zeros_like(found)
        return top, left, h, w, flip

    def __call__(self, x: Tensor, u: Tensor) -> Tensor:
        """Cropped, resized (and maybe flipped) images ``[..., C, size_h, size_w]``.

        Args:
            x: Images ``[..., C, H, W]``.
            u: Uniform draws ``[..., 23]`` with the same leading shape (float64; row ``i`` for image ``i``).
        """
        if x.dim() < 3 or tuple(u.shape) != (*x.shape[:-3], self.draws_per_image):
            raise ValueError(
                f"RandomResizedCrop needs images [..., C, H, W] and draws [..., {self.draws_per_image}] of "
                f"the same leading shape, got {tuple(x.shape)} and {tuple(u.shape)}"
            )
        lead, (c, height, width) = x.shape[:-3], x.shape[-3:]
        n = math.prod(lead)
        top, left, h, w, flip = (t.reshape(n).to(x.device) for t in self.boxes(u, height, width))
        out_h, out_w = self.size
        i0, i1, a = _taps(top, h, out_h, x.dtype)
        j0, j1, b = _taps(left, w, out_w, x.dtype)
        mirror = flip.unsqueeze(1)
        j0, j1, b = (torch.where(mirror, t.flip(-1), t) for t in (j0, j1, b))
        # Rows, then columns: each axis one index_select of whole lines (~3x faster than gather on CPU).
        base = torch.arange(n, device=x.device).unsqueeze(1)
        lines = x.reshape(n, c, height, width).transpose(1, 2).reshape(n * height, c, width)
        y = torch.lerp(
            lines.index_select(0, (base * height + i0).view(-1)).view(n, out_h, c, width),
            lines.index_select(0, (base * height + i1).view(-1)).view(n, out_h, c, width),
            a.view(n, out_h, 1, 1),
        )
        lines = y.permute(0, 3, 1, 2).reshape(n * width, out_h, c)
        z = torch.lerp(
            lines.index_select(0, (base * width + j0).view(-1)).view(n, out_w, out_h, c),
            lines.index_select(0, (base * width + j1).view(-1)).view(n, out_w, out_h, c),
            b.view(n, out_w, 1, 1),
        ).permute(0, 3, 2, 1)
        return z.reshape(*lead, c, out_h, out_w).contiguous()


def _taps(start: Tensor, length: Tensor, out: int, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """Bilinear taps along one axis: output ``o`` of ``out`` samples box position ``(o + 0.5) length / out
    - 0.5`` (clamped into the box, as ``F.interpolate(align_corners=False)``); returns the two source
    indices ``[n, out]`` (absolute) and the weight of the second, in ``dtype``."""
    scale = length.to(torch.float64).unsqueeze(1) / out
    pos = ((torch.arange(out, dtype=torch.float64, device=start.device) + 0.5) * scale - 0.5).clamp_min(0.0)
    last = (length - 1).unsqueeze(1)
    lo = torch.minimum(torch.floor(pos).to(torch.int64), last)
    hi = torch.minimum(lo + 1, last)
    weight = (pos - lo.to(torch.float64)).clamp(0.0, 1.0).to(dtype)
    base = start.unsqueeze(1)
    return base + lo, base + hi, weight


def check_image_size(augment: Augment | None, shape: Sequence[int]) -> None:
    """Refuse a train-time crop whose output size differs from the stored images' ``[..., H, W]``
    (validation and test images are not cropped, so the model would see two input sizes)."""
    size = getattr(augment, "size", None)
    if size is not None and tuple(size) != tuple(shape[-2:]):
        raise ValueError(
            f"{_FIELD}.size must equal the images' size {tuple(shape[-2:])} (evaluation images are not "
            f"cropped), got {tuple(size)}"
        )
