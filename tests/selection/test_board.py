"""What a learned ABPS selector shares besides models is on the ledger (issue 30: the pooled
observations and the public pair features were read for free)."""

from __future__ import annotations

import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import ABPS
from lightning_fed.comm.ledger import SERVER, Ledger
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.selection.abps import BayesianSelector, PairRegression, PosteriorExceedance, ScaledUCB
from lightning_fed.selection.abps.board import RECORD_BYTES, book_features, book_observations
from lightning_fed.types import TrainerConfig


def _edges(ledger: Ledger) -> dict[tuple[int, int], int]:
    table = ledger.table()
    return {(int(u), int(v)): int(b) for u, v, b in zip(table["u"], table["v"], table["bytes"], strict=True)}


def test_observations_by_hand() -> None:
    """3 centers; center 0 observed two peers, center 2 one (N = 3); center 2 is unavailable.
    Posts: 0 -> directory 2 x 12 = 24 B, 2 -> directory 12 B. Downloads: center 0 reads the others'
    N - n_0 = 1 record (12 B), center 1 reads all 3 (36 B), center 2 nothing."""
    ledger = Ledger()
    book_observations(ledger, 4, torch.tensor([0, 0, 2]), torch.tensor([True, True, False]))
    # the ledger merges both directions of an undirected (directory, center) edge
    assert _edges(ledger) == {(SERVER, 0): 24 + 12, (SERVER, 1): 36, (SERVER, 2): 12}
    assert ledger.round_total(4) == 84
    empty = Ledger()
    book_observations(empty, 0, torch.zeros(0, dtype=torch.int64), torch.ones(3, dtype=torch.bool))
    assert empty.total() == 0


def test_features_by_hand() -> None:
    """3 centers, a 28-byte record (3 float64 descriptor entries + 1 int32 code): 3 uploads of 28 B and
    3 downloads of the other two records (56 B)."""
    ledger = Ledger()
    book_features(ledger, 0, 3, 8 * 3 + 4)
    assert _edges(ledger) == {(SERVER, c): 28 + 56 for c in range(3)}
    book_features(ledger, 0, 3, 0)
    assert ledger.total() == 3 * 84


def test_which_learners_pool() -> None:
    """Eq. 7's UCB reads only the center's own observations; the pooled learners read everyone's."""
    assert not BayesianSelector().pools_observations
    assert BayesianSelector().feature_record_bytes == 0
    assert BayesianSelector(policy=ScaledUCB()).pools_observations
    assert not BayesianSelector(policy=ScaledUCB(scale=1.0)).pools_observations
    assert BayesianSelector(acceptance=PosteriorExceedance()).pools_observations
    regression = BayesianSelector(policy=PairRegression(attributes=["care_unit"], metadata_dim=3))
    assert regression.pools_observations and regression.feature_record_bytes == 8 * 3 + 4


def _fit(federation, seen: list | None = None) -> tuple[Federation, dict]:
    policy = PairRegression(attributes=[], metadata_dim=3)
    selector = BayesianSelector(policy=policy, acceptance=PosteriorExceedance())
    if seen is not None:
        observe = selector.observe

        def recording(i, j, phi):
            seen.append(i.clone())
            observe(i, j, phi)

        selector.observe = recording
    fed = Federation(
        federation,
        MortalityMLP(hidden=(8, 4)),
        ABPS(selector=selector),
        TrainerConfig(rounds=3, batch_size=16),
        Fabric(accelerator="cpu", devices=1),
        seed=3,
    )
    summary = fed.fit()
    return fed, summary


def test_a_pooled_learner_books_exactly_its_posts_and_reads(small_federation, monkeypatch) -> None:
    """A PairRegression + PosteriorExceedance run: the same models and metrics as with the booking
    switched off, and the ledger larger by exactly the features (once) plus, every round, 12 B per
    observation posted and 12 (N - n_k) B read by every center (all available here)."""
    seen: list[torch.Tensor] = []
    fed, summary = _fit(small_federation, seen=seen)
    with monkeypatch.context() as patch:
        patch.setattr("lightning_fed.algorithms.abps.book_features", lambda *a: None)
        patch.setattr("lightning_fed.algorithms.abps.book_observations", lambda *a: None)
        bare, bare_summary = _fit(small_federation)
    for name, tensor in fed.engine.get_params().items():
        assert torch.equal(tensor, bare.engine.get_params()[name])
    assert summary["test_auroc_mean"] == bare_summary["test_auroc_mean"]
    c = small_federation.num_centers
    features = c * 24 + c * 24 * (c - 1)
    posts = sum(len(i) * RECORD_BYTES for i in seen)
    reads = sum(int(((len(i) - torch.bincount(i, minlength=c)) * RECORD_BYTES).sum()) for i in seen if len(i))
    assert sum(len(i) for i in seen) > 0
    assert fed.wire.ledger.total() - bare.wire.ledger.total() == features + posts + reads
