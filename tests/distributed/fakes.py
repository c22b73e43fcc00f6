"""A 2-process Fabric as the federation sees it at construction, for tests that need no real processes."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import torch


def two_ranks() -> SimpleNamespace:
    """Rank 0 of 2 on CPU in float32. Its ``all_gather`` repeats the local block (construction needs
    the shapes only) and ``call`` dispatches no hook."""
    return SimpleNamespace(
        world_size=2,
        global_rank=0,
        is_global_zero=True,
        device=torch.device("cpu"),
        autocast=nullcontext,
        strategy=SimpleNamespace(precision=SimpleNamespace(precision="32-true")),
        all_gather=lambda t: torch.stack([t, t]),
        call=lambda *args, **kwargs: None,
    )
