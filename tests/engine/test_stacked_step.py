"""The packed engine's generic path (a module's own ``training_step``) computes what plain autograd does.

:mod:`lightning_fed.engine.stacked_step` gives every group of centers its own autograd leaves and
writes their gradients into the flat ``[k, D]`` buffer; the reference here is the computation the
engine did before (commit 6334ec7): one leaf ``[k, D]`` per step, an ``index_select`` per group,
losses gathered with ``index_copy`` and one ``autograd.grad`` of their sum. Both must give the same
bits (parameters, optimizer state, losses, logs) after two rounds of a LayerNorm MLP with dropout,
the same vmapped calls drawing the same dropout masks.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn

from lightning_fed.algorithms.fedprox import ProximalTerm
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.engine.schedule import center_batches
from lightning_fed.engine.stacked_step import StackedTrainingStep
from lightning_fed.engine.training_step import RoundLogs
from lightning_fed.models import MortalityMLP
from lightning_fed.models.adapter import LightningAdapter
from tests.engine.test_training_step import WeightedMLP

SIZES = [1, 3, 8, 13, 17, 32, 33, 47, 16, 5]
BATCH, EPOCHS, SEED, ROUNDS = 8, 2, 3, 2


class NormNet(nn.Module):
    """A LayerNorm MLP with dropout and BCE in ``training_step`` (a plain module, adapter-wrapped)."""

    def __init__(self, dropout: float = 0.2) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(6, 16), nn.LayerNorm(16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 1)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x).squeeze(-1)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = nn.functional.binary_cross_entropy_with_logits(self(x), y)
        self.log("bce", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2, weight_decay=1e-4)


class IndexedNormNet(NormNet):
    """:class:`NormNet` whose loss reads ``batch_idx`` (so groups also share ``batch_idx``)."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        return super().training_step(batch, batch_idx) * (1.0 + 0.25 * batch_idx)


def _adapter(indexed: bool = False, dropout: float = 0.2) -> LightningAdapter:
    import lightning as L

    class Plain(IndexedNormNet if indexed else NormNet, L.LightningModule):
        pass

    torch.manual_seed(2)
    return LightningAdapter(Plain(dropout))


def _data(dtype: torch.dtype = torch.float32) -> list[tuple[Tensor, Tensor]]:
    gen = torch.Generator().manual_seed(4)
    return [
        (torch.randn(n, 6, generator=gen, dtype=dtype), (torch.rand(n, generator=gen) < 0.4).to(dtype))
        for n in SIZES
    ]


def _one_graph(
    self: StackedTrainingStep,
    params: dict[str, Tensor],
    xb: Tensor,
    yb: Tensor,
    rows: Tensor,
    batch_idx: Tensor,
    grad: Tensor,
    logs: RoundLogs,
    models: Tensor,
) -> Tensor:
    """The reference: the engine's computation before ``stacked_step`` (one leaf, one graph)."""
    k = xb.shape[0]
    leaf = torch.cat([t.reshape(k, -1) for t in params.values()], 1).detach().requires_grad_(True)
    views, col = {}, 0
    for name, t in params.items():
        width = t[0].numel()
        views[name] = leaf[:, col : col + width].view(t.shape)
        col += width
    key = batch_idx * (self.batch_size + 1) + rows if self.by_batch_idx else rows
    per_center = xb.new_zeros(k, dtype=yb.dtype)
    for value in torch.unique(key).tolist():
        members = torch.nonzero(key == value).flatten()
        n, b = int(rows[members[0]]), int(batch_idx[members[0]])
        group = {name: v.index_select(0, members) for name, v in views.items()}
        loss, logged = self.vmapped(
            group, xb.index_select(0, members)[:, :n], yb.index_select(0, members)[:, :n], b
        )
        per_center = per_center.index_copy(0, members, loss.to(per_center.dtype))
        logs.add(models[members], logged, rows[members])
    (g,) = torch.autograd.grad(per_center.sum(), [leaf])
    grad.copy_(g)
    return per_center.detach()


def _rounds(module: torch.nn.Module, dtype: torch.dtype = torch.float32, **setup: object) -> tuple:
    engine = PackedEngine()
    engine.setup(module, _data(dtype), batch_size=BATCH, epochs=EPOCHS, seed=SEED, dtype=dtype, **setup)
    losses = [engine.train_round(r) for r in range(ROUNDS)]
    return engine, losses


@pytest.mark.parametrize("indexed", [False, True], ids=["by-rows", "by-batch-idx"])
def test_generic_path_is_bit_identical_to_one_autograd_graph(
    indexed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, got_losses = _rounds(_adapter(indexed))
    with monkeypatch.context() as patch:
        patch.setattr(StackedTrainingStep, "loss_grad", _one_graph)
        ref, ref_losses = _rounds(_adapter(indexed))
    assert got.training_path.startswith("packed vmap:")
    for name, value in ref.get_params().items():
        assert torch.equal(got.get_params()[name], value), name
    for name, value in ref.state_dict()["optimizer"].items():
        assert torch.equal(got.state_dict()["optimizer"][name], value), name
    assert all(torch.equal(a, b) for a, b in zip(got_losses, ref_losses, strict=True))
    assert torch.equal(got.last_logged["bce"], ref.last_logged["bce"])
    # The check has power: another round's dropout (seed) moves the parameters.
    other = PackedEngine()
    other.setup(_adapter(indexed), _data(), batch_size=BATCH, epochs=EPOCHS, seed=SEED + 1)
    for r in range(ROUNDS):
        other.train_round(r)
    assert not torch.equal(other.get_params()["module.net.0.weight"], got.get_params()["module.net.0.weight"])


def test_training_step_with_a_proximal_term_matches_the_sequential_engine() -> None:
    """A local term's gradient is added to the groups' (float64, against the sequential engine)."""
    module = WeightedMLP(in_features=6, hidden=(8,), dropout=0.0).to(torch.float64)
    names = tuple(n for n, _ in module.named_parameters())
    params = []
    for engine in (PackedEngine(), SequentialEngine()):
        engine.setup(
            copy.deepcopy(module),
            _data(torch.float64),
            batch_size=BATCH,
            epochs=EPOCHS,
            seed=SEED,
            dtype=torch.float64,
            local_term=ProximalTerm(0.5, names),
        )
        for r in range(ROUNDS):
            engine.train_round(r)
            engine.set_params(
                {n: t.mean(0, keepdim=True).expand_as(t) for n, t in engine.get_params().items()}
            )
        params.append(engine.get_params())
    assert max(float((params[0][n] - params[1][n]).abs().max()) for n in names) < 1e-10


def _groups_by_hand(by_batch_idx: bool) -> int:
    """Calls of one round: per step, the distinct real-row counts (and ``batch_idx``) of the
    centers that still have a batch, from the shared schedule (``center_batches``)."""
    per_center = [
        [
            (int((b >= 0).sum()), t % -(-n // BATCH))
            for t, b in enumerate(center_batches(n, BATCH, EPOCHS, SEED, 0, c))
        ]
        for c, n in enumerate(SIZES)
    ]
    steps = max(len(s) for s in per_center)
    keys = [{s[t] if by_batch_idx else s[t][0] for s in per_center if t < len(s)} for t in range(steps)]
    return sum(len(k) for k in keys)


@pytest.mark.parametrize("indexed", [False, True], ids=["by-rows", "by-batch-idx"])
def test_training_step_calls_count_one_call_per_group(indexed: bool) -> None:
    engine = PackedEngine()
    engine.setup(_adapter(indexed), _data(), batch_size=BATCH, epochs=EPOCHS, seed=SEED)
    engine.train_round(0)
    assert engine.training_step_calls == _groups_by_hand(indexed)
    assert _groups_by_hand(True) > _groups_by_hand(False)  # the two keys differ on these sizes


def test_training_step_calls_is_zero_for_the_built_in_loss() -> None:
    engine = PackedEngine()
    engine.setup(
        MortalityMLP(in_features=6, hidden=(8,)), _data(), batch_size=BATCH, epochs=EPOCHS, seed=SEED
    )
    engine.train_round(0)
    assert engine.training_step_calls == 0
