"""The per-center model contract: a LightningModule that the engines pack.

A :class:`CenterModule` is an ordinary LightningModule (so ``Trainer.fit`` works on one center,
which ``benchmarks/engine.py`` uses as a baseline) plus three things the federation needs:

* :meth:`CenterModule.set_num_features` binds the input width once the data is known;
* :meth:`CenterModule.head_parameter_names` names the parameters that form the head, so an
  algorithm can keep them local (ABPS Sec. 6.4, extension P);
* optionally :meth:`CenterModule.packed_forward`, a forward over ``k`` stacked parameter sets at
  once. The packed engine uses it when present and otherwise falls back to
  ``torch.vmap(torch.func.functional_call)``; both are tested against the sequential engine;
* :meth:`CenterModule.loss_rows`, the per-row task loss (BCE on logits here; cross-entropy for the
  image models);
* optionally :meth:`CenterModule.forward_features` (logits and the representation, for MOON's
  contrastive term) and :meth:`CenterModule.penalty` (a parameter-only term of the loss, e.g. a
  Bayesian model's KL divergence);
* :meth:`CenterModule.reference_parameters`, the parameter count of the model whose float32 FedAvg
  is the bandwidth reference (``bytes_vs_fedavg``): its own count, unless the model replaces another
  (the Bayesian MLP stands in for the deterministic MLP).

The optimizer is whatever :meth:`configure_optimizers` returns (Lightning's convention); the
packed engine reads its hyperparameters and runs the same update functionally on stacked tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import lightning as L
import torch
from torch import Tensor

__all__ = ["CenterModule", "RowStreams", "hidden_widths", "input_width_to_build"]


def hidden_widths(hidden: Sequence[int]) -> tuple[int, ...]:
    """Validated ``model.hidden``: a non-empty list of positive layer widths."""
    if not hidden or any(int(h) < 1 for h in hidden):
        raise ValueError(f"model.hidden must be a non-empty list of positive widths, got {list(hidden)}")
    return tuple(int(h) for h in hidden)


def input_width_to_build(bound: int | None, num_features: int) -> bool:
    """Whether a model bound to ``bound`` inputs (None: not yet) must build its layers for
    ``num_features``; raises when it was built (or configured) for another width.

    Raises:
        ValueError: If ``bound`` differs from ``num_features``, or ``num_features < 1``.
    """
    if bound is not None:
        if bound != num_features:
            raise ValueError(
                f"model.in_features={bound} but the data has {num_features} features: "
                "remove model.in_features or set it to the data's width"
            )
        return False
    if num_features < 1:
        raise ValueError(f"model.in_features must be >= 1, got {num_features}")
    return True


@runtime_checkable
class RowStreams(Protocol):
    """Independent random streams, one per leading row of a packed tensor (one per center).

    The packed engine passes these (:class:`~lightning_fed.engine.packed.CenterStreams`) as the
    ``generator`` of the packed methods, so a center's random draws do not depend on which other
    centers (or processes) it is packed with.
    """

    def words(self, rows: int, count: int) -> Tensor:
        """Random int64 ``[rows, count]``, row ``c`` the next ``count`` words of stream ``c``."""
        ...


class CenterModule(L.LightningModule):
    """Base class of models trained per center (binary classification with logits)."""

    def set_num_features(self, num_features: int) -> None:
        """Build (or check) the input layer for ``num_features`` inputs.

        The built-in models build their first layer here. This default is for a module built for
        a fixed width in its ``__init__``: one eval-mode forward on zeros ``[2, num_features]`` checks
        that it accepts the data (image models, whose rows are not flat, override it).

        Raises:
            ValueError: The forward fails on the data's width (naming the width to build for).
        """
        was_training = self.training
        try:
            with torch.no_grad():
                self.eval()
                first = next(iter(self.parameters()), None)
                dtype = first.dtype if first is not None else torch.float32
                self(torch.zeros(2, int(num_features), dtype=dtype))
        except Exception as err:  # any failure of the user's forward is a width mismatch to report
            raise ValueError(
                f"model: {type(self).__name__} does not accept the data's {num_features} features "
                f"({(str(err).splitlines() or [type(err).__name__])[0][:120]}); build it for "
                f"{num_features} inputs (e.g. model.init_args.in_features={num_features}) or implement "
                "set_num_features(num_features)"
            ) from None
        finally:
            self.train(was_training)

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        """Names of the parameters of the last ``layers`` layers (the personalizable head).

        Needed only by ``algorithm.personal_layers > 0``; the built-in models implement it.

        Raises:
            NotImplementedError: The model does not say which parameters form its head.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement head_parameter_names(layers) -> tuple[str, ...], "
            "which personal_layers needs to know which parameters stay local: implement it on your model "
            "(the names of named_parameters() in the last `layers` layers) or set personal_layers: 0"
        )

    def packed_forward(
        self, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | RowStreams | None
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
        generator: torch.Generator | RowStreams | None,
        grads: dict[str, Tensor],
    ) -> Tensor:
        """Optional fast path: per-center mean BCE loss ``[k]`` and its gradients, without autograd.

        ``x [k, B, F]``, ``y`` and ``mask`` ``[k, B]`` (mask: real rows); writes d(sum of the
        per-center losses)/d(param) into the tensors of ``grads`` (same shapes as ``params``).
        The packed engine uses it when a subclass overrides it, else autograd over
        :meth:`packed_forward`; tests pin the two against each other.
        """
        raise NotImplementedError

    def loss_rows(self, logits: Tensor, y: Tensor) -> Tensor:
        """Per-row task loss, same shape as ``y``: BCE on logits (binary labels 0./1.).

        Multi-class models override this (cross-entropy with ``y`` holding class ids as floats).
        """
        return torch.nn.functional.binary_cross_entropy_with_logits(logits.to(y.dtype), y, reduction="none")

    def forward_features(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Logits and the representation ``[n, H]`` the head reads (MOON's ``z``).

        Raises:
            NotImplementedError: The model exposes no representation (MOON cannot use it).
        """
        raise NotImplementedError(
            f"{type(self).__name__} has no forward_features(x) -> (logits, representation); "
            "methods with a representation-level loss (MOON) need one"
        )

    def packed_forward_features(
        self, params: dict[str, Tensor], x: Tensor, generator: torch.Generator | RowStreams | None
    ) -> tuple[Tensor, Tensor]:
        """Packed :meth:`forward_features`: logits ``[k, B]`` and representations ``[k, B, H]``.

        Optional; without it the engines ``vmap`` :meth:`forward_features`.
        """
        raise NotImplementedError

    def penalty(self, params: dict[str, Tensor], n_train: Tensor) -> Tensor:
        """Optional parameter-only loss term per stacked model ``[k]`` (e.g. KL / n for a BNN).

        Args:
            params: Stacked parameters ``{name: [k, ...]}``.
            n_train: Training-set size of each of the ``k`` models (int64 ``[k]``).
        """
        raise NotImplementedError

    def reference_parameters(self) -> int:
        """Parameter count ``P_ref`` of the reference architecture for bandwidth ratios.

        The federation's ``bytes_vs_fedavg`` divides the bytes sent by those of float32 FedAvg of this
        architecture, ``rounds * 2 * C * 4 P_ref``. Default: this model's own count
        ``sum_p numel(p)``; a model that replaces another (a Bayesian MLP for the MLP it makes
        probabilistic) overrides it with the replaced model's count, so its extra bytes show.
        """
        return sum(p.numel() for p in self.parameters())

    @property
    def has_penalty(self) -> bool:
        """Whether the subclass adds a :meth:`penalty` to its loss."""
        return type(self).penalty is not CenterModule.penalty

    @property
    def has_packed_forward_features(self) -> bool:
        """Whether the subclass provides its own :meth:`packed_forward_features`."""
        return type(self).packed_forward_features is not CenterModule.packed_forward_features

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
        loss = self.loss_rows(self(x), y).mean()
        self.log("train_loss", loss, prog_bar=False)
        return loss
