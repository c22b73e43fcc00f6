"""A plain ``lightning.LightningModule`` as a per-center model (:class:`LightningAdapter`).

The federation trains :class:`~lightning_fed.models.base.CenterModule` subclasses. A module that
only subclasses ``lightning.LightningModule`` (your existing model, unchanged) is wrapped by
:func:`as_center_module`: its ``forward`` gives the logits, its ``training_step`` is the loss both
engines train (:mod:`lightning_fed.engine.training_step`), its ``configure_optimizers`` the
optimizer, and its ``self.log`` values are recorded per center. What the wrapper needs beyond
Lightning's contract is optional:

* ``head_parameter_names(layers) -> tuple[str, ...]`` on your module, only for
  ``algorithm.personal_layers > 0`` (names as in your module's ``named_parameters()``);
* the width check runs one forward on zeros (``CenterModule.set_num_features``); a module whose
  input is not ``[n, num_features]`` implements ``set_num_features``.

Parameter names gain the prefix ``module.`` (the wrapper's attribute) in checkpoints and logs.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from torch import Tensor

from lightning_fed.models.base import CenterModule

__all__ = ["LightningAdapter", "as_center_module"]


class LightningAdapter(CenterModule):
    """Wrap a plain ``lightning.LightningModule`` so the federation can pack and train it.

    Args:
        module: The LightningModule; it must define ``forward`` (logits ``[n]`` for binary labels,
            ``[n, classes]`` for multi-class), ``training_step`` and ``configure_optimizers``.
    """

    #: The wrapped module's ``training_step`` is the loss (:func:`overrides_training_step`).
    user_training_step = True

    def __init__(self, module: L.LightningModule) -> None:
        super().__init__()
        missing = [
            hook
            for hook in ("training_step", "configure_optimizers")
            if getattr(type(module), hook) is getattr(L.LightningModule, hook)
        ]
        if missing:
            raise ValueError(
                f"model: {type(module).__name__} does not define {' or '.join(missing)}, which federated "
                "training calls for every center (see docs/models.md)"
            )
        self.module = module

    def forward(self, x: Tensor) -> Tensor:
        return self.module(x)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.module.training_step(batch, batch_idx)

    def configure_optimizers(self) -> Any:
        return self.module.configure_optimizers()

    def set_num_features(self, num_features: int) -> None:
        own = getattr(self.module, "set_num_features", None)
        if own is not None:
            own(num_features)
        else:
            super().set_num_features(num_features)

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        own = getattr(self.module, "head_parameter_names", None)
        if own is None:
            raise NotImplementedError(
                f"{type(self.module).__name__} does not implement head_parameter_names(layers) -> "
                "tuple[str, ...], which personal_layers needs to know which parameters stay local: "
                "add it to your LightningModule or set personal_layers: 0"
            )
        return tuple(f"module.{name}" for name in own(layers))

    def reference_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters())


def as_center_module(module: Any) -> CenterModule:
    """``module`` itself if it is a :class:`CenterModule`, a :class:`LightningAdapter` around a plain
    ``lightning.LightningModule``.

    Raises:
        TypeError: For anything else (one line naming ``model``).
    """
    if isinstance(module, CenterModule):
        return module
    if isinstance(module, L.LightningModule):
        return LightningAdapter(module)
    raise TypeError(
        f"model: expected a lightning.LightningModule (or lightning_fed.models.CenterModule), "
        f"got {type(module).__name__}"
    )
