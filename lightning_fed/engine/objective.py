"""Extra terms in each center's local objective (FedProx, FedDyn, MOON), shared by both engines.

A method that changes what a center minimizes locally returns a :class:`LocalTerm` from
:meth:`Algorithm.local_term <lightning_fed.algorithms.base.Algorithm.local_term>`; the engine adds
its value to every center's mean batch loss, so each optimizer step follows
``grad [ (1/|B|) sum_b l(f_w(x_b), y_b) + R_c(w; B) ]``. The term sees only what the center itself
holds: its current parameters, its parameters at the start of the round (the model it received),
its own batch and the algorithm's per-center state (indexed by center id). Engines call it on
``k`` stacked centers at once (packed) or one at a time (sequential) with the same
:class:`TermBatch`, which is what makes the two engines agree on these methods.

While a term is active the packed engine takes its autograd path (the hand-derived BCE gradients
of the MLP fast path know nothing of the term).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

__all__ = ["LocalTerm", "TermBatch", "squared_distance"]


@dataclass(frozen=True, eq=False)
class TermBatch:
    """What a local term may use in one optimizer step of ``k`` centers.

    Attributes:
        params: Current parameters ``{name: [k, ...]}`` (differentiable).
        start: Parameters at the start of this round ``{name: [k, ...]}`` (the received model).
        centers: Center ids ``[k]`` (int64, CPU) of the stacked rows.
        x: The batch inputs ``[k, B, ...]``.
        mask: ``[k, B]``, 1 for real rows, 0 for padding.
        features: Representations ``[k, B, H]`` of the current models (with the training
            dropout), when the term asked for them (``needs_features``), else None.
        features_fn: ``features_fn(params, x)`` -> representations ``[k, B, H]`` of other stacked
            models on ``x`` (eval mode, no dropout); for reference models (MOON's global and
            previous models).
    """

    params: dict[str, Tensor]
    start: dict[str, Tensor]
    centers: Tensor
    x: Tensor
    mask: Tensor
    features: Tensor | None
    features_fn: Callable[[dict[str, Tensor], Tensor], Tensor]


class LocalTerm(ABC):
    """``R_c(w; B)``: an extra differentiable term of each center's local loss."""

    #: Whether :attr:`TermBatch.features` must be computed (the model's representation layer).
    needs_features: bool = False

    @abstractmethod
    def loss(self, batch: TermBatch) -> Tensor:
        """The term's value per center ``[k]`` (added to the mean batch loss before the gradient)."""


def squared_distance(a: dict[str, Tensor], b: dict[str, Tensor], names: tuple[str, ...]) -> Tensor:
    """``||a - b||^2`` per stacked row ``[k]`` over the tensors ``names`` (the shared ones)."""
    total = None
    for n in names:
        d = (a[n] - b[n].to(a[n].dtype)).reshape(a[n].shape[0], -1)
        part = (d * d).sum(1)
        total = part if total is None else total + part
    if total is None:
        raise ValueError("squared_distance needs at least one parameter name")
    return total
