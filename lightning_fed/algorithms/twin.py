"""Two copies of the user's model in one per-center module: a global copy and a personal copy.

Ditto and APFL train, at every center, the copy of the federation's global model that FedAvg
trains (the *global copy* ``w_i``, the only thing that crosses the wire) and a personal model
``v_i`` beside it, on the same batches. :class:`TwinModule` holds both as submodules
``global_model`` and ``personal_model`` (parameter names ``global_model.<name>`` and
``personal_model.<name>``), so the engines train them as one per-center parameter vector with one
optimizer (each parameter keeps its own Adam moments; the step count is the model's), both
engines take the same path (the module's own ``training_step``, under ``vmap`` in the packed
engine) and checkpoints hold both without any extra state. The algorithm installs the wrapper
through :meth:`Algorithm.model_for <lightning_fed.algorithms.base.Algorithm.model_for>` and shares
only the global copy's parameters.

Initialization: the global copy is registered first, so it gets exactly the initial draws the
plain model would (``(seed, "init")``); :meth:`TwinModule.start_personal_from_global` (called in the
algorithm's ``setup``) then copies them into the personal copy, so ``v_i^0 = w^0`` as in both papers.

Subclasses define :meth:`forward` (the model every evaluation uses) and :meth:`training_step` (the
local loss of both copies).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

from lightning_fed.engine.optim import optimizer_and_scheduler
from lightning_fed.engine.training_step import overrides_training_step
from lightning_fed.models.base import CenterModule

__all__ = ["GLOBAL", "PERSONAL", "TwinModule"]

#: Prefix of the global copy's parameter names.
GLOBAL = "global_model."
#: Prefix of the personal copy's parameter names.
PERSONAL = "personal_model."


class TwinModule(CenterModule):
    """A global copy and a personal copy of ``base``, trained side by side at every center.

    Args:
        base: The user's per-center model (a built-in or a :class:`CenterModule`); it becomes the
            global copy.
        method: The algorithm's config name, for error messages (e.g. ``"Ditto"``).

    Raises:
        ValueError: If ``base`` has its own ``training_step`` or a loss ``penalty`` (the twin's loss
            is ``base.loss_rows`` of both copies; a custom step or penalty would be dropped).
    """

    def __init__(self, base: CenterModule, method: str) -> None:
        super().__init__()
        for has, what in (
            (overrides_training_step(base), "its own training_step"),
            (base.has_penalty, "a penalty"),
        ):
            if has:
                raise ValueError(
                    f"model: {type(base).__name__} has {what}; algorithm {method} trains a global and a "
                    "personal copy with the model's loss_rows, which would drop it (use a model without it)"
                )
        self.method = method
        self.global_model = base
        self.personal_model = copy.deepcopy(base)

    def set_num_features(self, num_features: int) -> None:
        """Build the global copy for the data's width, then make the personal copy its twin."""
        self.global_model.set_num_features(num_features)
        self.personal_model = copy.deepcopy(self.global_model)

    @torch.no_grad()
    def start_personal_from_global(self) -> None:
        """``v^0 = w^0``: copy the global copy's (seeded) initial parameters into the personal copy."""
        glob = dict(self.global_model.named_parameters())
        for n, p in self.personal_model.named_parameters():
            p.copy_(glob[n])

    def global_names(self) -> tuple[str, ...]:
        """The global copy's parameter names (prefixed), in registration order."""
        return tuple(GLOBAL + n for n, _ in self.global_model.named_parameters())

    def personal_names(self) -> tuple[str, ...]:
        """The personal copy's parameter names (prefixed), in the same order as :meth:`global_names`."""
        return tuple(PERSONAL + n for n, _ in self.personal_model.named_parameters())

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        """The global copy's head (``personal_layers`` keeps it local; the personal copy never leaves)."""
        return tuple(GLOBAL + n for n in self.global_model.head_parameter_names(layers))

    def loss_rows(self, logits: Tensor, y: Tensor) -> Tensor:
        return self.global_model.loss_rows(logits, y)

    def mean_loss(self, model: torch.nn.Module, x: Tensor, y: Tensor) -> Tensor:
        """``(1/|B|) sum_b l(model(x_b), y_b)``: the base model's task loss on one batch."""
        return self.global_model.loss_rows(model(x), y).mean()

    def reference_parameters(self) -> int:
        """The base model's count: the bandwidth reference is FedAvg of the user's model."""
        return int(self.global_model.reference_parameters())

    def configure_optimizers(self) -> Any:
        """The base model's optimizer (its class and hyperparameters) over both copies' parameters.

        Raises:
            ValueError: If the base model also returns a learning-rate scheduler or several
                parameter groups.
        """
        optimizer, scheduler = optimizer_and_scheduler(self.global_model.configure_optimizers())
        base = type(self.global_model).__name__
        if len(optimizer.param_groups) > 1:
            raise ValueError(
                f"model: algorithm {self.method} rebuilds {base}'s optimizer over "
                "its global and personal copies and needs one parameter group; return an optimizer with one"
            )
        if scheduler is not None:
            raise ValueError(
                f"model: algorithm {self.method} rebuilds {base}'s optimizer over "
                "its global and personal copies and cannot carry an lr_scheduler from configure_optimizers; "
                "use trainer.lr_schedule instead"
            )
        settings = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
        return type(optimizer)(self.parameters(), **settings)
