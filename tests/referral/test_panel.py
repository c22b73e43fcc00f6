"""The hospital-tier query panel (EdgeDRM App. D.1, Table 4): common images, balanced arrival records.

The paper: "The common diagnostic panel contains 20 official test images per class. Each of the 200
distinct images is reused in 64 arrival records, yielding 12,800 records with exactly uniform entry
counts across hospitals" and "EdgeDRM-NR workload quantities are fixed by uniform entry": with 32
hospitals each one is the entry of 12,800 / 32 = 400 records, so EdgeDRM-NR's peak share is exactly
100 / 32 = 3.125 %, and the 8 large hospitals take 25 % of the calls, 25 calls per 100 arrivals.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lightning_fed.algorithms.edgedrm import EdgeDRM
from lightning_fed.algorithms.edgedrm.potentials import Potentials
from lightning_fed.data.images import Digits
from lightning_fed.federation import Federation
from lightning_fed.graphs.topology import HospitalTiers
from lightning_fed.referral import run as run_module
from lightning_fed.referral.panel import (
    QueryPanel,
    balanced_entries,
    config_panel,
    panel_rows,
    untransformed_data,
)
from lightning_fed.referral.refer import refer
from lightning_fed.referral.routers import EdgeDRMRouter, NoReferral
from lightning_fed.referral.run import refer_run
from lightning_fed.types import TrainerConfig

from .toy import ToyModule, identity_params, make_data

SIZES = [40] * 16 + [80] * 8 + [160] * 8  # small / medium / large hospitals


def tiers_data(seed: int = 0):
    """32 two-feature clients (16 small, 8 medium, 8 large), label = sign of feature 1, 12 test rows each."""
    gen = torch.Generator().manual_seed(seed)
    xs = [torch.randn(n, 2, generator=gen) + 0.05 * u for u, n in enumerate(SIZES)]
    tests = [torch.randn(12, 2, generator=gen) for _ in SIZES]
    return make_data(xs, [(x[:, 1] > 0).float() for x in xs], [(x, (x[:, 1] > 0).float()) for x in tests])


def test_balanced_entries_give_every_client_exactly_its_share() -> None:
    entry = balanced_entries(200 * 64, 32, seed=2025)
    assert entry.shape == (12800,)
    assert torch.equal(torch.bincount(entry, minlength=32), torch.full((32,), 400))
    # Seeded: the same seed gives the same order, another seed another one (same counts).
    assert torch.equal(entry, balanced_entries(12800, 32, seed=2025))
    assert not torch.equal(entry, balanced_entries(12800, 32, seed=2026))
    with pytest.raises(ValueError, match="cannot enter 32 clients equally"):
        balanced_entries(200 * 3, 32, seed=0)


def test_panel_rows_are_class_balanced_distinct_and_seeded() -> None:
    labels = torch.arange(500) % 10
    rows = panel_rows(labels, 200, 10, seed=2025)
    assert rows.unique().numel() == 200
    assert torch.equal(torch.bincount(labels[rows], minlength=10), torch.full((10,), 20))
    assert torch.equal(rows, panel_rows(labels, 200, 10, seed=2025))
    assert not torch.equal(rows, panel_rows(labels, 200, 10, seed=2026))
    with pytest.raises(ValueError, match="divisible by 10"):
        panel_rows(labels, 205, 10, seed=0)
    short = labels[(labels != 3) | (torch.arange(500) < 150)]  # class 3 keeps 15 images
    with pytest.raises(ValueError, match="class 3 has 15 test images, fewer than the 20"):
        panel_rows(short, 200, 10, seed=0)


def test_query_panel_validates_its_sizes() -> None:
    for bad in ({"images": 0}, {"records": 1.5}, {"images": True}):
        with pytest.raises(ValueError, match="QueryPanel"):
            QueryPanel(**bad)
    with pytest.raises(ValueError, match="cannot enter 32 clients equally"):
        QueryPanel(images=20, records=3).check(tiers_data())


def test_panel_records_repeat_each_image_and_balance_entries() -> None:
    data = tiers_data()
    q = QueryPanel().queries(data, seed=2025)  # the paper's 200 x 64
    assert q.label == "panel 200x64" and q.x.shape == (12800, 2) and q.y.dtype == torch.int64
    assert torch.equal(torch.bincount(q.image), torch.full((200,), 64))
    assert torch.equal(torch.bincount(q.entry, minlength=32), torch.full((32,), 400))
    assert torch.equal(torch.bincount(q.y[::64], minlength=2), torch.tensor([100, 100]))
    # Every record of an image carries that image.
    first = q.x[::64].repeat_interleave(64, 0)
    assert torch.equal(q.x, first) and torch.equal(q.y, q.y[::64].repeat_interleave(64))


@pytest.mark.parametrize("shortcut", [False, True])
def test_no_referral_peak_share_is_exactly_one_in_32(shortcut: bool) -> None:
    """EdgeDRM-NR on the 200 x 64 panel over 16/8/8 hospitals: peak share 3.125 %, large share 25 %,
    25 large calls per 100 arrivals, one call per query; the referring router's entries are the same."""
    data = tiers_data()
    graph = HospitalTiers(shortcut=shortcut).build(32)
    module = ToyModule()
    potentials = Potentials(
        b=torch.zeros(32), theta=torch.randn(32, 2), counts=torch.tensor(SIZES, dtype=torch.int64)
    )
    queries = QueryPanel().queries(data, seed=2025)
    table = refer(
        ".",
        module,
        identity_params(module, 32, head_scale=0.1),
        data,
        graph,
        potentials,
        seed=2025,
        routers=[NoReferral(), EdgeDRMRouter()],
        write=False,
        queries=queries,
    )
    nr = table.filter(table["router"] == "EdgeDRM-NR").row(0, named=True)
    assert nr["peak_share"] == 3.125 == 100 / 32
    assert nr["share_large"] == 25.0 and nr["calls_per_100_large"] == 25.0 and nr["calls_per_query"] == 1.0
    assert nr["share_small"] == 50.0 and nr["share_medium"] == 25.0
    assert set(table["queries"]) == {"panel 200x64"}


def _tier_run(data, shortcut: bool) -> Federation:
    fed = Federation(
        data,
        ToyModule(),
        EdgeDRM(topology=HospitalTiers(shortcut=shortcut), stage2_epochs=2),
        TrainerConfig(rounds=1, local_epochs=1, batch_size=64),
        seed=2025,
    )
    fed.fit()
    return fed


def test_refer_run_uses_one_panel_for_both_graphs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Layered and shortcut runs of one seed answer the same panel images from the same entries, and
    every row of a run's table (routers and stage I) the same records."""
    data = tiers_data()
    seen: dict[bool, list] = {False: [], True: []}
    real = run_module.refer_frames
    for shortcut in (False, True):
        fed = _tier_run(data, shortcut)

        def spy(*args, _seen=seen[shortcut], **kwargs):
            _seen.append(kwargs["queries"])
            return real(*args, **kwargs)

        monkeypatch.setattr(run_module, "refer_frames", spy)
        table = refer_run(
            tmp_path / str(shortcut),
            lambda _folder, fed=fed: fed,
            routers=[NoReferral()],
            queries=QueryPanel(images=20, records=64),
        )
        nr = table.filter(table["router"] == "EdgeDRM-NR").row(0, named=True)
        assert nr["peak_share"] == 3.125 and set(table["queries"]) == {"panel 20x64"}
    (a, *rest_a), (b, *_) = seen[False], seen[True]
    assert all(q is a for q in rest_a)  # the stage-I row reads the same records
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and torch.equal(a.entry, b.entry)


def test_refer_run_queries_option(tmp_path: Path) -> None:
    fed = _tier_run(tiers_data(), shortcut=False)
    table = refer_run(tmp_path, lambda _folder: fed, routers=[NoReferral()], queries="test")
    assert set(table["queries"]) == {"test"} and table["peak_share"][0] != 3.125
    table = refer_run(tmp_path, lambda _folder: fed, routers=[NoReferral()], queries="panel")
    assert set(table["queries"]) == {"panel 200x64"} and table["peak_share"][0] == 3.125
    with pytest.raises(ValueError, match="test, every-entry or panel"):
        refer_run(tmp_path, lambda _folder: fed, queries="all")


DIGITS_CONFIG = """seed: 7
data:
  class_path: lightning_fed.data.Digits
  init_args:
    num_clients: 4
    max_per_client: 120
    transforms: {transforms}
callbacks:
  - class_path: lightning_fed.referral.panel.QueryPanel
    init_args: {{images: 20, records: 4}}
"""


def test_untransformed_data_rebuilds_the_same_splits_without_transforms(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(DIGITS_CONFIG.format(transforms="true"))
    data = Digits(num_clients=4, max_per_client=120).build(7)
    raw = untransformed_data(tmp_path, data, 7)
    plain = Digits(num_clients=4, max_per_client=120, transforms=False).build(7)
    for r, d, p in zip(raw.centers, data.centers, plain.centers, strict=True):
        assert torch.equal(r.y_test, d.y_test) and torch.equal(r.x_test, p.x_test)
        assert r.attributes["transform"] == "identity" != d.attributes["transform"]
    assert any(not torch.equal(r.x_test, d.x_test) for r, d in zip(raw.centers, data.centers, strict=True))
    # No config (an in-memory run), or transforms already off: the data as given.
    assert untransformed_data(tmp_path / "none", data, 7) is data
    (tmp_path / "config.yaml").write_text(DIGITS_CONFIG.format(transforms="false"))
    assert untransformed_data(tmp_path, plain, 7) is plain
    panel = config_panel(tmp_path)
    assert panel is not None and (panel.images, panel.records) == (20, 4)
    assert config_panel(tmp_path / "none") is None
    assert np.isfinite(panel.queries(raw, 7).x.numpy()).all()
