"""One check of the CUDA paths, side by side with the CPU, printed as one markdown table.

Every step runs once per device: ``cpu``, then ``cuda`` (when there is a GPU and ``--cpu-only`` is
not given). A device that is not used gets ``skipped: <reason>``; a step that raises gets
``FAILED: <one-line error>`` and the script goes on (exit code 1 when any cell failed).

1. ``tests/distributed/test_cuda.py`` with pytest in a subprocess (the cpu column hides the GPUs):
   passed / failed / skipped counts.
2. The packed engine against the sequential reference (float64, 2 rounds, the 24 uneven centers of
   ``tests/engine/test_equivalence.py``) on the device: max abs difference of the parameters
   (must be < 1e-10).
3. ``configs/fedavg.yaml`` and ``configs/abps_x.yaml`` (``--centers`` synthetic centers,
   ``--rounds`` rounds): seconds per round (median of rounds 2+) and mean test AUROC.
4. ``fabric.precision`` ``bf16-mixed`` against ``32-true`` on the FedAvg run: test AUROC of both,
   seconds per round, and the largest parameter difference (0 would mean bf16 was not applied).
5. ``configs/abps_x.yaml`` on 2 processes (``lightning-fed fit --fabric.strategy=ddp
   --fabric.devices=2``: gloo on CPU, NCCL on 2 GPUs; with one GPU the two processes are asked to
   share it, and Fabric's refusal is reported as ``unsupported``) against 1 process:
   ``rounds.parquet`` and ``summary.json`` bit for bit on CPU, within 1e-4 on GPUs.
6. EdgeDRM stage I (DFedAvgM) + stage II with a GroupNorm ResNet-18 (``--width``) on random
   CIFAR-shaped images (4 clients x 64 images, 3x32x32, 10 classes), settings of
   ``configs/edgedrm_bench/methods/edgedrm_gpu.yaml`` with 2 local steps per round: seconds per
   stage-I round, seconds of stage II, test accuracy (random labels: no signal to learn).

Run: ``python benchmarks/gpu_check.py [--cpu-only] [--rounds 3] [--centers 230] [--width 64]
[--out FILE]`` (sized for under 8 minutes on one GPU; ``--centers 12 --rounds 2 --width 8`` is the
smoke test of ``tests/distributed/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
import yaml
from torch import Tensor

from lightning_fed.callbacks import Callback
from lightning_fed.comm import Wire
from lightning_fed.data import ImageSource
from lightning_fed.data.center import FederatedData
from lightning_fed.engine import PackedEngine, SequentialEngine
from lightning_fed.federation import Federation
from lightning_fed.io import write_text
from lightning_fed.models import MortalityMLP

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
#: The uneven train sizes of tests/engine/test_equivalence.py (1 row up to 233 rows, batch 32).
SIZES = [1, 2, 3, 5, 8, 13, 16, 17, 21, 31, 32, 33, 34, 47, 55, 63, 64, 65, 89, 100, 128, 144, 150, 233]
#: Stays per center of the default synthetic federation (71,000 stays on 230 centers).
STAYS_PER_CENTER = 71000 / 230
#: Largest difference allowed between 1 and 2 GPU processes (cuBLAS may pick kernels by batch count).
GPU_DDP_TOLERANCE = 1e-4


@dataclass(frozen=True)
class Row:
    """One table row: a check and its result on each device."""

    step: str
    check: str
    cuda: str
    cpu: str
    note: str


@dataclass(frozen=True)
class Run:
    """What one federation run gives the table."""

    summary: dict[str, Any]
    round_seconds: list[float]
    finish_seconds: float
    params: dict[str, Tensor]

    @property
    def per_round(self) -> float:
        """Median seconds per round, the first (warm-up) round left out when there are more."""
        return statistics.median(self.round_seconds[1:] or self.round_seconds)


class RoundTimes(Callback):
    """Seconds of every round, and when the round loop ended (before the final stage)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.train_end = 0.0

    def on_round_end(self, federation: Any, result: Any) -> None:
        self.seconds.append(result.seconds)

    def on_train_end(self, federation: Any) -> None:
        self.train_end = time.perf_counter()


class RandomImages(ImageSource):
    """Uniform random RGB 32x32 images with balanced random labels, dealt like CIFAR-10 (5 shards per
    client, the client colour transforms, 70 / 30 split)."""

    channel_names = ("red", "green", "blue")
    mean = (0.5, 0.5, 0.5)
    std = (0.2887, 0.2887, 0.2887)  # uniform [0, 1]: 1 / sqrt(12)

    def __init__(self, num_clients: int, per_client: int, seed: int = 0) -> None:
        super().__init__(num_clients=num_clients, seed=seed)
        self.num_images = num_clients * per_client

    def pooled(self) -> tuple[np.ndarray, np.ndarray, int]:
        rng = np.random.default_rng(self.seed)
        images = rng.integers(0, 256, (self.num_images, 3, 32, 32), dtype=np.uint8)
        return images, rng.permutation(np.arange(self.num_images) % 10), 10


def run_federation(
    data: FederatedData,
    module: Any,
    algorithm: Any,
    trainer: Any,
    fabric: Any,
    seed: int,
    wire: Wire,
    callbacks: Sequence[Callback] = (),
) -> Run:
    """Fit one federation in this process.

    Args:
        data, module, algorithm, trainer, seed, wire: As :class:`~lightning_fed.federation.Federation`.
        fabric: A :class:`~lightning_fed.config.FabricConfig` (accelerator, precision).
        callbacks: Extra callbacks (a config's ``callbacks``, e.g. early stopping).
    """
    times = RoundTimes()
    federation = Federation(
        data, module, algorithm, trainer, fabric=fabric.fabric([times, *callbacks], []), seed=seed, wire=wire
    )
    summary = federation.fit()
    finish = time.perf_counter() - times.train_end
    params = {n: t.detach().cpu() for n, t in federation.engine.get_params().items()}
    return Run(summary, times.seconds, finish, params)


def size_overrides(args: argparse.Namespace) -> list[str]:
    """Config overrides for ``--centers`` synthetic centers and ``--rounds`` rounds."""
    stays = round(STAYS_PER_CENTER * args.centers)
    return [
        f"--data.init_args.num_centers={args.centers}",
        f"--data.init_args.num_stays={stays}",
        f"--trainer.rounds={args.rounds}",
    ]


_DATA: dict[str, FederatedData] = {}


def run_config(name: str, device: str, args: argparse.Namespace, *overrides: str) -> Run:
    """``configs/<name>`` resized by :func:`size_overrides`, on ``device``, in this process.

    The data of a data config is built once and shared by every run that uses it.
    """
    from lightning_fed.cli import fit_parser

    parser = fit_parser()
    argv = ["--config", str(CONFIGS / name), *size_overrides(args), f"--fabric.accelerator={device}"]
    cfg = parser.parse_args([*argv, *overrides])
    init = (getattr(parser, "instantiate", None) or parser.instantiate_classes)(cfg)
    key = f"{cfg.data} {init.seed}"
    if key not in _DATA:
        _DATA[key] = init.data.build(init.seed)
    wire = Wire(hook=init.wire.hook, faults=init.wire.faults)
    parts = (_DATA[key], init.model, init.algorithm, init.trainer, init.fabric, init.seed, wire)
    return run_federation(*parts, callbacks=init.callbacks or ())


def pytest_counts(device: str, args: argparse.Namespace) -> str:
    """Step 1: ``tests/distributed/test_cuda.py`` in a subprocess (GPUs hidden for the cpu column)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/distributed/test_cuda.py"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last)}
    cell = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("passed", "failed", "skipped"))
    if done.returncode != 0 or counts.get("failed") or counts.get("error") or counts.get("errors"):
        failing = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        raise AssertionError(f"{cell}: {(failing or [last])[0]}")
    return cell


def engine_equivalence(device: str, args: argparse.Namespace) -> str:
    """Step 2: packed == sequential in float64 on ``device`` (as tests/engine/test_equivalence.py)."""
    f64 = torch.float64
    gen = torch.Generator().manual_seed(0)
    train = [
        (torch.randn(n, 7, generator=gen, dtype=f64), (torch.rand(n, generator=gen) < 0.3).to(f64))
        for n in SIZES
    ]
    torch.manual_seed(1)
    module = MortalityMLP(in_features=7, hidden=(16, 8), dropout=0.0).to(f64)
    params = []
    for engine in (PackedEngine(), SequentialEngine()):
        engine.setup(module, train, batch_size=32, epochs=2, seed=5, device=device, dtype=f64)
        for r in range(2):
            engine.train_round(r)
        params.append(engine.get_params())
        assert all(p.device.type == device for p in params[-1].values()), "parameters left the device"
    diff = max(float((params[0][n] - params[1][n]).abs().max()) for n in params[0])
    if not diff < 1e-10:
        raise AssertionError(f"max abs diff {diff:.2e} >= 1e-10")
    return f"max abs diff {diff:.1e}"


def timed_config(name: str) -> Callable[[str, argparse.Namespace], str]:
    """Step 3: seconds per round and test AUROC of ``configs/<name>``."""

    def check(device: str, args: argparse.Namespace) -> str:
        run = run_config(name, device, args)
        return f"{run.per_round:.3f} s/round; AUROC {run.summary['test_auroc_mean']:.4f}"

    return check


def precision(device: str, args: argparse.Namespace) -> str:
    """Step 4: ``bf16-mixed`` against ``32-true`` on the FedAvg run."""
    full, mixed = (
        run_config("fedavg.yaml", device, args, f"--fabric.precision={p}") for p in ("32-true", "bf16-mixed")
    )
    moved = max(float((full.params[n] - mixed.params[n]).abs().max()) for n in full.params)
    if moved == 0.0:
        raise AssertionError("bf16-mixed gave the 32-true parameters exactly: the precision was not applied")
    auroc = [r.summary["test_auroc_mean"] for r in (full, mixed)]
    return (
        f"32-true AUROC {auroc[0]:.4f}, {full.per_round:.3f} s/round; bf16-mixed AUROC {auroc[1]:.4f}, "
        f"{mixed.per_round:.3f} s/round; diff {auroc[1] - auroc[0]:+.4f}; max param diff {moved:.1e}"
    )


def _error_line(text: str) -> str:
    """The last line of ``text`` that names an error (else its last line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if re.search(r"(error|exception)\b", line, re.IGNORECASE)]
    return (named or lines or ["no output"])[-1][:300]


def _cli_fit(argv: Sequence[str], env: dict[str, str]) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``lightning-fed fit`` in a subprocess; its rounds (timings left out) and summary."""
    import json

    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", *argv]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=500)
    if done.returncode != 0:
        raise RuntimeError(_error_line(done.stderr))
    run_dir = Path(next(a for a in argv if a.startswith("--output.root=")).split("=", 1)[1])
    run_dir = run_dir / next(a for a in argv if a.startswith("--output.name=")).split("=", 1)[1]
    frame = pl.read_parquet(run_dir / "rounds.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("wall_seconds", "run_dir"):
        summary.pop(key, None)
    return frame.drop(pl.selectors.starts_with("seconds_")), summary


def _max_difference(a: tuple[pl.DataFrame, dict[str, Any]], b: tuple[pl.DataFrame, dict[str, Any]]) -> float:
    """Largest absolute difference between two runs' rounds columns and summary values (NaN against
    NaN counts as equal; a difference in a non-numeric value or in the columns is infinite)."""
    (frame_a, summary_a), (frame_b, summary_b) = a, b
    if frame_a.columns != frame_b.columns or summary_a.keys() != summary_b.keys():
        return math.inf
    pairs = [(frame_a[n], frame_b[n]) for n in frame_a.columns]
    pairs += [(pl.Series([summary_a[k]]), pl.Series([summary_b[k]])) for k in summary_a]
    worst = 0.0
    for x, y in pairs:
        if not (x.dtype.is_numeric() and y.dtype.is_numeric()):
            worst = worst if x.equals(y) else math.inf
            continue
        x, y = x.cast(pl.Float64).to_numpy(), y.cast(pl.Float64).to_numpy()
        gap = np.where(np.isnan(x) & np.isnan(y), 0.0, np.abs(x - y))
        worst = max(worst, float(np.max(gap, initial=0.0)))
    return worst


def ddp_equality(device: str, args: argparse.Namespace) -> str:
    """Step 5: ABPS-X on 2 processes against 1 process, through the command line."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))  # the same threads in both runs
    for key in [k for k in env if k.startswith(("SLURM_", "TORCHELASTIC_"))] + ["LOCAL_RANK", "WORLD_SIZE"]:
        env.pop(key, None)
    with tempfile.TemporaryDirectory() as tmp:
        common = [
            "--config",
            str(CONFIGS / "abps_x.yaml"),
            *size_overrides(args),
            f"--fabric.accelerator={device}",
            "--logger.enabled=false",
            "--output.progress_bar=false",
            f"--output.root={tmp}",
        ]
        start = time.perf_counter()
        try:
            two = _cli_fit([*common, "--output.name=two", "--fabric.strategy=ddp", "--fabric.devices=2"], env)
        except RuntimeError as err:
            if device == "cuda" and torch.cuda.device_count() < 2:
                return f"unsupported (2 processes on 1 GPU): {err}"
            raise
        seconds = time.perf_counter() - start
        one = _cli_fit([*common, "--output.name=one"], env)
    where = "2 GPUs" if device == "cuda" else "2 processes, gloo"
    if one[0].equals(two[0]) and one[1] == two[1]:
        return f"bit-identical ({where}; {seconds:.0f} s)"
    diff = _max_difference(one, two)
    tolerance = GPU_DDP_TOLERANCE if device == "cuda" else 0.0
    if not diff <= tolerance:
        raise AssertionError(f"{where}: rounds / summary differ from 1 process by {diff:.2e} > {tolerance:g}")
    return f"max diff {diff:.1e} <= {tolerance:g} ({where}; {seconds:.0f} s)"


def edgedrm_resnet(device: str, args: argparse.Namespace) -> str:
    """Step 6: EdgeDRM stage I + II with ResNet18GN on random CIFAR-shaped images."""
    from lightning_fed.algorithms import EdgeDRM
    from lightning_fed.config import FabricConfig
    from lightning_fed.graphs import Cycle
    from lightning_fed.models import ResNet18GN
    from lightning_fed.types import TrainerConfig

    method = yaml.safe_load((CONFIGS / "edgedrm_bench" / "methods" / "edgedrm_gpu.yaml").read_text())
    settings = method["algorithm"]["init_args"]
    data = RandomImages(num_clients=4, per_client=64).build(0)
    model = ResNet18GN(num_classes=10, width=args.width, groups=math.gcd(args.width, 32))
    algorithm = EdgeDRM(topology=Cycle(), **settings)  # RR4 needs more than 4 clients
    trainer = TrainerConfig(rounds=args.rounds, local_steps=2, batch_size=method["trainer"]["batch_size"])
    run = run_federation(data, model, algorithm, trainer, FabricConfig(accelerator=device), 0, Wire())
    return (
        f"stage I {run.per_round:.2f} s/round; stage II {run.finish_seconds:.2f} s; "
        f"test acc {run.summary['test_accuracy_mean']:.3f}"
    )


#: (step, check, function, note): every check runs once per device.
CHECKS: list[tuple[str, str, Callable[[str, argparse.Namespace], str], str]] = [
    ("1", "pytest tests/distributed/test_cuda.py", pytest_counts, "cpu column: GPUs hidden"),
    ("2", "packed == sequential (float64)", engine_equivalence, "24 uneven centers, 2 rounds; < 1e-10"),
    ("3", "FedAvg (configs/fedavg.yaml)", timed_config("fedavg.yaml"), "median s/round of rounds 2+"),
    ("3", "ABPS-X (configs/abps_x.yaml)", timed_config("abps_x.yaml"), "median s/round of rounds 2+"),
    ("4", "bf16-mixed vs 32-true (FedAvg)", precision, "fabric.precision; test AUROC"),
    ("5", "DDP 2 processes == 1 (ABPS-X)", ddp_equality, "lightning-fed fit --fabric.strategy=ddp"),
    ("6", "EdgeDRM + ResNet18GN (random images)", edgedrm_resnet, "4 clients x 64 images, random labels"),
]


def run_check(fn: Callable[[str, argparse.Namespace], str], device: str, args: argparse.Namespace) -> str:
    """The check's result on ``device``, or ``FAILED: <one-line error>``."""
    start = time.perf_counter()
    try:
        cell = fn(device, args)
    except Exception as err:  # every failure becomes a row; the script goes on
        first = (str(err).strip().splitlines() or [""])[0]
        cell = f"FAILED: {type(err).__name__}: {first}"[:300]
    name = fn.__qualname__.split(".")[0]
    print(f"gpu_check: {name} on {device}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return cell


def markdown(rows: list[Row]) -> str:
    """The table as markdown."""
    lines = ["| step | check | cuda | cpu | notes |", "|---|---|---|---|---|"]
    for row in rows:
        cells = (row.step, row.check, row.cuda, row.cpu, row.note)
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run every check on every device; print (and with ``--out`` write) the table.

    Returns:
        0, or 1 when a check failed.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-only", action="store_true", help="run on the CPU only (cuda column skipped)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every federation run")
    parser.add_argument("--centers", type=int, default=230, help="synthetic centers of steps 3-5")
    parser.add_argument("--width", type=int, default=64, help="ResNet18GN stem width of step 6")
    parser.add_argument("--out", type=Path, default=None, help="also write the table (markdown) here")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    use_cuda = torch.cuda.is_available() and not args.cpu_only
    skipped = "skipped: --cpu-only" if args.cpu_only else "skipped: no CUDA device"
    gpus = f"{torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}, " if use_cuda else ""
    name = f"{gpus}cpu ({os.cpu_count()} cores)"
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    header = [
        "# benchmarks/gpu_check.py",
        "",
        f"torch {torch.__version__}; device: {name}; load average {load}; "
        f"rounds {args.rounds}, centers {args.centers}, ResNet width {args.width}",
    ]
    print("\n".join(header), flush=True)
    rows = []
    for step, check, fn, note in CHECKS:
        cpu = run_check(fn, "cpu", args)  # first: a broken CUDA context cannot spoil the cpu column
        rows.append(Row(step, check, run_check(fn, "cuda", args) if use_cuda else skipped, cpu, note))
    footer = f"wall time {time.perf_counter() - start:.0f} s"
    table = markdown(rows)
    print(f"\n{table}\n{footer}")
    if args.out is not None:
        write_text(args.out, "\n".join(header) + f"\n\n{table}\n{footer}\n")
    return 1 if any(c.startswith("FAILED") for r in rows for c in (r.cuda, r.cpu)) else 0


if __name__ == "__main__":
    sys.exit(main())
