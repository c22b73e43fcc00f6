r"""Differential privacy for the metadata descriptors (the ABPS paper's first future-work item, Sec. 7).

With a goal filter, every center publishes its descriptor once (round 0)

.. math:: v_i = [\text{positive rate},\ \log n_{train},\ \overline{\text{year}} / 2030,\
    p_1, \dots, p_{12}]

(``p_k`` the train-split prevalences of the 12 Charlson flags; 3 entries for the base descriptor).
:class:`GaussianMechanism` releases a noisy ``v_i`` that is :math:`(\varepsilon, \delta)`-DP for the
rows of center ``i`` (Dwork & Roth 2014, Theorem A.1).

Neighbouring datasets: *replace one patient* of a center with ``n = n_train`` training rows (the
center's size is unchanged). Per-entry sensitivity :math:`\Delta_k = \max |v_k(D) - v_k(D')|`:

* positive rate ``mean(y)``, ``y in {0, 1}``: one label changes by at most 1, so :math:`\Delta_0 = 1/n`;
* ``log n_train``: ``n`` is unchanged by a replacement, :math:`\Delta_1 = 0`. We assume ``n_train``
  is **public**: the sample weights of FedAvg and of ABPS's mixing are ``n_train``, and the noise
  scale below depends on ``n`` (it could not if ``n`` were private). This entry is released as is;
* mean year / 2030: every admission year of the center lies in a public window whose years differ
  by at most ``year_span`` (1 for the paper's 2-year windows ``[s, s + 1]``), so the mean moves by at
  most ``year_span / n`` and :math:`\Delta_2 = \text{year\_span} / (2030\, n)` (kept private and noised,
  to be conservative, although a center's window is usually its name);
* each prevalence, a mean of a 0/1 flag: :math:`\Delta_k = 1/n` (``k >= 3``).

One replacement moves all entries at once, so the L2 sensitivity is

.. math::

    \Delta_2(n) = \sqrt{\textstyle\sum_k \Delta_k^2}
        = \frac{1}{n}\sqrt{1 + (\text{year\_span}/2030)^2 + (d - 3)}

(:math:`\approx \sqrt{13}/n` for ``d = 15``, :math:`\approx 1/n` for ``d = 3``).

Clipping (``clip``) bounds the entries whatever the input (and the sensitivity for tiny centers):
clamping and the projection onto an L2 ball are 1-Lipschitz, so neighbours stay at most
:math:`\Delta_2(n)` apart after clipping, and the clip adds its own bound:

* ``clip = c`` (a float): the private entries of ``v_i`` (all but ``log n_train``) are scaled down to
  L2 norm ``<= c``; two such vectors differ by at most ``2c``, so
  :math:`\Delta = \min(\Delta_2(n), 2c)`;
* ``clip = [c_0, ..., c_{d-1}]``: entry ``k`` is clamped to ``[0, c_k]`` (every descriptor entry is
  non-negative), so :math:`\Delta_k \leftarrow \min(\Delta_k, c_k)` and
  :math:`\Delta = \sqrt{\sum_{k\,\text{private}} \min(\Delta_k, c_k)^2}`.

The noise is :math:`\mathcal N(0, \sigma_i^2)` on every private entry with

.. math:: \sigma_i = \sqrt{2 \ln(1.25/\delta)}\ \Delta(n_i) / \varepsilon,

which is :math:`(\varepsilon, \delta)`-DP for :math:`\varepsilon \in (0, 1)` (Theorem A.1 asks
:math:`c^2 > 2\ln(1.25/\delta)`; we use the boundary value, as is customary). The theorem does not
hold for :math:`\varepsilon \ge 1`, so such values are refused. The descriptor is published once,
and centers hold disjoint rows (parallel composition), so the whole run costs each center's
patients :math:`(\varepsilon, \delta)` for the metadata; the model parameters are not covered.
Anything computed from the noisy descriptors afterwards (the goal filter, clamping the rates back to
``[0, 1]``) is post-processing and costs nothing more.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = ["PUBLIC_ENTRIES", "GaussianMechanism", "descriptor_sensitivity", "noisy_descriptors"]

#: Descriptor entries released without noise (public, sensitivity 0): ``log n_train``.
PUBLIC_ENTRIES = (1,)
#: Divisor of the mean-year entry of the descriptor.
YEAR_SCALE = 2030.0


def descriptor_sensitivity(n_train: Tensor, dim: int, year_span: float = 1.0) -> Tensor:
    r"""Per-entry sensitivities :math:`\Delta_k` ``[C, dim]`` for "replace one patient" (module docstring).

    Args:
        n_train: Training rows per center ``[C]`` (>= 1).
        dim: Descriptor length ``d``.
        year_span: Largest difference between two admission years of one center.

    Returns:
        float64 ``[C, dim]``: ``1/n`` for the rates, 0 for ``log n_train``, ``year_span / (2030 n)``
        for the mean year.
    """
    inv = 1.0 / n_train.to(torch.float64).reshape(-1, 1)
    per_entry = torch.ones(dim, dtype=torch.float64)
    if dim > 1:
        per_entry[1] = 0.0
    if dim > 2:
        per_entry[2] = year_span / YEAR_SCALE
    return inv * per_entry


class GaussianMechanism:
    r"""The Gaussian mechanism on metadata descriptors (Dwork & Roth, Theorem A.1).

    Args:
        epsilon: Privacy loss, in ``(0, 1)`` (the theorem's range).
        delta: Failure probability, in ``(0, 1)``.
        clip: A float ``c > 0``: L2-norm bound on the private entries; or one bound ``c_k > 0`` per
            descriptor entry: entry ``k`` is clamped to ``[0, c_k]``.
        year_span: Largest difference between two admission years inside one center (1 for 2-year
            windows), which bounds the mean-year entry's sensitivity.

    Raises:
        ValueError: On ``epsilon`` outside ``(0, 1)``, ``delta`` outside ``(0, 1)``, a non-positive or
            non-finite clip, or a negative ``year_span``.
    """

    def __init__(
        self, epsilon: float, delta: float, clip: float | Sequence[float], year_span: float = 1.0
    ) -> None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or not 0.0 < epsilon < 1.0:
            raise ValueError(
                f"privacy.epsilon must be in (0, 1) (the Gaussian mechanism's bound, Dwork & Roth "
                f"Thm A.1, holds only there), got {epsilon!r}"
            )
        if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0.0 < delta < 1.0:
            raise ValueError(f"privacy.delta must be in (0, 1), got {delta!r}")
        bounds = [clip] if isinstance(clip, numbers.Real) else list(clip)
        if not bounds or any(
            isinstance(c, bool) or not isinstance(c, numbers.Real) or not (math.isfinite(c) and c > 0)
            for c in bounds
        ):
            raise ValueError(f"privacy.clip must be a number > 0 or a non-empty list of them, got {clip!r}")
        if isinstance(year_span, bool) or not isinstance(year_span, numbers.Real) or not year_span >= 0:
            raise ValueError(f"privacy.year_span must be >= 0, got {year_span!r}")
        self.epsilon, self.delta, self.year_span = float(epsilon), float(delta), float(year_span)
        self.clip: float | tuple[float, ...] = (
            float(clip) if isinstance(clip, numbers.Real) else tuple(float(c) for c in bounds)
        )

    def __repr__(self) -> str:
        return (
            f"GaussianMechanism(epsilon={self.epsilon}, delta={self.delta}, clip={self.clip}, "
            f"year_span={self.year_span})"
        )

    @property
    def noise_multiplier(self) -> float:
        r""":math:`\sqrt{2 \ln(1.25/\delta)} / \varepsilon`: ``sigma`` per unit of L2 sensitivity."""
        return math.sqrt(2.0 * math.log(1.25 / self.delta)) / self.epsilon

    def _private(self, dim: int) -> Tensor:
        """Bool ``[dim]``: entries that are noised (all but :data:`PUBLIC_ENTRIES`)."""
        mask = torch.ones(dim, dtype=torch.bool)
        mask[[k for k in PUBLIC_ENTRIES if k < dim]] = False
        return mask

    def _bounds(self, dim: int) -> Tensor:
        if isinstance(self.clip, float):
            raise TypeError("per-entry bounds need a list clip")
        if len(self.clip) != dim:
            raise ValueError(f"privacy.clip has {len(self.clip)} bounds but the descriptor has {dim} entries")
        return torch.tensor(self.clip, dtype=torch.float64)

    def sensitivity(self, n_train: Tensor, dim: int) -> Tensor:
        r"""L2 sensitivity :math:`\Delta(n_i)` ``[C]`` of the clipped descriptor (module docstring)."""
        per_entry = descriptor_sensitivity(n_train, dim, self.year_span) * self._private(dim)
        if isinstance(self.clip, float):
            return per_entry.norm(dim=1).clamp(max=2.0 * self.clip)
        return torch.minimum(per_entry, self._bounds(dim)).norm(dim=1)

    def sigma(self, n_train: Tensor, dim: int) -> Tensor:
        r"""Noise scale ``[C]``: :math:`\sigma_i = \sqrt{2\ln(1.25/\delta)}\,\Delta(n_i)/\varepsilon`."""
        return self.noise_multiplier * self.sensitivity(n_train, dim)

    def clip_descriptors(self, metadata: Tensor) -> Tensor:
        """Clip ``[C, d]``: clamp entry ``k`` to ``[0, c_k]``, or the private part's L2 norm to ``c``."""
        meta = metadata.to(torch.float64)
        private = self._private(meta.shape[1])
        if isinstance(self.clip, float):
            norm = (meta * private).norm(dim=1, keepdim=True)
            scale = torch.clamp(self.clip / torch.where(norm > 0, norm, torch.ones_like(norm)), max=1.0)
            return torch.where(private, meta * scale, meta)
        bounds = self._bounds(meta.shape[1])
        return torch.minimum(meta.clamp(min=0.0), bounds)

    def apply(self, metadata: Tensor, n_train: Tensor, generator: torch.Generator) -> Tensor:
        """Clip, then add ``N(0, sigma_i^2)`` to every private entry of every center.

        Args:
            metadata: Descriptors ``[C, d]``.
            n_train: Training rows per center ``[C]`` (public, >= 1).
            generator: The noise stream.

        Returns:
            float64 ``[C, d]``; ``log n_train`` (entry 1) is released unchanged.

        Raises:
            ValueError: On shapes that do not match, non-finite descriptors, or ``n_train < 1``.
        """
        if metadata.dim() != 2 or metadata.shape[1] < 1:
            raise ValueError(f"metadata must be [C, d] with d >= 1, got {list(metadata.shape)}")
        n_train = torch.as_tensor(n_train).reshape(-1)
        if n_train.shape[0] != metadata.shape[0]:
            raise ValueError(f"n_train has {n_train.shape[0]} entries, metadata has {metadata.shape[0]} rows")
        if bool((n_train < 1).any()):
            raise ValueError(f"n_train must be >= 1 for every center, got min {int(n_train.min())}")
        if not bool(torch.isfinite(metadata).all()):
            raise ValueError("metadata holds NaN or inf: descriptors must be finite before adding noise")
        dim = metadata.shape[1]
        clipped = self.clip_descriptors(metadata)
        sigma = self.sigma(n_train, dim).view(-1, 1)
        noise = torch.randn(clipped.shape, dtype=torch.float64, generator=generator, device=generator.device)
        return clipped + noise.to(clipped.device) * sigma.to(clipped.device) * self._private(dim).to(
            clipped.device
        )


def noisy_descriptors(metadata: Tensor, n_train: Tensor, mechanism: GaussianMechanism, seed: int) -> Tensor:
    """What each center publishes: its own descriptor through ``mechanism``, noised with its own stream.

    Center ``i`` draws from ``(seed, "dp-metadata", i)``, so its noise depends on nothing but the
    seed and its id (a center can add it before sending, with no coordination).

    Args:
        metadata: Descriptors ``[C, d]`` (``FederatedData.metadata()``, cut to the filter's dim).
        n_train: Training rows per center ``[C]``.
        mechanism: The Gaussian mechanism.
        seed: The run seed.

    Returns:
        float64 noisy descriptors ``[C, d]``.
    """
    n_train = torch.as_tensor(n_train).reshape(-1)
    if metadata.dim() != 2 or n_train.shape[0] != metadata.shape[0]:
        raise ValueError(
            f"metadata must be [C, d] with one n_train per row, got {list(metadata.shape)} and "
            f"{n_train.shape[0]} sizes"
        )
    rows = [
        mechanism.apply(metadata[i : i + 1], n_train[i : i + 1], torch_generator(seed, "dp-metadata", i))
        for i in range(metadata.shape[0])
    ]
    if not rows:
        return metadata.to(torch.float64)
    return torch.cat(rows)
