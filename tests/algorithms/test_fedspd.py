"""FedSPD: hard/soft E-step, the M-step with the model's optimizer, per-cluster count-weighted averaging
of only the clusters with data, by hand; end to end."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from lightning_fed.algorithms import FedSPD
from lightning_fed.algorithms.fedspd_steps import (
    cluster_average,
    mixture,
    soft_assignments,
    weighted_sgd_step,
)
from lightning_fed.comm import Wire
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.data.center import CenterData, FederatedData
from lightning_fed.data.images import Digits
from lightning_fed.federation import Federation
from lightning_fed.graphs import Path, RandomRegular
from lightning_fed.models import SmallCNN
from lightning_fed.models.base import CenterModule
from lightning_fed.types import FinishContext, RoundContext, TrainerConfig

CTX = RoundContext(round=0, seed=0, val_utility=lambda params, centers: torch.full((len(centers),), 0.5))


class Logits(CenterModule):
    """Input-free classifier: every row gets the logits ``b`` (one parameter ``[K]``), cross-entropy.

    Row loss with label ``y``: ``l(b; y) = logsumexp(b) - b_y``; gradient ``softmax(b) - e_y``.
    """

    def __init__(self, num_classes: int = 2) -> None:
        super().__init__()
        self.b = nn.Parameter(torch.zeros(num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.b.expand(x.shape[0], -1)

    def loss_rows(self, logits: Tensor, y: Tensor) -> Tensor:
        flat = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1).long(), reduction="none"
        )
        return flat.reshape(y.shape)

    def set_num_features(self, num_features: int) -> None:
        pass

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        return ("b",)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _AdamLogits(Logits):
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=0.1)


class _NoEngine:
    """FedSPD trains its own cluster models: touching the engine's training is an error."""

    def train_round(self, round_idx: int) -> Tensor:
        raise AssertionError("FedSPD must not run the engine's local epochs")

    def lr_factor(self, round_idx: int) -> float:
        """The round's ``trainer.lr_schedule`` factor (constant here), which FedSPD applies itself."""
        return 1.0


def _data(labels: list[list[int]]) -> FederatedData:
    """One client per label list; one all-zero feature per row."""
    centers = []
    for c, ys in enumerate(labels):
        y = torch.tensor(ys, dtype=torch.float32)
        x = torch.zeros(len(ys), 1)
        centers.append(CenterData(f"c{c}", x, y, x, y, x, y, torch.zeros(3, dtype=torch.float64)))
    return FederatedData(tuple(centers), ("f0",))


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


def test_soft_assignments_are_softmax_of_negative_losses() -> None:
    """Clusters b_0 = (0, 0), b_1 = (2, 0). Label 0: p_0 = 1/2, p_1 = sigmoid(2); label 1:
    p_1 = sigmoid(-2). With p_s = exp(-l_s): gamma_r1 = exp(-l_1 / T) / (exp(-l_0 / T) + exp(-l_1 / T))
    = p_1^(1/T) / (p_0^(1/T) + p_1^(1/T))."""
    module = Logits()
    clusters = {"b": torch.tensor([[0.0, 0.0], [2.0, 0.0]])}
    x, y = torch.zeros(3, 1), torch.tensor([0.0, 1.0, 0.0])
    for temp in (1.0, 0.5):
        gamma, loss = soft_assignments(module, clusters, x, y, temperature=temp, chunk=2)
        expected = []
        for p1 in (_sigmoid(2.0), _sigmoid(-2.0), _sigmoid(2.0)):
            a, b = 0.5 ** (1 / temp), p1 ** (1 / temp)
            expected.append([a / (a + b), b / (a + b)])
        torch.testing.assert_close(gamma, torch.tensor(expected, dtype=torch.float64))
        torch.testing.assert_close(loss[:, 0], torch.full((3,), math.log(2.0)))
    # T = 0: one-hot of the argmin-loss cluster (label 0 prefers b_1, label 1 prefers b_0).
    hard, _ = soft_assignments(module, clusters, x, y, temperature=0.0)
    assert hard.tolist() == [[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]


def test_weighted_sgd_step_matches_the_hand_gradient() -> None:
    """b = (0, 0), labels (0, 1, 1), weights (2, 1, 0): L = (2 l(0) + l(1)) / 3, grad = (2 (-1/2, 1/2) +
    (1/2, -1/2)) / 3 = (-1/6, 1/6); lr 0.6 gives b = (0.1, -0.1). A second model with zero weights
    stays put."""
    module = Logits()
    params = {"b": torch.zeros(2, 2)}
    x, y = torch.zeros(2, 3, 1), torch.tensor([[0.0, 1.0, 1.0]] * 2)
    w = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    out, loss = weighted_sgd_step(module, params, x, y, w, lr=0.6)
    torch.testing.assert_close(out["b"], torch.tensor([[0.1, -0.1], [0.0, 0.0]]))
    assert float(loss[0]) == pytest.approx(math.log(2.0))


def test_cluster_average_weights_each_cluster_by_membership_on_a_path() -> None:
    """Path 0-1-2, S = 2, scalar models theta = [[1, 10], [4, 20], [7, 30]], memberships
    m = [[3, 1], [1, 1], [2, 0]]. Cluster 0: client 0 (3*1 + 1*4)/4 = 1.75, client 1
    (1*4 + 3*1 + 2*7)/6 = 3.5, client 2 (2*7 + 1*4)/3 = 6. Cluster 1: client 0 (10 + 20)/2 = 15,
    client 1 (20 + 10 + 0*30)/2 = 15, client 2 (0*30 + 1*20)/1 = 20. Messages cross 4 directed edges,
    each S (|W| + 1) float32 = 2 * (2 + 1) * 4 = 24 bytes. With client 2 unavailable only 0-1 talks:
    client 1 cluster 0 (4 + 3)/4 = 1.75, cluster 1 (20 + 10)/2 = 15; client 2 keeps (7, 30), including
    its cluster 1 of zero weight. Only clusters with data travel: clients 0 and 1 send both clusters,
    client 2 only cluster 0, so the 4 directed edges carry 2 + 2 + 2 + 1 = 7 messages of |W| + 1 = 3
    float32 (12 bytes), 84 bytes; without client 2 the 2 edges carry 4 messages, 48 bytes."""
    algo = FedSPD(topology=Path(), num_clusters=2)
    algo.setup(_data([[0], [1], [0]]), Logits(), seed=0)
    theta = torch.tensor([[1.0, 10.0], [4.0, 20.0], [7.0, 30.0]])
    weight = torch.tensor([[3.0, 1.0], [1.0, 1.0], [2.0, 0.0]], dtype=torch.float64)
    algo.clusters = {"b": theta.unsqueeze(2).repeat(1, 1, 2)}
    wire = Wire()
    algo.exchange(weight, wire, 0)
    torch.testing.assert_close(
        algo.clusters["b"][..., 0], torch.tensor([[1.75, 15.0], [3.5, 15.0], [6.0, 20.0]])
    )
    assert wire.ledger.total() == 7 * 12 and algo.round_stats()["mean_neighbours"] == pytest.approx(4 / 3)
    assert algo.round_stats()["sent_cluster_models"] == 7
    algo.clusters = {"b": theta.unsqueeze(2).repeat(1, 1, 2)}
    faulty = Wire(faults=FaultInjection(unavailable={0: [2]}))
    algo.exchange(weight, faulty, 0)
    torch.testing.assert_close(
        algo.clusters["b"][..., 0], torch.tensor([[1.75, 15.0], [1.75, 15.0], [7.0, 30.0]])
    )
    assert faulty.ledger.total() == 4 * 12
    # The bare function: a message without weight changes nothing.
    own = {"t": theta.unsqueeze(2)}
    out = cluster_average(
        own, weight, {"t": theta[:1, :1]}, torch.zeros(1), torch.tensor([2]), torch.tensor([1])
    )
    torch.testing.assert_close(out["t"], own["t"])


def test_aggregate_returns_membership_mixtures_and_books_the_bytes() -> None:
    """local_steps = 0 (E-step and exchange only). Every client holds b_0 = (0, 0), b_1 = (2, 0), so
    averaging keeps them. Rows with label 0 have gamma_1 = sigmoid(2) / (1/2 + sigmoid(2)) = g0, label 1
    gamma_1 = sigmoid(-2) / (1/2 + sigmoid(-2)) = g1. Client 0 (labels 0, 0): pi_1 = g0; client 1
    (0, 1): (g0 + g1)/2; client 2 (1, 1): g1. Mixture b = pi_1 (2, 0). A corrupt sender (NaN) is
    rejected by both its receivers and its neighbour's clusters stay as they were (soft assignments:
    every cluster has membership, so all S travel on each of the 4 directed edges)."""
    algo = FedSPD(topology=Path(), num_clusters=2, local_steps=0, assignment="soft", temperature=1.0)
    algo.setup(_data([[0, 0], [0, 1], [1, 1]]), Logits(), seed=0)
    algo.clusters = {"b": torch.tensor([[0.0, 0.0], [2.0, 0.0]]).repeat(3, 1, 1)}
    wire = Wire()
    assert algo.train_round(_NoEngine(), 0).shape == (3,)  # E-step (no M-step steps)
    out = algo.aggregate(CTX, {"b": torch.zeros(3, 2)}, wire)
    g0 = _sigmoid(2.0) / (0.5 + _sigmoid(2.0))
    g1 = _sigmoid(-2.0) / (0.5 + _sigmoid(-2.0))
    pi1 = torch.tensor([g0, (g0 + g1) / 2, g1])
    torch.testing.assert_close(out["b"], torch.stack([2 * pi1, torch.zeros(3)], 1))
    torch.testing.assert_close(algo.share[:, 1], pi1.double())
    assert wire.ledger.total() == 4 * 2 * (2 + 1) * 4
    stats = algo.round_stats()
    assert stats["membership_entropy"] > 0 and stats["mean_neighbours"] == pytest.approx(4 / 3)
    bad = Wire(faults=FaultInjection(corrupt={0: {1: "nan"}}))
    before = algo.clusters["b"].clone()
    algo.train_round(_NoEngine(), 1)
    algo.aggregate(CTX, {"b": torch.zeros(3, 2)}, bad)
    assert bad.rejected_in(0) == 2 * 2 and torch.equal(algo.clusters["b"], before)


def test_init_is_shared_across_clients_and_seeded_and_bad_config_is_named() -> None:
    """Cluster s starts at theta_0 + noise * rms * eps_s with eps_s drawn from (seed, s): equal across
    clients, different across clusters, the same for the same seed; noise 0 gives theta_0 everywhere."""
    data = _data([[0, 1], [1, 0], [0, 0]])
    module = SmallCNN(num_classes=2, embed_dim=4, width=4, groups=2, in_channels=1)
    a, b = FedSPD(topology=Path(), num_clusters=3), FedSPD(topology=Path(), num_clusters=3)
    a.setup(data, module, seed=5)
    b.setup(data, module, seed=5)
    w = a.clusters["head.weight"]
    assert w.shape == (3, 3, *module.head.weight.shape)
    assert torch.equal(w[0], w[2]) and not torch.equal(w[0, 0], w[0, 1])
    assert all(torch.equal(a.clusters[n], b.clusters[n]) for n in a.clusters)
    flat = FedSPD(topology=Path(), init_noise=0.0)
    flat.setup(data, module, seed=5)
    assert torch.equal(flat.clusters["head.weight"][1, 1], module.head.weight.detach())
    restored = FedSPD(topology=Path(), num_clusters=3)
    restored.setup(data, module, seed=9)
    restored.load_state_dict(a.state_dict())
    assert torch.equal(restored.clusters["head.weight"], w)
    for kwargs, key in (
        ({"num_clusters": 0}, "algorithm.num_clusters"),
        ({"temperature": -0.5}, "algorithm.temperature"),
        ({"lr": -1.0}, "algorithm.lr"),
        ({"local_steps": -1}, "algorithm.local_steps"),
        ({"assignment": "medoid"}, "algorithm.assignment"),
        ({"temperature": 0.0}, "algorithm.temperature"),
        ({"init_noise": -1e-3}, "algorithm.init_noise"),
    ):
        with pytest.raises(ValueError, match=key):
            FedSPD(**kwargs)


def test_two_rounds_on_digits_then_final_personalization() -> None:
    """End to end on 4 Digits clients (RR-2 = a 4-cycle, 8 directed edges): each round books one
    message of |W| + 1 float32 per (edge, cluster with data at the sender), between 8 and 8 S;
    finish() moves every client's mixture by 2 optimizer steps; a rerun with the same seed reproduces
    the numbers."""

    def run() -> tuple[dict, Federation]:
        data = Digits(num_clients=4, transforms=False, max_per_client=40).build(0)
        module = SmallCNN(num_classes=10, embed_dim=8, width=4, groups=2)
        algo = FedSPD(topology=RandomRegular(2), num_clusters=2, local_steps=2, final_steps=2, batch_size=16)
        fed = Federation(data, module, algo, TrainerConfig(rounds=2, local_epochs=1, batch_size=16), seed=3)
        return fed.fit(), fed

    summary, fed = run()
    w = fed.num_shared_parameters
    # The engine never trains (its epochs would be overwritten by the mixtures): the logged train
    # loss is the clients' membership-weighted M-step loss.
    losses = fed.last_result.train_loss
    assert losses.shape == (4,) and torch.isfinite(losses).all()
    per = (w + 1) * 4
    assert summary["total_bytes"] % per == 0 and 2 * 8 <= summary["total_bytes"] // per <= 2 * 8 * 2
    assert summary["rounds"] == 2 and math.isfinite(summary["test_accuracy_mean"])
    again, _ = run()
    assert again["test_auroc_mean"] == summary["test_auroc_mean"]
    # Installed: the last round's mixtures moved by finish(); finish is seeded, so redoing it on the
    # mixtures gives the installed models exactly.
    algo = fed.algorithm
    mixed = {n: t.to(torch.float32) for n, t in mixture(algo.clusters, algo.share).items()}
    ctx = FinishContext(3, fed.data, fed.module, mixed, Wire(), 2, torch.device("cpu"), lambda s: None)
    moved, installed = algo.finish(ctx), fed.engine.get_params()
    assert not torch.equal(installed["head.weight"], mixed["head.weight"])
    assert all(torch.equal(moved[n], installed[n]) for n in installed)


def test_diverged_cluster_models_are_rolled_back() -> None:
    """lr = 1e39 exceeds the float32 range: the model's Adam turns its step size lr / (1 - beta1) into
    inf, so the first step sends every bias to +-inf (every gradient entry is nonzero); all 3 x 2
    cluster models return to their values before the M-step, with a fresh optimizer state, and the
    round counts them."""
    algo = FedSPD(topology=Path(), num_clusters=2, local_steps=3, lr=1e39, assignment="soft", temperature=1.0)
    algo.setup(_data([[0, 1], [1, 0], [0, 1]]), _AdamLogits(), seed=0)
    algo.clusters = {"b": torch.tensor([[0.0, 0.0], [2.0, 0.0]]).repeat(3, 1, 1)}
    before = algo.clusters["b"].clone()
    gamma = algo.memberships()
    algo.m_step(gamma, 0)
    assert algo.round_stats()["diverged_cluster_models"] == 6
    assert torch.equal(algo.clusters["b"], before)
    assert all(bool((t == 0).all()) for t in algo.opt_state.values())


def test_the_m_step_follows_the_rounds_learning_rate_factor() -> None:
    """FedSPD trains outside the engine, so it applies ``trainer.lr_schedule`` itself: an M-step at
    factor 0.5 equals one with ``lr`` halved (the step size is ``lr * factor``), and factor 0 leaves
    every cluster model where it was (no weight decay in the M-step)."""

    def step(lr: float, factor: float) -> torch.Tensor:
        algo = FedSPD(
            topology=Path(), num_clusters=2, local_steps=2, lr=lr, assignment="soft", temperature=1.0
        )
        algo.setup(_data([[0, 1], [1, 0], [0, 1]]), Logits(), seed=0)
        algo.clusters = {"b": torch.tensor([[0.0, 0.0], [2.0, 0.0]]).repeat(3, 1, 1)}
        algo.m_step(algo.memberships(), 0, factor)
        return algo.clusters["b"]

    assert torch.equal(step(0.2, 0.5), step(0.1, 1.0))
    assert not torch.equal(step(0.2, 1.0), step(0.1, 1.0))
    assert torch.equal(step(0.2, 0.0), torch.tensor([[0.0, 0.0], [2.0, 0.0]]).repeat(3, 1, 1))


def test_hard_assignment_and_per_cluster_aggregation_on_two_clients() -> None:
    """Two clients on an edge, S = 2, local_steps = 0, logits models set by hand:
    client 0: b_00 = (0, 0), b_01 = (2, 0), labels (0, 0, 1); client 1: b_10 = (0, 1), b_11 = (3, 0),
    labels (1, 1).

    Hard E-step (argmin loss, l(b; y) = logsumexp(b) - b_y): client 0, label 0: l(b_00) = log 2 = 0.69,
    l(b_01) = log(1 + e^-2) = 0.13 -> cluster 1; label 1: log 2 vs 2 + log(1 + e^-2) = 2.13 -> cluster 0.
    Client 1, label 1: l(b_10) = log(1 + e^-1) = 0.31, l(b_11) = 3.05 -> cluster 0 (both rows). Counts
    m_0 = (1, 2), m_1 = (2, 0); pi_0 = (1/3, 2/3), pi_1 = (1, 0).

    Exchange: client 0 sends clusters 0 and 1, client 1 only cluster 0 (it has no rows of cluster 1):
    3 messages of |W| + 1 = 3 float32, 36 bytes. Cluster 0 at both: (1 (0, 0) + 2 (0, 1)) / 3 =
    (0, 2/3). Cluster 1 at client 0: (2 (2, 0) + nothing) / 2 = (2, 0); at client 1 (own weight 0):
    the received (2, 0). Mixtures: client 0 (0, 2/3) / 3 + 2/3 (2, 0) = (4/3, 2/9); client 1 (0, 2/3)."""
    algo = FedSPD(topology=Path(), num_clusters=2, local_steps=0)
    algo.setup(_data([[0, 0, 1], [1, 1]]), Logits(), seed=0)
    algo.clusters = {"b": torch.tensor([[[0.0, 0.0], [2.0, 0.0]], [[0.0, 1.0], [3.0, 0.0]]])}
    gamma = algo.memberships()
    assert gamma[0].tolist() == [[0, 1], [0, 1], [1, 0]] and gamma[1].tolist() == [[1, 0], [1, 0]]
    wire = Wire()
    algo.train_round(_NoEngine(), 0)
    out = algo.aggregate(CTX, {"b": torch.zeros(2, 2)}, wire)
    assert wire.ledger.total() == 3 * 3 * 4 and algo.round_stats()["sent_cluster_models"] == 3
    torch.testing.assert_close(
        algo.clusters["b"], torch.tensor([[[0.0, 2 / 3], [2.0, 0.0]], [[0.0, 2 / 3], [2.0, 0.0]]])
    )
    torch.testing.assert_close(algo.share, torch.tensor([[1 / 3, 2 / 3], [1.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(out["b"], torch.tensor([[4 / 3, 2 / 9], [0.0, 2 / 3]]))


class _ResetEngine(_NoEngine):
    reset_optimizer_each_round = True


def test_the_m_step_uses_the_models_optimizer_and_trains_only_clusters_with_data() -> None:
    """Both clients hold labels (0, 0) and identical cluster models b = (0, 0) (init_noise 0): every row
    ties and goes to cluster 0, so only the two cluster-0 models train. The model's optimizer is Adam
    (lr 0.1): its first step moves each coordinate by lr * g / |g| (bias-corrected, eps 1e-8), so with
    g = softmax(b) - e_0 = (-1/2, 1/2) b = (0.1, -0.1), where plain SGD would give (0.05, -0.05).
    Cluster 1 keeps (0, 0), a zero step count and zero moments. The state persists into the next
    round (step count 2) unless trainer.reset_optimizer_each_round (1)."""

    def fresh() -> FedSPD:
        algo = FedSPD(topology=Path(), num_clusters=2, local_steps=1, init_noise=0.0)
        algo.setup(_data([[0, 0], [0, 0]]), _AdamLogits(), seed=0)
        return algo

    algo = fresh()
    assert algo.base_lr == pytest.approx(0.1)
    algo.train_round(_NoEngine(), 0)
    torch.testing.assert_close(algo.clusters["b"][:, 0], torch.tensor([[0.1, -0.1]] * 2))
    assert torch.equal(algo.clusters["b"][:, 1], torch.zeros(2, 2))
    assert algo.opt_state["step"].tolist() == [1, 0, 1, 0]
    moments = algo.opt_state["exp_avg_sq.b"]
    assert bool((moments[0] > 0).all()) and torch.equal(moments[1], torch.zeros(2))
    assert algo.round_stats()["trained_cluster_models"] == 2
    algo.train_round(_NoEngine(), 1)
    assert algo.opt_state["step"].tolist() == [2, 0, 2, 0]
    reset = fresh()
    reset.train_round(_ResetEngine(), 0)
    reset.train_round(_ResetEngine(), 1)
    assert reset.opt_state["step"].tolist() == [1, 0, 1, 0]


def test_authors_protocol_sends_one_cluster_per_client_and_averages_uniformly() -> None:
    """The authors' protocol (schedule="rotating", weighting="uniform", init="data_split") on the path
    0-1-2 with S = 2 and the input-free Logits model (|W| = 2, so a message is |W| + 1 = 3 float32,
    12 bytes), local_steps = 0 so only the exchange moves the models.

    First round: every client holds both clusters and the data split gives each client's 4 rows 2 to
    each cluster (seeded; the same again for the same seed). All 4 directed edges carry both
    clusters: 8 messages, 96 bytes, and uniform averages: cluster 0 at client 0 is (1 + 4) / 2 = 2.5.

    Round 1, seed 0: the seeded groups put client 0 on cluster 1 and clients 1, 2 on cluster 0. Only
    the same-group edge 1-2 carries a message, one cluster each way: 2 messages, 24 bytes (one
    cluster per sending client and edge). Cluster 0 at clients 1 and 2: (4 + 7) / 2 = 5.5; client 0
    keeps its cluster 0 (1) and, alone in its group, its cluster 1 (10); clients 1, 2 keep theirs."""
    data = _data([[0, 1, 0, 1], [1, 0, 1, 0], [0, 0, 1, 1]])
    theta = torch.tensor([[1.0, 10.0], [4.0, 20.0], [7.0, 30.0]])
    kw = {"schedule": "rotating", "weighting": "uniform", "init": "data_split", "local_steps": 0}
    algo = FedSPD(topology=Path(), num_clusters=2, **kw)
    algo.setup(data, Logits(), seed=0)
    split = algo.split_memberships()
    assert [g.sum(0).tolist() for g in split] == [[2.0, 2.0]] * 3
    again = FedSPD(topology=Path(), num_clusters=2, **kw)
    again.setup(data, Logits(), seed=0)
    assert all(torch.equal(a, b) for a, b in zip(split, again.split_memberships(), strict=True))
    algo.clusters = {"b": theta.unsqueeze(2).repeat(1, 1, 2)}
    algo.train_round(_NoEngine(), 0)
    wire = Wire()
    algo.aggregate(CTX, {"b": torch.zeros(3, 2)}, wire)
    assert wire.ledger.total() == 8 * 12
    assert float(algo.clusters["b"][0, 0, 0]) == pytest.approx(2.5)
    assert algo.groups(1, first=False).tolist() == [[False, True], [True, False], [True, False]]
    algo.clusters = {"b": theta.unsqueeze(2).repeat(1, 1, 2)}
    algo.train_round(_NoEngine(), 1)
    wire = Wire()
    ctx = RoundContext(round=1, seed=0, val_utility=CTX.val_utility)
    algo.aggregate(ctx, {"b": torch.zeros(3, 2)}, wire)
    assert wire.ledger.total() == 2 * 12 and algo.round_stats()["sent_cluster_models"] == 2
    torch.testing.assert_close(
        algo.clusters["b"][..., 0], torch.tensor([[1.0, 10.0], [5.5, 20.0], [5.5, 30.0]])
    )
    with pytest.raises(ValueError, match=r"algorithm\.schedule must be one of"):
        FedSPD(schedule="every")


def test_authors_protocol_packs_a_checkpoint_and_resumes_past_the_first_round() -> None:
    """A checkpoint taken after the first round restores ``started``: the resumed run uses the
    E-step (not the data split again) and rotating groups; one without the key counts as started."""
    data = _data([[0, 1, 0, 1], [1, 0, 1, 0], [0, 0, 1, 1]])
    algo = FedSPD(topology=Path(), num_clusters=2, schedule="rotating", init="data_split", local_steps=1)
    algo.setup(data, Logits(), seed=0)
    algo.train_round(_NoEngine(), 0)
    state = algo.state_dict()
    fresh = FedSPD(topology=Path(), num_clusters=2, schedule="rotating", init="data_split", local_steps=1)
    fresh.setup(data, Logits(), seed=0)
    fresh.load_state_dict(state)
    assert fresh.started
    del state["started"]
    fresh.started = False
    fresh.load_state_dict(state)
    assert fresh.started
