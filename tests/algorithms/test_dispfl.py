"""DisPFL: mask helpers and overlap aggregation by hand, the engines' mask hook, and runs end to end."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.fabric import Fabric
from torch import Tensor, nn

from lightning_fed.algorithms import DisPFL
from lightning_fed.algorithms.masks import (
    ERK,
    Uniform,
    active_counts,
    drop_fraction,
    gradient_regrow,
    magnitude_prune,
    pack_mask,
    prune_count,
    random_masks,
    unpack_mask,
)
from lightning_fed.comm import BFloat16Hook, Wire
from lightning_fed.comm.faults import FaultInjection
from lightning_fed.data import Digits
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.engine.base import Engine
from lightning_fed.federation import Federation
from lightning_fed.graphs import Cycle, EdgeList, Path
from lightning_fed.models import MortalityMLP, SmallCNN
from lightning_fed.models.base import CenterModule
from lightning_fed.seeding import torch_generator
from lightning_fed.types import RoundContext, TrainerConfig
from tests.conftest import make_federation


def ctx(round_idx: int = 0, rounds: int | None = 50) -> RoundContext:
    return RoundContext(round=round_idx, seed=0, val_utility=lambda p, c: torch.zeros(len(c)), rounds=rounds)


class Tiny(CenterModule):
    """One weight vector ``w`` of 4 coordinates: logit = ``x[:, :4] @ w`` (BCE loss)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4))

    def forward(self, x: Tensor) -> Tensor:
        return x[..., :4] @ self.w

    def set_num_features(self, num_features: int) -> None:
        pass

    def head_parameter_names(self, layers: int = 1) -> tuple[str, ...]:
        return ("w",)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


#: Masks (2 of 4 active each) and trained weights (zero outside) of clients 0, 1, 2.
MASKS = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
WEIGHTS = torch.tensor([[1.0, 2.0, 0.0, 0.0], [0.0, 4.0, 6.0, 0.0], [0.0, 0.0, 2.0, 5.0]])


def _tiny(**kwargs) -> DisPFL:
    algo = DisPFL(topology=Path(), score_batch_size=8, **kwargs)
    algo.setup(make_federation([20, 12, 30]), Tiny(), seed=0)
    algo.masks = {"w": MASKS.clone()}
    return algo


# --- mask helpers ------------------------------------------------------------------------------


def test_erk_densities_by_hand() -> None:
    """Shapes w (4, 2), v (8, 8), b (4,): ERK ratios sum/prod = 6/8, 16/64, 4/4; 76 weights, d = 0.5
    -> 38 active. eps = 38 / (6 + 16 + 4) makes b exceed 1 -> dense; eps = 34 / 22 makes w exceed 1
    -> dense; eps = 26 / 16 = 1.625 gives v 1.625 / 4 = 0.40625 -> floor(26.0) = 26 active, total
    4 + 8 + 26 = 38. Uniform: 0.5 everywhere -> 4, 32, 2."""
    shapes = {"w": (4, 2), "v": (8, 8), "b": (4,)}
    dens = ERK().densities(shapes, 0.5)
    assert dens == pytest.approx({"w": 1.0, "v": 0.40625, "b": 1.0})
    assert active_counts(shapes, dens) == {"w": 8, "v": 26, "b": 4}
    assert active_counts(shapes, Uniform().densities(shapes, 0.5)) == {"w": 4, "v": 32, "b": 2}
    assert ERK(power=0.0).densities(shapes, 0.5) == pytest.approx({"w": 0.5, "v": 0.5, "b": 0.5})


def test_cosine_drop_fraction_and_prune_counts() -> None:
    """alpha_t = 0.5 / 2 (1 + cos(pi t / 4)): 0.5, 0.25 (1 + 1/sqrt 2), 0.25, 0 at t = 4 and after.
    k = ceil(alpha n): 0.3 * 10 = 3 (not 4 from float error), ceil(1.75) = 2, ceil(0) = 0."""
    expected = [0.5, 0.25 * (1 + 1 / math.sqrt(2)), 0.25, 0.0, 0.0]
    assert [drop_fraction(t, 4, 0.5) for t in (0, 1, 2, 4, 9)] == pytest.approx(expected)
    assert (prune_count(10, 0.3), prune_count(7, 0.25), prune_count(7, 0.0), prune_count(3, 1.0)) == (
        3,
        2,
        0,
        3,
    )


def test_magnitude_prune_then_gradient_regrow_by_hand() -> None:
    """Row 0: active {0, 1, 2, 5}, |w| = 0.5, 0.1, 0.3, 0.2 -> prune k = 2 smallest: 1 and 5. Regrow
    among inactive {1, 3, 4, 5} by |g| = 0.1, 0.8, 0.2, 0.9 -> 5 and 3. Row 1: all |w| tie -> the
    lower indices 0, 1 go; all |g| tie -> the lower inactive indices 0, 1 come back."""
    mask = torch.tensor([[1, 1, 1, 0, 0, 1], [1, 1, 0, 0, 1, 1]], dtype=torch.bool)
    w = torch.tensor([[0.5, -0.1, 0.3, 9.0, 9.0, -0.2], [1.0] * 6])
    g = torch.tensor([[5.0, 0.1, 5.0, -0.8, 0.2, -0.9], [1.0] * 6])
    pruned = magnitude_prune(mask, w, 2)
    assert pruned.int().tolist() == [[1, 0, 1, 0, 0, 0], [0, 0, 0, 0, 1, 1]]
    grown = gradient_regrow(pruned, g, 2)
    assert grown.int().tolist() == [[1, 0, 1, 1, 0, 1], [1, 1, 0, 0, 1, 1]]
    assert grown.sum(1).tolist() == [4, 4] and mask.int().tolist()[0] == [1, 1, 1, 0, 0, 1]


def test_random_masks_have_exact_counts_and_are_seeded_per_client() -> None:
    shapes, counts = {"a": (5, 6), "b": (7,)}, {"a": 11, "b": 3}
    m = random_masks(shapes, counts, 4, seed=3)
    assert m["a"].shape == (4, 5, 6) and m["a"].reshape(4, -1).sum(1).tolist() == [11] * 4
    assert m["b"].sum(1).tolist() == [3] * 4
    again = random_masks(shapes, counts, 4, seed=3)
    assert all(torch.equal(m[n], again[n]) for n in m)
    assert not torch.equal(m["a"][0], m["a"][1])  # clients draw different masks


def test_mask_wire_form_round_trips_and_flags_corruption() -> None:
    """20 coordinates -> ceil(20 / 8) = 3 bytes, stored as 3 bfloat16 = 6 bytes; a NaN byte marks the
    row malformed."""
    mask = torch.rand(3, 20, generator=torch.Generator().manual_seed(0)) > 0.5
    packed = pack_mask(mask)
    assert packed.dtype == torch.bfloat16 and packed.shape == (3, 3)
    assert packed[0].numel() * packed.element_size() == 6
    back, ok = unpack_mask(packed, 20)
    assert torch.equal(back, mask) and ok.all()
    packed[1, 2] = float("nan")
    packed[2, 0] = 300.0
    assert unpack_mask(packed, 20)[1].tolist() == [True, False, False]


# --- aggregation by hand --------------------------------------------------------------------------


def test_overlap_aggregation_on_a_path_by_hand() -> None:
    """Path 0-1-2, masks {0,1}, {1,2}, {2,3}; w0 = (1, 2, ., .), w1 = (., 4, 6, .), w2 = (., ., 2, 5).
    No mask change (anneal_factor 0). Client 0 averages itself and 1 per coordinate over the masks
    that cover it: c0 = 1/1, c1 = (2 + 4)/2 = 3. Client 1 (0, 1, 2): c1 = 6/2 = 3, c2 = (6 + 2)/2 = 4.
    Client 2 (1, 2): c2 = 8/2 = 4, c3 = 5/1. Each message: 2 float32 values + 4 mask bits (1 byte
    as one bfloat16) = 10 bytes; 4 directed messages, 20 bytes per edge."""
    algo = _tiny(anneal_factor=0.0)
    wire = Wire()
    out = algo.aggregate(ctx(0), {"w": WEIGHTS.clone()}, wire)
    expected = torch.tensor([[1.0, 3.0, 0.0, 0.0], [0.0, 3.0, 4.0, 0.0], [0.0, 0.0, 4.0, 5.0]])
    torch.testing.assert_close(out["w"], expected)
    assert torch.equal(algo.masks["w"], MASKS)
    assert wire.ledger.table()["bytes"].tolist() == [20, 20]
    assert algo.round_stats()["mean_neighbours"] == pytest.approx(4 / 3)


def test_bf16_wire_halves_the_values_and_keeps_the_mask_exact() -> None:
    """With bfloat16 on the wire a message is 2 values * 2 bytes + 2 mask bytes = 6 bytes (12 per
    edge); the toy values are exact in bfloat16, so the result equals the float32 one."""
    algo = _tiny(anneal_factor=0.0)
    wire = Wire(hook=BFloat16Hook())
    out = algo.aggregate(ctx(0), {"w": WEIGHTS.clone()}, wire)
    assert out["w"].tolist() == [[1.0, 3.0, 0.0, 0.0], [0.0, 3.0, 4.0, 0.0], [0.0, 0.0, 4.0, 5.0]]
    assert wire.ledger.table()["bytes"].tolist() == [12, 12]


def test_faults_drop_corrupt_messages_and_isolate_unavailable_clients() -> None:
    """Client 0 sends NaN: client 1 drops it and averages itself and 2: c1 = 4/1, c2 = 8/2 = 4; one
    rejection, all 40 bytes booked. Client 2 unavailable: client 1 averages with 0 only: c1 = 3,
    c2 = 6/1; client 2 keeps (., ., 2, 5); only edge (0, 1) carries bytes."""
    algo = _tiny(anneal_factor=0.0)
    wire = Wire(faults=FaultInjection(corrupt={0: {0: "nan"}}))
    out = algo.aggregate(ctx(0), {"w": WEIGHTS.clone()}, wire)
    assert out["w"][1].tolist() == [0.0, 4.0, 4.0, 0.0] and out["w"][0].tolist() == [1.0, 3.0, 0.0, 0.0]
    assert wire.rejected_in(0) == 1 and wire.ledger.total() == 40
    wire = Wire(faults=FaultInjection(unavailable={0: [2]}))
    out = algo.aggregate(ctx(0), {"w": WEIGHTS.clone()}, wire)
    assert out["w"].tolist() == [[1.0, 3.0, 0.0, 0.0], [0.0, 3.0, 6.0, 0.0], [0.0, 0.0, 2.0, 5.0]]
    assert wire.ledger.table()["v"].tolist() == [1] and wire.ledger.total() == 20


def _reference_grad(algo: DisPFL, w: Tensor, c: int, round_idx: int) -> Tensor:
    """Plain autograd of client c's mean BCE on its scoring batch (rows drawn as documented)."""
    x, y = algo.train_sets[c]
    rows = torch.randperm(len(y), generator=torch_generator(0, "dispfl-regrow", round_idx, c))[:8]
    leaf = w.clone().requires_grad_(True)
    loss = nn.functional.binary_cross_entropy_with_logits(x[rows, :4] @ leaf, y[rows])
    return torch.autograd.grad(loss, leaf)[0]


def test_mask_update_prunes_by_magnitude_regrows_by_gradient_then_aggregates() -> None:
    """Round 1 of T = 2 with anneal_factor 1: alpha = 0.5 (1 + cos(pi / 2)) = 0.5, k = ceil(0.5 * 2)
    = 1 per client. Prune the smaller |w|: client 0 drops c0 (1 < 2), client 1 drops c1 (4 < 6),
    client 2 drops c2 (2 < 5); regrow the inactive coordinate of largest |g| (g: plain autograd on the
    client's 8-row scoring batch). Values: the average over the *sent* masks restricted to the new
    mask; the averages per coordinate (0/0 -> 0) are client 0: (1, 3, 6, 0), client 1: (1, 3, 4, 5),
    client 2: (0, 4, 4, 5)."""
    algo = _tiny(anneal_factor=1.0, anneal_rounds=2)
    out = algo.aggregate(ctx(1), {"w": WEIGHTS.clone()}, Wire())
    pruned = torch.tensor([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.bool)
    grads = torch.stack([_reference_grad(algo, WEIGHTS[c], c, 1) for c in range(3)])
    torch.testing.assert_close(algo.scoring_gradients({"w": WEIGHTS.clone()}, 1)["w"], grads)
    new = gradient_regrow(pruned, grads, 1)
    assert torch.equal(algo.masks["w"], new) and new.sum(1).tolist() == [2, 2, 2]
    averages = torch.tensor([[1.0, 3.0, 6.0, 0.0], [1.0, 3.0, 4.0, 5.0], [0.0, 4.0, 4.0, 5.0]])
    torch.testing.assert_close(out["w"], torch.where(new, averages, 0.0))
    assert algo.round_stats()["drop_fraction"] == pytest.approx(0.5)
    # Without anneal_rounds the schedule spans the run's round budget from the context: same result.
    default = _tiny(anneal_factor=1.0)
    budget = RoundContext(round=1, seed=0, val_utility=lambda p, c: torch.zeros(len(c)), rounds=2)
    torch.testing.assert_close(default.aggregate(budget, {"w": WEIGHTS.clone()}, Wire())["w"], out["w"])
    assert default.round_stats()["drop_fraction"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"algorithm\.anneal_rounds: no round budget"):
        _tiny().aggregate(ctx(1, rounds=None), {"w": WEIGHTS.clone()}, Wire())


def test_bad_settings_fail_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"algorithm\.density"):
        DisPFL(density=0.0)
    with pytest.raises(ValueError, match=r"algorithm\.anneal_factor"):
        DisPFL(anneal_factor=1.5)
    with pytest.raises(ValueError, match=r"algorithm\.anneal_rounds"):
        DisPFL(anneal_rounds=0)
    with pytest.raises(ValueError, match=r"algorithm\.layer_density"):
        DisPFL(layer_density="erk")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"algorithm\.topology"):
        DisPFL(topology=EdgeList(edges=[[0, 1]])).setup(make_federation([9, 9, 9]), Tiny())


# --- the engines' mask hook -----------------------------------------------------------------------


def _engines(monkeypatch: pytest.MonkeyPatch, fast: bool) -> tuple[PackedEngine, SequentialEngine, dict]:
    if not fast:
        monkeypatch.setattr(MortalityMLP, "has_packed_loss_grad", property(lambda self: False))
    gen = torch.Generator().manual_seed(0)
    sizes = [5, 17, 40, 33]
    train = [
        (torch.randn(n, 7, generator=gen, dtype=torch.float64), (torch.rand(n, generator=gen) < 0.4).double())
        for n in sizes
    ]
    torch.manual_seed(1)
    module = MortalityMLP(in_features=7, hidden=(16, 8), dropout=0.0).double()
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    masks = random_masks(shapes, active_counts(shapes, Uniform().densities(shapes, 0.5)), len(sizes), 4)
    engines = (PackedEngine(), SequentialEngine())
    for engine in engines:
        engine.setup(module, train, batch_size=16, epochs=2, seed=5, dtype=torch.float64)
        engine.set_mask(masks)
    return engines[0], engines[1], masks


def _masked_sum(params: dict, masks: dict) -> float:
    return max(float(params[n][~m].abs().sum()) for n, m in masks.items())


@pytest.mark.parametrize("fast", [True, False], ids=["fast_path", "autograd"])
def test_masked_training_keeps_zeros_and_engines_agree(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    """Outside the mask weights stay exactly 0 through Adam steps (both engines, float64, equal to
    1e-10). Pruning more coordinates zeroes them and their Adam moments; the engines still agree."""
    packed, sequential, masks = _engines(monkeypatch, fast)
    for r in range(2):
        packed.train_round(r)
        sequential.train_round(r)
    p, s = packed.get_params(), sequential.get_params()
    assert _masked_sum(p, masks) == 0.0 and _masked_sum(s, masks) == 0.0
    assert max(float((p[n] - s[n]).abs().max()) for n in p) < 1e-10
    assert all(bool((p[n][masks[n]] != 0).any()) for n in p)  # the active weights did train
    pruned = {
        n: m & (torch.rand(m.shape, generator=torch.Generator().manual_seed(9)) < 0.7)
        for n, m in masks.items()
    }
    flat_pruned = torch.cat([m.reshape(len(m), -1) for m in pruned.values()], 1)
    flat_old = torch.cat([m.reshape(len(m), -1) for m in masks.values()], 1)
    before = packed.state_dict()["optimizer"]["exp_avg.flat"]
    assert float(before[flat_old & ~flat_pruned].abs().sum()) > 0.0  # the pruned ones had moments
    for engine in (packed, sequential):
        engine.set_mask(pruned)
    assert float(packed.state_dict()["optimizer"]["exp_avg.flat"][~flat_pruned].abs().sum()) == 0.0
    for c, opt in enumerate(sequential.optimizers):
        for n, param in sequential.models[c].named_parameters():
            assert float(opt.state[param]["exp_avg_sq"][~pruned[n][c]].abs().sum()) == 0.0
    packed.train_round(2)
    sequential.train_round(2)
    p, s = packed.get_params(), sequential.get_params()
    assert _masked_sum(p, pruned) == 0.0 and _masked_sum(s, pruned) == 0.0
    assert max(float((p[n] - s[n]).abs().max()) for n in p) < 1e-10


def test_set_params_zeroes_outside_the_mask_and_none_unmasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """set_params zeroes outside the mask; a saved state brings its own mask back (early stopping
    restores a best round whose mask differs from the current one); None trains densely again."""
    packed, sequential, masks = _engines(monkeypatch, True)
    ones = {n: torch.ones_like(t) for n, t in packed.get_params().items()}
    for engine in (packed, sequential):
        engine.train_round(0)
        saved = engine.state_dict()
        engine.set_mask({n: ~m for n, m in masks.items()})
        engine.load_state_dict(saved)
        assert all(torch.equal(engine.mask[n], masks[n]) for n in masks)
        assert all(torch.equal(engine.get_params()[n], saved["params"][n]) for n in masks)
        engine.set_params(ones)
        assert _masked_sum(engine.get_params(), masks) == 0.0
        engine.set_mask(None)
        engine.set_params(ones)
        assert all(bool((t == 1).all()) for t in engine.get_params().values())
    with pytest.raises(ValueError, match="must be bool of shape"):
        packed.set_mask({"layers.0.weight": torch.ones(2, 3, dtype=torch.bool)})
    with pytest.raises(ValueError, match=r"trainer\.engine"):
        Engine.set_mask(packed, masks)  # the default of engines without mask support


# --- end to end -----------------------------------------------------------------------------------


def _fed(engine, rounds: int = 2) -> Federation:
    data = Digits(num_clients=4, max_per_client=60, transforms=False).build(0)
    algo = DisPFL(topology=Cycle(), anneal_rounds=2, score_batch_size=16)
    trainer = TrainerConfig(rounds=rounds, local_epochs=1, batch_size=16, engine=engine)
    fabric = Fabric(accelerator="cpu", devices=1, precision="64-true")
    return Federation(data, SmallCNN(num_classes=10, embed_dim=16), algo, trainer, fabric=fabric, seed=3)


def test_federation_trains_sparse_models_identically_on_both_engines() -> None:
    """Digits, 4 clients on a cycle (4 edges, 8 messages a round), 2 rounds. Final models are zero
    outside each mask, masks keep their ERK counts, the engines agree, and the ledger holds
    2 rounds * 8 messages * (active values * 8 bytes + sum ceil(N_l / 8) * 2 mask bytes)."""
    feds = [_fed(PackedEngine()), _fed(SequentialEngine())]
    summaries = [fed.fit() for fed in feds]
    (a, algo), (b, _) = ((f.engine.get_params(), f.algorithm) for f in feds)
    assert _masked_sum(a, algo.masks) == 0.0 and _masked_sum(b, feds[1].algorithm.masks) == 0.0
    assert all(torch.equal(algo.masks[n], feds[1].algorithm.masks[n]) for n in a)
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-9
    for n, m in algo.masks.items():
        assert m.reshape(4, -1).sum(1).tolist() == [algo.counts[n]] * 4
    message = sum(algo.counts.values()) * 8 + sum(
        2 * math.ceil(m[0].numel() / 8) for n, m in algo.masks.items() if n in algo.sparse_names
    )
    assert summaries[0]["total_bytes"] == 2 * 8 * message
    assert summaries[0]["density"] == pytest.approx(0.5, abs=1e-3)
    assert summaries[0]["bytes_vs_fedavg"] < 0.6 * 2  # 2 neighbours, messages ~0.53 of a dense model


def test_resume_from_a_checkpoint_continues_identically() -> None:
    """Round 1 from a state saved after round 0 (masks restored before the engine is re-masked)."""
    full = _fed(PackedEngine(), rounds=2)
    full.fit()
    first = _fed(PackedEngine(), rounds=1)
    first.fit()
    resumed = _fed(PackedEngine(), rounds=2)
    resumed.load_state_dict(first.state_dict())
    resumed.fit()
    a, b = full.engine.get_params(), resumed.engine.get_params()
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert all(torch.equal(full.algorithm.masks[n], resumed.algorithm.masks[n]) for n in a)
