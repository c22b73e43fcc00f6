"""A module's own ``validation_step`` / ``test_step``, run per center, with its ``self.log`` values.

Evaluation proper (AUROC, accuracy, the ``metrics:`` list) runs one packed forward over every
center (:mod:`lightning_fed.evaluation`). A module that also overrides ``validation_step`` or
``test_step`` gets them called as ``Trainer.validate`` / ``Trainer.test`` would: in ``eval()`` mode
and without gradients, on each center's own split cut into batches of ``trainer.batch_size`` rows in
split order, as ``(x, y)`` with ``batch_idx`` counting from 0 per center. What it logs with
``self.log`` / ``self.log_dict`` is reduced as Lightning reduces a validation epoch
(``on_epoch=True``, ``reduce_fx="mean"`` weighted by the batch's rows) into one value per center:
``val/<name>`` / ``test/<name>`` in ``rounds.parquet`` and the loggers (mean over centers), and the
final values in ``summary.json``. What the step returns is ignored, as Lightning ignores it.

The steps run center by center on the stacked parameters through :func:`torch.func.functional_call`
(evaluation is a small share of a round: a few forwards per center, no backward); every process of a
DDP run computes all centers, so the values need no collective.
"""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor

from lightning_fed.engine.training_step import RoundLogs, captured_logs, user_module

__all__ = ["EVAL_HOOKS", "EvalStep", "overrides_eval_step", "step_logs"]

#: The hook run on each split.
EVAL_HOOKS = {"val": "validation_step", "test": "test_step"}


def overrides_eval_step(module: torch.nn.Module, split: str) -> bool:
    """Whether the module the user wrote defines its own ``validation_step`` (``split="val"``) or
    ``test_step`` (``"test"``), i.e. one that is not ``LightningModule``'s empty default."""
    hook = EVAL_HOOKS[split]
    return getattr(type(user_module(module)), hook) is not getattr(L.LightningModule, hook)


class EvalStep(torch.nn.Module):
    """``forward(batch, batch_idx) -> logged``: one call of the user's evaluation hook, its logs returned.

    Args:
        module: The per-center model (an adapter's wrapped module is what gets called).
        hook: ``"validation_step"`` or ``"test_step"``.
    """

    def __init__(self, module: torch.nn.Module, hook: str) -> None:
        super().__init__()
        self.m = module
        self.hook = hook

    def forward(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Tensor]:
        with captured_logs(self.m) as logs:
            getattr(user_module(self.m), self.hook)(batch, batch_idx)
        return logs.values


@torch.no_grad()
def step_logs(
    module: torch.nn.Module,
    params: dict[str, Tensor],
    x: Tensor,
    y: Tensor,
    mask: Tensor,
    split: str,
    batch_size: int,
) -> dict[str, Tensor]:
    """Per-center epoch means of what the user's ``validation_step`` / ``test_step`` logs.

    Args:
        module: The template model (its parameters are replaced per center).
        params: Stacked per-center parameters ``{name: [C, ...]}`` (center order).
        x, y, mask: The padded split ``[C, n, ...]``, ``[C, n]``, ``[C, n]`` (True = real row).
        split: ``"val"`` or ``"test"`` (which hook runs).
        batch_size: Rows per batch.

    Returns:
        ``{name: float64 [C]}``: each center's row-weighted mean over its batches (NaN for a center
        with an empty split or that never logged the name); empty when nothing was logged.
    """
    step = EvalStep(module, EVAL_HOOKS[split])
    device = next(iter(params.values())).device
    num_centers = mask.shape[0]
    logs = RoundLogs(num_centers)
    was_training = module.training
    module.eval()
    try:
        for c in range(num_centers):
            named = {f"m.{n}": p[c] for n, p in params.items()}
            rows = int(mask[c].sum())
            for batch_idx, lo in enumerate(range(0, rows, batch_size)):
                xb = x[c, lo : min(rows, lo + batch_size)].to(device)
                yb = y[c, lo : min(rows, lo + batch_size)].to(device, xb.dtype)
                values = torch.func.functional_call(step, named, ((xb, yb), batch_idx))
                logs.add(torch.tensor([c]), values, torch.tensor([len(yb)]))
    finally:
        module.train(was_training)
    return logs.means()
