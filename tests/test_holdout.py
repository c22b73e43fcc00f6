"""Held-out centers (``evaluation.holdout_centers``): they never train nor send, and what they receive
and how they are fine-tuned checks against hand computations and sklearn."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from lightning.fabric import Fabric
from sklearn.metrics import roc_auc_score

from lightning_fed.aggregation.newcomer import nearest_peer_weights
from lightning_fed.algorithms import ABPS, Algorithm, FedAvg, LocalOnly
from lightning_fed.comm import IdentityHook
from lightning_fed.commands.common import build_federation
from lightning_fed.data.center import CenterData, FederatedData
from lightning_fed.engine.packed import PackedEngine
from lightning_fed.holdout import HoldoutSettings, holdout_key
from lightning_fed.models import MortalityMLP
from lightning_fed.selection.abps import BayesianSelector, GoalFilter
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation
from tests.test_privacy import RecordingWire, _leaks

SIZES = [40, 7, 130, 3, 64, 200, 18, 9]


class RecordingEngine(PackedEngine):
    """A packed engine that keeps the training rows it was set up with."""

    def setup(self, module: Any, train: Any, **kwargs: Any) -> None:
        self.train_sets = [(x.clone(), y.clone()) for x, y in train]
        super().setup(module, train, **kwargs)


class Source:
    """A data source returning a fixed federation (``data.build(seed)``)."""

    def __init__(self, data: FederatedData) -> None:
        self.data = data

    def build(self, seed: int) -> FederatedData:
        return self.data


def _build(
    data: FederatedData,
    algorithm: Algorithm,
    settings: HoldoutSettings,
    monkeypatch: pytest.MonkeyPatch,
    *,
    rounds: int = 2,
    engine: PackedEngine | None = None,
    model: MortalityMLP | None = None,
    batch_size: int = 32,
    fabric: Fabric | None = None,
) -> tuple[Any, RecordingWire]:
    """The federation ``lightning-fed fit`` builds (``commands.common.build_federation``), trained,
    with a wire that records every payload."""
    wire = RecordingWire()
    monkeypatch.setattr("lightning_fed.fit_parser.wire_from", lambda init: wire)
    init = SimpleNamespace(
        data=Source(data),
        model=model or MortalityMLP(hidden=(16, 8), dropout=0.0),
        algorithm=algorithm,
        trainer=TrainerConfig(rounds=rounds, batch_size=batch_size, engine=engine or RecordingEngine()),
        wire=SimpleNamespace(hook=IdentityHook(), faults=None, max_norm_ratio=5.0),
        metrics=None,
        seed=0,
        evaluation=settings,
    )
    federation = build_federation(init, fabric or Fabric(accelerator="cpu", devices=1))
    federation.fit()
    return federation, wire


def _rows_in(x: torch.Tensor, rows: torch.Tensor) -> int:
    """How many of ``rows`` occur (bit-equal) among the rows of ``x``."""
    if x.numel() == 0 or rows.numel() == 0:
        return 0
    return int((rows.double()[:, None, :] == x.double()[None]).all(-1).any(1).sum())


def _noised(data: FederatedData, held: tuple[int, ...]) -> FederatedData:
    """``data`` with every held-out center's rows and labels replaced by other random ones."""
    gen = torch.Generator().manual_seed(99)
    centers = list(data.centers)
    for i in held:
        c = centers[i]
        swap = {}
        for split in ("train", "val", "test"):
            x, y = getattr(c, f"x_{split}"), getattr(c, f"y_{split}")
            swap[f"x_{split}"] = torch.randn(x.shape, generator=gen)
            swap[f"y_{split}"] = 1.0 - y
        centers[i] = dataclasses.replace(c, metadata=c.metadata + 1.0, **swap)
    return dataclasses.replace(data, centers=tuple(centers))


ALGORITHMS = {
    "fedavg": FedAvg,
    "abps_filter": lambda: ABPS(
        selector=BayesianSelector(
            kappa=2, filter=GoalFilter(goal="homogeneity", keep_fraction=0.5, metadata_dim=3)
        )
    ),
    "local": LocalOnly,
}


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_held_out_centers_never_train_nor_send(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the patient-row leak test (tests/test_privacy.py) does for the training centers: no
    held-out row is among the rows any model trains on, no message carries a held-out row, label
    vector or descriptor, and replacing every held-out row, label and descriptor by other values
    leaves every trained parameter bit-equal (they contribute no gradient)."""
    data = make_federation(SIZES)
    settings = HoldoutSettings(holdout_centers=3, holdout_finetune_steps=[0, 2])
    held = settings.chosen(data, seed=0)
    assert len(held) == 3
    federation, wire = _build(data, ALGORITHMS[name](), settings, monkeypatch)
    assert federation.held_out.ids == held and federation.data.num_centers == len(SIZES) - 3
    assert [c.name for c in federation.data.centers] == [
        c.name for i, c in enumerate(data.centers) if i not in held
    ]
    out = FederatedData(tuple(data.centers[i] for i in held), data.feature_names)
    for x, _ in federation.engine.train_sets:
        for center in out.centers:
            for split in ("train", "val", "test"):
                assert _rows_in(x, getattr(center, f"x_{split}")) == 0
    for payload, _, _ in wire.sent:
        assert _leaks(payload, out) == []
        if "v" in payload:  # the descriptors sent are the trained centers' only
            assert _rows_in(payload["v"], out.metadata(payload["v"].shape[1])) == 0
    assert bool(wire.sent) == (name != "local")

    again, _ = _build(_noised(data, held), ALGORITHMS[name](), settings, monkeypatch)
    for n, p in federation.center_params().items():
        assert torch.equal(p, again.center_params()[n]), n


def test_zero_steps_is_the_received_global_model_evaluated(monkeypatch: pytest.MonkeyPatch) -> None:
    """FedAvg: a newcomer receives the global model (every trained center holds it); its 0-step
    AUROC is sklearn's on that model's logits, and other fine-tuning budgets do not change it."""
    data = make_federation(SIZES)
    fed, _ = _build(
        data,
        FedAvg(),
        HoldoutSettings(holdout_centers=["c0", "c4"], holdout_finetune_steps=[0, 3]),
        monkeypatch,
    )
    summary, rows = fed.held_out.evaluate(fed)
    params = fed.center_params()
    for n, p in fed.held_out.received(fed).items():
        torch.testing.assert_close(p, params[n][:1].expand_as(p), rtol=1e-6, atol=1e-7)
    zero = rows.filter(rows["steps"] == 0)
    assert zero["name"].to_list() == ["c0", "c4"] and zero["center"].to_list() == [0, 4]
    for row, center in zip(zero.iter_rows(named=True), fed.held_out.centers, strict=True):
        one = {n: p[:1] for n, p in params.items()}
        logits = fed.engine.predict(one, center.x_test[None]).double().numpy()[0]
        assert row["test_auroc"] == pytest.approx(roc_auc_score(center.y_test.numpy(), logits), abs=1e-12)
        assert row["test_n"] == len(center.y_test) and row["test_positives"] == int(center.y_test.sum())
    only_zero = HoldoutSettings(holdout_centers=["c0", "c4"])
    alone = dataclasses.replace(fed.held_out, settings=only_zero)
    summary_zero, rows_zero = alone.evaluate(fed)
    assert rows_zero["test_auroc"].to_list() == zero["test_auroc"].to_list()
    key = holdout_key(0, "test_auroc_mean")
    assert summary_zero[key] == summary[key] == pytest.approx(float(np.mean(zero["test_auroc"].to_numpy())))
    assert summary["holdout/centers"] == ["c0", "c4"] and summary["holdout/finetune_steps"] == [0, 3]
    assert holdout_key(3, "test_auroc_pooled") in summary


def test_one_fine_tuning_step_is_adams_first_step_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """One step on a held-out center whose train rows fit one batch (float64, no weight decay).

    Adam's first step from a fresh state: ``m = (1 - b1) g``, ``v = (1 - b2) g^2``, so
    ``theta_1 = theta_0 - lr m / (1 - b1) / (sqrt(v / (1 - b2)) + eps) = theta_0 - lr g / (|g| + eps)``
    with ``g`` the gradient of the mean binary cross-entropy over the center's 7 train rows (autograd
    on the received model, independent of the engine)."""
    data = make_federation(SIZES)
    model = MortalityMLP(hidden=(4,), dropout=0.0, lr=0.01, weight_decay=0.0)
    settings = HoldoutSettings(holdout_centers=["c1"], holdout_finetune_steps=1)
    fabric = Fabric(accelerator="cpu", devices=1, precision="64-true")
    fed, _ = _build(data, FedAvg(), settings, monkeypatch, model=model, batch_size=64, fabric=fabric)
    held = fed.held_out
    received = held.received(fed)
    tuned = held.finetune(fed, received, 1)
    center = held.centers[0]
    theta = {n: p[0].detach().clone().requires_grad_(True) for n, p in received.items()}
    logits = torch.func.functional_call(fed.module, theta, (center.x_train.double(),)).reshape(-1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, center.y_train.double())
    grads = torch.autograd.grad(loss, list(theta.values()))
    for (n, p), g in zip(theta.items(), grads, strict=True):
        expected = p.detach() - 0.01 * g / (g.abs() + 1e-8)
        torch.testing.assert_close(tuned[n][0], expected, rtol=1e-10, atol=1e-12)
    assert held.finetune(fed, received, 0) is received  # 0 steps: the received model itself


def test_nearest_peer_weights_by_hand() -> None:
    """Three trained centers with descriptors (1, 0), (0, 1), (1, 1) and 10, 20, 30 train rows; a
    newcomer at (2, 0.1): cosines 0.9988, 0.0499, 0.7425, so its 2 nearest are centers 0 and 2, and
    it averages them by rows: (10, 0, 30) / 40."""
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    w = nearest_peer_weights(v, torch.tensor([10, 20, 30]), torch.tensor([[2.0, 0.1]]), peers=2)
    torch.testing.assert_close(w, torch.tensor([[0.25, 0.0, 0.75]], dtype=torch.float64))
    everyone = nearest_peer_weights(v, torch.tensor([10, 20, 30]), torch.tensor([[2.0, 0.1]]), peers=5)
    torch.testing.assert_close(everyone, torch.tensor([[1 / 6, 2 / 6, 3 / 6]], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"evaluation\.holdout_peers"):
        nearest_peer_weights(v, torch.tensor([10, 20, 30]), torch.tensor([[2.0, 0.1]]), peers=0)


def _meta(center: CenterData, v: list[float]) -> CenterData:
    return dataclasses.replace(center, metadata=torch.tensor(v, dtype=torch.float64))


def test_abps_newcomer_receives_its_nearest_peers_and_local_the_initialization(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ABPS: the newcomer's received model is the hand-weighted mix of its 2 nearest trained centers'
    final models; Local: the seeded initialization every center started from."""
    base = make_federation([30, 20, 60, 40])
    vs = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [2.0, 0.1, 0.0]]
    data = dataclasses.replace(
        base, centers=tuple(_meta(c, v) for c, v in zip(base.centers, vs, strict=True))
    )
    settings = HoldoutSettings(holdout_centers=["c3"], holdout_peers=2)
    fed, _ = _build(data, ABPS(selector=BayesianSelector(kappa=1)), settings, monkeypatch)
    params = fed.center_params()
    n = [c.n_train for c in fed.data.centers]  # centers c0, c1, c2: the nearest are c0 and c2
    for name, p in fed.held_out.received(fed).items():
        mix = (n[0] * params[name][0].double() + n[2] * params[name][2].double()) / (n[0] + n[2])
        torch.testing.assert_close(p[0].double(), mix, rtol=1e-6, atol=1e-7)

    local, _ = _build(data, LocalOnly(), settings, monkeypatch)
    start = dict(local.module.named_parameters())
    for name, p in local.held_out.received(local).items():
        assert torch.equal(p[0], start[name].detach())


def test_settings_refuse_bad_values_in_one_line() -> None:
    data = make_federation([10, 10, 10])
    for bad, match in (
        (dict(holdout_centers=0), "evaluation.holdout_centers must be a count >= 1"),
        (dict(holdout_centers=True), "evaluation.holdout_centers must be a count >= 1"),
        (dict(holdout_centers=["c0", "c0"]), "distinct"),
        (dict(holdout_finetune_steps=-1), "evaluation.holdout_finetune_steps"),
        (dict(holdout_finetune_steps=[]), "evaluation.holdout_finetune_steps"),
        (dict(holdout_peers=0), "evaluation.holdout_peers"),
    ):
        with pytest.raises(ValueError, match=match) as err:
            HoldoutSettings(**bad)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"leaves no center to train.*at most 2"):
        HoldoutSettings(holdout_centers=3).chosen(data, 0)
    with pytest.raises(ValueError, match=r"names \['x'\] which the data does not have"):
        HoldoutSettings(holdout_centers=["x"]).chosen(data, 0)
    assert HoldoutSettings(holdout_centers=["c2", "c0"]).chosen(data, 0) == (0, 2)
    assert HoldoutSettings().split(data, 0) == (data, None)
    draws = {HoldoutSettings(holdout_centers=1).chosen(make_federation([5] * 8), s) for s in range(6)}
    assert len(draws) > 1  # the count is drawn from the seed
    assert HoldoutSettings(holdout_centers=2).chosen(data, 4) == HoldoutSettings(holdout_centers=2).chosen(
        data, 4
    )
    assert HoldoutSettings(holdout_finetune_steps=[5, 0, 5]).holdout_finetune_steps == (0, 5)


def test_centralized_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from lightning_fed.algorithms import Centralized

    with pytest.raises(SystemExit):
        _build(make_federation([10, 10, 10]), Centralized(), HoldoutSettings(holdout_centers=1), monkeypatch)
    assert "evaluation.holdout_centers: Centralized" in capsys.readouterr().err
