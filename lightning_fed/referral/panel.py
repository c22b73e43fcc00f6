"""Referral queries: the clients' test rows, or a fixed diagnostic panel (EdgeDRM App. D.1, Table 4).

Two query modes feed :func:`lightning_fed.referral.refer.refer`:

- ``test`` (the default): every client's test rows, each entering at a client other than its source
  (:func:`~lightning_fed.referral.refer.draw_entries`).
- ``panel``: the hospital-tier protocol. "The common diagnostic panel contains 20 official test images
  per class. Each of the 200 distinct images is reused in 64 arrival records, yielding 12,800 records
  with exactly uniform entry counts across hospitals. Seeds 2025-2027 vary training and entry
  assignments." :class:`QueryPanel` draws ``images / K`` images of every class ``k`` from the pooled
  test splits of the *untransformed* federation (the same partition and splits built with
  ``data.transforms=false``: a common panel image carries no client's colour transform), repeats each
  in ``records`` arrival records, and deals the ``images x records`` entries so that every client is
  the entry of exactly ``images x records / C`` of them, in a seeded random order. Both draws depend
  on the run seed only (``(seed, "referral_panel")`` and ``(seed, "referral_panel_entry")``), never on
  the graph, so the layered and shortcut runs of one seed share the panel and its arrival records.
  With uniform entries EdgeDRM-NR's peak share is exactly ``100 / C`` percent (3.125 % for 32).

A run asks for the panel in its config, where ``lightning-fed refer`` (and the sweep's referral
step) read it::

    callbacks:
      - class_path: lightning_fed.referral.panel.QueryPanel
        init_args: {images: 200, records: 64}

As a callback it only checks, before the first round, that the panel fits the federation (``K``
divides ``images``, ``C`` divides ``images x records``, enough test images of every class), so a
misfit fails before training rather than after it. ``refer --queries test|panel`` overrides it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import Tensor

from lightning_fed.callbacks.base import Callback
from lightning_fed.data.center import FederatedData
from lightning_fed.seeding import torch_generator

__all__ = [
    "Queries",
    "QueryPanel",
    "balanced_entries",
    "config_panel",
    "panel_rows",
    "untransformed_data",
]


@dataclass(frozen=True, eq=False)
class Queries:
    """The referral queries: inputs, labels, entry clients and how they were made.

    Attributes:
        x: Inputs ``[Q, ...]``.
        y: Class ids ``[Q]`` (int64).
        entry: Entry client per query ``[Q]`` (int64).
        label: ``"test"`` or ``"panel <images>x<records>"`` (the table's ``queries`` column).
        image: Panel image of each record ``[Q]`` (int64; None for test queries).
        source: Source client of each query ``[Q]`` (int64; the client whose test split holds it),
            None for panel records (a panel image belongs to no client). Never shown to a router: it
            only scores the walks (``source_reached`` / ``source_in_reach`` in the referral table).
    """

    x: Tensor
    y: Tensor
    entry: Tensor
    label: str = "test"
    image: Tensor | None = None
    source: Tensor | None = None


def panel_rows(labels: Tensor, images: int, num_classes: int, seed: int) -> Tensor:
    """Positions of the panel images in the pooled test set: ``images / K`` of every class, seeded.

    Class ``k = 0, 1, ...`` in turn takes the first ``images / K`` of a random permutation of its
    positions, all from one generator ``(seed, "referral_panel")``.

    Raises:
        ValueError: If ``K`` does not divide ``images`` or a class has too few test images.
    """
    if images % num_classes:
        raise ValueError(
            f"referral panel: {images} images cannot hold the {num_classes} classes equally "
            f"(choose images divisible by {num_classes})"
        )
    per, labels = images // num_classes, labels.to(torch.int64)
    gen = torch_generator(seed, "referral_panel")
    rows = []
    for k in range(num_classes):
        pool = (labels == k).nonzero().flatten()
        if pool.numel() < per:
            raise ValueError(
                f"referral panel: class {k} has {pool.numel()} test images, fewer than the {per} per class "
                f"that {images} images need (fewer panel images, or more test data)"
            )
        rows.append(pool[torch.randperm(pool.numel(), generator=gen)[:per]])
    return torch.cat(rows)


def balanced_entries(num_records: int, num_clients: int, seed: int) -> Tensor:
    """Entry client per record ``[Q]``: each client exactly ``Q / C`` times, in a seeded random order.

    Raises:
        ValueError: If ``C`` does not divide ``Q``.
    """
    if num_records % num_clients:
        raise ValueError(
            f"referral panel: {num_records} arrival records cannot enter {num_clients} clients equally "
            f"(choose images x records divisible by {num_clients})"
        )
    gen = torch_generator(seed, "referral_panel_entry")
    clients = torch.arange(num_records, dtype=torch.int64) % num_clients
    return clients[torch.randperm(num_records, generator=gen)]


class QueryPanel(Callback):
    """The fixed diagnostic panel of the hospital-tier experiment (module docstring).

    Args:
        images: Distinct panel images (paper: 200, 20 per class).
        records: Arrival records per image (paper: 64).
    """

    def __init__(self, images: int = 200, records: int = 64) -> None:
        for name, value in (("images", images), ("records", records)):
            if isinstance(value, bool) or int(value) != value or int(value) < 1:
                raise ValueError(f"QueryPanel.{name} must be an integer >= 1, got {value!r}")
        self.images, self.records = int(images), int(records)

    @property
    def label(self) -> str:
        return f"panel {self.images}x{self.records}"

    def check(self, data: FederatedData) -> None:
        """Raise the one-line ``ValueError`` of :meth:`queries` now if the panel cannot fit ``data``."""
        y = torch.cat([cd.y_test for cd in data.centers])
        panel_rows(y, self.images, data.num_classes, 0)
        balanced_entries(self.images * self.records, data.num_centers, 0)

    def check_data(self, data: FederatedData) -> None:
        """Called by :class:`~lightning_fed.federation.Federation` when it is built: the panel must fit."""
        self.check(data)

    def queries(self, data: FederatedData, seed: int) -> Queries:
        """The panel's arrival records on ``data`` (the untransformed federation: :func:`untransformed_data`).

        Record ``i * records + j`` is arrival ``j`` of panel image ``i``.
        """
        x = torch.cat([cd.x_test for cd in data.centers])
        y = torch.cat([cd.y_test for cd in data.centers]).to(torch.int64)
        rows = panel_rows(y, self.images, data.num_classes, seed)
        image = torch.arange(self.images).repeat_interleave(self.records)
        entry = balanced_entries(image.numel(), data.num_centers, seed)
        return Queries(x[rows][image], y[rows][image], entry, self.label, image)


def _run_config(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else None


def config_panel(run_dir: str | Path) -> QueryPanel | None:
    """The :class:`QueryPanel` listed under ``callbacks:`` in ``run_dir/config.yaml``, or None."""
    config = _run_config(run_dir) or {}
    for entry in config.get("callbacks") or []:
        if isinstance(entry, dict) and str(entry.get("class_path", "")).endswith(".QueryPanel"):
            return QueryPanel(**(entry.get("init_args") or {}))
    return None


def untransformed_data(run_dir: str | Path, data: FederatedData, seed: int) -> FederatedData:
    """``data`` rebuilt from ``run_dir/config.yaml`` with ``data.transforms=false``.

    The partition and splits do not depend on the transforms, so the clients hold the same images
    (checked by their test labels), now without their colour transforms. ``data`` itself is
    returned when the run has no config file (an in-memory federation) or its data source takes no
    ``transforms`` option or has them off already.

    Raises:
        ValueError: If the rebuilt federation's test labels differ from ``data``'s.
    """
    config = _run_config(run_dir)
    section = (config or {}).get("data")
    args = section.get("init_args") if isinstance(section, dict) else None
    if not isinstance(args, dict) or args.get("transforms") in (None, False):
        return data
    from jsonargparse import ArgumentParser

    from lightning_fed.data.base import DataSource

    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(DataSource, "data")
    cfg = parser.parse_object({"data": {**section, "init_args": {**args, "transforms": False}}})
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # jsonargparse >= 4.49
    raw = instantiate(cfg).data.build(int(seed))
    same = raw.num_centers == data.num_centers and all(
        torch.equal(a.y_test, b.y_test) for a, b in zip(raw.centers, data.centers, strict=True)
    )
    if not same:
        raise ValueError(
            f"referral panel: {run_dir}'s data rebuilt without transforms holds other test images than "
            "the run's (the partition should not depend on data.transforms)"
        )
    return raw
