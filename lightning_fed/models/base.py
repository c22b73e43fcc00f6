"""The per-center model contract: a LightningModule that the engines pack.

A :class:`CenterModule` is an ordinary LightningModule (so ``Trainer.fit`` works on one center,
which ``benchmarks/engine.py`` uses as a baseline) plus three things the federation needs:

* :meth:`CenterModule.set_num_features` binds the input width once the data is known;
* :meth:`CenterModule.head_parameter_names` names the parameters that form the head, so an
  algorithm can keep them local (ABPS Sec. 6.4, extension P);
* optionally :meth:`CenterModule.packed_forward`, a forward over ``k`` stacked parameter sets at
  once. The packed engine uses it when present and otherwise falls back to
  ``torch.vmap(torch.func.functional_call)``; both are tested against the sequential engine.

The optimizer is whatever :meth:`configure_optimizers` returns (Lightning's convention); the
packed engine reads its hyperparameters and runs the same update functionally on stacked tensors.
"""

from __future__ import annotations

from abc import abstractmethod

import lightning as L
import torch
from torch import Tensor

__all__ = ["CenterModule"]


class CenterModule(L.LightningModule):
    """Base class of models trained per center (binary classification with logits)."""

    @abstractmethod
    def set_num_features(self, num_features: int) -> None:
        """Build (or check) the input layer for ``num_features`` inputs."""

    @abstractmethod
    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        """Names of the parameters of the last ``layers`` layers (the personalizable head)."""

    def packed_forward(
        self, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | None
    ) -> Tensor:
        """Forward ``k`` stacked parameter sets on ``x`` of shape ``[k, B, F]``; returns ``[k, B]``.

        ``generator`` drives dropout when training (None means no dropout). Subclasses that do not
        override this are run through ``torch.vmap`` instead.
        """
        raise NotImplementedError

    def packed_loss_grad(
        self,
        params: dict[str, Tensor],
        x: Tensor,
        y: Tensor,
        mask: Tensor,
        generator: torch.Generator | None,
        grads: dict[str, Tensor],
    ) -> Tensor:
        """Optional fast path: per-center mean BCE loss ``[k]`` and its gradients, without autograd.

        ``x [k, B, F]``, ``y`` and ``mask`` ``[k, B]`` (mask: real rows); writes d(sum of the
        per-center losses)/d(param) into the tensors of ``grads`` (same shapes as ``params``).
        The packed engine uses it when a subclass overrides it, else autograd over
        :meth:`packed_forward`; tests pin the two against each other.
        """
        raise NotImplementedError

    @property
    def has_packed_loss_grad(self) -> bool:
        """Whether the subclass provides its own :meth:`packed_loss_grad`."""
        return type(self).packed_loss_grad is not CenterModule.packed_loss_grad

    @property
    def has_packed_forward(self) -> bool:
        """Whether the subclass provides its own :meth:`packed_forward`."""
        return type(self).packed_forward is not CenterModule.packed_forward

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = torch.nn.functional.binary_cross_entropy_with_logits(self(x), y)
        self.log("train_loss", loss, prog_bar=False)
        return loss
