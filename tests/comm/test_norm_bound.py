"""The update bound (``wire.norm_bound``): sustained attacks, shrinking and zero messages, the
reference by hand, clipping, resume, the config key."""

from __future__ import annotations

import math

import pytest
import torch
from lightning.fabric import Fabric

from lightning_fed.algorithms import FedAvg
from lightning_fed.comm import FaultInjection, NormBound, Wire
from lightning_fed.comm.exchange import exchange
from lightning_fed.comm.ledger import SERVER
from lightning_fed.comm.wire import message_norms
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

#: 60 centers, the last (center 59) the largest by far: 400 rows against 20-119.
SIZES = [20 + (37 * i) % 100 for i in range(59)] + [400]
LARGEST, ROUNDS = 59, 20


def _fit(faults: FaultInjection | None, norm_bound: NormBound | None, rounds: int = ROUNDS) -> Federation:
    fed = Federation(
        make_federation(SIZES),
        MortalityMLP(hidden=(8, 4), lr=0.01),
        FedAvg(),
        TrainerConfig(rounds=rounds, batch_size=32),
        Fabric(accelerator="cpu", devices=1),
        wire=Wire(faults=faults, norm_bound=norm_bound),
    )
    fed.fit()
    return fed


def _model_norm(fed: Federation) -> float:
    """L2 norm of center 0's parameters (under FedAvg every center holds the global model)."""
    params = fed.engine.get_params()
    return math.sqrt(sum(float((t[0].double() ** 2).sum()) for t in params.values()))


def _sustained(scale: float, rounds: int = ROUNDS) -> FaultInjection:
    return FaultInjection(corrupt={r: {LARGEST: {"scale": scale}} for r in range(rounds)})


@pytest.fixture(scope="module")
def clean_norm() -> float:
    return _model_norm(_fit(None, None))


def test_sustained_3x_from_the_largest_center_is_held(clean_norm: float) -> None:
    """The largest of 60 centers uploads 3x its model in each of 20 rounds. Under the ratio test
    (its honest ratio to the median upload is ~1, so 3 < 5 passes every round) the global model's
    norm grows every round; under the update bound (its update ~2 ||theta|| against a median honest
    update of a fraction of ||theta||; its norm 3x its round-start model's, above ``H = 2``) every
    one of its 20 uploads is rejected and the norm stays within 2x of the clean run's."""
    attacked = _fit(_sustained(3.0), NormBound())
    assert attacked.wire.rejected_total() == ROUNDS
    assert _model_norm(attacked) < 2 * clean_norm
    assert _model_norm(_fit(_sustained(3.0), None)) > 2 * clean_norm  # the ratio test does not hold it


def test_clean_run_rejects_nothing_under_the_bound(clean_norm: float) -> None:
    """No honest upload or download of the clean run fails the default bound, and the final model is
    the ratio-test run's (nothing was rejected by either)."""
    fed = _fit(None, NormBound())
    assert fed.wire.rejected_total() == 0
    assert _model_norm(fed) == pytest.approx(clean_norm, rel=1e-6)


@pytest.mark.parametrize("scale", [0.1, 0.0])
def test_shrunk_and_zero_uploads_are_rejected(scale: float) -> None:
    """0.1x and all-zero uploads from the largest center in rounds 0-4 (the ratio test has no lower
    bound and accepts them): the bound rejects each of the 5, in reject mode and, through the lower
    norm test, in clip mode too."""
    rounds = 5
    assert _fit(_sustained(scale, rounds), None, rounds).wire.rejected_total() == 0
    for mode in ("reject", "clip"):
        assert _fit(_sustained(scale, rounds), NormBound(mode=mode), rounds).wire.rejected_total() == rounds


def _send(wire: Wire, messages: list[list[float]], anchors: list[list[float]], round_idx: int):
    """Centers 0..k-1 upload ``messages`` to the server, whose anchors are their round-start rows."""
    wire.start_round(round_idx, {"w": torch.tensor(anchors)})
    src = torch.arange(len(messages))
    return exchange(
        wire, {"w": torch.tensor(messages, dtype=torch.float32)}, src, torch.full_like(src, SERVER), round_idx
    )


def test_reference_and_verdict_by_hand() -> None:
    """Anchors (1, 0) for all four senders. Round 0 messages (1, 1), (1, 2), (1, 4), (0.1, 0):
    updates (0, 1), (0, 2), (0, 4), (-0.9, 0) with norms 1, 2, 4, 0.9; the fourth fails the lower
    test (||m|| = 0.1 < 0.4 ||a|| = 0.4) and leaves the median, so ``s_0`` = lower median {1, 2, 4} =
    2 and with T = 1.5 the bound is 3: the third (4 > 3) is rejected. Round 1 messages with updates
    of norm 10, 10, 10, 1: ``s_1`` = lower median {1, 10, 10, 10} = 10, and ``ref_1`` = the lower
    median of the window {2, 10} = 2 (under the growth cap 2 * 2), bound 3: the three 10s are
    rejected, the 1 passes. Three attackers of four move ``s_1`` but not ``ref_1``."""
    bound = NormBound(max_update_ratio=1.5, min_norm_ratio=0.4, max_norm_ratio=math.inf, window=5, growth=2.0)
    wire = Wire(norm_bound=bound)
    anchors = [[1.0, 0.0]] * 4
    got = _send(wire, [[1, 1], [1, 2], [1, 4], [0.1, 0]], anchors, 0)
    assert got.accepted.tolist() == [True, True, False, False]
    assert wire.norm_bound.refs["server"][0] == 2.0
    got = _send(wire, [[1, 10], [1, 10], [1, -10], [1, 1]], anchors, 1)
    assert wire.norm_bound.refs["server"][1] == 2.0
    assert got.accepted.tolist() == [False, False, False, True]
    assert wire.rejected == {0: 2, 1: 3}


def test_growth_cap_by_hand() -> None:
    """Window 1 (``ref_t = s_t``) and growth 2: round 0 updates 1, 1, 1 -> ref 1; round 1 updates
    5, 5, 5 -> ``s_1`` = 5 capped at 2 * 1 = 2, bound 1.5 * 2 = 3, all three rejected; round 2
    the same -> 4, bound 6, all accepted: the cap slows a shift of every sender, it does not freeze
    the bound."""
    wire = Wire(norm_bound=NormBound(max_update_ratio=1.5, max_norm_ratio=math.inf, window=1, growth=2.0))
    anchors = [[1.0, 0.0]] * 3
    assert _send(wire, [[1, 1]] * 3, anchors, 0).accepted.all()
    assert not _send(wire, [[1, 5]] * 3, anchors, 1).accepted.any()
    assert wire.norm_bound.refs["server"] == {0: 1.0, 1: 2.0}
    assert _send(wire, [[1, 5]] * 3, anchors, 2).accepted.all()
    assert wire.norm_bound.refs["server"][2] == 4.0


def test_clip_shortens_the_update_to_the_bound() -> None:
    """Clip mode, T = 1.5, anchors (1, 0): updates of norm 1, 2, 8 -> ``s`` = 2, bound 3; the third
    message (1, 8) is kept as (1, 0) + (3 / 8) (0, 8) = (1, 3); the others are unchanged, nothing is
    rejected and one message is counted as clipped."""
    wire = Wire(norm_bound=NormBound(max_update_ratio=1.5, max_norm_ratio=math.inf, mode="clip"))
    got = _send(wire, [[1, 1], [1, 2], [1, 8]], [[1.0, 0.0]] * 3, 0)
    assert got.accepted.all()
    assert got.received["w"].tolist() == [[1, 1], [1, 2], [1, 3]]
    assert wire.norm_bound.clipped == {0: 1}


def test_norm_band_by_hand() -> None:
    """Anchors (2, 0), band [0.5, 2] x ||a|| = [1, 4], projection ``<m, a> / ||a||^2 >= 0.2``,
    update test out of reach (T large). Messages (0, 0), (0.9, 0), (1, 0), (4, 0), (4.1, 0), the
    sign flip (-2, 0) and (0, 2), both of the anchor's norm: norms 0, 0.9, 1, 4, 4.1, 2, 2 and
    projections 0, 0.45, 0.5, 2, 2.05, -1, 0 -> (1, 0) and (4, 0) pass; the first two are short,
    the fifth long, the last two point away from the anchor."""
    wire = Wire(norm_bound=NormBound(max_update_ratio=1e9))
    got = _send(wire, [[0, 0], [0.9, 0], [1, 0], [4, 0], [4.1, 0], [-2, 0], [0, 2]], [[2.0, 0.0]] * 7, 0)
    assert got.accepted.tolist() == [False, False, True, True, False, False, False]


def test_projection_test_off_accepts_the_sign_flip() -> None:
    """``min_projection_ratio=None`` is the bound of before: the sign flip (-2, 0) against the
    anchor (2, 0) lies in the norm band and passes (its update, norm 4, is for the update test)."""
    wire = Wire(norm_bound=NormBound(max_update_ratio=1e9, min_projection_ratio=None))
    assert _send(wire, [[-2, 0], [0, 2]], [[2.0, 0.0]] * 2, 0).accepted.tolist() == [True, True]


def test_a_sign_flip_inside_the_update_bound_is_rejected() -> None:
    """The hole measured on ABPS (60 centers, the 10 % largest sending -1x from round 5): a peer's
    model is ~7 median honest updates long, so a sign flip's update (~2 ||a||, 14.6 ref) stays
    under T = 20 and its norm inside the band; 18 of 18 passed and the pooled AUROC fell 0.16.

    By hand, defaults (T = 20, L = 0.5, H = 2): anchors (1, 0); five honest messages (1, 0.1)
    (update norm 0.1, so ``s_0`` = ``ref_0`` = 0.1 and the bound is 2); the sign flip (-0.95, 0)
    (norm 0.95 inside [0.5, 2], update norm 1.95 < 2) and noise at the honest norm (0, 1) (update
    sqrt 2 < 2): projections on the anchor -0.95 and 0 < P = 0.2 -> both rejected, the five pass."""
    honest = [[1.0, 0.1]] * 5
    got = _send(Wire(norm_bound=NormBound()), [*honest, [-0.95, 0.0], [0.0, 1.0]], [[1.0, 0.0]] * 7, 0)
    assert got.accepted.tolist() == [True] * 5 + [False, False]


def test_payloads_the_bound_does_not_cover_keep_the_ratio_test() -> None:
    """A payload whose tensor is not a recorded shared tensor (a descriptor ``v``) is held to the
    ratio test: median {1, 1, 10} = 1, ratio 10 > 5 rejects the third."""
    wire = Wire(norm_bound=NormBound())
    wire.start_round(0, {"w": torch.zeros(3, 2)})
    src = torch.arange(3)
    got = exchange(wire, {"v": torch.tensor([[1.0], [1.0], [10.0]])}, src, torch.full_like(src, SERVER), 0)
    assert got.accepted.tolist() == [True, True, False]


def test_resume_continues_the_window() -> None:
    """A 3-round run resumed from its round-1 state ends with the straight run's references and
    parameters (the per-round medians travel in the checkpoint)."""
    faults = _sustained(3.0, 3)
    straight = _fit(faults, NormBound(), rounds=3)
    first = _fit(faults, NormBound(), rounds=1)
    state = first.state_dict()
    resumed = Federation(
        make_federation(SIZES),
        MortalityMLP(hidden=(8, 4), lr=0.01),
        FedAvg(),
        TrainerConfig(rounds=3, batch_size=32),
        Fabric(accelerator="cpu", devices=1),
        wire=Wire(faults=faults, norm_bound=NormBound()),
    )
    resumed._setup()
    resumed.load_state_dict(state)
    resumed.fit()
    assert resumed.wire.norm_bound.refs == straight.wire.norm_bound.refs
    for name, t in straight.engine.get_params().items():
        assert torch.equal(resumed.engine.get_params()[name], t)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_update_ratio": 1.0}, "max_update_ratio must be a finite number > 1"),
        ({"min_norm_ratio": 1.0}, "min_norm_ratio must be in [0, 1)"),
        ({"window": 0}, "window must be an integer >= 1"),
        ({"growth": 0.5}, "growth must be a finite number >= 1"),
        ({"max_norm_ratio": 1.0}, "max_norm_ratio must be a number > 1"),
        ({"min_projection_ratio": 1.0}, "min_projection_ratio must be a finite number < 1"),
        ({"min_projection_ratio": math.nan}, "min_projection_ratio must be a finite number < 1"),
        ({"min_projection_ratio": -math.inf}, "min_projection_ratio must be a finite number < 1"),
        ({"mode": "drop"}, "mode must be one of ['reject', 'clip']"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=r"^wire\.norm_bound\.init_args\.") as err:
        NormBound(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_config_key_and_fingerprint() -> None:
    """``fit`` builds the bound into the wire by default; ``--wire.norm_bound=null`` (the ratio test
    only, as before issue 32) keeps the fingerprint of a config written before the key existed, and
    the projection test off (null) (as before the sign-flip finding) that of a bound without it."""
    from lightning_fed.cli import fit_parser
    from lightning_fed.fit_parser import wire_from
    from lightning_fed.runfolder.fingerprint import config_fingerprint

    parser = fit_parser()
    default = parser.parse_args(["--trainer.rounds=1"])
    ratio = parser.parse_args(["--trainer.rounds=1", "--wire.norm_bound=null"])
    clip = parser.parse_args(["--trainer.rounds=1", "--wire.norm_bound.mode=clip"])
    before = parser.parse_args(["--trainer.rounds=1", "--wire.norm_bound.min_projection_ratio=null"])
    wire = wire_from(parser.instantiate_classes(default))
    assert isinstance(wire.norm_bound, NormBound) and wire.norm_bound.min_projection_ratio == 0.2
    assert wire_from(parser.instantiate_classes(clip)).norm_bound.mode == "clip"
    assert wire_from(parser.instantiate_classes(ratio)).norm_bound is None

    def without(cfg: object, key: str) -> dict:
        flat = cfg.as_dict()
        wire = dict(flat["wire"])
        if key == "norm_bound":
            del wire["norm_bound"]
        else:
            wire["norm_bound"] = {**wire["norm_bound"], "init_args": dict(wire["norm_bound"]["init_args"])}
            del wire["norm_bound"]["init_args"][key]
        return {**flat, "wire": wire}

    assert config_fingerprint(ratio.as_dict()) == config_fingerprint(without(ratio, "norm_bound"))
    assert config_fingerprint(before.as_dict()) == config_fingerprint(without(before, "min_projection_ratio"))
    assert len({config_fingerprint(c.as_dict()) for c in (default, ratio, clip, before)}) == 4


class _RecordingWire(Wire):
    """A wire that keeps, per bound-checked call, the round, the senders and the verdicts."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    def accept(
        self,
        received: dict[str, torch.Tensor],
        own: dict[str, torch.Tensor] | torch.Tensor | None,
        round_idx: int,
        src: torch.Tensor | None = None,
        dst: torch.Tensor | None = None,
    ) -> torch.Tensor:
        ok = super().accept(received, own, round_idx, src=src, dst=dst)
        if src is not None:
            self.calls.append((round_idx, torch.as_tensor(src).reshape(-1).clone(), ok.clone()))
        return ok


@pytest.mark.parametrize("kind", [{"scale": -1.0}, "gaussian"], ids=["sign_flip", "gaussian"])
def test_abps_peers_reject_every_norm_preserving_attack_and_no_honest_message(kind: object) -> None:
    """ABPS, 60 centers, the 10 % largest sending a sign flip or noise at the honest norm from
    round 2 for 6 rounds: every attacker message is rejected and no honest one. Before the
    projection test, 61 of the 106 sign flips passed (their updates are
    within ``T ref_t`` between peers) and the receivers they had moved then rejected 390 honest
    messages."""
    from lightning_fed.algorithms import ABPS

    faults = FaultInjection(attacks=[{"kind": kind, "centers": 0.1, "pick": "largest", "from_round": 2}])
    wire = _RecordingWire(faults=faults, norm_bound=NormBound())
    Federation(
        make_federation(SIZES),
        MortalityMLP(hidden=(8, 4), lr=0.01),
        ABPS(),
        TrainerConfig(rounds=8, batch_size=32),
        Fabric(accelerator="cpu", devices=1),
        wire=wire,
    ).fit()
    attackers = torch.tensor(faults.attackers[0])
    attacked = honest_rejected = accepted_attacks = 0
    for round_idx, src, ok in wire.calls:
        bad = torch.isin(src, attackers) & (round_idx >= 2)
        attacked += int(bad.sum())
        accepted_attacks += int((ok & bad).sum())
        honest_rejected += int((~ok & ~bad).sum())
    assert attacked > 50
    assert (accepted_attacks, honest_rejected) == (0, 0)


def test_fit_says_which_defence_runs() -> None:
    """The start line names the checks and how to change them."""
    bound = Wire(norm_bound=NormBound()).describe_defence()
    assert bound.startswith("defence: NormBound on shared parameters (update <= 20x")
    assert "norm 0.5-2x the round-start model, projection >= 0.2; reject" in bound
    assert "wire.norm_bound: null" in bound
    off = Wire(norm_bound=NormBound(min_projection_ratio=None)).describe_defence()
    assert "projection" not in off
    assert Wire().describe_defence() == "defence: ratio test (norm <= 5x its reference; NaN/Inf rejected)"


def test_accept_equals_the_verdict_on_materialized_anchors() -> None:
    """The wire norms updates chunk by chunk and anchors once per center (issue 33: the E x |W| anchor
    copy and difference were most of ABPS's norm-test time); its verdicts, rejections and the
    bound's references must be those of the verdict on the materialized anchors ``a_e = s[owner_e]``,
    for peer messages (owner = receiver) and uploads (owner = sender), over two rounds."""
    g = torch.Generator().manual_seed(7)
    start = {"w": torch.randn(9, 5, 3, generator=g), "b": torch.randn(9, 3, generator=g)}
    wire, ref_bound = Wire(norm_bound=NormBound()), NormBound()
    for r in range(2):
        wire.start_round(r, start)
        for channel, (src, dst) in {
            "centers": (torch.randint(0, 9, (27,), generator=g), torch.randint(0, 9, (27,), generator=g)),
            "server": (torch.arange(9), torch.full((9,), SERVER)),
        }.items():
            owner = torch.where(dst == SERVER, src, dst)
            scale = torch.tensor([-1.0, 0.1, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0]).repeat(3)[: len(src)]
            got = {
                n: t[owner] * scale.view(-1, *[1] * (t.dim() - 1))
                + 0.05 * torch.randn(len(src), *t.shape[1:], generator=g)
                for n, t in start.items()
            }
            anchors = {n: t[owner] for n, t in start.items()}
            norms = message_norms(got)
            update = message_norms({n: got[n] - anchors[n] for n in got})
            want, _ = ref_bound.verdict(channel, r, norms, update, message_norms(anchors))
            assert torch.equal(wire.accept(got, None, r, src=src, dst=dst), want)
            assert 0 < int((~want).sum()) < len(src)
        start = {n: t + 0.01 * torch.randn(t.shape, generator=g) for n, t in start.items()}
    assert wire.norm_bound.refs == ref_bound.refs


def test_start_round_copies_the_anchors_unless_handed_over() -> None:
    """``copy=True`` (default) keeps a detached copy; ``copy=False`` keeps the caller's tensors (the
    federation hands over ``replay_params()``, already a copy: one ``[C, D]`` fewer, issue 33)."""
    wire = Wire(norm_bound=NormBound())
    given = torch.arange(6.0).view(3, 2)
    wire.start_round(0, {"w": given})
    assert torch.equal(wire.start["w"], given) and wire.start["w"].data_ptr() != given.data_ptr()
    wire.start_round(1, {"w": given}, copy=False)
    assert wire.start["w"].data_ptr() == given.data_ptr()
