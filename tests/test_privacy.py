"""What leaves a center: only declared payloads cross the wire, and each center trains on its own rows.

An instrumented :class:`~lightning_fed.comm.wire.Wire` records every payload of a run. For FedAvg and
ABPS (with and without a goal filter, with a personal head) every payload must be either the shared
model parameters (names in ``algorithm.shared_names``, shapes ``[E or 1, *param.shape]``, never a
personal-head parameter) or the metadata descriptor ``v`` (``[C, metadata_dim]``, sent once), and no
message may contain a row or the label vector of any center.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import Tensor

from lightning_fed.algorithms import ABPS, Algorithm, FedAvg, LocalOnly
from lightning_fed.comm import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.selection.abps import BayesianSelector, GoalFilter
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

SIZES = [40, 7, 130, 3, 64, 200, 18, 9]


class RecordingWire(Wire):
    """A wire that keeps a copy of every payload with its edges."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[dict[str, Tensor], Tensor, Tensor]] = []

    def send(self, payload: dict[str, Tensor], src: Tensor, dst: Tensor, round_idx: int) -> dict[str, Tensor]:
        src_t, dst_t = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
        self.sent.append(({n: t.detach().clone() for n, t in payload.items()}, src_t.clone(), dst_t.clone()))
        return super().send(payload, src, dst, round_idx)


def _contains(message: Tensor, needle: Tensor) -> bool:
    """Whether the flat ``needle`` occurs as a contiguous run of the flat ``message`` (bit-equal values)."""
    m, k = message.reshape(-1).to(torch.float64), needle.numel()
    if k == 0 or m.numel() < k:
        return False
    return bool((m.unfold(0, k, 1) == needle.reshape(1, -1).to(torch.float64)).all(1).any())


def _leaks(payload: dict[str, Tensor], data: FederatedData) -> list[str]:
    """Names of the centers' rows / label vectors found inside any message of ``payload``."""
    found = []
    for name, t in payload.items():
        for e in range(t.shape[0]):
            msg = t[e].reshape(-1).to(torch.float64)
            for c, center in enumerate(data.centers):
                for split in ("train", "val", "test"):
                    x, y = getattr(center, f"x_{split}"), getattr(center, f"y_{split}")
                    if msg.numel() >= x.shape[1]:
                        windows = msg.unfold(0, x.shape[1], 1)
                        if bool((windows[:, None, :] == x.to(torch.float64)[None]).all(-1).any()):
                            found.append(f"{name}: a {split} row of center {c}")
                    if y.numel() >= 3 and _contains(msg, y):
                        found.append(f"{name}: the {split} labels of center {c}")
    return found


def _run(data: FederatedData, algorithm: Algorithm, rounds: int = 2) -> tuple[Federation, RecordingWire]:
    wire = RecordingWire()
    fed = Federation(
        data,
        MortalityMLP(hidden=(16, 8), dropout=0.0),
        algorithm,
        TrainerConfig(rounds=rounds, batch_size=32),
        seed=0,
        wire=wire,
    )
    fed.fit()
    return fed, wire


def _filter(dim: int = 3) -> GoalFilter:
    return GoalFilter(goal="homogeneity", keep_fraction=0.5, metadata_dim=dim)


ALGORITHMS = {
    "fedavg": lambda: FedAvg(),
    "fedavg_p1": lambda: FedAvg(personal_layers=1),
    "abps": lambda: ABPS(selector=BayesianSelector(kappa=2)),
    "abps_filter": lambda: ABPS(selector=BayesianSelector(kappa=1, filter=_filter())),
    "abps_p1": lambda: ABPS(selector=BayesianSelector(kappa=2), personal_layers=1),
    "abps_p1_filter": lambda: ABPS(selector=BayesianSelector(kappa=1, filter=_filter()), personal_layers=1),
}


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_only_declared_payloads_cross_the_wire(name: str) -> None:
    data = make_federation(SIZES)
    algorithm = ALGORITHMS[name]()
    fed, wire = _run(data, algorithm)
    shapes = {n: tuple(p.shape) for n, p in fed.module.named_parameters()}
    shared = set(algorithm.shared_names)
    personal = set(shapes) - shared
    assert bool(personal) == (algorithm.personal_layers > 0)
    if algorithm.personal_layers:
        assert personal == set(fed.module.head_parameter_names(algorithm.personal_layers))
    has_filter = isinstance(algorithm, ABPS) and algorithm.selector.filter is not None
    descriptors = 0
    assert wire.sent, "nothing crossed the wire"
    for payload, src, dst in wire.sent:
        edges = src.shape[0]
        assert dst.shape[0] == edges and edges > 0
        if set(payload) == {"v"}:
            descriptors += 1
            dim = algorithm.selector.filter.metadata_dim
            assert payload["v"].shape == (data.num_centers, dim) == (edges, dim)
            assert src.tolist() == list(range(data.num_centers)), "each center sends its own descriptor"
            torch.testing.assert_close(payload["v"].double(), data.metadata(dim), rtol=1e-6, atol=0)
        else:
            assert set(payload) == shared, f"payload {sorted(payload)} is not the shared set"
            assert not set(payload) & personal, "a personal-head parameter left its center"
            for n, t in payload.items():
                assert t.shape[0] in (edges, 1) and tuple(t.shape[1:]) == shapes[n], n
        assert _leaks(payload, data) == []
    assert descriptors == (1 if has_filter else 0)


def test_leak_check_catches_a_row_and_labels_in_a_payload() -> None:
    """The detector itself: a training row hidden in a weight and a label vector in a bias are found."""
    data = make_federation(SIZES)
    weight = torch.randn(2, 16, 6)
    weight[1, 3] = data.centers[2].x_train[5]
    bias = torch.randn(2, 40)
    bias[0, 10:17] = data.centers[1].y_train
    found = _leaks({"layers.0.weight": weight, "layers.0.bias": bias}, data)
    assert "layers.0.weight: a train row of center 2" in found
    assert "layers.0.bias: the train labels of center 1" in found


def _replace_center(data: FederatedData, c: int, **splits: Tensor) -> FederatedData:
    centers = list(data.centers)
    centers[c] = dataclasses.replace(centers[c], **splits)
    return dataclasses.replace(data, centers=tuple(centers))


def _final(data: FederatedData, algorithm: Algorithm) -> dict[str, Tensor]:
    return _run(data, algorithm, rounds=3)[0].center_params()


def test_local_only_center_trains_on_its_own_rows_only() -> None:
    """Permuting (or replacing) center 1's training rows and labels leaves every other center's
    final parameters bit-identical: no code path reads another center's rows."""
    data = make_federation(SIZES)
    base = _final(data, LocalOnly())
    one = data.centers[1]
    perm = torch.randperm(one.n_train, generator=torch.Generator().manual_seed(1))
    permuted = _replace_center(data, 1, x_train=one.x_train[perm], y_train=one.y_train[perm])
    gen = torch.Generator().manual_seed(2)
    other = _replace_center(
        data,
        1,
        x_train=torch.randn(one.x_train.shape, generator=gen),
        y_train=1.0 - one.y_train,
        x_val=torch.randn(one.x_val.shape, generator=gen),
    )
    keep = torch.tensor([c for c in range(data.num_centers) if c != 1])
    for changed in (permuted, other):
        after = _final(changed, LocalOnly())
        for n in base:
            assert torch.equal(base[n][keep], after[n][keep]), n
        assert any(not torch.equal(base[n][1], after[n][1]) for n in base), "center 1 itself must change"


def test_collaboration_does_read_other_centers_models() -> None:
    """The control: under FedAvg the same change to center 1 reaches center 0 (through parameters)."""
    data = make_federation(SIZES)
    one = data.centers[1]
    gen = torch.Generator().manual_seed(2)
    other = _replace_center(
        data, 1, x_train=torch.randn(one.x_train.shape, generator=gen), y_train=1.0 - one.y_train
    )
    a, b = _final(data, FedAvg()), _final(other, FedAvg())
    assert any(not torch.equal(a[n][0], b[n][0]) for n in a)
