"""``PackedEngine.get_params`` hands out one contiguous tensor per parameter (issue 33).

Strided views into one ``[C, D]`` copy of the flat buffer were copied again by every consumer that
reshapes them (norms, flattened messages). The values are the same as the sequential engine's (the
packed == sequential tests), so this checks the layout and that the tensors own their memory (a
caller may modify them without touching the engine).
"""

from __future__ import annotations

import torch

from lightning_fed.data import SyntheticICU
from lightning_fed.engine import PackedEngine
from lightning_fed.models import MortalityMLP


def test_get_params_are_contiguous_copies_in_model_order() -> None:
    data = SyntheticICU(num_centers=6, num_stays=900).build(0)
    engine = PackedEngine()
    module = MortalityMLP()
    module.set_num_features(data.num_features)
    engine.setup(
        module,
        [(c.x_train, c.y_train) for c in data.centers],
        batch_size=32,
        epochs=1,
        seed=0,
        dtype=torch.float64,
    )
    params = engine.get_params()
    assert all(t.is_contiguous() for t in params.values())
    assert all(t.shape[0] == data.num_centers for t in params.values())
    # Centers keep their identity: setting distinct rows and reading them back returns each row.
    marked = {
        n: torch.arange(len(t), dtype=t.dtype).view(-1, *[1] * (t.dim() - 1)).expand_as(t).clone()
        for n, t in params.items()
    }
    engine.set_params(marked)
    back = engine.get_params()
    for n, t in back.items():
        assert torch.equal(t, marked[n]), n
        t.add_(1.0)  # a copy: the engine's parameters do not move
    assert all(torch.equal(engine.get_params()[n], marked[n]) for n in marked)
