"""FedDRM (Wang et al. 2026b), the EdgeDRM paper's centralized reference, as its own method.

The done-when check: on a 3-client toy whose clients hold disjoint input regions, FedDRM's own
selection head routes every test query to its source client.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import Tensor

from lightning_fed.algorithms import FedDRM
from lightning_fed.algorithms.feddrm import SOURCE_HEAD
from lightning_fed.cli import main
from lightning_fed.commands.common import load_run as _load_run
from lightning_fed.data.center import FederatedData
from lightning_fed.federation import Federation
from lightning_fed.models.mlp import MortalityMLP
from lightning_fed.reporting.edgedrm_tables import edgedrm_rows
from lightning_fed.types import TrainerConfig
from tests.referral.toy import ToyModule, make_data


class FeatureToy(ToyModule):
    """The referral toy (``z = P x``, linear head) with the representation FedDRM's source term reads."""

    def forward_features(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encode(x)
        return self.head(z), z


def three_regions(n: int = 60, radius: float = 2.0, sd: float = 0.3, seed: int = 0) -> FederatedData:
    """Client ``u``'s rows ~ N(mu_u, sd^2 I), ``mu_u = radius (cos 2 pi u/3, sin 2 pi u/3)``; the label is
    the side of the cluster along its tangent ``t_u`` (``y = 1{(x - mu_u)^T t_u > 0}``). Test rows are
    fresh draws."""
    gen = torch.Generator().manual_seed(seed)
    xs, ys, test = [], [], []
    for u in range(3):
        a = 2 * math.pi * u / 3
        mu = radius * torch.tensor([math.cos(a), math.sin(a)])
        tangent = torch.tensor([-math.sin(a), math.cos(a)])
        draws = []
        for _ in range(2):
            x = mu + sd * torch.randn(n, 2, generator=gen)
            draws.append((x, ((x - mu) @ tangent > 0).float()))
        (x, y), held = draws
        xs.append(x)
        ys.append(y)
        test.append(held)
    return make_data(xs, ys, test)


@pytest.fixture(scope="module")
def fitted() -> tuple[Federation, dict]:
    fed = Federation(
        three_regions(), FeatureToy(), FedDRM(), TrainerConfig(rounds=20, local_epochs=1, batch_size=20)
    )
    return fed, fed.fit()


def test_feddrm_routes_each_query_to_its_source(fitted: tuple[Federation, dict]) -> None:
    """Source accuracy 1.0. Why it must be: the three regions are equal isotropic Gaussians with equal
    priors (n = 60 each), so the Bayes source classifier is linear in x (argmax_j mu_j^T x, the |mu_j|
    being equal), which the selection head ``b_j + vartheta_j^T P x`` represents once the shared ``P``
    is full rank. Each mean lies ``radius sin 60 deg = 1.73 = 5.8 sd`` from the nearest Bayes boundary,
    so a query crosses it with probability ``2 Phi(-5.8) < 1e-8``: none of the 180 queries does, and the
    fitted head (train rows with the same margin) separates them all. With the head at its zero start
    every query would go to client 0 (source accuracy 1/3)."""
    _, summary = fitted
    assert summary["feddrm_source_accuracy"] == 1.0
    assert summary["feddrm_queries"] == 180.0
    # Perfect routing: each query is answered by its own client's head, so FedDRM's accuracy is the
    # pooled accuracy of every client's model on its own test rows (equal sizes: their mean).
    assert summary["feddrm_accuracy"] == pytest.approx(summary["test_accuracy_mean"])
    assert summary["feddrm_accuracy"] > 0.8  # the private heads learned the within-client labels


def test_encoder_and_selection_head_are_shared_task_heads_private(fitted: tuple[Federation, dict]) -> None:
    fed, _ = fitted
    params = fed.center_params()
    for name in ("proj.weight", f"{SOURCE_HEAD}.weight", f"{SOURCE_HEAD}.bias"):
        torch.testing.assert_close(params[name], params[name][:1].expand_as(params[name]))
    assert not torch.allclose(params["head.weight"][0], params["head.weight"][1])
    assert params[f"{SOURCE_HEAD}.weight"].shape == (3, 3, 2)  # m = 3 sources, d = 2
    assert float(params[f"{SOURCE_HEAD}.weight"].abs().sum()) > 0  # trained from its zero start
    assert set(fed.algorithm.shared_names) == {"proj.weight", f"{SOURCE_HEAD}.weight", f"{SOURCE_HEAD}.bias"}


def test_results_survive_a_checkpoint(fitted: tuple[Federation, dict]) -> None:
    fed, summary = fitted
    again = FedDRM()
    again.load_state_dict(fed.algorithm.state_dict())
    assert again.summary_stats() == {k: v for k, v in summary.items() if k.startswith("feddrm_")}


def _hand_set(prior: bool, prediction: str = "select") -> tuple[FedDRM, FeatureToy, dict[str, Tensor]]:
    """Identity encoder; source head scores ``z_0`` for client 1 (weight 1) and nothing for 0 and 2;
    client ``j``'s head predicts class ``j % 2`` with logit margin 10; counts n = (10, 10, 80)."""
    xs = [torch.zeros(10, 2), torch.zeros(10, 2), torch.zeros(80, 2)]
    data = make_data(xs, [torch.zeros(len(x)) for x in xs])
    alg, module = FedDRM(prior=prior, prediction=prediction), FeatureToy()
    alg.setup(data, module)
    w_src = torch.zeros(3, 3, 2)
    w_src[:, 1, 0] = 1.0
    bias = torch.zeros(3, 2)
    bias[[0, 2], 0], bias[1, 1] = 10.0, 10.0
    params = {
        "proj.weight": torch.eye(2).expand(3, 2, 2).clone(),
        "head.weight": torch.zeros(3, 2, 2),
        "head.bias": bias,
        f"{SOURCE_HEAD}.weight": w_src,
        f"{SOURCE_HEAD}.bias": torch.zeros(3, 3),
    }
    return alg, module, params


def test_selection_rule_prior_and_mixture() -> None:
    """Query z = (1, 0): scores (0, 1, 0) without the prior -> client 1 (class 1); with the prior
    log rho = log(0.1, 0.1, 0.8) the scores are (-2.30, -1.30, -0.22) -> client 2 (class 0). The mixture
    weighs class 1 by softmax(0, 1, 0)_1 = e / (e + 2) = 0.576 (heads are near one-hot)."""
    x = torch.tensor([[1.0, 0.0]])
    alg, module, params = _hand_set(prior=False)
    routed = alg.route(module, params, x)
    assert routed.selected.tolist() == [1] and routed.prediction.tolist() == [1]
    torch.testing.assert_close(routed.scores, torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64))
    alg, module, params = _hand_set(prior=True)
    routed = alg.route(module, params, x)
    assert routed.selected.tolist() == [2] and routed.prediction.tolist() == [0]
    alg, module, params = _hand_set(prior=False, prediction="mixture")
    routed = alg.route(module, params, x)
    assert routed.probabilities[0, 1].item() == pytest.approx(math.e / (math.e + 2), abs=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lam": 0.0}, "algorithm.lam"),
        ({"lam": 1.5}, "algorithm.lam"),
        ({"prediction": "vote"}, "algorithm.prediction"),
        ({"prior": "yes"}, "algorithm.prior"),
        ({"encode_batch_size": 0}, "algorithm.encode_batch_size"),
    ],
)
def test_bad_arguments_name_their_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field) as err:
        FedDRM(**kwargs)
    assert "\n" not in str(err.value)


def test_needs_an_encoder_with_a_linear_head_and_two_clients() -> None:
    xs = [torch.zeros(4, 2), torch.zeros(4, 2)]
    data = make_data(xs, [torch.zeros(4), torch.zeros(4)])
    with pytest.raises(ValueError, match="encode"):
        FedDRM().setup(data, MortalityMLP())  # the tabular MLP has no encode(x) / linear head
    one = make_data(xs[:1], [torch.zeros(4)])
    with pytest.raises(ValueError, match="at least 2 clients"):
        FedDRM().setup(one, FeatureToy())


DIGITS = [
    "--data=lightning_fed.data.Digits",
    "--data.init_args.num_clients=4",
    "--data.init_args.max_per_client=120",
    "--model=lightning_fed.models.SmallCNN",
    "--model.init_args.embed_dim=16",
    "--trainer.rounds=2",
    "--trainer.local_steps=5",
    "--trainer.batch_size=32",
    "--logger.enabled=false",
    "--output.progress_bar=false",
]


@pytest.mark.cli
def test_cli_fit_writes_the_feddrm_number_and_the_tables_read_it(tmp_path: Path) -> None:
    """``lightning-fed fit`` with FedDRM on tiny Digits: summary.json carries its accuracy on the pooled
    test queries, a reload of the run keeps it, and the EdgeDRM tables read one Reference row."""
    main(
        [
            "fit",
            *DIGITS,
            "--algorithm=lightning_fed.algorithms.FedDRM",
            f"--output.root={tmp_path}",
            "--output.name=feddrm",
        ]
    )
    run = tmp_path / "feddrm"
    summary = json.loads((run / "summary.json").read_text())
    assert 0.0 <= summary["feddrm_accuracy"] <= 1.0 and 0.0 <= summary["feddrm_source_accuracy"] <= 1.0
    assert summary["feddrm_queries"] > 0
    assert _load_run(run).algorithm.summary_stats()["feddrm_accuracy"] == summary["feddrm_accuracy"]
    rows = edgedrm_rows(tmp_path)
    assert rows["method"].to_list() == ["FedDRM"] and rows["graph"].to_list() == ["Reference"]
    assert rows["accuracy"][0] == pytest.approx(100.0 * summary["feddrm_accuracy"])


BENCH = Path(__file__).resolve().parents[2] / "configs" / "edgedrm_bench"


@pytest.mark.cli
def test_the_benchmark_layers_run_feddrm(tmp_path: Path) -> None:
    """data/fmnist_cpu + partitions/dir03 + methods/feddrm_cpu (no graph layer), shrunk to 60 images per
    client and 2 rounds of 2 updates: a FedDRM run the EdgeDRM tables read."""
    if not Path("/usr/share/datasets/fashion-mnist").is_dir():
        pytest.skip("/usr/share/datasets/fashion-mnist is absent (Debian package dataset-fashion-mnist)")
    layers = [BENCH / "data" / "fmnist_cpu.yaml", BENCH / "partitions" / "dir03.yaml"]
    layers.append(BENCH / "methods" / "feddrm_cpu.yaml")
    tiny = ["--data.init_args.max_per_client=60", "--trainer.rounds=2", "--trainer.local_steps=2"]
    args = [arg for layer in layers for arg in ("--config", str(layer))]
    args += [*tiny, "--seed=2025", "--logger.enabled=false", "--output.progress_bar=false"]
    main(["fit", *args, f"--output.root={tmp_path}", "--output.name=fmnist-dir03-feddrm-seed2025"])
    rows = edgedrm_rows(tmp_path)
    assert rows.select("method", "graph", "dataset", "partition", "clients").row(0) == (
        "FedDRM",
        "Reference",
        "FashionMNIST",
        "Dir-0.3",
        8,
    )
