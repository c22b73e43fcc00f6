"""One run seed drives every random draw (docs/architecture.md, decision 6).

Each draw site asks for a generator derived from ``(seed, purpose, *keys)`` (for example
``("batches", round, center)``), so draws never depend on call order or on global state, and
the same config and seed give identical numbers in one process or several and after a resume.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

__all__ = ["derive_seed", "numpy_rng", "torch_generator"]


def derive_seed(seed: int, purpose: str, *keys: int) -> int:
    """Derive a 63-bit seed from the run seed, a purpose label and integer keys.

    Args:
        seed: The run seed.
        purpose: What the draw is for (``"init"``, ``"batches"``, ``"dropout"``, ...).
        *keys: Further integers that select an independent stream (round, center, ...).

    Returns:
        A non-negative integer usable by ``torch.Generator.manual_seed`` and numpy.
    """
    text = "|".join([str(int(seed)), purpose, *(str(int(k)) for k in keys)])
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def torch_generator(
    seed: int, purpose: str, *keys: int, device: str | torch.device = "cpu"
) -> torch.Generator:
    """A ``torch.Generator`` seeded by :func:`derive_seed`."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, purpose, *keys))
    return gen


def numpy_rng(seed: int, purpose: str, *keys: int) -> np.random.Generator:
    """A numpy ``Generator`` seeded by :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(seed, purpose, *keys))
