"""Stage II fitted as the paper fits it (App. D.2.1, D.3.2): mini-batch momentum SGD on a cosine rate.

Why SGD is the default: the task term touches only the heads and the edge terms only the potentials,
so full-batch Adam, which normalizes each parameter's step by its own gradient scale, makes lambda
(and kappa) all but irrelevant; with SGD lambda and kappa set the step sizes (the paper's Table 5).
"""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from lightning_fed.algorithms.edgedrm import EdgeDRM
from lightning_fed.algorithms.edgedrm.stage2 import Stage2Optim, fit_stage2, stage2_batches
from lightning_fed.graphs.topology import Graph

MEANS = torch.tensor([[0.0, 0.0], [1.0, 0.5], [-0.5, 1.5]])
PATH3 = Graph(3, torch.tensor([[0, 1], [1, 2]])).adjacency
EDGE2 = Graph(2, torch.tensor([[0, 1]])).adjacency


def ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y.long(), reduction="none")


def gaussian_clients(sizes: list[int], seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    z = [MEANS[u] + torch.randn(n, 2, generator=gen) for u, n in enumerate(sizes)]
    return z, [(t[:, 0] > 0).float() for t in z]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def test_lambda_moves_heads_and_potentials_under_sgd_but_not_under_full_batch_adam() -> None:
    """lambda = 0.1 vs 0.9 on a 3-client path (kappa = 3 (1 - lambda) / 4): with the default SGD the
    heads and the potentials differ by O(1) (measured: heads ~1.3, slopes ~0.5, intercepts ~0.7).
    With full-batch Adam the heads agree to ~1e-6 and the potentials to ~1e-2: Adam's per-parameter
    normalization cancels lambda on the heads and kappa on the potentials (the defect SGD fixes)."""
    z, y = gaussian_clients([400, 100, 200])
    w0, b0 = torch.zeros(3, 2, 2), torch.zeros(3, 2)
    sgd = {lam: fit_stage2(z, y, w0, b0, PATH3, lam, ce, seed=1) for lam in (0.1, 0.9)}
    lo, hi = sgd[0.1], sgd[0.9]
    assert max_diff(lo.weight, hi.weight) > 0.5
    assert max_diff(lo.potentials.theta, hi.potentials.theta) > 0.2
    assert max_diff(lo.potentials.b, hi.potentials.b) > 0.2
    # More routing weight (small lambda, large kappa) -> larger potentials; more task weight -> larger heads.
    assert float(lo.potentials.theta.norm()) > float(hi.potentials.theta.norm())
    assert float(hi.weight.norm()) > float(lo.weight.norm())

    adam = Stage2Optim("adam", lr=0.01, rounds=200)
    lo, hi = (fit_stage2(z, y, w0, b0, PATH3, lam, ce, adam) for lam in (0.1, 0.9))
    assert max_diff(lo.weight, hi.weight) < 1e-5
    assert max_diff(lo.bias, hi.bias) < 1e-5
    assert max_diff(lo.potentials.theta, hi.potentials.theta) < 2e-2
    assert max_diff(lo.potentials.b, hi.potentials.b) < 2e-2


def two_clients() -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor]:
    z = [torch.tensor([[1.0], [2.0]], dtype=torch.float64), torch.tensor([[-1.0]], dtype=torch.float64)]
    y = [torch.tensor([0, 1]), torch.tensor([1])]
    w0 = torch.zeros(2, 2, 1, dtype=torch.float64)
    b0 = torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]], dtype=torch.float64)
    return z, y, w0, b0


def reference_grads(z, y, w, bh, b, th, lam):
    """Closed-form gradients of sum_u [lam T_u + kappa L_01^(u)] on one edge (m = 2, |E| = 1, so
    kappa = 1 - lam), d = 1: softmax - onehot for the heads, sigmoid of the edge logit for the potentials."""
    k = 1.0 - lam
    gw, gbh, gb, gth = torch.zeros_like(w), torch.zeros_like(bh), torch.zeros_like(b), torch.zeros_like(th)
    for u in range(2):
        v = 1 - u
        zu = z[u][:, 0]
        p = torch.softmax(zu[:, None] * w[u, :, 0] + bh[u], dim=1)
        err = p - F.one_hot(y[u], 2).to(p.dtype)  # d CE / d logits
        gw[u, :, 0] += lam * (err * zu[:, None]).mean(0)
        gbh[u] += lam * err.mean(0)
        s = torch.sigmoid((b[v] - b[u]) + (th[v, 0] - th[u, 0]) * zu)  # d softplus(logit) / d logit
        gb[v] += k * s.mean()
        gb[u] -= k * s.mean()
        gth[v, 0] += k * (s * zu).mean()
        gth[u, 0] -= k * (s * zu).mean()
    return [gw, gbh, gb, gth]


def test_one_sgd_step_on_two_clients_by_hand() -> None:
    """Client 0: z = (1, 2), y = (0, 1), head bias (log 3, 0); client 1: z = (-1), y = 1, head 0; the
    edge {0, 1}: m = 2, |E| = 1, kappa = (1 - lambda) = 0.75 at lambda = 0.25. Batches hold every row.

    Heads (d T / d logits = p - e_y): client 0 has p = (3/4, 1/4), rows give (-1/4, 1/4) * 1 and
    (3/4, -3/4) * 2, so grad W_0 = lambda (0.625, -0.625) = (0.15625, -0.15625) and grad alpha_0 =
    lambda (0.25, -0.25) = (0.0625, -0.0625); client 1 has p = (1/2, 1/2), row (1/2, -1/2) * (-1):
    grad W_1 = lambda (-0.5, 0.5) = (-0.125, 0.125), grad alpha_1 = lambda (0.5, -0.5) = (0.125, -0.125).
    Potentials at 0 (softplus' = 1/2): L_01^(0) = mean softplus((b_1 - b_0) + (t_1 - t_0) z_0r) gives
    d/dt_0 = -1/2 * 1.5 = -0.75; L_01^(1) = mean softplus((b_0 - b_1) + (t_0 - t_1) z_1r) gives
    d/dt_0 = -1/2 * 1 = -0.5 (the neighbour's contribution, App. B.4). So G_t0 = 0.75 (-0.75 - 0.5)
    = -0.9375 = -G_t1, and the intercept terms cancel (-1/2 + 1/2): G_b = 0.
    SGD (lr 0.1, round 1 so eta_1 = lr, wd 0.01, first step: buf = g + wd p): p <- p - 0.1 (g + 0.01 p).
    """
    z, y, w0, b0 = two_clients()
    lam, lr, wd = 0.25, 0.1, 0.01
    optim = Stage2Optim(lr=lr, weight_decay=wd, momentum=0.9, batch_size=8, rounds=1, steps_per_round=1)
    fit = fit_stage2(z, y, w0, b0, EDGE2, lam, ce, optim)
    log3 = math.log(3.0)
    exp_w = torch.tensor([[[-0.015625], [0.015625]], [[0.0125], [-0.0125]]], dtype=torch.float64)
    exp_bias = torch.tensor(
        [[log3 - lr * (0.0625 + wd * log3), lr * 0.0625], [-lr * 0.125, lr * 0.125]], dtype=torch.float64
    )
    torch.testing.assert_close(fit.weight, exp_w, rtol=0, atol=1e-12)
    torch.testing.assert_close(fit.bias, exp_bias, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        fit.potentials.theta, torch.tensor([[0.09375], [-0.09375]], dtype=torch.float64)
    )
    torch.testing.assert_close(fit.potentials.b, torch.zeros(2, dtype=torch.float64), rtol=0, atol=1e-15)
    # The closed form agrees with the hand numbers at the start.
    zero_b, zero_t = torch.zeros(2, dtype=torch.float64), torch.zeros(2, 1, dtype=torch.float64)
    grads = reference_grads(z, y, w0, b0, zero_b, zero_t, lam)
    torch.testing.assert_close(grads[3][:, 0], torch.tensor([-0.9375, 0.9375], dtype=torch.float64))


@pytest.mark.parametrize(
    ("rounds", "steps", "reset"), [(1, 3, True), (3, 1, True), (3, 1, False), (2, 2, True)]
)
def test_momentum_buffer_weight_decay_and_round_rates_match_a_hand_loop(rounds, steps, reset) -> None:
    """Several steps against a hand loop of the update (closed-form gradients): g = grad + wd p,
    buf = g on a round's first step (reset) else momentum buf + g, p <- p - eta_r buf, with
    eta_r = lr/2 (1 + cos(pi (r - 1) / H)) held through round r."""
    z, y, w0, b0 = two_clients()
    lam, lr, wd, mom, horizon = 0.4, 0.2, 0.05, 0.9, 4
    optim = Stage2Optim(
        lr=lr,
        momentum=mom,
        weight_decay=wd,
        batch_size=8,
        rounds=rounds,
        steps_per_round=steps,
        horizon=horizon,
        reset_momentum=reset,
    )
    fit = fit_stage2(z, y, w0, b0, EDGE2, lam, ce, optim)
    p = [w0.clone(), b0.clone(), torch.zeros(2, dtype=torch.float64), torch.zeros(2, 1, dtype=torch.float64)]
    buf = None
    for r in range(1, rounds + 1):
        eta = lr / 2 * (1 + math.cos(math.pi * (r - 1) / horizon))
        if reset:
            buf = None
        for _ in range(steps):
            g = [gi + wd * pi for gi, pi in zip(reference_grads(z, y, *p, lam), p, strict=True)]
            buf = g if buf is None else [mom * bi + gi for bi, gi in zip(buf, g, strict=True)]
            p = [pi - eta * bi for pi, bi in zip(p, buf, strict=True)]
    for got, want in zip([fit.weight, fit.bias, fit.potentials.b, fit.potentials.theta], p, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_cosine_rate_inside_the_stage() -> None:
    """eta_r = 0.005 {1 + cos(pi (r - 1) / 600)} for lr 0.01: eta_1 = 0.01, eta_301 = 0.005,
    eta_201 = 0.005 * 1.5 = 0.0075, eta_200 = 0.005 (1 + cos(199 pi / 600)) (the last CIFAR round)."""
    optim = Stage2Optim()
    assert optim.lr_at(1) == pytest.approx(0.01, abs=1e-15)
    assert optim.lr_at(301) == pytest.approx(0.005, abs=1e-15)
    assert optim.lr_at(201) == pytest.approx(0.0075, abs=1e-15)
    assert optim.lr_at(200) == pytest.approx(0.005 * (1 + math.cos(199 * math.pi / 600)), abs=1e-15)
    assert optim.steps == 200 * 5
    assert Stage2Optim("adam", lr=0.03).lr_at(7) == 0.03 and Stage2Optim("adam", rounds=9).steps == 9
    # The fit uses and logs one rate per round (H = 4: eta = lr, lr/2 (1 + 1/sqrt 2), lr/2, ...).
    z, y = gaussian_clients([20, 10, 15])
    seen: list[dict[str, float]] = []
    fit_stage2(
        z,
        y,
        torch.zeros(3, 2, 2),
        torch.zeros(3, 2),
        PATH3,
        0.5,
        ce,
        Stage2Optim(rounds=4, horizon=4),
        log=seen.append,
    )
    want = [0.01, 0.005 * (1 + math.sqrt(0.5)), 0.005, 0.005 * (1 - math.sqrt(0.5))]
    assert [s["stage2_lr"] for s in seen] == pytest.approx(want, abs=1e-15)
    assert seen[-1]["stage2_loss"] < seen[0]["stage2_loss"]


def test_same_seed_same_fit_and_a_clients_batches_ignore_the_others() -> None:
    z, y = gaussian_clients([50, 30, 40])
    w0, b0 = torch.zeros(3, 2, 2), torch.zeros(3, 2)
    optim = Stage2Optim(rounds=5, batch_size=8)
    a, b = (fit_stage2(z, y, w0, b0, PATH3, 0.5, ce, optim, seed=7) for _ in range(2))
    for x1, x2 in [(a.weight, b.weight), (a.bias, b.bias), (a.potentials.theta, b.potentials.theta)]:
        assert torch.equal(x1, x2)
    other = fit_stage2(z, y, w0, b0, PATH3, 0.5, ce, optim, seed=8)
    assert not torch.equal(a.weight, other.weight)
    # A client's batches: permutations of its own rows from (seed, "stage2-batches", round, client).
    rows = stage2_batches(10, 4, 5, seed=7, round_idx=2, client=1)
    assert rows.shape == (5, 4)
    first = rows[:3].flatten()
    assert sorted(first[first >= 0].tolist()) == list(range(10))  # 4 + 4 + 2: one permutation
    assert torch.equal(rows, stage2_batches(10, 4, 5, seed=7, round_idx=2, client=1))
    assert not torch.equal(rows, stage2_batches(10, 4, 5, seed=7, round_idx=3, client=1))
    # End to end: with lambda = 1 nothing couples the clients, so client 0's head depends on its own
    # rows and batches only, whatever the other clients' sizes (and so the padding) are.
    z2, y2 = gaussian_clients([50, 80, 5])
    z2[0], y2[0] = z[0], y[0]
    lone, moved = (fit_stage2(zz, yy, w0, b0, PATH3, 1.0, ce, optim, seed=7) for zz, yy in [(z, y), (z2, y2)])
    assert torch.equal(lone.weight[0], moved.weight[0]) and torch.equal(lone.bias[0], moved.bias[0])
    assert not torch.equal(lone.weight[1], moved.weight[1])


def test_sgd_recovers_the_log_density_ratios() -> None:
    """The Gaussian toy of test_stage2 (true slope differences mu_j - mu_i) with SGD run to the end of
    its cosine (H = R) and larger batches: the potentials land within the same tolerance."""
    z, y = gaussian_clients([4000, 1000, 2000])
    optim = Stage2Optim(lr=0.05, rounds=300, horizon=300, steps_per_round=10, batch_size=128)
    fit = fit_stage2(z, y, torch.zeros(3, 2, 2), torch.zeros(3, 2), PATH3, 0.5, ce, optim)
    b, theta = fit.potentials.b, fit.potentials.theta
    sq = (MEANS**2).sum(1) / 2
    for i, j in [(0, 1), (1, 2), (0, 2)]:
        torch.testing.assert_close(theta[j] - theta[i], MEANS[j] - MEANS[i], atol=0.12, rtol=0)
        assert float(b[j] - b[i]) == pytest.approx(float(-(sq[j] - sq[i])), abs=0.12)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "lbfgs"}, "algorithm.stage2_optimizer"),
        ({"lr": 0.0}, "algorithm.lr"),
        ({"momentum": 1.0}, "algorithm.stage2_momentum"),
        ({"weight_decay": -1e-4}, "algorithm.stage2_weight_decay"),
        ({"batch_size": 0}, "algorithm.stage2_batch_size"),
        ({"rounds": 0}, "algorithm.stage2_epochs"),
        ({"steps_per_round": 0}, "algorithm.stage2_steps_per_round"),
        ({"horizon": 2.5}, "algorithm.stage2_horizon"),
        ({"rounds": 700}, "algorithm.stage2_horizon"),
    ],
)
def test_bad_settings_give_one_line_naming_the_field(kwargs, field) -> None:
    with pytest.raises(ValueError, match=re.escape(field)) as err:
        Stage2Optim(**kwargs)
    assert "\n" not in str(err.value)


def test_edgedrm_builds_the_papers_stage2_and_validates_it() -> None:
    algo = EdgeDRM()
    assert algo.stage2 == Stage2Optim()  # the paper's defaults
    assert EdgeDRM(stage2_optimizer="adam", stage2_epochs=7, lr=0.05).stage2.steps == 7
    assert EdgeDRM(stage2_epochs=50, stage2_steps_per_round=3).stage2.steps == 150
    with pytest.raises(ValueError, match=r"algorithm\.stage2_momentum") as err:
        EdgeDRM(stage2_momentum=-0.1)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"algorithm\.stage2_epochs"):
        EdgeDRM(stage2_epochs=0)


def test_the_lambda_sweep_has_table5s_rows() -> None:
    """configs/sweeps/edgedrm_lambda_cpu.yaml: Table 5's nine lambdas in its row order, RR4, Dir-0.3,
    8 clients, seeds 2025-2027, every run referred (EdgeDRM, EdgeDRM-NR, gain, calls)."""
    from pathlib import Path

    import yaml

    from lightning_fed.sweep import plan

    root = Path(__file__).resolve().parents[2]
    spec = yaml.safe_load((root / "configs" / "sweeps" / "edgedrm_lambda_cpu.yaml").read_text())
    runs = plan([], spec["seeds"], "out", spec["refer"], spec.get("refer_baselines", []), spec["grids"])
    assert spec["seeds"] == [2025, 2026, 2027] and len(runs) == 9 * 3
    lams = []
    for run in runs[:9]:
        layer = yaml.safe_load((root / run.configs[-1]).read_text())
        lams.append(layer["algorithm"]["init_args"]["lam"])
        assert "-rr4-" in run.name and run.name.startswith("fmnist-dir03-edgedrm-")
        assert run.refer_baselines is not None  # referred: EdgeDRM and EdgeDRM-NR rows
    assert lams == [0.10, 0.25, 0.40, 0.50, 0.60, 0.75, 0.90, 0.95, 1.00]


def test_edgedrm_finish_with_adam_is_the_old_fit_and_books_one_exchange_per_step() -> None:
    """EdgeDRM(stage2_optimizer="adam") runs fit_stage2's Adam (the pre-SGD behaviour) and books
    2 * stage2_epochs + 1 potential messages; the SGD default books 2 * rounds * steps_per_round + 1."""
    from lightning_fed.comm.wire import Wire
    from lightning_fed.graphs.topology import Path as PathTopology
    from lightning_fed.types import FinishContext

    from .test_algorithms import toy_federation
    from .toy import ToyModule, identity_params

    data, module = toy_federation(), ToyModule()
    z = [c.x_train for c in data.centers]  # the identity encoder: representations = inputs
    y = [c.y_train for c in data.centers]
    cases = [
        ({"stage2_optimizer": "adam", "lr": 0.05}, Stage2Optim("adam", lr=0.05, rounds=6)),
        ({"stage2_steps_per_round": 2}, Stage2Optim(rounds=6, steps_per_round=2)),
    ]
    for kwargs, optim in cases:
        algo = EdgeDRM(topology=PathTopology(), stage2_epochs=6, lam=0.5, **kwargs)
        algo.setup(data, module, seed=0)
        params, wire = identity_params(module, 3), Wire()
        out = algo.finish(
            FinishContext(3, data, module, params, wire, 0, torch.device("cpu"), lambda s: None)
        )
        assert wire.ledger.total() == 8 * 4 + 12 * 4 * (2 * optim.steps + 1)
        adj = algo.graph.adjacency
        want = fit_stage2(
            z, y, params["head.weight"], params["head.bias"], adj, 0.5, module.loss_rows, optim, 3
        )
        assert torch.equal(out["head.weight"], want.weight) and torch.equal(
            algo.potentials.theta, want.potentials.theta
        )
