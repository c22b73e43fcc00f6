"""ABPS as an algorithm: exchange, aggregation, momentum, credit, rest and bandwidth."""

from __future__ import annotations

import pytest
import torch

from lightning_fed.aggregation import CenterServerAverage, CenterServerMomentum
from lightning_fed.aggregation.mixing import renormalize
from lightning_fed.algorithms import ABPS
from lightning_fed.comm import BFloat16Hook, NormBound, Wire
from lightning_fed.comm.exchange import peer_exchange
from lightning_fed.models import MortalityMLP
from lightning_fed.selection.abps import BayesianSelector, GoalFilter, ShapleyCredit
from lightning_fed.selection.base import partner_edges, partner_lists
from lightning_fed.types import RoundContext
from tests.conftest import make_federation


def _bias_utility(params: dict, centers: torch.Tensor) -> torch.Tensor:
    """A stand-in utility: the first entry of the first bias of each coalition model."""
    return params["layers.0.bias"][:, 0].double()


CTX = RoundContext(round=0, seed=0, val_utility=_bias_utility)


def _setup(sizes, algo, values):
    data = make_federation(sizes)
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo.setup(data, module, seed=0)
    params = {n: torch.stack([torch.full_like(p, v) for v in values]) for n, p in module.named_parameters()}
    return module, params


def _fixed(algo: ABPS, partners: list[list[int]]) -> None:
    algo.selector.select = lambda round_idx: partners


def test_pair_averages_by_size_and_rester_keeps_its_model() -> None:
    """n = (30, 10, 20), theta = (1, 5, 2), P = {0: [1], 1: [0], 2: []}:
    centers 0 and 1 both get (30*1 + 10*5) / 40 = 2.0; center 2 rests and keeps 2.0 (sends nothing)."""
    algo = ABPS()
    module, params = _setup([30, 10, 20], algo, [1.0, 5.0, 2.0])
    _fixed(algo, [[1], [0], []])
    wire = Wire()
    out = algo.aggregate(CTX, params, wire)
    for p in out.values():
        assert torch.allclose(p, torch.full_like(p, 2.0))
    size = sum(p.numel() for p in module.parameters()) * 4
    assert wire.ledger.per_center(3).tolist() == [2 * size, 2 * size, 0]
    stats = algo.round_stats()
    assert stats["isolation_rate"] == pytest.approx(1 / 3) and stats["mean_partners"] == pytest.approx(2 / 3)


def test_shapley_credit_updates_the_posterior_by_hand() -> None:
    """U_0(empty) = 1, U_0({1}) = (30*1 + 10*5)/40 = 2 -> phi_{1->0} = 1 -> clip 1 -> Beta(2, 1).
    U_1(empty) = 5, U_1({0}) = 2 -> phi_{0->1} = -3 -> clip 0 -> Beta(1, 2)."""
    algo = ABPS()
    _setup([30, 10, 20], algo, [1.0, 5.0, 2.0])
    _fixed(algo, [[1], [0], []])
    algo.aggregate(CTX, _setup([30, 10, 20], ABPS(), [1.0, 5.0, 2.0])[1], Wire())
    post = algo.selector.posterior
    assert (post.alpha[0, 1].item(), post.beta[0, 1].item()) == (2.0, 1.0)
    assert (post.alpha[1, 0].item(), post.beta[1, 0].item()) == (1.0, 2.0)
    assert post.count[0, 1] == 1 and post.count[1, 0] == 1 and post.count[2].sum() == 0


def test_undefined_utility_makes_no_observation() -> None:
    algo = ABPS()
    _, params = _setup([30, 10], algo, [1.0, 5.0])
    _fixed(algo, [[1], [0]])
    nan_ctx = RoundContext(0, 0, lambda p, c: torch.full((c.shape[0],), float("nan"), dtype=torch.float64))
    algo.aggregate(nan_ctx, params, Wire())
    assert algo.selector.posterior.count.sum() == 0


def test_momentum_ema_on_the_aggregated_update() -> None:
    """beta = 0.5: buf_0 = 0.5 * (2 - 1) = 0.5 -> theta_0 = 1.5; buf_1 = 0.5 * (2 - 5) = -1.5 -> 3.5."""
    algo = ABPS(momentum=0.5)
    _, params = _setup([30, 10, 20], algo, [1.0, 5.0, 2.0])
    _fixed(algo, [[1], [0], []])
    out = algo.aggregate(CTX, params, Wire())
    w = out["layers.0.weight"]
    assert (
        w[0].unique().tolist() == [1.5]
        and w[1].unique().tolist() == [3.5]
        and w[2].unique().tolist() == [2.0]
    )


def test_personal_head_and_bf16_wire_cut_bytes() -> None:
    module, params = _setup([30, 10], ABPS(), [1.0, 5.0])
    full = sum(p.numel() for p in module.parameters())
    head = sum(p.numel() for n, p in module.named_parameters() if n in module.head_parameter_names(1))
    algo = ABPS(personal_layers=1)
    _, params = _setup([30, 10], algo, [1.0, 5.0])
    _fixed(algo, [[1], [0]])
    wire = Wire(hook=BFloat16Hook())
    out = algo.aggregate(CTX, params, wire)
    assert wire.ledger.total() == 2 * (full - head) * 2
    assert torch.equal(out["layers.2.weight"], params["layers.2.weight"])


def test_metadata_crosses_the_wire_once_when_filtering() -> None:
    algo = ABPS(
        selector=BayesianSelector(
            filter=GoalFilter("homogeneity", keep_fraction=0.5, metadata_dim=3, keep="global")
        )
    )
    _, params = _setup([30, 10, 20, 40], algo, [1.0, 5.0, 2.0, 3.0])
    _fixed(algo, [[], [], [], []])
    wire = Wire()
    algo.aggregate(CTX, params, wire)
    assert wire.ledger.total() == 4 * 3 * 4  # 4 centers x 3 float32 entries
    algo.aggregate(RoundContext(1, 0, _bias_utility), params, wire)
    assert wire.ledger.total() == 4 * 3 * 4
    assert algo.selector.candidates.sum() == 6  # half of the 12 ordered pairs


def test_everyone_rests_when_no_ucb_reaches_tau_acc(small_federation) -> None:
    from lightning.fabric import Fabric

    from lightning_fed.federation import Federation
    from lightning_fed.types import TrainerConfig

    algo = ABPS(selector=BayesianSelector(gamma=0.0, tau_acc=0.9))
    fed = Federation(
        small_federation,
        MortalityMLP(hidden=(8, 4)),
        algo,
        TrainerConfig(rounds=2, batch_size=16),
        Fabric(accelerator="cpu", devices=1),
    )
    summary = fed.fit()
    assert summary["total_bytes"] == 0 and summary["isolation_rate"] == 1.0
    assert summary["rested_center_rounds"] == 2 * small_federation.num_centers
    assert summary["bytes_saved_by_rest"] > 0


def test_abps_federation_bandwidth_and_determinism(small_federation) -> None:
    """kappa = 3 with every proposal accepted in round 0 (prior mean 0.5 = tau_acc): each partnership is an
    edge of 2|W| against FedAvg's 2|W| per center, so bytes / FedAvg = edges / C = E|P_i| / 2 (1.5x when
    every center fills its 3 slots; greedy matching on 8 centers may leave a slot empty)."""
    from lightning.fabric import Fabric

    from lightning_fed.federation import Federation
    from lightning_fed.types import TrainerConfig

    def run(seed):
        fed = Federation(
            small_federation,
            MortalityMLP(hidden=(8, 4)),
            ABPS(),
            TrainerConfig(rounds=1, batch_size=16),
            Fabric(accelerator="cpu", devices=1),
            seed=seed,
        )
        return fed, fed.fit()

    fed, summary = run(0)
    assert summary["mean_partners"] >= 2.5
    assert summary["bytes_vs_fedavg"] == pytest.approx(summary["mean_partners"] / 2)
    assert all(1 <= len(p) <= 3 for p in fed.algorithm.last_partners)
    assert run(0)[1]["test_auroc_mean"] == summary["test_auroc_mean"]


def test_tmc_credit_matches_exact_when_every_permutation_is_drawn() -> None:
    """Center 0 with 3 partners: TMC over 6,000 permutations ~ exact Shapley of the same utilities.

    The posterior moves by the clipped value (phi + 0.1) / 0.2, so atol 0.05 on alpha is 0.01 on phi.
    """
    from lightning_fed.selection.abps import ShapleyCredit

    partners = [[1, 2, 3], [0], [0], [0]]
    results = {}
    for name, credit in (
        ("exact", ShapleyCredit(exact_max=5)),
        ("tmc", ShapleyCredit(exact_max=0, num_permutations=6000)),
    ):
        algo = ABPS(shapley=credit)
        _, params = _setup([30, 10, 20, 40], algo, [1.0, 5.0, 2.0, 3.0])
        _fixed(algo, partners)
        algo.aggregate(CTX, params, Wire())
        results[name] = algo.selector.posterior.alpha[0, 1:].clone()
    assert torch.allclose(results["exact"], results["tmc"], atol=0.05)


def test_dp_descriptors_are_noised_before_they_leave_and_seeded() -> None:
    """With a GaussianMechanism the published descriptors differ from the exact ones (log n_train is
    public and stays exact), and the same seed publishes the same noisy values."""
    from lightning_fed.privacy import GaussianMechanism

    def published() -> torch.Tensor:
        sent = []

        class Recording(Wire):
            def send(self, payload, src, dst, round_idx):
                sent.append({k: v.clone() for k, v in payload.items()})
                return super().send(payload, src, dst, round_idx)

        algo = ABPS(
            selector=BayesianSelector(
                filter=GoalFilter("homogeneity", keep_fraction=0.5, metadata_dim=3, keep="global")
            ),
            privacy=GaussianMechanism(epsilon=0.5, delta=1e-5, clip=1.0),
        )
        _, params = _setup([30, 10, 20, 40], algo, [1.0, 5.0, 2.0, 3.0])
        _fixed(algo, [[], [], [], []])
        algo.aggregate(CTX, params, Recording())
        return sent[0]["v"], algo.metadata[:, :3]

    noisy, exact = published()
    assert not torch.allclose(noisy[:, 0].double(), exact[:, 0])
    assert torch.allclose(noisy[:, 1].double(), exact[:, 1], atol=1e-6)
    assert torch.equal(published()[0], noisy)


def _goal_preset_run(tmp_path, preset: str, unavailable: list[int], rounds: int = 3) -> dict:
    """A goal preset on 30 synthetic centers with ``unavailable`` down in round 0; per-round isolation."""
    import json
    from pathlib import Path

    import polars as pl

    from lightning_fed.cli import main

    faults = tmp_path / "faults.yaml"
    faults.write_text(f"faults:\n  unavailable: {{0: {unavailable}}}\n")
    config = Path(__file__).resolve().parents[2] / "configs" / f"abps_goal_{preset}.yaml"
    main(
        [
            "fit",
            "--config",
            str(config),
            "--config",
            str(faults),
            "--data.init_args.num_centers=30",
            "--data.init_args.num_stays=3000",
            "--model.init_args.hidden=[16, 8]",
            f"--trainer.rounds={rounds}",
            "--logger.enabled=false",
            "--output.progress_bar=false",
            f"--output.root={tmp_path}",
            "--output.name=run",
        ]
    )
    rounds_table = pl.read_parquet(tmp_path / "run" / "rounds.parquet")
    per_round = rounds_table.group_by("round").agg(pl.col("isolation_rate", "bytes").first()).sort("round")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    return {"summary": summary, "isolation": per_round["isolation_rate"].to_list()}


@pytest.mark.cli
@pytest.mark.parametrize(
    ("preset", "down"),
    [("homogeneity", list(range(30))), ("alignment", list(range(1, 30)))],
    ids=["all-30-down", "29-of-30-down"],
)
def test_goal_preset_centers_down_at_publication_publish_later(
    tmp_path, preset: str, down: list[int]
) -> None:
    """Goal filter, centers unavailable in round 0 (all 30, or 29): the run completes (no IndexError),
    the late descriptors are published in round 1 and centers find partners from then on."""
    run = _goal_preset_run(tmp_path, preset, down)
    assert run["summary"]["rounds"] == 3
    assert run["isolation"][0] == 1.0
    assert all(iso < 1.0 for iso in run["isolation"][1:]), run["isolation"]
    assert run["summary"]["mean_partners"] > 0


def test_resume_with_a_pending_publication_continues_identically() -> None:
    """Goal filter, 10 of 12 centers down in round 0 and 2 of them again in round 1: a run resumed from
    its state after round 0 (10 descriptors pending) and after round 1 (2 pending) ends exactly as an
    uninterrupted one: parameters, ledger, candidates, posteriors and partners."""
    from lightning.fabric import Fabric

    from lightning_fed.comm import FaultInjection
    from lightning_fed.federation import Federation
    from lightning_fed.types import TrainerConfig

    data = make_federation([30 + 4 * i for i in range(12)])

    def fed(rounds: int) -> Federation:
        goal = GoalFilter("homogeneity", keep_fraction=0.5, metadata_dim=3, keep="global")
        return Federation(
            data,
            MortalityMLP(hidden=(8, 4)),
            ABPS(selector=BayesianSelector(kappa=1, filter=goal)),
            TrainerConfig(rounds=rounds, batch_size=16),
            Fabric(accelerator="cpu", devices=1),
            wire=Wire(faults=FaultInjection(unavailable={0: list(range(1, 11)), 1: [4, 7]})),
        )

    full = fed(4)
    full.fit()
    assert full.algorithm.state_dict()["descriptors_arrived"].all()
    for stop, pending in ((1, 10), (2, 2)):
        first = fed(stop)
        first.fit()
        assert int((~first.algorithm.state_dict()["descriptors_arrived"]).sum()) == pending
        resumed = fed(4)
        resumed.load_state_dict(first.state_dict())
        resumed.fit()
        a, b = full.engine.get_params(), resumed.engine.get_params()
        assert all(torch.equal(a[n], b[n]) for n in a)
        assert full.wire.ledger.total() == resumed.wire.ledger.total()
        assert torch.equal(full.algorithm.selector.candidates, resumed.algorithm.selector.candidates)
        assert torch.equal(
            full.algorithm.selector.posterior.alpha, resumed.algorithm.selector.posterior.alpha
        )
        assert full.algorithm.last_partners == resumed.algorithm.last_partners
    assert full.algorithm.summary_stats()["isolation_rate"] < 1.0


class _FakeEngine:
    """Hands ABPS the round-start parameters and 'trains' by adding one per round of values given."""

    def __init__(self, params: dict) -> None:
        self.params = params

    def get_params(self) -> dict:
        return self.params

    def train_round(self, round_idx: int) -> torch.Tensor:
        return torch.zeros(2)


def test_server_momentum_is_fedavgm_with_each_center_as_its_own_server_by_hand() -> None:
    """n = (30, 10), beta = 0.5, partners {0: [1], 1: [0]} every round.
    Round 0: start s = (1, 5), trained (2, 6), mixed m = (30*2 + 10*6)/40 = 3 for both;
    v = 0.5*0 + (m - s) = (2, -2); theta = s + v = (3, 3).
    Round 1: start (3, 3), trained (4, 2), m = (120 + 20)/40 = 3.5; Delta = (0.5, 0.5);
    v = 0.5*(2, -2) + (0.5, 0.5) = (1.5, -0.5); theta = (4.5, 2.5).
    (Plain ABPS would give 3.5 for both; the per-center EMA momentum other numbers again.)"""
    _check_center_server_momentum_by_hand(ABPS(server_momentum=0.5))
    _check_center_server_momentum_by_hand(ABPS(server_optimizer=CenterServerMomentum(beta=0.5)))


def _check_center_server_momentum_by_hand(algo: ABPS) -> None:
    algo.selector = BayesianSelector(kappa=1)
    _, start = _setup([30, 10], algo, [1.0, 5.0])
    _fixed(algo, [[1], [0]])
    expected = [(3.0, 3.0), (4.5, 2.5)]
    trained_values = [(2.0, 6.0), (4.0, 2.0)]
    for r in range(2):
        algo.train_round(_FakeEngine(start), r)
        trained = {
            n: torch.stack([torch.full_like(p[0], v) for v in trained_values[r]]) for n, p in start.items()
        }
        out = algo.aggregate(RoundContext(round=r, seed=0, val_utility=_bias_utility), trained, Wire())
        w = out["layers.0.weight"]
        assert (w[0].unique().item(), w[1].unique().item()) == pytest.approx(expected[r])
        start = out


def test_server_momentum_zero_is_plain_abps_and_excludes_ema_momentum() -> None:
    with pytest.raises(ValueError, match="two kinds of momentum: set momentum to 0"):
        ABPS(momentum=0.5, server_momentum=0.5)
    with pytest.raises(
        ValueError, match=r"server_momentum is the old alias of algorithm\.init_args\.server_optimizer"
    ):
        ABPS(server_momentum=0.5, server_optimizer=CenterServerMomentum(0.5))
    alias = ABPS(server_momentum=0.5).server_optimizer
    assert type(alias) is CenterServerMomentum and alias.beta == 0.5
    assert type(ABPS(server_momentum=0.0).server_optimizer) is CenterServerAverage
    plain, zero = ABPS(), ABPS(server_momentum=0.0)
    outs = []
    for algo in (plain, zero):
        _, params = _setup([30, 10, 20], algo, [1.0, 5.0, 2.0])
        _fixed(algo, [[1], [0], []])
        outs.append(algo.aggregate(CTX, params, Wire()))
    for n in outs[0]:
        assert torch.equal(outs[0][n], outs[1][n])


def _abps_rounds(
    monkeypatch,
    chunk_bytes: int | None,
    rounds: int = 4,
    state: dict | None = None,
    cls: type[ABPS] = ABPS,
    norm_bound: bool = False,
    exact_max: int = 5,
):
    """Rounds of ABPS.aggregate on 30 hand-built centers (spread norms, a strict norm test so that
    some messages are rejected, a bf16 wire); optionally with tiny exchange/mixing chunks, starting
    from a saved state, as another class, with the update bound (anchored at 0.9x the models) or
    with TMC Shapley above ``exact_max`` partners."""
    import lightning_fed.algorithms.abps as abps_module

    if chunk_bytes is not None:
        monkeypatch.setattr(abps_module, "CHUNK_BYTES", chunk_bytes)
    sizes = [20 + 7 * k for k in range(30)]
    data = make_federation(sizes)
    torch.manual_seed(0)  # the module's initialization
    module = MortalityMLP(in_features=data.num_features, hidden=(4, 3))
    algo = cls(selector=BayesianSelector(kappa=3))
    algo.setup(data, module, seed=0)
    credit = ShapleyCredit(exact_max=exact_max)
    credit.chunk_bytes = 1 if chunk_bytes is not None else credit.chunk_bytes
    algo.credit = credit
    if state is not None:
        algo.load_state_dict(state)
    g = torch.Generator().manual_seed(1)
    params = {
        n: torch.stack(
            [p.detach() * (1 + 0.1 * k) + 0.01 * torch.randn(p.shape, generator=g) for k in range(30)]
        )
        for n, p in module.named_parameters()
    }
    if norm_bound:
        wire = Wire(
            hook=BFloat16Hook(), norm_bound=NormBound(max_update_ratio=1.5, min_projection_ratio=None)
        )
    else:
        wire = Wire(hook=BFloat16Hook(), max_norm_ratio=1.2)
    outs = []
    for r in range(rounds):
        ctx = RoundContext(
            round=r, seed=0, val_utility=lambda p, c: p["layers.1.weight"].double().sum((1, 2))
        )
        wire.start_round(r, {n: t * 0.9 for n, t in params.items()})
        params = algo.aggregate(ctx, params, wire)
        outs.append(({n: t.clone() for n, t in params.items()}, algo.round_stats(), algo.last_partners))
    return algo, wire, outs


def test_chunked_exchange_and_mixing_are_the_single_call_bit_for_bit(monkeypatch) -> None:
    """Exchanging and mixing a few messages a call (and Shapley a model a call) gives the same
    models, rejections, ledger, posterior and diagnostics as one call over every edge."""
    whole = _abps_rounds(monkeypatch, None)
    chunked = _abps_rounds(monkeypatch, 600)  # a few messages per call
    _assert_same_rounds(whole, chunked)


def _assert_same_rounds(a: tuple, b: tuple) -> None:
    """Two :func:`_abps_rounds` results agree bit for bit: every round's models, statistics and
    partners, the rejections (some: the norm test rejected messages), the ledger, the posterior and
    the summary."""
    (algo_a, wire_a, outs_a), (algo_b, wire_b, outs_b) = a, b
    assert sum(wire_a.rejected.values()) > 0
    for (pa, sa, la), (pb, sb, lb) in zip(outs_a, outs_b, strict=True):
        assert all(torch.equal(pa[n], pb[n]) for n in pa)
        assert la == lb and {k: v for k, v in sa.items() if not k.startswith("seconds")} == {
            k: v for k, v in sb.items() if not k.startswith("seconds")
        }
    assert wire_a.rejected == wire_b.rejected
    ta, tb = wire_a.ledger.table(), wire_b.ledger.table()
    assert all(torch.equal(ta[k], tb[k]) for k in ta)
    assert torch.equal(algo_a.selector.posterior.alpha, algo_b.selector.posterior.alpha)
    assert torch.equal(algo_a.selector.posterior.beta, algo_b.selector.posterior.beta)
    assert algo_a.summary_stats() == algo_b.summary_stats()


class _ExchangeThenMix(ABPS):
    """ABPS as it aggregated before issue 33's streaming: every accepted message of the round
    exchanged first (:func:`peer_exchange`, the same calls), then one mix and one credit call over
    every receiver."""

    def _exchange_mix_credit(self, ctx, params, shared, partners, wire):
        import lightning_fed.algorithms.abps as abps_module

        chunk = abps_module.CHUNK_BYTES
        got = peer_exchange(wire, shared, *partner_edges(partners), ctx.round, max_bytes=chunk)
        sizes = self.n_train.to(torch.float64)
        self_w, edge_w = renormalize(sizes, sizes[got.src], got.dst)
        mixed = self.aggregator.mix_received(shared, got.received, got.dst, self_w, edge_w, max_bytes=chunk)
        personal = {n: p for n, p in params.items() if n not in shared}
        accepted = partner_lists(got.src, got.dst, self.num_centers)
        edges = (got.src, got.dst)
        credit = self.credit(ctx, accepted, shared, got.received, edges, self.n_train, personal)
        return mixed, edges, credit, 0.0


@pytest.mark.parametrize("norm_bound", [False, True])
def test_streamed_rounds_are_exchange_then_mix_then_credit_bit_for_bit(monkeypatch, norm_bound: bool) -> None:
    """Mixing and crediting each range of receivers as soon as its messages have arrived (and
    dropping them) gives, round after round, the models, rejections, ledger, posterior and
    diagnostics of exchanging every message first, then mixing and crediting everyone (a few
    messages per call, so receivers are split between calls; Shapley one model per call, TMC above
    one partner, so the permutations are drawn across calls from one generator). With the update
    bound, whose per-call medians depend on the calls, as well as the ratio test."""
    streamed = _abps_rounds(monkeypatch, 600, norm_bound=norm_bound, exact_max=1)
    whole = _abps_rounds(monkeypatch, 600, cls=_ExchangeThenMix, norm_bound=norm_bound, exact_max=1)
    _assert_same_rounds(streamed, whole)


def test_a_checkpoint_with_the_dense_posterior_of_before_issue_17_resumes_identically(monkeypatch) -> None:
    """An ABPS state whose posterior is the former dense {alpha, beta, count} loads and continues
    exactly as the sparse state does."""
    algo, _, _ = _abps_rounds(monkeypatch, None, rounds=2)
    state = algo.state_dict()
    post = algo.selector.posterior
    old = {**state, "selector": {**state["selector"]}}
    old["selector"]["posterior"] = {
        "alpha": post.alpha,
        "beta": post.beta,
        "count": post.count,
        "alpha0": post.alpha0,
        "beta0": post.beta0,
    }
    new_run, _, outs_new = _abps_rounds(monkeypatch, None, rounds=2, state=state)
    old_run, _, outs_old = _abps_rounds(monkeypatch, None, rounds=2, state=old)
    assert torch.equal(new_run.selector.posterior.count, old_run.selector.posterior.count)
    assert torch.equal(new_run.selector.posterior.alpha, old_run.selector.posterior.alpha)
    for (pa, _, la), (pb, _, lb) in zip(outs_new, outs_old, strict=True):
        assert la == lb and all(torch.equal(pa[n], pb[n]) for n in pa)
