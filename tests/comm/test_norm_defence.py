"""The receiver-side norm defence: scaled-payload attacks, honest runs, the reference, the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightning_fed.algorithms import ABPS, FedAvg
from lightning_fed.comm import FaultInjection, Wire
from lightning_fed.comm.wire import MAX_NORM_RATIO
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

SIZES = [200, 20, 150, 25, 120, 30]
#: ABPS partnerships of the attack test (symmetric): the attacker, small center 1, serves 0 and 4.
PARTNERS = [[1], [0, 4], [5], [4], [1, 3], [2]]
ATTACKER, ROUND = 1, 1


def _fit(algorithm, faults: FaultInjection | None, **wire_kwargs: float) -> Federation:
    """Three rounds on ``SIZES`` (Adam lr 0.01: the centers' norms drift apart by up to ~30 %)."""
    fed = Federation(
        make_federation(SIZES),
        MortalityMLP(hidden=(8, 4), lr=0.01),
        algorithm,
        TrainerConfig(rounds=3, batch_size=16),
        Fabric(accelerator="cpu", devices=1),
        wire=Wire(faults=faults, **wire_kwargs),
    )
    fed.fit()
    return fed


def _fixed_abps() -> ABPS:
    """ABPS whose selector always returns ``PARTNERS``."""
    algo = ABPS()
    original = algo.setup

    def setup(*args, **kwargs) -> None:
        original(*args, **kwargs)
        algo.selector.select = lambda round_idx, available=None: [list(p) for p in PARTNERS]

    algo.setup = setup
    return algo


def _attack(scale: float) -> FaultInjection:
    return FaultInjection(corrupt={ROUND: {ATTACKER: {"scale": scale}}})


@pytest.mark.parametrize("scale", [10.0, 100.0, 1000.0])
def test_fedavg_server_rejects_a_scaled_upload(scale: float) -> None:
    """Center 1 uploads ``scale`` times its parameters in round 1: the server (reference: the median
    upload norm; center 1's honest ratio to it is ~0.97) rejects exactly that upload and every model
    stays finite. The former default ratio 1e3 rejects none of the three attacks."""
    fed = _fit(FedAvg(), _attack(scale))
    assert fed.wire.rejected == {ROUND: 1}
    assert all(torch.isfinite(t).all() for t in fed.engine.get_params().values())
    assert _fit(FedAvg(), _attack(scale), max_norm_ratio=1e3).wire.rejected == {}


@pytest.mark.parametrize("scale", [10.0, 100.0, 1000.0])
def test_abps_partners_reject_a_scaled_message(scale: float) -> None:
    """Partners fixed to ``PARTNERS``: center 1 sends ``scale`` times its parameters to 0 and 4 in
    round 1 (honest ratios to their own norms ~0.78 and ~0.96); both reject it, so round 1 has
    exactly 2 rejections and 0 and 4 observe 1 in 2 of the 3 rounds, while 1 observes them in all 3.
    The former default ratio 1e3 rejects none of the three attacks."""
    algo = _fixed_abps()
    fed = _fit(algo, _attack(scale))
    assert fed.wire.rejected == {ROUND: 2}
    count = algo.selector.posterior.count
    assert count[0, 1] == count[4, 1] == 2 and count[1, 0] == count[1, 4] == 3
    assert all(torch.isfinite(t).all() for t in fed.engine.get_params().values())
    assert _fit(_fixed_abps(), _attack(scale), max_norm_ratio=1e3).wire.rejected == {}


class _RatioWire(Wire):
    """Records every validated message's ratio to its reference."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ratios: list[Tensor] = []

    def accept(self, received: dict[str, Tensor], own: dict[str, Tensor] | None, round_idx: int) -> Tensor:
        self.ratios.append(self.norm_ratios(received, own))
        return super().accept(received, own, round_idx)


#: Shipped synthetic-data configs, and three graph methods whose shipped configs use Fashion-MNIST
#: (run here on the quickstart federation).
CONFIGS = ["fedavg", "fedavg_x", "fedprox", "feddyn", "moon", "bnn_fl", "abps", "abps_x", "decefl", "defta"]
CONFIGS += ["wpfed", *(f"quickstart --algorithm=lightning_fed.algorithms.{a}" for a in ("DisPFL", "FedSPD"))]
CONFIGS += ["quickstart --algorithm=lightning_fed.algorithms.DFedAvgM"]


@pytest.mark.parametrize("config", CONFIGS)
def test_no_honest_payload_is_rejected(config: str) -> None:
    """A clean 5-round run of the shipped config on a small default synthetic federation (20
    centers) rejects nothing, and every honest ratio is below half the default threshold."""
    from lightning_fed.cli import fit_parser

    name, *extra = config.split()
    parser = fit_parser()
    root = Path(__file__).resolve().parents[2]
    cfg = parser.parse_args(
        [
            "--config",
            str(root / "configs" / f"{name}.yaml"),
            *extra,
            "--data.init_args.num_centers=20",
            "--data.init_args.num_stays=5000",
            "--trainer.rounds=5",
        ]
    )
    cfg.callbacks = None
    init = parser.instantiate_classes(cfg)
    wire = _RatioWire(hook=init.wire.hook)
    fed = Federation(
        init.data.build(init.seed),
        init.model,
        init.algorithm,
        init.trainer,
        Fabric(accelerator="cpu", devices=1),
        seed=init.seed,
        wire=wire,
    )
    fed.fit()
    assert wire.rejected_total() == 0
    ratios = torch.cat(wire.ratios)
    assert ratios.numel() > 0 and float(ratios.max()) < MAX_NORM_RATIO / 2


def test_reference_by_hand_on_three_messages() -> None:
    """Norms over both tensors: sqrt(3^2 + 0^2) = 3, sqrt(3^2 + 4^2) = 5, sqrt(5^2 + 12^2) = 13.
    Server (own=None): reference median{3, 5, 13} = 5, ratios 0.6, 1.0, 2.6 -> ratio 2.5 rejects the
    third. Own norm 2 (one entry 2): ratios 1.5, 2.5, 6.5 -> the default 5 rejects the third. A NaN
    message leaves the median: median{3, 5} is the lower median, 3."""
    received = {"a": torch.tensor([[3.0], [3.0], [5.0]]), "b": torch.tensor([[0.0], [4.0], [12.0]])}
    wire = Wire(max_norm_ratio=2.5)
    norms, ref = wire.norms_and_reference(received, None)
    assert norms.tolist() == [3.0, 5.0, 13.0] and ref.tolist() == [5.0] * 3
    assert wire.norm_ratios(received, None).tolist() == pytest.approx([0.6, 1.0, 2.6])
    assert wire.accept(received, None, 0).tolist() == [True, True, False]
    own = {"a": torch.tensor([[2.0]]), "b": torch.tensor([[0.0]])}
    assert Wire().norm_ratios(received, own).tolist() == pytest.approx([1.5, 2.5, 6.5])
    assert Wire().accept(received, own, 0).tolist() == [True, True, False]
    received["b"][2] = float("nan")
    assert wire.norms_and_reference(received, None)[1].tolist() == [3.0] * 3
    assert wire.accept(received, None, 1).tolist() == [True, True, False]


def test_scale_corruption_multiplies_floating_tensors_only() -> None:
    """Center 1 with ``{scale: 100}``: its float rows are 100x, its boolean mask rows unchanged; a
    broadcast (leading dimension 1) is expanded to one message per edge first."""
    faults = FaultInjection(corrupt={0: {1: {"scale": 100}}})
    assert faults.corruptions(0) == {1: 100.0}
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    m = torch.tensor([[True, False], [False, True], [True, True]])
    out = faults.corrupt_payload({"w": w, "m": m}, torch.tensor([0, 1, 2]), 0)
    assert out["w"].tolist() == [[1.0, 2.0], [300.0, 400.0], [5.0, 6.0]] and torch.equal(out["m"], m)
    out = faults.corrupt_payload({"w": w[:1]}, torch.tensor([1, 2]), 0)
    assert out["w"].tolist() == [[100.0, 200.0], [1.0, 2.0]]
    assert faults.corrupt_payload({"w": w}, torch.tensor([0, 1, 2]), 1)["w"] is w


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ({"scale": float("inf")}, r"^faults\.corrupt\[4\]\[2\]\.scale must be finite"),
        ({"scale": "big"}, r"^faults\.corrupt\[4\]\[2\]\.scale must be a number, got 'big'$"),
        ({"scale": True}, r"^faults\.corrupt\[4\]\[2\]\.scale must be a number"),
        (
            {"factor": 2.0},
            r"^faults\.corrupt\[4\]\[2\] must be one of \[.*\] or \{scale: X\}, got \{'factor': 2\.0\}$",
        ),
        ("zero", r"^faults\.corrupt\[4\]\[2\] must be one of .* or \{scale: X\}, got 'zero'$"),
    ],
)
def test_scale_validation_names_the_field(kind: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FaultInjection(corrupt={4: {2: kind}})


@pytest.mark.parametrize("scale", [0, -1, -3.0])
def test_any_finite_scale_is_a_corruption(scale: float) -> None:
    """A sign flip (``-1``), a zero message (``0``) and any other finite scale can be configured
    (issue 32: they were refused as ``> 0``)."""
    assert FaultInjection(corrupt={4: {2: {"scale": scale}}}).corruptions(4) == {2: float(scale)}


@pytest.mark.cli
def test_cli_fit_with_a_scale_attack(tmp_path: Path) -> None:
    """``--faults='{corrupt: {1: {0: {scale: 100}}}}'`` from the command line: one rejected upload,
    and the dumped config (``scale: 100.0``) parses back for ``test``."""
    from lightning_fed.cli import main

    main(
        [
            "fit",
            "--data.class_path=lightning_fed.data.SyntheticICU",
            "--data.init_args.num_centers=8",
            "--data.init_args.num_stays=1200",
            "--model.init_args.hidden=[16, 8]",
            "--trainer.rounds=3",
            "--faults={corrupt: {1: {0: {scale: 100}}}}",
            "--logger.enabled=false",
            f"--output.root={tmp_path}",
            "--output.name=run",
            "--output.progress_bar=false",
        ]
    )
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["rejected_payloads"] == 1
    assert "scale: 100.0" in (tmp_path / "run" / "config.yaml").read_text()
    main(["test", "--run-dir", str(tmp_path / "run")])
