"""DFedAvgM mixing on a 3-node path by hand; EdgeDRM stage II through Algorithm.finish; refer end to end."""

from __future__ import annotations

import torch

from lightning_fed.algorithms.dfedavgm import DFedAvgM
from lightning_fed.algorithms.edgedrm import EdgeDRM
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.comm.wire import Wire
from lightning_fed.graphs.topology import Path
from lightning_fed.referral.refer import draw_entries, refer
from lightning_fed.types import FinishContext, RoundContext

from .toy import ToyModule, identity_params, make_data

MEANS = torch.tensor([[0.0, 0.0], [1.5, 0.0], [3.0, 0.0]])


def toy_federation(sizes=(120, 60, 90), seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    xs = [MEANS[u] + torch.randn(n, 2, generator=gen) for u, n in enumerate(sizes)]
    ys = [(x[:, 1] > 0).float() for x in xs]
    tests = []
    for u in range(3):
        xt = MEANS[u] + torch.randn(30, 2, generator=gen)
        tests.append((xt, (xt[:, 1] > 0).float()))
    return make_data(xs, ys, tests)


def ctx(round_idx: int = 0) -> RoundContext:
    return RoundContext(round=round_idx, seed=0, val_utility=lambda p, c: torch.zeros(len(c)))


def test_dfedavgm_metropolis_mix_on_a_path() -> None:
    """Path 0-1-2, degrees (1, 2, 1): W_01 = W_12 = 1/(1+2) = 1/3, W_00 = W_22 = 2/3, W_11 = 1/3.
    Scalars (0, 3, 6) -> (2/3*0 + 1/3*3, 1/3*(0+3+6), 1/3*3 + 2/3*6) = (1, 3, 5). Four directed
    messages of one float32 = 16 bytes. With client 2 unavailable only the edge 0-1 carries messages
    and each row is renormalized over what arrived: client 0 (2/3*0 + 1/3*3) / 1 = 1, client 1
    (1/3*3 + 1/3*0) / (2/3) = 1.5, client 2 keeps 6; 2 messages."""
    data = toy_federation()
    module = ToyModule()
    algo = DFedAvgM(topology=Path())
    algo.setup(data, module, seed=0)
    params = {n: torch.zeros(3, *p.shape) for n, p in module.named_parameters()}
    params["head.bias"] = torch.tensor([[0.0, 0.0], [3.0, 3.0], [6.0, 6.0]])
    wire = Wire()
    out = algo.aggregate(ctx(0), params, wire)
    torch.testing.assert_close(out["head.bias"][:, 0], torch.tensor([1.0, 3.0, 5.0]))
    per_message = sum(p.numel() for p in module.parameters()) * 4
    assert wire.ledger.total() == 4 * per_message
    faulty = Wire(faults=FaultInjection(unavailable={1: [2]}))
    out = algo.aggregate(ctx(1), params, faulty)
    torch.testing.assert_close(out["head.bias"][:, 0], torch.tensor([1.0, 1.5, 6.0]))
    assert faulty.ledger.total() == 2 * per_message


def test_edgedrm_finish_fits_heads_and_potentials_and_books_messages(tmp_path) -> None:
    """Stage II on a path of 3 (|E| = 2, 4 directed edges), d = 2, 50 rounds of 5 SGD steps (the
    default): counts are int64 (8 bytes x 4), potentials (b, theta) are 3 float32 (12 bytes) x 4 edges
    x (2 * 250 + 1) exchanges (one potential and one gradient per step, then the final potential)."""
    data = toy_federation()
    module = ToyModule()
    algo = EdgeDRM(topology=Path(), stage2_epochs=50, lam=0.5, lr=0.05, max_hops=2)
    algo.setup(data, module, seed=0)
    params = identity_params(module, 3)
    wire, logged = Wire(), []
    fctx = FinishContext(0, data, module, params, wire, 7, torch.device("cpu"), logged.append)
    out = algo.finish(fctx)
    assert len(logged) == 50
    assert torch.equal(out["proj.weight"], params["proj.weight"])  # encoder frozen
    assert not torch.equal(out["head.weight"], params["head.weight"])
    assert wire.ledger.total() == 8 * 4 + 12 * 4 * 501
    assert wire.ledger.round_total(7) == wire.ledger.total()
    pot = algo.potentials
    assert pot.counts.tolist() == [120, 60, 90]
    # Means move along x by 1.5 per client: the slope differences point that way.
    assert float(pot.theta[1, 0] - pot.theta[0, 0]) > 0.5 and float(pot.theta[2, 0] - pot.theta[1, 0]) > 0.5
    restored = EdgeDRM(topology=Path())
    restored.load_state_dict(algo.state_dict())
    assert torch.equal(restored.potentials.theta, pot.theta) and torch.equal(
        restored.potentials.counts, pot.counts
    )

    table = refer(tmp_path, module, out, data, algo.graph, pot, seed=3, max_hops=2)
    assert table.height == 6 * 3
    for name in ("referral.csv", "referral.md", "referral_traffic.png"):
        assert (tmp_path / name).stat().st_size > 0
    nr = table.filter(table["router"] == "EdgeDRM-NR")
    assert nr["calls_per_query"].to_list() == [1.0] * 3 and nr["incident_per_query"].to_list() == [0.0] * 3
    # NR with any rule = the entry expert's own prediction, recomputed here directly.
    x = torch.cat([c.x_test for c in data.centers])
    y = torch.cat([c.y_test for c in data.centers]).long()
    source = torch.arange(3).repeat_interleave(30)
    entry = draw_entries(source, 3, 3)
    assert not bool((entry == source).any())
    logits = torch.einsum("qd,qkd->qk", x, out["head.weight"][entry]) + out["head.bias"][entry]
    acc = float((logits.argmax(1) == y).double().mean())
    assert nr["accuracy"].to_list() == [acc] * 3
    edrm = table.filter(table["router"] == "EdgeDRM")
    assert all(1.0 <= v <= 3.0 for v in edrm["calls_per_query"].to_list())
    assert abs(sum(edrm["share_all"].to_list()) / 3 - 100.0) < 1e-9


def test_edgedrm_runs_inside_a_federation() -> None:
    """Stage I (1 round of DFedAvgM) then stage II through Federation.fit: the stage-II messages are
    booked on round index 1 (= rounds done): 8 * 4 count bytes + 12 * 4 * (2 * 5 * 5 + 1) potential bytes
    (5 stage-II rounds of 5 SGD steps)."""
    from lightning_fed.federation import Federation
    from lightning_fed.types import TrainerConfig

    algo = EdgeDRM(topology=Path(), stage2_epochs=5)
    fed = Federation(
        toy_federation(), ToyModule(), algo, TrainerConfig(rounds=1, local_epochs=1, batch_size=64)
    )
    fed.fit()
    assert algo.potentials is not None and algo.potentials.theta.shape == (3, 2)
    assert fed.wire.ledger.round_total(1) == 8 * 4 + 12 * 4 * 51


def test_stage_two_runs_once_after_early_stopping_restores_the_best_round() -> None:
    """Early stopping ends stage I before trainer.rounds and restores its best round in on_train_end;
    stage II must still run (once), on those restored parameters, so referral has potentials."""
    from lightning.fabric import Fabric

    from lightning_fed.callbacks import EarlyStopping
    from lightning_fed.federation import Federation
    from lightning_fed.types import TrainerConfig

    seen: list[int] = []

    class Spy(EdgeDRM):
        def finish(self, ctx):
            seen.append(ctx.round)
            return super().finish(ctx)

    algo = Spy(topology=Path(), stage2_epochs=3)
    stopper = EarlyStopping(patience=1, min_delta=1.0)  # no round improves by 1.0: stops after round 2
    fed = Federation(
        toy_federation(),
        ToyModule(),
        algo,
        TrainerConfig(rounds=10, local_epochs=1, batch_size=64),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[stopper]),
    )
    fed.fit()
    assert fed.round < 10 and seen == [fed.round] and fed.finished
    assert algo.potentials is not None
