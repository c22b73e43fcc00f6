"""``fabric.precision`` is the one source of truth for parameter and compute dtype (decision 11).

For every accepted value a tiny federation trains one round on each engine, and the parameters,
the optimizer states and the forward passes of local training are checked against
:data:`lightning_fed.precision.POLICIES`; the refused values fail before any work with one line
naming ``fabric.precision``.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch
from lightning.fabric import Fabric
from torch import Tensor

from lightning_fed.algorithms import FedAvg, FedProx
from lightning_fed.cli import fit_parser, main
from lightning_fed.config import FabricConfig
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.models import MortalityMLP
from lightning_fed.precision import PRECISIONS, REFUSED, policy, policy_of
from lightning_fed.runfolder.state import read_checkpoint
from lightning_fed.types import TrainerConfig
from tests.conftest import make_federation

#: What each accepted value must apply: (parameter dtype, autocast dtype or None).
EXPECTED: dict[str, tuple[torch.dtype, torch.dtype | None]] = {
    "32-true": (torch.float32, None),
    "32": (torch.float32, None),
    "64-true": (torch.float64, None),
    "64": (torch.float64, None),
    "bf16-mixed": (torch.float32, torch.bfloat16),
    "bf16-true": (torch.bfloat16, None),
}

SIZES = [40, 7, 70, 3, 25]


class RecordingMLP(MortalityMLP):
    """The MLP, recording every training forward: which path, autocast state, input and logit dtype.

    ``seen`` is a class attribute so that the sequential engine's per-center copies share it.
    """

    seen: ClassVar[list[dict[str, Any]]] = []

    def _record(self, path: str, x: Tensor, logits: Tensor) -> None:
        if self.training:
            enabled = torch.is_autocast_enabled(x.device.type)
            RecordingMLP.seen.append(
                {
                    "path": path,
                    "autocast": torch.get_autocast_dtype(x.device.type) if enabled else None,
                    "input": x.dtype,
                    "logits": logits.dtype,
                }
            )

    def forward_features(self, x: Tensor) -> tuple[Tensor, Tensor]:
        logits, h = super().forward_features(x)
        self._record("forward", x, logits)
        return logits, h

    def packed_forward_features(
        self, params: dict[str, Tensor], x: Tensor, generator: Any
    ) -> tuple[Tensor, Tensor]:
        logits, h = super().packed_forward_features(params, x, generator)
        self._record("packed_forward", x, logits)
        return logits, h

    def packed_loss_grad(
        self,
        params: dict[str, Tensor],
        x: Tensor,
        y: Tensor,
        mask: Tensor,
        generator: Any,
        grads: dict[str, Tensor],
    ) -> Tensor:
        loss = super().packed_loss_grad(params, x, y, mask, generator, grads)
        self._record("packed_loss_grad", x, params["layers.0.weight"])
        return loss


@pytest.fixture(autouse=True)
def _fresh_records() -> None:
    RecordingMLP.seen = []


def _federation(
    precision: str,
    engine: Any,
    algorithm: Any = None,
    dropout: float = 0.2,
    rounds: int = 1,
    callbacks: list[Any] | None = None,
) -> Federation:
    """A 5-center federation whose Fabric comes from ``FabricConfig`` (what the CLI builds)."""
    fabric = FabricConfig(accelerator="cpu", devices=1, precision=precision).fabric(callbacks or [], [])
    return Federation(
        make_federation(SIZES),
        RecordingMLP(hidden=(8, 4), dropout=dropout),
        algorithm or FedAvg(),
        TrainerConfig(rounds=rounds, batch_size=16, engine=engine),
        fabric=fabric,
        seed=3,
    )


def _optimizer_state_dtypes(engine: Any) -> set[torch.dtype]:
    if isinstance(engine, PackedEngine):
        return {t.dtype for n, t in engine.opt_state.items() if n != "step"}
    return {
        v.dtype
        for opt in engine.optimizers
        for state in opt.state.values()
        for k, v in state.items()
        if k != "step"
    }


@pytest.mark.parametrize("engine", ["packed", "sequential"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_accepted_precision_sets_parameter_dtype_and_autocast(precision: str, engine: str) -> None:
    """One round per value and engine: parameters, Adam moments, features and evaluation inputs in
    the value's parameter dtype; the training forward autocast exactly when the value says so."""
    param_dtype, autocast = EXPECTED[precision]
    fed = _federation(precision, PackedEngine() if engine == "packed" else SequentialEngine())
    assert fed.dtype == param_dtype and fed.mixed_precision == (autocast is not None)
    assert {p.dtype for p in fed.module.parameters()} == {param_dtype}
    fed.fit()
    assert {p.dtype for p in fed.engine.get_params().values()} == {param_dtype}
    assert {p.dtype for p in fed.center_params().values()} == {param_dtype}
    assert _optimizer_state_dtypes(fed.engine) == {param_dtype}
    assert fed.val.x.dtype == param_dtype and fed.test.x.dtype == param_dtype
    seen = RecordingMLP.seen
    assert seen, "no training forward was recorded"
    assert {s["autocast"] for s in seen} == {autocast}
    assert {s["input"] for s in seen} == {param_dtype}
    if autocast is not None:  # the forward computed in the autocast dtype
        assert {s["logits"] for s in seen} == {autocast}
    else:
        assert {s["logits"] for s in seen} == {param_dtype}
    if engine == "packed":  # autocast takes the autograd path; without it the MLP's fast path
        assert {s["path"] for s in seen} == {"packed_forward" if autocast else "packed_loss_grad"}


def test_64_true_trains_float64_where_trainer_dtype_used_to_decide() -> None:
    """The issue's case: ``64-true`` used to train float32 (``Federation.dtype`` came from
    ``trainer.dtype``); ``trainer`` no longer has a dtype to disagree with."""
    fed = _federation("64-true", PackedEngine())
    fed.fit()
    assert all(p.dtype == torch.float64 for p in fed.engine.get_params().values())
    assert "dtype" not in inspect.signature(TrainerConfig).parameters
    with pytest.raises(TypeError):
        TrainerConfig(dtype="float64")  # type: ignore[call-arg]


@pytest.mark.parametrize("algorithm", [FedAvg, lambda: FedProx(mu=0.5)], ids=["fast_path", "autograd"])
def test_packed_matches_sequential_in_float64_through_fabric_precision(algorithm: Any) -> None:
    """64-true from Fabric alone: the packed engine (hand-derived gradients, or autograd with a
    local term) equals the sequential reference to float64 rounding."""
    feds = [_federation("64-true", e, algorithm(), dropout=0.0) for e in (PackedEngine(), SequentialEngine())]
    for fed in feds:
        fed.fit()
    a, b = (fed.engine.get_params() for fed in feds)
    assert all(a[n].dtype == torch.float64 for n in a)
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-10


def test_bf16_true_trains_and_its_loss_falls() -> None:
    """bf16 parameters and Adam moments (functional Adam in the packed engine) train: the loss
    of 4 rounds falls and no center diverges."""
    losses: list[float] = []
    record = SimpleNamespace(
        on_round_end=lambda fed, result: losses.append(float(result.train_loss.nanmean()))
    )
    fed = _federation("bf16-true", PackedEngine(), dropout=0.0, rounds=4, callbacks=[record])
    summary = fed.fit()
    assert losses[-1] < losses[0] and summary["diverged_center_rounds"] == 0


@pytest.mark.parametrize("value", sorted(REFUSED))
def test_refused_precisions_fail_in_one_line_naming_the_key(value: str) -> None:
    with pytest.raises(ValueError, match=rf"^fabric\.precision='{value}' is not supported: .*bf16") as err:
        policy(value)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"fabric\.precision"):
        FabricConfig(accelerator="cpu", precision=value)


def test_unknown_precision_lists_the_accepted_values() -> None:
    with pytest.raises(ValueError, match=r"^fabric\.precision must be one of \['32-true'.*got 'fp8'$"):
        FabricConfig(precision="fp8")


def test_federation_refuses_a_fabric_precision_it_cannot_apply_before_any_work() -> None:
    """A Fabric built by hand with float16 (on a GPU Fabric keeps ``16-mixed``; on CPU it turns it
    into bf16-mixed itself) is refused before the data, model or algorithm is touched."""
    module = MortalityMLP(hidden=(4,))
    algorithm = FedAvg()
    prepared = []
    algorithm.prepare = lambda data: prepared.append(data) or data  # type: ignore[method-assign]

    def plugin(name: str) -> SimpleNamespace:  # what Federation reads of a Fabric first
        return SimpleNamespace(
            world_size=1, strategy=SimpleNamespace(precision=SimpleNamespace(precision=name))
        )

    for fabric in (
        Fabric(accelerator="cpu", devices=1, precision="16-true"),
        plugin("16-mixed"),
        plugin("nf4"),
    ):
        with pytest.raises(ValueError, match=r"fabric\.precision"):
            Federation(make_federation([20, 30]), module, algorithm, fabric=fabric)  # type: ignore[arg-type]
    assert not prepared and module.in_features is None


def test_policy_reads_what_fabric_applies() -> None:
    """Fabric normalizes its aliases into the precision plugin; the policy follows the plugin."""
    for value, name in (("64", "64-true"), ("32", "32-true"), ("bf16-true", "bf16-true")):
        assert policy_of(Fabric(accelerator="cpu", devices=1, precision=value)).name == name
    assert policy_of(Fabric(accelerator="cpu", devices=1)).name == "32-true"


def test_fit_help_lists_the_accepted_precisions() -> None:
    assert "{32-true,32,64-true,64,bf16-mixed,bf16-true}" in fit_parser().format_help()


TINY = [
    "--data.class_path=lightning_fed.data.SyntheticICU",
    "--data.init_args.num_centers=4",
    "--data.init_args.num_stays=400",
    "--model.init_args.hidden=[8]",
    "--trainer.rounds=1",
    "--logger.enabled=false",
    "--output.progress_bar=false",
    "--fabric.accelerator=cpu",
]


@pytest.mark.cli
def test_cli_64_true_checkpoints_float64_parameters(tmp_path: Path) -> None:
    main(["fit", *TINY, f"--output.root={tmp_path}", "--output.name=run", "--fabric.precision=64-true"])
    state = read_checkpoint(tmp_path / "run" / "checkpoint.pt")
    params = state["federation"]["engine"]["params"]
    assert {t.dtype for t in params.values()} == {torch.float64}


@pytest.mark.cli
@pytest.mark.parametrize("value", ["16-mixed", "16-true"])
def test_cli_refuses_float16_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture, value: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fit", *TINY, f"--output.root={tmp_path}", f"--fabric.precision={value}"])
    assert exc.value.code != 0
    assert "fabric.precision" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
