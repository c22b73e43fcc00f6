"""Fabric's precision, the one source of truth for parameter and compute dtype.

``fabric.precision`` (:class:`~lightning_fed.config.FabricConfig`, or the ``precision`` of a Fabric
handed to :class:`~lightning_fed.federation.Federation` directly) decides three things, all read
from :data:`POLICIES` and nowhere else:

==============  ===============  ===============  ===========
value           parameters       autocast         loss scaler
==============  ===============  ===============  ===========
``32-true``     float32          none             no
``32``          float32          none             no
``64-true``     float64          none             no
``64``          float64          none             no
``bf16-mixed``  float32          bfloat16         no
``bf16-true``   bfloat16         none             no
==============  ===============  ===============  ===========

"parameters" is the dtype of the stacked parameters, the optimizer states (Adam moments, SGD
momentum) and the features the engines train and evaluate on; "autocast" is the dtype
``torch.autocast`` computes the forward pass in during local training (only the autograd path
honours it, so the packed engine's hand-derived MLP gradients are skipped under autocast).

Refused (:data:`REFUSED`, a ``ValueError`` naming ``fabric.precision`` before any work):

* ``16-mixed`` / ``16``: float16 autocast needs dynamic loss scaling (a ``GradScaler``) to keep small
  gradients from flushing to zero, and the engines' optimizers (per-center functional Adam/SGD in
  the packed engine, one ``torch.optim`` per center in the sequential one) have none; ``bf16-mixed``
  has float32's exponent range and needs no scaler.
* ``16-true``: float16 parameters without loss scaling; Adam's ``eps = 1e-8`` is below float16's
  smallest subnormal, so its update divides by zero where the second moment vanishes.

Any other value (``transformer-engine``, bitsandbytes' ``nf4``, ...) is refused as unknown. This
module imports no torch at import time (``lightning_fed.config`` uses :data:`Precision` as a type).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    import torch

__all__ = ["POLICIES", "PRECISIONS", "REFUSED", "Precision", "PrecisionPolicy", "policy", "policy_of"]

#: The accepted ``fabric.precision`` values (``--help`` lists them).
Precision = Literal["32-true", "32", "64-true", "64", "bf16-mixed", "bf16-true"]

#: :data:`Precision` as a tuple.
PRECISIONS: tuple[str, ...] = get_args(Precision)

#: Values Fabric knows that local training refuses, with the reason and the fix.
REFUSED: dict[str, str] = {
    "16-mixed": (
        "float16 autocast needs dynamic loss scaling (a GradScaler), which the engines' per-center "
        "optimizers do not implement; use bf16-mixed (float32's exponent range, no scaler needed)"
    ),
    "16-true": (
        "float16 parameters without loss scaling (Adam's eps=1e-8 underflows in float16); "
        "use bf16-true or bf16-mixed"
    ),
}
REFUSED["16"] = REFUSED["16-mixed"]  # Fabric's alias of 16-mixed


@dataclass(frozen=True)
class PrecisionPolicy:
    """What one accepted precision means for local training.

    Attributes:
        name: Fabric's canonical name (``"64"`` is ``"64-true"``).
        param_dtype: Name of the ``torch`` dtype of parameters, optimizer states and features.
        autocast_dtype: Name of the dtype ``torch.autocast`` computes the forward pass in during
            local training, or None (no autocast).
        grad_scaler: Whether the loss needs dynamic scaling (a ``GradScaler``). False for every
            accepted value; the values that would need one are refused (:data:`REFUSED`).
    """

    name: str
    param_dtype: str
    autocast_dtype: str | None = None
    grad_scaler: bool = False

    @property
    def dtype(self) -> torch.dtype:
        """The parameter dtype as a ``torch.dtype``."""
        import torch

        return getattr(torch, self.param_dtype)

    @property
    def autocast(self) -> bool:
        """Whether local training runs under ``torch.autocast``."""
        return self.autocast_dtype is not None


#: The one mapping from an accepted precision to what it applies.
POLICIES: dict[str, PrecisionPolicy] = {
    "32-true": PrecisionPolicy("32-true", "float32"),
    "64-true": PrecisionPolicy("64-true", "float64"),
    "bf16-mixed": PrecisionPolicy("bf16-mixed", "float32", autocast_dtype="bfloat16"),
    "bf16-true": PrecisionPolicy("bf16-true", "bfloat16"),
}
POLICIES["32"], POLICIES["64"] = POLICIES["32-true"], POLICIES["64-true"]
if set(POLICIES) != set(PRECISIONS):  # pragma: no cover - a guard on this module's own tables
    raise RuntimeError("lightning_fed.precision: POLICIES and Precision list different values")


def policy(value: Any) -> PrecisionPolicy:
    """The policy of a ``fabric.precision`` value.

    Args:
        value: A precision as in ``fabric.precision`` (Fabric's ints ``32`` / ``64`` are accepted).

    Returns:
        The :class:`PrecisionPolicy` of ``value``.

    Raises:
        ValueError: One line naming ``fabric.precision``: why a refused value is refused, or the
            accepted values for an unknown one.
    """
    key = str(value)
    if key in POLICIES:
        return POLICIES[key]
    if key in REFUSED:
        raise ValueError(f"fabric.precision={key!r} is not supported: {REFUSED[key]}")
    raise ValueError(f"fabric.precision must be one of {list(PRECISIONS)}, got {value!r}")


def policy_of(fabric: Any) -> PrecisionPolicy:
    """The policy of a (launched or not) Fabric: its precision plugin's ``precision`` (an object
    without a precision plugin, such as a test's stand-in Fabric, counts as ``32-true``).

    Fabric normalizes its ``precision`` argument into the plugin (``DoublePrecision`` is
    ``"64-true"``, ``HalfPrecision`` ``"bf16-true"`` / ``"16-true"``, ``MixedPrecision``
    ``"bf16-mixed"`` / ``"16-mixed"``, the base ``Precision`` ``"32-true"``).

    Raises:
        ValueError: If the Fabric's precision is refused or unknown (see :func:`policy`).
    """
    plugin = getattr(getattr(fabric, "strategy", None), "precision", None)
    return policy(getattr(plugin, "precision", "32-true"))
