"""Seconds per round of local training at 230 centers, against the machine's FLOP floor.

Measured side by side in one run on the default synthetic ICU federation (230 centers, ~57k
training rows, MortalityMLP 60 -> 128 -> 64 -> 1, Adam, batch 128, 2 local epochs):

* packed      ``PackedEngine.train_round`` (all centers at once, prefix schedule);
* sequential  ``SequentialEngine.train_round`` (a loop over centers with torch.optim.Adam);
* trainer     one ``lightning.pytorch.Trainer.fit`` per center per round (what most Lightning
              integrations do), timed over every center for one round;
* user        ``PackedEngine.train_round`` of a user's own LightningModule of the same widths with
              LayerNorm (``benchmarks/user_model.py``), through the generic path: its
              ``training_step`` under ``torch.vmap(functional_call)`` (issue 28 target: <= 1.5x the
              built-in packed round).

Packed and sequential rounds alternate (round r of one, then of the other), so a change in machine
load hits both alike; each is the median of ``--rounds`` rounds after one warm-up round. The
Trainer round is compared with the mean of a packed round just before and one just after it. Every
measurement prints the load average next to it (1, 5 and 15 minutes) and both wall and process CPU
seconds: on a loaded machine wall seconds drift and only ratios measured side by side hold.

**The FLOP floor.** A linear layer ``z = a W^T + b`` with ``W`` of ``out x in`` costs per row
``2 in out`` FLOP forward (a multiply and an add per weight), ``2 in out`` for the weight gradient
``dW = dz^T a`` and ``2 in out`` for the input gradient ``da = dz W``. With ``P`` the number of
weights in matmuls (``sum in * out``; biases, activations and the loss are elementwise) one training
row costs ``6 P`` FLOP, and a round ``6 P R`` with ``R = sum_c epochs * n_c`` the rows that every
center's local epochs visit (only real rows: the engine's padding of short batches is overhead it
pays, not work the problem needs). For the MortalityMLP ``P = 60*128 + 128*64 + 64*1 = 15,936`` and
``R = 2 * 56,800``, so one round is ``1.09e10`` FLOP. (The first layer needs no input gradient, so the
strict minimum is ``(6 P - 2 * 60 * 128) R = 9.1e9``; the ``6 P R`` convention is printed as the floor,
the strict count next to it.) Adam adds ~15 elementwise FLOP per parameter and step (per round
``sum_c steps_c = 1,140`` steps of 16,129 parameters, ~2.8e8 FLOP, 3 % of the matmuls), memory-bound
rather than FLOP-bound, so it is left out of the floor.

The floor is that FLOP count at the machine's matmul throughput, measured in the same run two ways,
again in every timed round just before the engines' rounds (the printed multiple is the median
over rounds of a round's seconds over its own floor, so slow changes of load cancel):

* ``bmm``    batched products of the engine's own shapes (230 centers x 128 rows, each layer's
             forward, weight-gradient and input-gradient product, contiguous, FLOP-weighted as in a
             round): what these small matrices reach on this machine; the primary floor;
* ``sgemm``  one large square product (2048^3): the machine's peak, a stricter reference.

``--phases`` then splits the packed round into its parts, timed in further rounds with a timer
around each part (so the split never touches the rounds above): the round's batch rows, the
snapshot a diverged center returns to, the dropout words (one ``randint`` per center and step from
its own generator), gathering the batches, the loss and hand-derived gradients (the matmuls, the
ReLU/dropout gates and the elementwise backward; its ``bmm``/``baddbmm`` calls are shown apart), the
optimizer step and the divergence check; the rest is the loop itself. Each part is printed as a
share of the round and as a multiple of the floor, so what stands between the round and its floor
is read off directly.

Run: ``python benchmarks/engine.py [--rounds 5] [--threads 2] [--no-trainer] [--full-run] [--phases]``.
``--full-run`` also times the whole 50-round 230-center FedAvg run (training, aggregation and
evaluation) through ``Federation.fit``. Targets on 2 CPU cores (2 threads): packed <= 2x the bmm FLOP
floor, >= 5x sequential, >= 20x Trainer-per-center; full run < 90 s.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

# Measure the checkout this file is in, whatever an editable install elsewhere points at (appended:
# found before the editable finder, after any PYTHONPATH entry, e.g. another version to compare).
sys.path.append(str(Path(__file__).resolve().parents[1]))


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall and process CPU seconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def matmul_probes(
    widths: list[int], centers: int, batch: int, side: int = 2048
) -> dict[str, tuple[Callable[[], None], float]]:
    """Matmul workloads to time, with their FLOP: ``{"bmm": (fn, flop), "sgemm": (fn, flop)}``.

    ``bmm`` runs the batched products of one training step of the engine's shapes (each layer's
    forward, weight-gradient and input-gradient product of ``centers`` models x ``batch`` rows,
    contiguous); ``sgemm`` one ``side x side`` square product.

    Args:
        widths: Layer widths, input first (``[60, 128, 64, 1]`` for the MortalityMLP).
        centers: Stacked models per product (the engine's ``k`` at its first steps).
        batch: Rows per model (the batch size).
        side: Size of the square sgemm.
    """
    gen = torch.Generator().manual_seed(0)
    shapes = []  # (m, k, n): out [centers, m, n] = a [centers, m, k] @ b [centers, k, n]
    for i, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
        shapes.append((batch, n_in, n_out))  # forward
        shapes.append((n_out, batch, n_in))  # weight gradient
        if i > 0:
            shapes.append((batch, n_out, n_in))  # input gradient
    ops = [
        (
            torch.randn(centers, m, k, generator=gen),
            torch.randn(centers, k, n, generator=gen),
            torch.empty(centers, m, n),
        )
        for m, k, n in shapes
    ]
    x, y = torch.randn(side, side, generator=gen), torch.randn(side, side, generator=gen)
    z = torch.empty(side, side)

    def batched() -> None:
        for a, b, out in ops:
            torch.bmm(a, b, out=out)

    def square() -> None:
        torch.mm(x, y, out=z)

    batched(), square()  # warm-up
    return {
        "bmm": (batched, sum(2.0 * centers * m * k * n for m, k, n in shapes)),
        "sgemm": (square, 2.0 * side**3),
    }


def matmul_throughput(
    widths: list[int], centers: int, batch: int, repeats: int = 5, side: int = 2048
) -> dict[str, float]:
    """GFLOP/s of :func:`matmul_probes` (median of ``repeats``).

    ``bmm`` and ``sgemm`` are per wall second; ``bmm_cpu`` per process CPU second (which, with one
    thread, holds on a loaded machine where wall seconds stretch).
    """
    probes = matmul_probes(widths, centers, batch, side)
    times = {name: [_timed(fn) for _ in range(repeats)] for name, (fn, _) in probes.items()}
    wall = {name: _median([w for w, _ in t]) for name, t in times.items()}
    return {
        "bmm": probes["bmm"][1] / wall["bmm"] / 1e9,
        "sgemm": probes["sgemm"][1] / wall["sgemm"] / 1e9,
        "bmm_cpu": probes["bmm"][1] / _median([c for _, c in times["bmm"]]) / 1e9,
    }


def _median(values: list[float]) -> float:
    """Median, at least the clock's resolution (tiny workloads may time as 0 s)."""
    return max(statistics.median(values), 1e-9)


def round_flop(widths: list[int], rows: int) -> tuple[float, float]:
    """FLOP of one round, ``6 P R`` and the strict count without the first layer's input gradient."""
    weights = [a * b for a, b in itertools.pairwise(widths)]
    params = sum(weights)
    return 6.0 * params * rows, (6.0 * params - 2.0 * weights[0]) * rows


def _time_rounds(
    probes: dict[str, tuple[Callable[[], None], float]], engines: dict[str, object], rounds: int
) -> dict[str, list[tuple[float, float]]]:
    """Wall and CPU seconds of each probe and each engine's round, round by round.

    In every round the matmul probes run first (best of 3), then each engine's round, so that the
    floor of a round is measured within a second of the engines it is compared with.
    """
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in [*probes, *engines]}
    for r in range(1, rounds + 1):
        for name, (fn, _) in probes.items():
            times[name].append(min((_timed(fn) for _ in range(3)), key=lambda t: t[0]))
        for name, engine in engines.items():
            times[name].append(_timed(lambda engine=engine, r=r: engine.train_round(r)))
    return times


def _streams(engine: object) -> type:
    """The class whose ``prefetch`` draws a round's dropout words (the engine's module's)."""
    return sys.modules[type(engine).__module__].CenterStreams


#: The packed round's parts timed by ``--phases``: ``(label, owner of the method given the engine,
#: method)``. A label may name several methods (``matmuls``: the batched products inside ``loss +
#: gradients``); the table lists the labels in this order.
PHASES: tuple[tuple[str, Callable[[object], object], str], ...] = (
    ("batch rows", lambda engine: engine, "_round_rows"),
    ("snapshot", lambda engine: engine, "_snapshot"),
    ("dropout words", _streams, "prefetch"),
    ("gather batches", lambda engine: engine, "_gather"),
    ("loss + gradients", lambda engine: engine.module, "packed_loss_grad"),
    ("matmuls", lambda engine: torch, "bmm"),
    ("matmuls", lambda engine: torch, "baddbmm"),
    ("optimizer step", lambda engine: engine.optimizer, "step"),
    ("divergence check", lambda engine: engine, "_contain"),
)


def phase_split(engine, rounds: int, first_round: int) -> dict[str, float]:
    """Median seconds of each part of ``engine``'s round (:data:`PHASES`) and ``"round"`` itself.

    Each part's method is wrapped by a timer for these rounds only: set on its owner (an instance
    attribute over the class's method, or over the function of a class or module) and removed or
    put back after.
    """
    spent: dict[str, float] = {}
    patched: list[tuple[object, str, object | None]] = []

    def timer(label: str, fn: Callable[..., object]) -> Callable[..., object]:
        def timed(*args: object, **kwargs: object) -> object:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0

        return timed

    for label, owner, name in PHASES:
        obj = owner(engine)
        patched.append((obj, name, vars(obj).get(name)))  # None: the method is the class's
        setattr(obj, name, timer(label, getattr(obj, name)))
    per_round: list[dict[str, float]] = []
    try:
        for r in range(first_round, first_round + rounds):
            spent.clear()
            wall, _ = _timed(lambda r=r: engine.train_round(r))
            per_round.append({**spent, "round": wall})
    finally:
        for obj, name, original in reversed(patched):
            if original is None:
                delattr(obj, name)  # the instance attribute: the class's method shows again
            else:
                setattr(obj, name, original)
    labels = [*dict.fromkeys(label for label, _, _ in PHASES), "round"]
    return {label: statistics.median(r.get(label, 0.0) for r in per_round) for label in labels}


def _print_phases(parts: dict[str, float], floor: float, rounds: int) -> None:
    """The table of :func:`phase_split`: seconds, share of the round and multiple of the floor."""
    print(f"packed round by part (median of {rounds} rounds; bmm floor {floor:.3f} s) [{_load()}]")
    rest = parts["round"] - sum(v for k, v in parts.items() if k not in ("round", "matmuls"))
    rows = [(k, v) for k, v in parts.items() if k != "round"] + [("loop and the rest", rest)]
    for label, seconds in [*rows, ("round", parts["round"])]:
        name = "  of which matmuls" if label == "matmuls" else label
        print(f"  {name:<20} {seconds:7.3f} s {seconds / parts['round']:6.1%} {seconds / floor:6.2f}x floor")


def _time_trainer_per_center(module, train) -> tuple[float, float]:
    """Wall and CPU seconds of one ``Trainer.fit`` (2 epochs) per center, model copies excluded."""
    import copy

    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    models = [copy.deepcopy(module) for _ in train]

    def fit_all() -> None:
        for model, (x, y) in zip(models, train, strict=True):
            trainer = pl.Trainer(
                max_epochs=2,
                accelerator="cpu",
                devices=1,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
            )
            trainer.fit(model, DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True))

    return _timed(fit_all)


def _full_run() -> float:
    from lightning.fabric import Fabric

    from lightning_fed.algorithms import FedAvg
    from lightning_fed.data import SyntheticICU
    from lightning_fed.federation import Federation
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig

    start = time.perf_counter()
    data = SyntheticICU().build(0)
    fed = Federation(
        data, MortalityMLP(), FedAvg(), TrainerConfig(rounds=50), Fabric(accelerator="cpu", devices=1)
    )
    summary = fed.fit()
    seconds = time.perf_counter() - start
    auroc = summary["test_auroc_mean"]
    print(f"full run: 50 rounds x 230 centers FedAvg in {seconds:.1f} s (test AUROC {auroc:.4f}) [{_load()}]")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per engine (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--no-trainer", action="store_true", help="skip the Trainer-per-center timing")
    parser.add_argument("--full-run", action="store_true", help="also time the full 50-round FedAvg run")
    parser.add_argument("--phases", action="store_true", help="split the packed round into its parts")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    import lightning_fed
    from lightning_fed.data import SyntheticICU
    from lightning_fed.engine import PackedEngine, SequentialEngine
    from lightning_fed.models import MortalityMLP

    data = SyntheticICU().build(0)
    train = [(c.x_train, c.y_train) for c in data.centers]
    torch.manual_seed(0)
    module = MortalityMLP(in_features=data.num_features)
    widths = [data.num_features, *module.hidden, 1]
    rows = 2 * sum(len(y) for _, y in train)
    padded = 2 * sum(-(-len(y) // 128) * 128 for _, y in train)
    print(
        f"{data.num_centers} centers, {rows // 2} training rows, torch {torch.__version__}, "
        f"lightning_fed from {Path(lightning_fed.__file__).parent}, "
        f"{torch.get_num_threads()} threads, median of {args.rounds} rounds [{_load()}]"
    )

    flop, strict = round_flop(widths, rows)
    print(
        f"round FLOP  6 P R = {flop:.3g} (strict {strict:.3g}; the engine multiplies "
        f"{padded / rows:.2f}x the rows, padding short batches)"
    )
    probes = matmul_probes(widths, data.num_centers, 128)
    from lightning_fed.models.adapter import LightningAdapter

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from user_model import LayerNormMLP

    engines = {"packed": PackedEngine(), "sequential": SequentialEngine(), "user": PackedEngine()}
    user = LightningAdapter(LayerNormMLP(in_features=data.num_features))
    for name, engine in engines.items():
        engine.setup(user if name == "user" else module, train, batch_size=128, epochs=2, seed=0)
        engine.train_round(0)  # warm-up (allocations, first-call overheads)
    times = _time_rounds(probes, engines, args.rounds)

    def med(name: str, cpu: bool = False) -> float:
        return _median([t[cpu] for t in times[name]])

    def gflops(name: str, cpu: bool = False) -> float:
        return probes[name][1] / med(name, cpu) / 1e9

    def floor_multiple(name: str, probe: str, cpu: bool = False) -> float:
        """Median over rounds of the engine's seconds over that round's floor."""
        return statistics.median(
            e[cpu] * probes[probe][1] / (max(p[cpu], 1e-9) * flop)
            for e, p in zip(times[name], times[probe], strict=True)
        )

    print(
        f"matmul      bmm of the engine's shapes {gflops('bmm'):.1f} GFLOP/s "
        f"(CPU {gflops('bmm', True):.1f}), sgemm 2048^3 {gflops('sgemm'):.1f} GFLOP/s [{_load()}]"
    )
    print(
        f"FLOP floor  {flop / gflops('bmm') / 1e9:.3f} s at bmm throughput, "
        f"{flop / gflops('sgemm') / 1e9:.3f} s at sgemm peak"
    )
    packed, sequential = med("packed"), med("sequential")
    print(f"packed      {packed:8.3f} s/round (CPU {med('packed', True):.3f} s) [{_load()}]")
    print(f"sequential  {sequential:8.3f} s/round (CPU {med('sequential', True):.3f} s) [{_load()}]")
    print(
        f"packed = {floor_multiple('packed', 'bmm'):.2f}x the bmm FLOP floor (target <= 2x), "
        f"{floor_multiple('packed', 'sgemm'):.2f}x the sgemm floor; in CPU seconds "
        f"{floor_multiple('packed', 'bmm', True):.2f}x the bmm floor (median over rounds of each "
        f"round's seconds over the floor measured just before it)"
    )
    ratio = statistics.median(s[0] / p[0] for s, p in zip(times["sequential"], times["packed"], strict=True))
    ratio_cpu = statistics.median(
        s[1] / p[1] for s, p in zip(times["sequential"], times["packed"], strict=True)
    )
    print(f"ratio sequential / packed = {ratio:.1f}x (target >= 5x; in CPU seconds {ratio_cpu:.1f}x)")
    user_ratio = statistics.median(u[0] / p[0] for u, p in zip(times["user"], times["packed"], strict=True))
    print(
        f"user        {med('user'):8.3f} s/round (CPU {med('user', True):.3f} s; LayerNorm MLP, "
        f"{engines['user'].training_path}, {engines['user'].training_step_calls} training_step calls "
        f"per round) [{_load()}]"
    )
    user_ratio_cpu = statistics.median(
        u[1] / p[1] for u, p in zip(times["user"], times["packed"], strict=True)
    )
    print(
        f"ratio user / packed       = {user_ratio:.2f}x "
        f"(target <= 1.5x; in CPU seconds {user_ratio_cpu:.2f}x)"
    )
    if not args.no_trainer:
        # One packed round just before and one just after, so the ratio is taken side by side.
        around = [_timed(lambda: engines["packed"].train_round(args.rounds + 1))]
        trainer, trainer_cpu = _time_trainer_per_center(module, train)
        around.append(_timed(lambda: engines["packed"].train_round(args.rounds + 2)))
        print(
            f"trainer     {trainer:8.3f} s/round (CPU {trainer_cpu:.3f} s; one Trainer.fit per center; "
            f"packed rounds around it {around[0][0]:.3f} s, {around[1][0]:.3f} s) [{_load()}]"
        )
        wall, cpu = (statistics.mean(t[i] for t in around) for i in (0, 1))
        print(
            f"ratio trainer / packed    = {trainer / wall:.1f}x (target >= 20x; "
            f"in CPU seconds {trainer_cpu / cpu:.1f}x)"
        )
    if args.phases:
        parts = phase_split(engines["packed"], args.rounds, first_round=args.rounds + 3)
        _print_phases(parts, flop / gflops("bmm") / 1e9, args.rounds)
    if args.full_run:
        _full_run()


if __name__ == "__main__":
    main()
