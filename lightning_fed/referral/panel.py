"""Referral queries: the clients' test rows, every row at every entry, or a fixed diagnostic panel.

Three query modes feed :func:`lightning_fed.referral.refer.refer`:

- ``test`` (the default): every client's test rows, each entering at a client other than its source
  (:func:`~lightning_fed.referral.refer.draw_entries`).
- ``every-entry``: the ISIC2019 protocol (EdgeDRM Sec. 5.4, App. D.3): "Every test image is evaluated
  at all six entry clients, and we report pooled balanced accuracy". :func:`every_entry_queries` puts
  test row ``i`` at every client ``s`` (query ``i * C + s``), so every class's rows count ``C`` times
  and the table's balanced accuracy is the paper's
  ``BA = 1/K sum_k 1/(C |T_k|) sum_{(x, y) in T_k} sum_s 1{y_hat(x, s) = y}``. A run config asks for
  it with the :class:`EveryEntry` callback.
- ``panel``: the hospital-tier protocol (App. D.1, Table 4). "The common diagnostic panel contains
  20 official test images per class. Each of the 200 distinct images is reused in 64 arrival
  records, yielding 12,800 records with exactly uniform entry counts across hospitals. Seeds
  2025-2027 vary training and entry assignments." :class:`QueryPanel` draws ``images / K`` images of
  every class ``k`` from the pooled test splits of the *untransformed* federation (the same
  partition and splits built with ``data.transforms=false``: a common panel image carries no
  client's colour transform), repeats each in ``records`` arrival records, and deals the ``images x
  records`` entries so that every client is the entry of exactly ``images x records / C`` of them,
  in a seeded random order. Both draws depend on the run seed only (``(seed, "referral_panel")`` and
  ``(seed, "referral_panel_entry")``), never on the graph, so the layered and shortcut runs of one
  seed share the panel and its arrival records. With uniform entries EdgeDRM-NR's peak share is
  exactly ``100 / C`` percent (3.125 % for 32).

A run asks for the panel (or every entry) in its config, where ``lightning-fed refer`` (and the
sweep's referral step) read it::

    callbacks:
      - class_path: lightning_fed.referral.panel.QueryPanel
        init_args: {images: 200, records: 64}
      # or: - class_path: lightning_fed.referral.panel.EveryEntry

As a callback it only checks, before the first round, that the panel fits the federation (``K``
divides ``images``, ``C`` divides ``images x records``, enough test images of every class), so a
misfit fails before training rather than after it. ``refer --queries test|every-entry|panel``
overrides the config.
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
    "EveryEntry",
    "Queries",
    "QueryPanel",
    "balanced_entries",
    "config_panel",
    "config_queries",
    "every_entry_queries",
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


def every_entry_queries(data: FederatedData) -> Queries:
    """Every client's test rows, each entering at every client, its source included (module docstring).

    Query ``i * C + s`` is test row ``i`` (the clients' test splits in order) entering at client ``s``.
    Memory: ``C`` copies of the test inputs.
    """
    c = data.num_centers
    x = torch.cat([cd.x_test for cd in data.centers])
    y = torch.cat([cd.y_test for cd in data.centers]).to(torch.int64)
    source = torch.cat([torch.full((cd.x_test.shape[0],), u) for u, cd in enumerate(data.centers)])
    entry = torch.arange(c, dtype=torch.int64).repeat(x.shape[0])
    return Queries(
        x.repeat_interleave(c, dim=0),
        y.repeat_interleave(c),
        entry,
        EveryEntry.label,
        source=source.to(torch.int64).repeat_interleave(c),
    )


class EveryEntry(Callback):
    """Config marker: ``lightning-fed refer`` evaluates every test row at every client (App. D.3).

    Unlike the panel, the queries are the clients' own test splits as trained on (their transforms
    included), so it fits every federation and checks nothing.
    """

    label = "every entry"

    def queries(self, data: FederatedData, seed: int) -> Queries:
        """:func:`every_entry_queries` (``seed`` unused: nothing is drawn)."""
        del seed
        return every_entry_queries(data)


def _run_config(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "config.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else None


def config_queries(run_dir: str | Path) -> QueryPanel | EveryEntry | None:
    """The query mode listed under ``callbacks:`` in ``run_dir/config.yaml`` (a :class:`QueryPanel`
    or :class:`EveryEntry`, the first one listed), or None (the test splits)."""
    config = _run_config(run_dir) or {}
    modes = {".QueryPanel": QueryPanel, ".EveryEntry": EveryEntry}
    for entry in config.get("callbacks") or []:
        path = str(entry.get("class_path", "")) if isinstance(entry, dict) else ""
        for suffix, mode in modes.items():
            if path.endswith(suffix):
                return mode(**(entry.get("init_args") or {}))
    return None


def config_panel(run_dir: str | Path) -> QueryPanel | None:
    """The :class:`QueryPanel` listed under ``callbacks:`` in ``run_dir/config.yaml``, or None."""
    found = config_queries(run_dir)
    return found if isinstance(found, QueryPanel) else None


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
