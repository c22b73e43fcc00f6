"""Held-out-center generalization: a new hospital joins after training (the ``evaluation`` group).

``evaluation.holdout_centers`` (a count, or a list of center names) takes centers out of the
federation before anything is built on it: the federation, its engine, its algorithm and its wire
see only the others, so a held-out center's rows never enter a gradient and it sends and receives
no message during training (:meth:`HoldoutSettings.split`). A count is drawn from the run seed,
``numpy_rng(seed, "holdout")``, without replacement among the built centers.

After training, each held-out center receives a model (:meth:`Algorithm.newcomer_weights
<lightning_fed.algorithms.base.Algorithm.newcomer_weights>`, one row of a mixing matrix over the
trained centers' final models, :mod:`lightning_fed.aggregation.newcomer`):

* FedAvg and the star methods: the global model (every center's, weighted by training rows);
* ABPS and the peer methods: the row-weighted mean of its ``evaluation.holdout_peers`` nearest
  trained centers by descriptor (cosine; why: :class:`~lightning_fed.algorithms.peers.JoinsNearestPeers`);
* Local: nothing; it starts from the seeded initialization every center started from.

and is evaluated on its own test split as received (0 steps) and after ``k`` local fine-tuning
steps for each ``k`` of ``evaluation.holdout_finetune_steps``. Fine-tuning is the run's own local
training on the center's own train rows: a fresh engine of the run's kind
(``trainer.engine``), the model's optimizer from a fresh state at its base learning rate, batch size
``trainer.batch_size``, ``k`` optimizer steps (``trainer.local_steps = k``), no local term (FedProx's
proximal term and the like need a round's reference model, which a newcomer's one-off fine-tune does
not have), batch order and dropout drawn from ``(seed, ..., round R, center id)`` with ``R`` the round
budget (a round no training used) and the held-out center's position in the built federation.
Each ``k`` starts again from the received model.

What comes out: ``holdout/...`` keys in ``summary.json`` (:meth:`HeldOut.evaluate`), one row per
held-out center and ``k`` in ``holdout.parquet`` with the test split's support and DeLong interval
(the columns of ``centers.parquet``), and the report's ``holdout.md``.
"""

from __future__ import annotations

import dataclasses
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import polars as pl
import torch
from torch import Tensor

from lightning_fed.data.center import CenterData, FederatedData
from lightning_fed.evaluation import EvalSet, Evaluation, evaluate, support_columns
from lightning_fed.holdout_keys import holdout_key
from lightning_fed.io import atomic_path
from lightning_fed.metrics import fragile_auroc, summarize
from lightning_fed.metrics.support import auroc_averages, split_support
from lightning_fed.seeding import numpy_rng

__all__ = ["HeldOut", "HoldoutSettings", "holdout_key"]


def _steps(value: Any) -> tuple[int, ...]:
    values = value if isinstance(value, list | tuple) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ValueError(
            f"evaluation.holdout_finetune_steps must be an integer >= 0 or a list of them, got {value!r}"
        )
    return tuple(sorted({int(v) for v in values}))


class HoldoutSettings:
    """Which centers sit out of training and how they are evaluated when they join (module docstring).

    Args:
        holdout_centers: None (default: every center trains), a count ``H`` (``1 <= H < C``, drawn from
            the run seed), or a list of center names.
        holdout_finetune_steps: Local fine-tuning steps of each held-out center before it is
            evaluated: an integer or a list (``0``: the received model as is); default 0.
        holdout_peers: ``k`` of the peer methods' rule (a newcomer averages its ``k`` nearest trained
            centers by descriptor); default 3. Read by ABPS and the peer methods only.

    Raises:
        ValueError: One line naming the ``evaluation`` key, on a count below 1, an empty or repeated
            list of names, negative steps or ``holdout_peers < 1``.
    """

    def __init__(
        self,
        holdout_centers: int | list[str] | None = None,
        holdout_finetune_steps: int | list[int] = 0,
        holdout_peers: int = 3,
    ) -> None:
        if isinstance(holdout_centers, bool) or (isinstance(holdout_centers, int) and holdout_centers < 1):
            raise ValueError(
                f"evaluation.holdout_centers must be a count >= 1, a list of center names or null, got "
                f"{holdout_centers!r}"
            )
        if isinstance(holdout_centers, list | tuple):
            names = [str(n) for n in holdout_centers]
            if not names or len(set(names)) != len(names):
                raise ValueError(
                    f"evaluation.holdout_centers must name distinct centers, got {list(holdout_centers)!r}"
                )
            holdout_centers = names
        if isinstance(holdout_peers, bool) or not isinstance(holdout_peers, int) or holdout_peers < 1:
            raise ValueError(f"evaluation.holdout_peers must be an integer >= 1, got {holdout_peers!r}")
        self.holdout_centers = holdout_centers
        self.holdout_finetune_steps = _steps(holdout_finetune_steps)
        self.holdout_peers = int(holdout_peers)

    def chosen(self, data: FederatedData, seed: int) -> tuple[int, ...]:
        """Positions (sorted) of the held-out centers in ``data``; ``()`` when none is held out.

        Raises:
            ValueError: One line naming ``evaluation.holdout_centers`` when it would leave no center
                to train or names a center the data does not have.
        """
        spec, c = self.holdout_centers, data.num_centers
        if spec is None:
            return ()
        if isinstance(spec, int):
            if spec >= c:
                raise ValueError(
                    f"evaluation.holdout_centers={spec} leaves no center to train: the data has {c} "
                    f"centers; give at most {c - 1}"
                )
            return tuple(
                sorted(int(i) for i in numpy_rng(seed, "holdout").choice(c, size=spec, replace=False))
            )
        names = [center.name for center in data.centers]
        unknown = [n for n in spec if n not in names]
        if unknown:
            raise ValueError(
                f"evaluation.holdout_centers names {unknown[:3]} which the data does not have; its centers "
                f"are e.g. {names[:5]} (lightning-fed data describe lists them)"
            )
        if len(spec) >= c:
            raise ValueError(f"evaluation.holdout_centers names all {c} centers: leave at least one to train")
        return tuple(sorted(names.index(n) for n in spec))

    def split(self, data: FederatedData, seed: int) -> tuple[FederatedData, HeldOut | None]:
        """The federation to train (the other centers, in their order) and the held-out centers.

        Returns:
            ``(data, None)`` when nothing is held out.
        """
        held = self.chosen(data, seed)
        if not held:
            return data, None
        kept = tuple(c for i, c in enumerate(data.centers) if i not in held)
        out = tuple(data.centers[i] for i in held)
        return dataclasses.replace(data, centers=kept), HeldOut(out, held, self)


@dataclasses.dataclass(frozen=True, eq=False)
class HeldOut:
    """The centers :meth:`HoldoutSettings.split` took out, and how they are evaluated.

    Attributes:
        centers: Their data (each standardized on its own train split, as every center is).
        ids: Their positions in the built federation (before the split).
        settings: The ``evaluation`` group.
    """

    centers: tuple[CenterData, ...]
    ids: tuple[int, ...]
    settings: HoldoutSettings

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.centers]

    def check(self, algorithm: Any) -> None:
        """Refuse an algorithm that trains on a view of the data a newcomer has no part in.

        Raises:
            ValueError: For an algorithm whose ``prepare`` rewrites the data (Centralized's pooled
                standardization uses every trained center's statistics; a held-out center's rows
                are standardized on its own).
        """
        from lightning_fed.algorithms.base import Algorithm

        if type(algorithm).prepare is not Algorithm.prepare:
            raise ValueError(
                f"evaluation.holdout_centers: {type(algorithm).__name__} trains on a rewritten view of the "
                "data (its prepare) that a held-out center has no part in; drop holdout_centers for it"
            )

    def received(self, federation: Any) -> dict[str, Tensor]:
        """Each held-out center's model as it joins, stacked ``[H, ...]`` (module docstring)."""
        h = len(self.centers)
        metadata = torch.stack([c.metadata for c in self.centers])
        weights = federation.algorithm.newcomer_weights(
            federation.data, metadata, self.settings.holdout_peers
        )
        if weights is None:  # the seeded initialization (the federation's template module holds it)
            return {
                n: p.detach().unsqueeze(0).expand(h, *p.shape).clone()
                for n, p in federation.module.named_parameters()
            }
        params = federation.center_params()
        return {
            n: torch.einsum("hc,c...->h...", weights.to(p.device, torch.float64), p.double()).to(p.dtype)
            for n, p in params.items()
        }

    def finetune(self, federation: Any, params: dict[str, Tensor], steps: int) -> dict[str, Tensor]:
        """``params`` after ``steps`` local optimizer steps on each held-out center's train rows."""
        if steps == 0:
            return params
        trainer = federation.trainer
        engine = type(trainer.engine)()
        engine.setup(
            federation.module,
            [(c.x_train, c.y_train) for c in self.centers],
            batch_size=trainer.batch_size,
            epochs=1,
            seed=federation.seed,
            device=federation.fabric.device,
            dtype=federation.dtype,
            autocast=federation.fabric.autocast if federation.mixed_precision else nullcontext,
            steps=steps,
            center_ids=self.ids,
            augment=getattr(federation.data, "train_augment", None),
        )
        engine.set_params(params)
        engine.train_round(federation.round_budget)
        return engine.get_params()

    def evaluate(self, federation: Any) -> tuple[dict[str, Any], pl.DataFrame]:
        """The ``holdout/...`` summary entries and the ``holdout.parquet`` rows of a trained federation.

        Summary: ``holdout/centers`` (names), ``holdout/finetune_steps``, ``holdout/test_n`` and
        ``holdout/test_positives`` (over the held-out centers), and per ``k`` of the steps
        (:func:`holdout_key`) ``test_auroc_mean`` / ``_std`` / ``_undefined`` / ``_fragile`` /
        ``_robust`` / ``_robust_centers`` / ``_weighted`` / ``_pooled`` and ``test_accuracy_mean`` /
        ``test_balanced_accuracy_mean``, the same figures as the federation's own summary.
        """
        test = EvalSet.from_splits([(c.x_test, c.y_test) for c in self.centers], federation.dtype)
        k_classes, m = federation.data.num_classes, federation.robust_min_per_class
        support = split_support(test.y, test.mask, k_classes)
        received = self.received(federation)
        summary: dict[str, Any] = {
            "holdout/centers": self.names,
            "holdout/finetune_steps": list(self.settings.holdout_finetune_steps),
            "holdout/test_n": int(support.n.sum()),
            "holdout/test_positives": int(support.positives.sum()),
        }
        frames = []
        for steps in self.settings.holdout_finetune_steps:
            params = self.finetune(federation, received, steps)
            ev = evaluate(federation.engine, params, test, federation.metrics)
            summary.update(_figures(steps, ev, test, support, m))
            frames.append(
                pl.DataFrame(
                    {
                        "center": list(self.ids),
                        "name": self.names,
                        "steps": [steps] * len(self.ids),
                        "n_train": [c.n_train for c in self.centers],
                        **support_columns("test", ev, test, k_classes, m),
                    }
                )
            )
        return summary, pl.concat(frames)

    def report(self, federation: Any, path: str | Path) -> dict[str, Any]:
        """:meth:`evaluate`, writing the rows to ``path`` atomically (rank 0); returns the summary entries."""
        summary, rows = self.evaluate(federation)
        if federation.fabric.is_global_zero:
            with atomic_path(path) as tmp:
                rows.write_parquet(tmp)
        return summary


def _figures(steps: int, ev: Evaluation, split: EvalSet, support: Any, m: int) -> dict[str, Any]:
    """One fine-tuning budget's summary entries (:meth:`HeldOut.evaluate`)."""
    t, avg = summarize(ev.auroc), auroc_averages(ev.auroc, support, m)
    figures = {
        "test_auroc_mean": t.mean,
        "test_auroc_std": t.std,
        "test_auroc_undefined": t.n_undefined,
        "test_auroc_fragile": int(fragile_auroc(ev.auroc, split.y, split.mask).sum()),
        "test_auroc_robust": avg["robust"],
        "test_auroc_robust_centers": avg["robust_centers"],
        "test_auroc_weighted": avg["weighted"],
        "test_auroc_pooled": ev.pooled_auroc,
        "test_accuracy_mean": summarize(ev.accuracy).mean,
        "test_balanced_accuracy_mean": summarize(ev.balanced_accuracy).mean,
    }
    return {holdout_key(steps, name): value for name, value in figures.items()}
