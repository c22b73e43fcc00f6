"""The server-optimizer plugins: the star's (ServerAverage, ServerMomentum, the PseudoGradientStep base)
and ABPS's per-center variant, their float aliases, and the fingerprint the alias keeps."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from lightning_fed.aggregation import (
    CenterServerAverage,
    CenterServerMomentum,
    PseudoGradientStep,
    ServerAverage,
    ServerMomentum,
)
from lightning_fed.aggregation.center_optimizer import center_server_optimizer_from
from lightning_fed.aggregation.momentum import UpdateMomentum
from lightning_fed.aggregation.server_optimizer import server_optimizer_from
from lightning_fed.runfolder.fingerprint import config_fingerprint


def test_server_average_returns_the_aggregate_itself() -> None:
    average = {"w": torch.randn(1, 3)}
    opt = ServerAverage()
    opt.start({"w": torch.zeros(3)})
    assert opt.step(average) is average and opt.state_dict() == {}


def test_server_momentum_steps_along_the_pseudo_gradient_by_hand() -> None:
    """x_0 = 0, beta = 0.5: theta_bar = 2 -> v = 2, x = 2; theta_bar = 3 -> v = 0.5*2 + 1 = 2, x = 4."""
    opt = ServerMomentum(beta=0.5)
    opt.start({"w": torch.zeros(2)})
    assert torch.equal(opt.step({"w": torch.full((1, 2), 2.0)})["w"], torch.full((1, 2), 2.0))
    out = opt.step({"w": torch.full((1, 2), 3.0)})["w"]
    assert torch.equal(out, torch.full((1, 2), 4.0)) and out.dtype == torch.float32
    assert set(opt.state_dict()) == {"server", "velocity"}


class _SignStep(PseudoGradientStep):
    """A stand-in for a later adaptive rule: ``s_t = lr * sign(Delta_t)``, with a step counter as state."""

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr, self.steps = lr, 0

    def reset(self) -> None:
        self.steps = 0

    def direction(self, name: str, delta: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        return self.lr * delta.sign()

    def rule_state(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def load_rule_state(self, state: dict[str, Any]) -> None:
        self.steps = state["steps"]


def test_a_new_rule_needs_only_its_direction_and_its_state() -> None:
    """The base keeps x_t in float64, casts back, and saves x_t beside the rule's own state."""
    rule = _SignStep(lr=0.25)
    rule.start({"w": torch.zeros(3)})
    out = rule.step({"w": torch.tensor([[1.0, -2.0, 0.0]])})["w"]
    assert torch.equal(out, torch.tensor([[0.25, -0.25, 0.0]]))
    again = _SignStep(lr=0.25)
    again.load_state_dict(rule.state_dict())
    assert again.steps == 1 and torch.equal(again.server["w"], rule.server["w"])


@pytest.mark.parametrize(
    ("resolve", "momentum", "average"),
    [
        (server_optimizer_from, ServerMomentum, ServerAverage),
        (center_server_optimizer_from, CenterServerMomentum, CenterServerAverage),
    ],
)
def test_float_alias_maps_to_the_plugin_and_both_is_an_error(resolve, momentum, average) -> None:
    opt = resolve(None, 0.9)
    assert type(opt) is momentum and opt.beta == 0.9
    assert type(resolve(None, 0.0)) is average
    given = momentum(0.5)
    assert resolve(given, 0.0) is given
    with pytest.raises(ValueError, match=r"^algorithm\.init_args\.server_momentum is the old alias"):
        resolve(momentum(0.5), 0.5)
    with pytest.raises(ValueError, match=r"^algorithm\.init_args\.server_momentum must be in \[0, 1\)"):
        resolve(None, 1.5)


def test_center_server_average_is_plain_mixing_for_active_centers() -> None:
    own, mixed = torch.zeros(3, 2), torch.ones(3, 2)
    out = CenterServerAverage().apply("w", own, own, mixed, torch.tensor([True, False, True]))
    assert torch.equal(out, torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]))
    assert out is mixed  # written into the mix it was given: no third [C, ...] tensor (issue 33)


def test_update_momentum_zero_in_place_writes_the_same_rows_into_the_given_mix() -> None:
    """beta = 0 is ``where(active, mixed, own)``; handed a mix to give away (``in_place``), the same
    rows are written into it; with beta > 0 nothing is written in place."""
    own, active = torch.zeros(3, 2), torch.tensor([True, False, True])
    expected = UpdateMomentum(0.0).apply("w", own, torch.ones(3, 2), active)
    mixed = torch.ones(3, 2)
    out = UpdateMomentum(0.0).apply("w", own, mixed, active, in_place=True)
    assert out is mixed and torch.equal(out, expected)
    mixed = torch.ones(3, 2)
    out = UpdateMomentum(0.5).apply("w", own, mixed, active, in_place=True)
    assert out is not mixed and torch.equal(mixed, torch.ones(3, 2))
    assert torch.equal(out, torch.tensor([[0.5, 0.5], [0.0, 0.0], [0.5, 0.5]]))


def _config(algorithm: dict[str, Any]) -> dict[str, Any]:
    return {"seed": 0, "algorithm": {"class_path": "lightning_fed.algorithms.FedAvg", "init_args": algorithm}}


def test_the_plugin_keeps_the_fingerprint_of_the_float_key_it_replaced() -> None:
    """``server_optimizer: ServerMomentum(0.5)`` is fingerprinted as ``server_momentum: 0.5`` (so runs
    of the configs from before the plugin resume); another beta, or another key, is a different run."""
    old = _config({"personal_layers": 2, "server_momentum": 0.5})
    plugin = {"class_path": "lightning_fed.aggregation.ServerMomentum", "init_args": {"beta": 0.5}}
    new = _config({"personal_layers": 2, "server_momentum": 0.0, "server_optimizer": plugin})
    assert config_fingerprint(new) == config_fingerprint(old)
    other = {"class_path": "lightning_fed.aggregation.ServerMomentum", "init_args": {"beta": 0.9}}
    assert config_fingerprint(
        _config({"personal_layers": 2, "server_optimizer": other})
    ) != config_fingerprint(old)
    plain = _config({"personal_layers": 2, "server_momentum": 0.0})
    assert config_fingerprint(
        _config({"personal_layers": 2, "server_momentum": 0.0, "server_optimizer": None})
    ) == (config_fingerprint(plain))
