"""``bytes_vs_fedavg`` against a fixed reference: float32 FedAvg of the reference model over the budget.

With ``C`` centers, round budget ``R`` (``trainer.rounds``), ``r`` rounds run, ``B`` bytes on the
ledger and ``P_ref`` the reference model's parameter count (``CenterModule.reference_parameters``):

    bytes_vs_fedavg             = B / (R * 2 * C * 4 P_ref)
    bytes_vs_fedavg_same_rounds = B / (r * 2 * C * 4 P_ref)

The tiny MLP ``hidden=(4, 3)`` on 6 features has ``P = (6*4 + 4) + (4*3 + 3) + (3*1 + 1) = 28 + 15 + 4
= 47`` parameters; its head (last layer) has 4, so the shared trunk with one personal layer has 43.
"""

from __future__ import annotations

import pytest
from lightning.fabric import Fabric

from lightning_fed.algorithms import ABPS, BNNFedAvg, FedAvg
from lightning_fed.callbacks import Callback, EarlyStopping
from lightning_fed.comm import BFloat16Hook, Wire
from lightning_fed.federation import Federation
from lightning_fed.models import BayesianMLP, MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

SIZES = [30, 10, 20, 16]


class _Stats(Callback):
    """Each round's statistics."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, float]] = []

    def on_round_end(self, federation, result) -> None:
        self.rounds.append(dict(result.stats))


class _StopAfter(Callback):
    """Stop after ``rounds`` rounds (a deterministic early stop)."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def on_round_end(self, federation, result) -> None:
        federation.should_stop = result.round + 1 >= self.rounds


def _run(module, algo, rounds: int, callbacks=(), wire=None) -> tuple[Federation, dict, _Stats]:
    stats = _Stats()
    fed = Federation(
        make_federation(SIZES),
        module,
        algo,
        TrainerConfig(rounds=rounds, batch_size=16),
        Fabric(accelerator="cpu", devices=1, callbacks=[stats, *callbacks]),
        wire=wire,
    )
    return fed, fed.fit(), stats


def test_reference_parameters_default_and_bayesian() -> None:
    """MLP: its own 47. Bayesian MLP of the same shape: 2 * 47 = 94 parameters (mu and rho), but it
    declares the MLP's 47 as its reference."""
    mlp, bnn = MortalityMLP(in_features=6, hidden=(4, 3)), BayesianMLP(in_features=6, hidden=(4, 3))
    assert mlp.reference_parameters() == 47
    assert sum(p.numel() for p in bnn.parameters()) == 94 and bnn.reference_parameters() == 47


def test_fedavg_is_exactly_one_and_per_round_grows_to_it() -> None:
    """FedAvg, 3 of 3 rounds: B = 3 * 2 * C * 4 * 47 = the reference, so 1.0 exactly (both ratios).
    Per round r the bytes so far are (r + 1) * 2 * C * 4 * 47: bytes_vs_fedavg = (r + 1) / 3, growing
    to the summary's 1.0; same-rounds is 1.0 every round."""
    fed, summary, stats = _run(MortalityMLP(hidden=(4, 3)), FedAvg(), rounds=3)
    assert fed.reference_message_bytes == 4 * 47
    assert summary["bytes_vs_fedavg"] == 1.0 and summary["bytes_vs_fedavg_same_rounds"] == 1.0
    assert [s["bytes_vs_fedavg"] for s in stats.rounds] == [1 / 3, 2 / 3, 1.0]
    assert [s["bytes_vs_fedavg_same_rounds"] for s in stats.rounds] == [1.0, 1.0, 1.0]


def test_bnn_fl_sends_twice_the_mlp() -> None:
    """BNN+FL sends mu and rho of every weight: each message is 4 * 94 bytes, against the MLP's
    4 * 47, so B / reference = 94 / 47 = 2.0 (it reported 1.0 when the denominator was its own model)."""
    _, summary, _ = _run(BayesianMLP(hidden=(4, 3)), BNNFedAvg(), rounds=2)
    assert summary["bytes_vs_fedavg"] == pytest.approx(2.0)
    assert summary["bytes_vs_fedavg_same_rounds"] == pytest.approx(2.0)


def test_early_stopped_fedavg_at_round_5_of_10() -> None:
    """EarlyStopping(patience=4, min_delta=1.0): round 0 improves on -inf, no later round can improve by
    1.0 AUROC, so rounds 1-4 wait and the run stops after 5 rounds. B = 5 * 2 * C * 4 * 47:
    bytes_vs_fedavg = 5 / 10 = 0.5, same-rounds = 5 / 5 = 1.0."""
    stop = EarlyStopping(patience=4, min_delta=1.0)
    _, summary, stats = _run(MortalityMLP(hidden=(4, 3)), FedAvg(), rounds=10, callbacks=[stop])
    assert summary["rounds"] == 5 and summary["stopped_early"] is True
    assert summary["bytes_vs_fedavg"] == 0.5 and summary["bytes_vs_fedavg_same_rounds"] == 1.0
    assert stats.rounds[-1]["bytes_vs_fedavg"] == 0.5


def test_personal_bf16_fedavg_stopped_early_by_hand() -> None:
    """FedAvg+P+Q (one personal layer, bfloat16), stopped after 2 of 8 rounds: each message carries the
    43 shared parameters at 2 bytes, against float32 FedAvg's 47 at 4:
    same-rounds = (43 * 2) / (47 * 4) = 86 / 188 = 0.45745...; bytes_vs_fedavg = that * 2 / 8."""
    fed, summary, _ = _run(
        MortalityMLP(hidden=(4, 3)),
        FedAvg(personal_layers=1),
        rounds=8,
        callbacks=[_StopAfter(2)],
        wire=Wire(hook=BFloat16Hook()),
    )
    assert summary["rounds"] == 2 and fed.num_shared_parameters == 43
    assert summary["bytes_vs_fedavg_same_rounds"] == pytest.approx(86 / 188)
    assert summary["bytes_vs_fedavg"] == pytest.approx(86 / 188 * 2 / 8)


def test_abps_like_mesh_stopped_early_by_hand() -> None:
    """ABPS: each accepted partnership is one undirected edge costing 2 * 4 * 47 bytes (one message
    each way), against FedAvg's 2 * 4 * 47 per center per round; with sum_i |P_i| = 2 E edges-ends,
    B / (one FedAvg round) = E / C = E|P_i| / 2. Stopped after 1 of 4 rounds: same-rounds =
    E|P_i| / 2 and bytes_vs_fedavg = E|P_i| / 8."""
    _, summary, _ = _run(MortalityMLP(hidden=(4, 3)), ABPS(), rounds=4, callbacks=[_StopAfter(1)])
    assert summary["rounds"] == 1 and summary["mean_partners"] > 0
    assert summary["bytes_vs_fedavg_same_rounds"] == pytest.approx(summary["mean_partners"] / 2)
    assert summary["bytes_vs_fedavg"] == pytest.approx(summary["mean_partners"] / 8)
