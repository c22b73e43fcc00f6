"""The personalization family (Ditto, FedRep, FedBN, APFL): hand-computed rounds on 2 centers, the
limits of each objective, and the packed engine against the sequential one."""

from __future__ import annotations

import itertools

import pytest
import torch
from lightning.fabric import Fabric
from torch import nn

from lightning_fed.algorithms import APFL, Ditto, FedAvg, FedBN, FedRep, LocalOnly
from lightning_fed.algorithms.fedbn import norm_parameter_names
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import CenterData, FederatedData
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.models import CenterModule, MortalityMLP, SmallCNN
from lightning_fed.types import TrainerConfig
from tests.algorithms.tiny_models import LogReg
from tests.algorithms.tiny_models import round_ctx as _ctx
from tests.conftest import make_federation

F64 = dict(accelerator="cpu", devices=1, precision="64-true")


def _one_row_centers(rows: list[tuple[float, float]]) -> FederatedData:
    """One training row ``(x, y)`` per center (validation and test: the same row, unused here)."""
    centers = []
    for c, (x, y) in enumerate(rows):
        xt, yt = torch.tensor([[x]], dtype=torch.float64), torch.tensor([y], dtype=torch.float64)
        centers.append(CenterData(f"c{c}", xt, yt, xt, yt, xt, yt, torch.zeros(3, dtype=torch.float64)))
    return FederatedData(tuple(centers), ("f0",))


def _zero_init(module: CenterModule) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.zero_()


def _grad(x: float, y: float, w: torch.Tensor) -> torch.Tensor:
    """``d/d(w, b) BCE(sigmoid(x w + b), y) = (sigmoid(x w + b) - y) [x, 1]``."""
    p = torch.sigmoid(x * w[0] + w[1])
    return (p - y) * torch.tensor([x, 1.0], dtype=torch.float64)


def _pair(params: dict[str, torch.Tensor], prefix: str, c: int) -> torch.Tensor:
    return torch.stack(
        [params[f"{prefix}linear.weight"][c].reshape(()), params[f"{prefix}linear.bias"][c].reshape(())]
    )


def _fit(data: FederatedData, module: CenterModule, algo, engine=None, rounds: int = 2, seed: int = 3):
    fed = Federation(
        data,
        module,
        algo,
        TrainerConfig(rounds=rounds, batch_size=16, engine=engine or PackedEngine()),
        fabric=Fabric(**F64),
        seed=seed,
    )
    fed.fit()
    return fed


# ----------------------------------------------------------------------------------------- Ditto


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_ditto_one_round_by_hand(engine_cls) -> None:
    """Two centers, one row each ((x, y) = (1, 1) and (-2, 0)), SGD eta = 0.5, lambda = 0.8, two
    local steps (epochs = 2, batch 1), w^0 = v^0 = 0 (both copies start at the init).

    Center i, g_i(w) = (sigmoid(x_i w + b) - y_i) [x_i, 1]:
        global copy:  w_i1 = 0 - eta g_i(0),     w_i2 = w_i1 - eta g_i(w_i1)
        personal:     v_i1 = 0 - eta (g_i(0) + lambda (0 - 0)) = w_i1
                      v_i2 = v_i1 - eta (g_i(v_i1) + lambda (v_i1 - 0)) = w_i2 - eta lambda w_i1
    Aggregation (n_1 = n_2 = 1): both global copies become (w_12 + w_22) / 2; v_i2 stays, and is
    what the center's forward (its evaluated model) computes.
    """
    eta, lam = 0.5, 0.8
    rows = [(1.0, 1.0), (-2.0, 0.0)]
    data = _one_row_centers(rows)
    algo = Ditto(lam=lam)
    module = algo.model_for(LogReg(1, eta)).double()
    _zero_init(module)
    algo.setup(data, module)
    engine = engine_cls()
    engine.setup(
        module,
        [(c.x_train, c.y_train) for c in data.centers],
        batch_size=1,
        epochs=2,
        seed=0,
        dtype=torch.float64,
        local_term=algo.local_term(),
    )
    engine.train_round(0)
    trained = engine.get_params()
    out = algo.aggregate(_ctx(), trained, Wire())
    zero = torch.zeros(2, dtype=torch.float64)
    w2, v2 = [], []
    for x, y in rows:
        w1 = zero - eta * _grad(x, y, zero)
        w2.append(w1 - eta * _grad(x, y, w1))
        v2.append(w2[-1] - eta * lam * w1)
    for c in range(2):
        torch.testing.assert_close(_pair(trained, "global_model.", c), w2[c])
        torch.testing.assert_close(_pair(out, "personal_model.", c), v2[c])
        torch.testing.assert_close(_pair(out, "global_model.", c), (w2[0] + w2[1]) / 2)
    x = torch.tensor([[[1.0]], [[-2.0]]], dtype=torch.float64)
    logits = engine.predict(out, x)
    torch.testing.assert_close(
        logits[:, 0],
        torch.stack(
            [
                v2[0] @ torch.tensor([1.0, 1.0], dtype=torch.float64),
                v2[1] @ torch.tensor([-2.0, 1.0], dtype=torch.float64),
            ]
        ),
    )


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_ditto_lambda_zero_is_local_only_and_its_global_copy_is_fedavg(engine_cls) -> None:
    """lambda = 0: the personal models are Local-only's models and the global copies FedAvg's.

    Sequential engine: bit for bit (the same autograd ops and batches). Packed: to 1e-12 in
    float64 (Local-only and FedAvg take the MLP's hand-derived gradients there, Ditto autograd:
    equal up to rounding). Without dropout: with it the two copies draw from one stream per center,
    so neither copy sees Local-only's (or FedAvg's) masks.
    """
    data = make_federation([40, 7, 70, 3, 25])
    ditto = _fit(data, MortalityMLP(hidden=(8, 4), dropout=0.0), Ditto(lam=0.0), engine_cls()).center_params()
    local = _fit(data, MortalityMLP(hidden=(8, 4), dropout=0.0), LocalOnly(), engine_cls()).center_params()
    fedavg = _fit(data, MortalityMLP(hidden=(8, 4), dropout=0.0), FedAvg(), engine_cls()).center_params()
    for n in local:
        if engine_cls is SequentialEngine:
            assert torch.equal(ditto["personal_model." + n], local[n]), n
            assert torch.equal(ditto["global_model." + n], fedavg[n]), n
        else:
            torch.testing.assert_close(ditto["personal_model." + n], local[n], rtol=0.0, atol=1e-12)
            torch.testing.assert_close(ditto["global_model." + n], fedavg[n], rtol=0.0, atol=1e-12)


def test_ditto_huge_lambda_approaches_fedavg() -> None:
    """lambda -> infinity pins v_i to the model w^t it received (FedAvg's model after t rounds).

    The personal step ``v' - w = (1 - eta lambda)(v - w) - eta grad F(v)`` (SGD, eta = 0.01) is
    stable for ``eta lambda <= 1``; over the round's steps ``v - w^t`` settles near
    ``-grad F / lambda``. Stated tolerance: with lambda = 100 (eta lambda = 1) every coordinate of
    v_i is within 1e-2 of FedAvg's model after R - 1 rounds (|grad F| <= |x| + 1 for the logistic
    loss, so one step moves at most ~eta (|x|_max + 1)); the gap shrinks as lambda grows.
    """
    data = make_federation([40, 7, 70, 3, 25], num_features=1)
    rounds = 3
    fedavg = _fit(data, LogReg(1, 0.01), FedAvg(), rounds=rounds - 1).center_params()
    gaps = []
    for lam in (0.1, 1.0, 10.0, 100.0):
        ditto = _fit(data, LogReg(1, 0.01), Ditto(lam=lam), rounds=rounds).center_params()
        gaps.append(max(float((ditto["personal_model." + n] - fedavg[n]).abs().max()) for n in fedavg))
    assert all(a > b for a, b in itertools.pairwise(gaps)), gaps
    assert gaps[-1] < 1e-2, gaps


def test_ditto_packed_matches_sequential() -> None:
    data = make_federation([40, 7, 70, 3, 25])
    finals = [
        _fit(data, MortalityMLP(hidden=(8, 4), dropout=0.0), Ditto(lam=0.5), engine).engine.get_params()
        for engine in (PackedEngine(), SequentialEngine())
    ]
    for n in finals[0]:
        torch.testing.assert_close(finals[0][n], finals[1][n], rtol=1e-9, atol=1e-9)


def test_ditto_shares_only_the_global_copy() -> None:
    data = make_federation([30, 12])
    fed = _fit(data, MortalityMLP(hidden=(8, 4), dropout=0.0), Ditto(lam=0.1), rounds=1)
    assert fed.algorithm.shared_names and all(
        n.startswith("global_model.") for n in fed.algorithm.shared_names
    )
    plain = sum(p.numel() for p in MortalityMLP(hidden=(8, 4), in_features=6).parameters())
    assert fed.num_shared_parameters == plain
    assert fed.reference_message_bytes == 4 * plain


def test_ditto_bad_lambda_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.lam"):
        Ditto(lam=-1.0)


# ------------------------------------------------------------------------------------------ APFL


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_apfl_one_round_by_hand(engine_cls) -> None:
    """Two centers, one row each ((1, 1) and (-2, 0)), SGD eta = 0.5, alpha^0 = 0.3, two local steps,
    w^0 = v^0 = 0; g_i(u) = (sigmoid(x_i u_w + u_b) - y_i) [x_i, 1].

    step 1 (vbar_0 = a0 v0 + (1 - a0) w0 = 0):
        w1 = -eta g(0),   v1 = -eta a0 g(0),   a1 = a0 - eta <v0 - w0, g(0)> = a0
    step 2 (vbar_1 = a1 v1 + (1 - a1) w1):
        w2 = w1 - eta g(w1),   v2 = v1 - eta a1 g(vbar_1),   a2 = a1 - eta <v1 - w1, g(vbar_1)>
    Aggregation (n_1 = n_2 = 1): w <- (w2_1 + w2_2) / 2 at both; v2, a2 stay. The evaluated model is
    vbar = a2 v2 + (1 - a2) w (logit at x: vbar . [x, 1]).
    """
    eta, a0 = 0.5, 0.3
    rows = [(1.0, 1.0), (-2.0, 0.0)]
    data = _one_row_centers(rows)
    algo = APFL(alpha=a0)
    module = algo.model_for(LogReg(1, eta)).double()
    _zero_init(module.global_model)
    algo.setup(data, module)
    engine = engine_cls()
    engine.setup(
        module,
        [(c.x_train, c.y_train) for c in data.centers],
        batch_size=1,
        epochs=2,
        seed=0,
        dtype=torch.float64,
    )
    engine.train_round(0)
    out = algo.aggregate(_ctx(), engine.get_params(), Wire())
    zero = torch.zeros(2, dtype=torch.float64)
    expected = []
    for x, y in rows:
        w1, v1, a1 = -eta * _grad(x, y, zero), -eta * a0 * _grad(x, y, zero), a0
        gbar = _grad(x, y, a1 * v1 + (1 - a1) * w1)
        w2, v2, a2 = w1 - eta * _grad(x, y, w1), v1 - eta * a1 * gbar, a1 - eta * float((v1 - w1) @ gbar)
        expected.append((w2, v2, a2))
    wbar = (expected[0][0] + expected[1][0]) / 2
    for c, (_, v2, a2) in enumerate(expected):
        torch.testing.assert_close(_pair(out, "global_model.", c), wbar)
        torch.testing.assert_close(_pair(out, "personal_model.", c), v2)
        assert float(out["alpha"][c]) == pytest.approx(a2, abs=1e-12)
    assert a2 != pytest.approx(a0)  # the weight moved
    x = torch.tensor([[[1.0]], [[-2.0]]], dtype=torch.float64)
    logits = engine.predict(out, x)[:, 0]
    for c, (_, v2, a2) in enumerate(expected):
        vbar = a2 * v2 + (1 - a2) * wbar
        assert float(logits[c]) == pytest.approx(
            float(vbar @ torch.tensor([rows[c][0], 1.0], dtype=torch.float64)), abs=1e-12
        )
    assert algo.round_stats()["alpha_mean"] == pytest.approx((expected[0][2] + expected[1][2]) / 2, abs=1e-12)


def test_apfl_alpha_is_clipped_to_the_unit_interval_in_the_mixture() -> None:
    """alpha = 1.7 mixes as 1 (the local model alone), with alpha's own gradient passed through."""
    module = APFL(alpha=0.5).model_for(LogReg(1)).double()
    with torch.no_grad():
        module.alpha.fill_(1.7)
        module.personal_model.linear.weight.fill_(2.0)
        module.personal_model.linear.bias.fill_(0.0)
        module.global_model.linear.weight.fill_(-5.0)
        module.global_model.linear.bias.fill_(0.0)
    x = torch.tensor([[1.0]], dtype=torch.float64)
    assert float(module(x).detach()) == pytest.approx(2.0)
    module(x).sum().backward()
    assert float(module.alpha.grad) == pytest.approx(2.0 - (-5.0))  # d/da (a v + (1 - a) w) x at a = 1


def test_apfl_packed_matches_sequential_and_shares_only_w() -> None:
    data = make_federation([40, 7, 70, 3, 25])
    feds = [
        _fit(data, MortalityMLP(hidden=(8, 4), dropout=0.0), APFL(alpha=0.4), e)
        for e in (PackedEngine(), SequentialEngine())
    ]
    finals = [f.engine.get_params() for f in feds]
    for n in finals[0]:
        torch.testing.assert_close(finals[0][n], finals[1][n], rtol=1e-9, atol=1e-9)
    assert all(n.startswith("global_model.") for n in feds[0].algorithm.shared_names)
    assert not torch.equal(finals[0]["alpha"], torch.full_like(finals[0]["alpha"], 0.4))


def test_apfl_bad_alpha_is_one_line() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.alpha"):
        APFL(alpha=1.5)


# ----------------------------------------------------------------------------------------- FedBN


class BatchNormNet(CenterModule):
    """A user module with BatchNorm: Linear(2, 3) -> BatchNorm1d(3) -> ReLU -> Linear(3, 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.ReLU())
        self.out = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x)).squeeze(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_fedbn_keeps_normalization_parameters_local_by_hand() -> None:
    """Two centers (n_1 = 1, n_2 = 3 training rows), parameters set to c + 1 at center c:
    every shared tensor becomes (1 * 1 + 3 * 2) / 4 = 1.75 at both; BatchNorm's weight and bias stay
    1 and 2 (never sent), and the bytes are FedAvg's less the 6 BatchNorm parameters.
    """
    data = FederatedData(
        tuple(
            CenterData(
                f"c{c}",
                torch.zeros(n, 2),
                torch.zeros(n),
                torch.zeros(2, 2),
                torch.zeros(2),
                torch.zeros(2, 2),
                torch.zeros(2),
                torch.zeros(3, dtype=torch.float64),
            )
            for c, n in enumerate((1, 3))
        ),
        ("a", "b"),
    )
    module = BatchNormNet()
    algo = FedBN()
    algo.setup(data, module)
    assert set(algo.shared_names) == {"body.0.weight", "body.0.bias", "out.weight", "out.bias"}
    params = {
        n: torch.stack([torch.full_like(p, 1.0), torch.full_like(p, 2.0)])
        for n, p in module.named_parameters()
    }
    wire = Wire()
    out = algo.aggregate(_ctx(), params, wire)
    for n in algo.shared_names:
        torch.testing.assert_close(out[n], torch.full_like(params[n], 1.75))
    for n in ("body.1.weight", "body.1.bias"):
        assert torch.equal(out[n], params[n])
    shared = sum(p.numel() for n, p in module.named_parameters() if n in algo.shared_names)
    assert shared == sum(p.numel() for p in module.parameters()) - 6
    assert wire.ledger.total() == 2 * 2 * 4 * shared


def test_fedbn_on_the_built_in_models() -> None:
    """SmallCNN: its GroupNorm and LayerNorm parameters are local; the MLP (no normalization) is refused."""
    cnn = SmallCNN(num_classes=3, embed_dim=4, width=4, groups=2, in_channels=1)
    names = norm_parameter_names(cnn)
    by_name = dict(cnn.named_modules())
    kinds = {type(by_name[n.rsplit(".", 1)[0]]).__name__ for n in names}
    assert kinds == {"GroupNorm", "LayerNorm"} and len(names) == 2 * 4  # 3 GroupNorm + 1 LayerNorm
    algo = FedBN()
    algo.setup(make_federation([5, 6]), cnn)
    assert not set(names) & set(algo.shared_names)
    with pytest.raises(ValueError, match="no normalization layer"):
        FedBN().setup(make_federation([5, 6]), MortalityMLP(hidden=(4,), in_features=6))


def test_fedbn_trains_a_batchnorm_module_through_the_sequential_engine() -> None:
    """Two rounds of a user BatchNorm module: the BatchNorm parameters differ between centers, the
    shared ones agree. (The packed engine's vmap cannot update BatchNorm's running statistics, a
    limit of any BatchNorm model there, FedBN or not: such a model takes trainer.engine =
    SequentialEngine.)"""
    data = make_federation([20, 12, 30], num_features=2)
    fed = _fit(data, BatchNormNet(), FedBN(), SequentialEngine())
    p = fed.center_params()
    assert not torch.allclose(p["body.1.weight"][0], p["body.1.weight"][1])
    for n in fed.algorithm.shared_names:
        torch.testing.assert_close(p[n][0], p[n][1])


def _images(sizes: list[int], seed: int = 0) -> FederatedData:
    gen = torch.Generator().manual_seed(seed)
    centers = []
    for c, n in enumerate(sizes):
        x = torch.randn(n, 1, 8, 8, generator=gen) + c
        y = torch.arange(n, dtype=torch.float32) % 3
        centers.append(
            CenterData(f"c{c}", x, y, x[:4], y[:4], x[:4], y[:4], torch.zeros(3, dtype=torch.float64))
        )
    return FederatedData(tuple(centers), ("pixels",))


def test_fedbn_packed_matches_sequential_on_smallcnn() -> None:
    """SmallCNN (GroupNorm + LayerNorm) under FedBN: packed == sequential; the norm parameters differ
    between centers after aggregation, every other parameter agrees."""
    data = _images([12, 7, 9])
    feds = [
        _fit(data, SmallCNN(num_classes=3, embed_dim=4, width=4, groups=2), FedBN(), e)
        for e in (PackedEngine(), SequentialEngine())
    ]
    finals = [f.engine.get_params() for f in feds]
    for n in finals[0]:
        torch.testing.assert_close(finals[0][n], finals[1][n], rtol=1e-9, atol=1e-9)
    local = set(norm_parameter_names(feds[0].module))
    for n, t in finals[0].items():
        assert torch.allclose(t[0], t[1]) != (n in local), n


# ---------------------------------------------------------------------------------------- FedRep


class ScalarNet(CenterModule):
    """``logit = b (a x) + c``: body ``a`` (no bias), head ``(b, c)``; SGD with momentum 0.9."""

    def __init__(self, lr: float = 0.5) -> None:
        super().__init__()
        self.lr = lr
        self.body = nn.Linear(1, 1, bias=False)
        self.head = nn.Linear(1, 1)

    def set_num_features(self, num_features: int) -> None:
        assert num_features == 1

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        return ("head.weight", "head.bias")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)).squeeze(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


@pytest.mark.parametrize("engine_cls", [PackedEngine, SequentialEngine])
def test_fedrep_one_round_by_hand(engine_cls) -> None:
    """Two centers, rows (x, y) = (1, 1) and (-2, 0), eta = 0.5, start a = 0.5, b = -1, c = 0.2;
    head_epochs = 2 and local_epochs = 1 (batch 1: two head steps, one body step). Momentum 0.9:
    the head's second step uses buf = 0.9 g_1 + g_2; the body's first step has buf = g (its state
    was kept at zero through the head phase).

    With r(a, b, c) = sigmoid(b a x + c) - y:
        head step 1:  g1 = r(a0, b0, c0) [a0 x, 1];          (b1, c1) = (b0, c0) - eta g1
        head step 2:  g2 = r(a0, b1, c1) [a0 x, 1];          (b2, c2) = (b1, c1) - eta (0.9 g1 + g2)
        body step:    a1 = a0 - eta r(a0, b2, c2) b2 x       (head fixed at (b2, c2))
    Aggregation (n_1 = n_2 = 1): a <- (a1_1 + a1_2) / 2 at both; the heads stay.
    """
    eta, a0, b0, c0 = 0.5, 0.5, -1.0, 0.2
    rows = [(1.0, 1.0), (-2.0, 0.0)]
    data = _one_row_centers(rows)
    module = ScalarNet(eta).double()
    with torch.no_grad():
        module.body.weight.fill_(a0)
        module.head.weight.fill_(b0)
        module.head.bias.fill_(c0)
    algo = FedRep(head_epochs=2)
    algo.setup(data, module)
    assert algo.shared_names == ("body.weight",)
    engine = engine_cls()
    engine.setup(
        module,
        [(c.x_train, c.y_train) for c in data.centers],
        batch_size=1,
        epochs=1,
        seed=0,
        dtype=torch.float64,
    )
    algo.train_round(engine, 0)
    trained = engine.get_params()
    out = algo.aggregate(_ctx(), trained, Wire())

    def r(x: float, y: float, a: float, b: float, c: float) -> float:
        return float(torch.sigmoid(torch.tensor(b * a * x + c, dtype=torch.float64))) - y

    bodies = []
    for i, (x, y) in enumerate(rows):
        g1 = r(x, y, a0, b0, c0) * torch.tensor([a0 * x, 1.0], dtype=torch.float64)
        b1, c1 = torch.tensor([b0, c0], dtype=torch.float64) - eta * g1
        g2 = r(x, y, a0, b1, c1) * torch.tensor([a0 * x, 1.0], dtype=torch.float64)
        b2, c2 = torch.tensor([b1, c1], dtype=torch.float64) - eta * (0.9 * g1 + g2)
        a1 = a0 - eta * r(x, y, a0, float(b2), float(c2)) * float(b2) * x
        bodies.append(a1)
        assert float(out["head.weight"][i]) == pytest.approx(float(b2), abs=1e-12)
        assert float(out["head.bias"][i]) == pytest.approx(float(c2), abs=1e-12)
        assert float(trained["body.weight"][i]) == pytest.approx(a1, abs=1e-12)
    for i in range(2):
        assert float(out["body.weight"][i]) == pytest.approx(sum(bodies) / 2, abs=1e-12)


def test_fedrep_packed_matches_sequential() -> None:
    """MLP with Adam (frozen moments, one step count per model), head_epochs = 2, two rounds."""
    data = make_federation([40, 7, 70, 3, 25])
    finals = [
        _fit(data, MortalityMLP(hidden=(8, 4), dropout=0.0), FedRep(head_epochs=2), e).engine.get_params()
        for e in (PackedEngine(), SequentialEngine())
    ]
    for n in finals[0]:
        torch.testing.assert_close(finals[0][n], finals[1][n], rtol=1e-9, atol=1e-9)


def test_fedrep_frozen_parameters_do_not_move() -> None:
    """A head phase leaves the body exactly where it was (values), in both engines."""
    data = make_federation([30, 12])
    for engine in (PackedEngine(), SequentialEngine()):
        module = MortalityMLP(hidden=(8, 4), dropout=0.0, in_features=6).double()
        engine.setup(
            module,
            [(c.x_train, c.y_train) for c in data.centers],
            batch_size=8,
            epochs=1,
            seed=0,
            dtype=torch.float64,
        )
        before = engine.get_params()
        head = set(module.head_parameter_names(1))
        engine.set_phase(2, frozen=tuple(n for n in before if n not in head))
        engine.train_round(0)
        after = engine.get_params()
        for n in before:
            assert torch.equal(before[n], after[n]) == (n not in head), n


def test_fedrep_bad_settings_are_one_line() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.personal_layers"):
        FedRep(personal_layers=0)
    with pytest.raises(ValueError, match=r"algorithm\.head_epochs"):
        FedRep(head_epochs=0)
