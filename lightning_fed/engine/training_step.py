"""A module's own ``training_step`` as every center's local loss, with its ``self.log`` values.

When a model overrides ``training_step`` (a :class:`~lightning_fed.models.base.CenterModule`
subclass, or a plain ``lightning.LightningModule`` through
:class:`~lightning_fed.models.adapter.LightningAdapter`), both engines train **that** loss: for each
center and step they call ``training_step((x, y), batch_idx)`` on the center's batch and minimize
what it returns (a tensor, or a dict with ``"loss"``), plus the model's ``penalty`` and the
algorithm's local term (FedProx, FedDyn, MOON) when there are any. The batch is ``(x, y)``: the
center's rows ``[B, ...]`` and float labels ``[B]`` (0./1., class ids as floats for multi-class
models); ``batch_idx`` is the batch's index within its local epoch, as under ``Trainer.fit``.

The sequential engine calls it on each center's module copy; the packed engine calls it through
:func:`torch.func.functional_call` on the stacked parameters under :func:`torch.vmap`
(``randomness="different"``), one call per group of centers whose batches share a row count and
``batch_idx`` (so no padded row ever reaches the user's loss and ``batch_idx`` is each center's own;
a ``training_step`` that never reads ``batch_idx``, :func:`reads_batch_idx`, is grouped by row count only;
:mod:`lightning_fed.engine.stacked_step` runs the groups and writes their gradients).
A ``training_step`` that ``vmap`` cannot run (data-dependent Python control flow, ``.item()``, an
in-place buffer update such as BatchNorm's running statistics) is run center by center on the
same stacked parameters (same loss and update, slower); the engine's :attr:`training_path` says so.

``self.log(name, value)`` / ``self.log_dict`` inside ``training_step`` are captured (no ``Trainer``
is needed): each center's values are averaged over the round's steps weighted by the batch's row
count, which is Lightning's ``on_epoch=True`` reduction (``reduce_fx="mean"``, ``batch_size`` =
the batch's rows); the federation records them per center and round in ``rounds.parquet`` and as
round means ``train/<name>`` for the loggers. ``on_step`` values are not logged per step (a
round is the federation's unit; a per-step history of hundreds of centers is not kept).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "LogCapture",
    "RoundLogs",
    "TrainingStep",
    "loss_of",
    "model_name",
    "overrides_training_step",
    "reads_batch_idx",
    "user_module",
]


def overrides_training_step(module: torch.nn.Module) -> bool:
    """Whether ``module``'s ``training_step`` is its own (not the built-in ``loss_rows`` mean)."""
    from lightning_fed.models.base import CenterModule

    own = getattr(module, "user_training_step", None)
    if own is not None:  # an adapter around a plain LightningModule says so itself
        return bool(own)
    return type(module).training_step is not CenterModule.training_step


def user_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module the user wrote: the wrapped one for an adapter around a plain LightningModule
    (:class:`~lightning_fed.models.adapter.LightningAdapter`), else ``module`` itself."""
    inner = getattr(module, "module", None) if hasattr(module, "user_training_step") else None
    return inner if isinstance(inner, torch.nn.Module) else module


def model_name(module: torch.nn.Module) -> str:
    """The user's class name (the wrapped module's, for an adapter around a plain LightningModule)."""
    return type(user_module(module)).__name__


def reads_batch_idx(module: torch.nn.Module) -> bool:
    """Whether the module's ``training_step`` reads its ``batch_idx`` argument.

    Read from the method's source: ``False`` only when the second parameter's name never occurs
    in the body (then every center of a step can share one call whatever its index in the epoch);
    ``True`` when it does, or when the source cannot be read (the safe answer).
    """
    method = type(user_module(module)).training_step
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    except (OSError, TypeError, SyntaxError):
        return True
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
        return True
    args = [a.arg for a in func.args.args]
    if len(args) < 3 or func.args.vararg is not None or func.args.kwarg is not None:
        return True
    name = args[2]
    return any(isinstance(node, ast.Name) and node.id in (name, "locals", "vars") for node in ast.walk(func))


def loss_of(out: Any, module: torch.nn.Module) -> Tensor:
    """The loss ``training_step`` returned: a scalar tensor, or the ``"loss"`` of a dict.

    Raises:
        TypeError: For None (Lightning's "skip this step", which a federation round cannot do) or
            anything that is not a scalar tensor, naming the module.
    """
    name = model_name(module)
    if isinstance(out, Mapping):
        if "loss" not in out:
            raise TypeError(
                f"model: {name}.training_step returned a dict without 'loss'; return the loss tensor"
            )
        out = out["loss"]
    if not isinstance(out, Tensor) or out.numel() != 1:
        raise TypeError(
            f"model: {name}.training_step must return the loss as a scalar tensor (or {{'loss': tensor}}) "
            f"for federated training, got {type(out).__name__} (skipping a step by returning None is not "
            "supported)"
        )
    return out.reshape(())


class LogCapture:
    """Collects the ``self.log`` / ``self.log_dict`` calls of one ``training_step`` call.

    Attributes:
        values: ``{name: value}`` of the calls so far (tensors as given, numbers as tensors).
    """

    def __init__(self) -> None:
        self.values: dict[str, Tensor] = {}

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log(name, value, ...)``: keeps the value. The display and reduction options
        (``prog_bar``, ``on_step``, ``batch_size``, ...) do not apply: a round's values are averaged
        weighted by the batch's rows (module docstring)."""
        if isinstance(value, Mapping):
            raise TypeError(f"self.log({name!r}, ...) got a dict; use self.log_dict for several values")
        if hasattr(value, "compute") and not isinstance(value, Tensor):  # a torchmetrics Metric object
            raise TypeError(
                f"self.log({name!r}, <{type(value).__name__}>): a metric object would pool every center's "
                "updates; log its tensor value, or list the metric under `metrics:` to get it per center"
            )
        self.values[str(name)] = value if isinstance(value, Tensor) else torch.tensor(float(value))

    def log_dict(self, dictionary: Mapping[str, Any], *args: Any, **kwargs: Any) -> None:
        """Lightning's ``log_dict``: one :meth:`log` per entry."""
        for name, value in dictionary.items():
            self.log(name, value)


@contextmanager
def captured_logs(module: torch.nn.Module) -> Iterator[LogCapture]:
    """Route ``module.log`` / ``module.log_dict`` to a fresh :class:`LogCapture` while inside."""
    capture = LogCapture()
    hosts = list(dict.fromkeys([module, user_module(module)]))
    for host in hosts:
        object.__setattr__(host, "log", capture.log)
        object.__setattr__(host, "log_dict", capture.log_dict)
    try:
        yield capture
    finally:
        for host in hosts:
            host.__dict__.pop("log", None)
            host.__dict__.pop("log_dict", None)


class TrainingStep(torch.nn.Module):
    """``forward(batch, batch_idx) -> (loss, logged)``: a module's ``training_step`` with its logs.

    Wrapping the module lets :func:`torch.func.functional_call` swap in one center's parameters
    (keys ``"m.<name>"``) and ``torch.vmap`` run many centers at once; the logged values come back
    as outputs (a vmapped function cannot leak them otherwise).

    Args:
        module: The per-center model.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.m = module

    def forward(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> tuple[Tensor, dict[str, Tensor]]:
        with captured_logs(self.m) as logs:
            loss = loss_of(self.m.training_step(batch, batch_idx), self.m)
        return loss, logs.values


class RoundLogs:
    """Per-center, row-weighted means over a round of the values ``training_step`` logged.

    Args:
        num_models: Models (centers or groups) of the engine, in its center order.
        names: The names ``training_step`` logs (the packed engine learns them from its first
            call); every name gets a value (NaN for a model that never logged it) and a name
            outside them is refused, so shards of a federation report the same columns. None:
            whatever is logged.
    """

    def __init__(self, num_models: int, names: tuple[str, ...] | None = None) -> None:
        self.num_models = num_models
        self.names = names
        self._sums: dict[str, Tensor] = {}
        self._weights: dict[str, Tensor] = {}
        for name in names or ():
            self._new(name)

    def _new(self, name: str) -> None:
        self._sums[name] = torch.zeros(self.num_models, dtype=torch.float64)
        self._weights[name] = torch.zeros(self.num_models, dtype=torch.float64)

    def add(self, models: Tensor, values: Mapping[str, Tensor], rows: Tensor) -> None:
        """Add one step's values of ``models`` (int64 ``[k]``), each weighted by its batch ``rows [k]``.

        A value may be per model ``[k]`` or one number for all (a logged constant).
        """
        models = models.cpu()
        weight = rows.detach().to("cpu", torch.float64).reshape(-1)
        for name, value in values.items():
            v = value.detach().to("cpu", torch.float64).reshape(-1).expand(len(models))
            if name not in self._sums:
                if self.names is not None:
                    raise ValueError(
                        f"model: training_step logged {name!r}, which its first step did not log "
                        f"({list(self.names)}); log the same names every step (a NaN where undefined)"
                    )
                self._new(name)
            self._sums[name].index_add_(0, models, v * weight)
            self._weights[name].index_add_(0, models, weight)

    def means(self) -> dict[str, Tensor]:
        """``{name: [num_models]}`` means (NaN for a model that never logged ``name``)."""
        return {n: self._sums[n] / self._weights[n] for n in sorted(self._sums)}
