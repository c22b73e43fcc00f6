r"""FedAvg through Flower's simulation runtime and through lightning-fed, side by side on one federation.

Both frameworks train the same federation (default: the built-in synthetic ICU federation,
:class:`~lightning_fed.data.TeacherICU`, 230 centers, 71,000 stays) with FedAvg over every center,
the same model (:class:`~lightning_fed.models.MortalityMLP` 60-128-64-1, ReLU, dropout 0.2), the same
optimizer (``MortalityMLP.configure_optimizers``: Adam, lr 1e-3, weight decay 1e-5, each center keeping
its Adam moments across rounds), the same batches (128 rows, 2 local epochs) and the same seeds, in
one run of this script, each framework in its own child process (one after the other, so neither
competes with the other):

* lightning-fed  ``Federation.fit`` with its default packed engine;
* Flower         flwr 1.42 ``run_simulation`` with a ``ServerApp`` running
                 ``flwr.serverapp.strategy.FedAvg`` over all clients (``fraction_train = 1``, federated
                 evaluation on all clients every round) and a ``ClientApp`` per center on the Ray
                 backend, ``client_resources = {num_cpus: 1}`` and Ray started with ``--actors`` CPUs
                 (default 2), so two clients run at a time on a 2-core machine. The worker starts
                 Ray itself with the arguments Flower's Ray backend passes (so it can retry when Ray
                 fails to come up on a busy machine), at the same scheduling priority as
                 lightning-fed's process (``RAY_worker_niceness=0``: Ray renices its workers by +15
                 otherwise).

What is identical, and how
    * Initial model: the Flower side initializes a ``MortalityMLP`` exactly as ``Federation`` does
      (``torch.manual_seed(derive_seed(seed, "init"))``, then every layer's ``reset_parameters``);
      the two initial models are compared bit for bit.
    * Batches: a Flower client for center ``c`` in round ``r`` trains on
      :func:`~lightning_fed.engine.schedule.center_batches` ``(n_c, 128, 2, seed, r, c)``, the index
      lists lightning-fed's engines consume (a permutation per epoch from the generator
      ``(seed, "batches", r, c)``, the last batch short).
    * Dropout masks: lightning-fed draws inverted-dropout masks with
      :func:`~lightning_fed.models.mlp.dropout_mask` from one stream per center,
      ``(seed, "dropout", r, c)``, for a whole padded batch of 128 rows per step and hidden layer.
      The client draws from that same stream with that same function, 128 rows per step and layer,
      and keeps the rows of its real batch, so the masks are identical and dropout need not be
      disabled for the check (``torch.nn.functional.dropout`` could not match: it draws
      ``bernoulli_`` from the global generator). This is the client's one line a stock PyTorch loop
      would not have; it is ~7x cheaper than ``bernoulli_`` (see ``dropout_mask``), so if anything
      it favours Flower.
    * Optimizer state: each Flower client keeps its Adam state across rounds in its ``Context.state``
      (what lightning-fed's engines do per center); the client's loop is otherwise plain PyTorch:
      ``nn.Linear`` layers, autograd, ``torch.optim.Adam``.
    * Aggregation weights: ``num-examples`` = the center's training rows, lightning-fed's
      ``n_j / sum_k n_k``.
    * Per round, both train every center, average, then compute every center's validation and test
      AUROC of the new model (:func:`~lightning_fed.metrics.batched_auroc`).

What is not identical: float32 rounding, and the tolerance of the round-1 check
    lightning-fed's packed engine computes each layer with ``baddbmm``, hand-derived gradients and a
    stacked Adam; the client uses ``addmm`` (``nn.Linear``), autograd and ``torch.optim.Adam``
    (``addcdiv``). Each op may round differently in its last bit (unit roundoff ``u = 2^-24``), and
    Flower's server sums in float32 in reply order while lightning-fed sums in float64. So the check
    is not bit equality but two bounds, both checked after round 1:

    1. Local models (every center's model after its round-1 training, before averaging)::

           max_j |theta_j^Flower - theta_j^lf| < lr / 10 = 1e-4   (a tenth of one Adam step)

       Adam's step ``lr m_hat / (sqrt(v_hat) + eps)`` does not depend on the gradient's scale, so a
       relative gradient difference ``delta`` (a reduction over K <= 128 terms: ``delta <~ K u``,
       about 1e-5) changes a step by about ``lr delta`` (1e-8), under 1e-6 after the largest center's
       42 steps. Coordinates whose gradient is itself at rounding level (cancellations, a unit active
       on one row) make ``m_hat / sqrt(v_hat)`` O(1) noise and can differ by up to lr in a step; they
       are rare: measured 2.5e-6 at most over the 230 centers. Any real mismatch (another batch,
       another dropout mask, stale optimizer state, a step more or less) moves the coordinates it
       touches by whole steps, ~lr, ten times the bound.
    2. Server models (the model after round 1), elementwise, with ``w_j = n_j / sum_k n_k`` and
       ``Delta_j = theta_j^Flower - theta_j^lf``::

           |theta_bar^Flower - theta_bar^lf| <= sum_j w_j |Delta_j| + (C + 3) u sum_j w_j |theta_j^Flower|

       Flower computes ``acc += theta_j * float32(w_j)`` in float32 (two roundings per term, then
       C - 1 additions: the recursive-summation bound ``(n - 1) u sum |x_i| + O(u^2)``, Higham,
       *Accuracy and Stability of Numerical Algorithms*, Sec. 4.2, gives ``(C + 1) u sum_j w_j
       |theta_j|``); lightning-fed sums in float64 and rounds once (``u |theta_bar|``); the third
       ``u`` absorbs the O(u^2) and float64 terms. The first term is measured, so this checks the
       aggregation itself (which centers, which weights) apart from training noise. On the default
       federation's round-1 models an unweighted mean moves the average by up to 1e-2 (about 10^4
       times the bound) and leaving out the smallest center (weight 5.6e-4) by 9e-6 (up to 80 times
       the bound). The bound's largest entry is at most ``1e-4 + (C + 3) u max|theta|`` (230
       centers: 1e-4 + 2e-6); measured, it is 2.0e-6, against a largest difference of 1e-7.

    The script prints both maxima next to their bounds and exits with status 1 if either fails.
    Later rounds start from the two (slightly different) averages, so their differences grow;
    the last round's difference is printed for information, not checked.

What is printed (and written with ``--json OUT``)
    Per framework: seconds per round (median over the rounds after the first; a round is local
    training + aggregation + evaluation, timed from the server's dispatch of round r to the end of
    its evaluation for Flower and from ``on_round_start`` to ``on_round_end`` for lightning-fed),
    start-up seconds (child process start to the start of round 1: imports, data, Ray and its
    actors, the engine's setup), total seconds (child process start to exit, Ray's shutdown
    included), peak memory (the largest sum of resident set sizes over the child and all its
    descendants, Ray's GCS, raylet and worker processes included, sampled every 0.2 s with psutil
    or /proc; shared pages count once per process), the number of processes at that peak, CPU
    seconds (user + system over the same process tree: per round, the median over the rounds after
    the first from the samples bracketing each round; for the whole run, the larger of
    ``getrusage`` over the reaped processes and the sum of every process's last sample), and the
    mean test AUROC after the last round. Then the ratios Flower /
    lightning-fed, and the machine's load average (``os.getloadavg``) at start and end: wall times
    taken on a busy machine are not comparable to idle ones, and the scheduler shares a busy
    machine per runnable thread, so Flower's two actors and driver get up to three times the share
    of a one-thread lightning-fed there. CPU seconds are much less sensitive to that.

Target: lightning-fed >= 10x faster than Flower per round and for the whole run.

Run::

    pip install "lightning-fed[peers]"          # flwr[simulation]==1.42.0 (Ray)
    python benchmarks/peers/flower_fedavg.py [--rounds 4] [--centers 230] [--stays 71000] [--json OUT]

Without flwr it prints a one-line install hint and exits with status 1.
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.peers.side_by_side import print_side_by_side

if TYPE_CHECKING:
    import torch
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from torch import Tensor

    from lightning_fed.models import MortalityMLP

ROOT = Path(__file__).resolve().parents[2]
FLWR_VERSION = "1.42.0"
INSTALL_HINT = (
    f'flwr is not installed; install it with: pip install "lightning-fed[peers]" '
    f'(or pip install "flwr[simulation]=={FLWR_VERSION}")'
)
FRAMEWORKS = ("lightning-fed", "flower")
#: Rows of every batch the engines pad to (dropout masks are drawn for this many rows).
BATCH_SIZE = 128
LOCAL_EPOCHS = 2
#: Unit roundoff of float32.
U32 = 2.0**-24


# --------------------------------------------------------------------------------------------------
# Shared by both sides


def _build_data(centers: int, stays: int, seed: int) -> Any:
    """The synthetic ICU federation both frameworks train on."""
    from lightning_fed.data import SyntheticICU

    return SyntheticICU(num_centers=centers, num_stays=stays).build(seed)


def _initial_model(num_features: int, dropout: float, seed: int) -> MortalityMLP:
    """A ``MortalityMLP`` initialized exactly as ``Federation._setup`` initializes its module."""
    import torch

    from lightning_fed.models import MortalityMLP
    from lightning_fed.seeding import derive_seed

    module = MortalityMLP(dropout=dropout)
    with torch.random.fork_rng():
        torch.manual_seed(derive_seed(seed, "init"))
        module.set_num_features(num_features)
        for layer in module.modules():
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()
    return module


def _params(module: torch.nn.Module) -> dict[str, Tensor]:
    """Detached copies of a module's parameters."""
    return {n: p.detach().clone() for n, p in module.named_parameters()}


# --------------------------------------------------------------------------------------------------
# The Flower client: a plain PyTorch loop on lightning-fed's seeded batches and dropout streams

#: Per Ray worker process: the centers' tensors, loaded once per data file.
_CLIENT_DATA: dict[str, list[tuple[Tensor, ...]]] = {}


def _client_data(path: str) -> list[tuple[Tensor, ...]]:
    """Every center's ``(x_train, y_train, x_val, y_val, x_test, y_test)``, cached per process."""
    if path not in _CLIENT_DATA:
        import torch

        _CLIENT_DATA[path] = torch.load(path)
    return _CLIENT_DATA[path]


def _client_logits(model: MortalityMLP, x: Tensor, masks: torch.Generator | None) -> Tensor:
    """Logits of ``model`` on ``x``, each hidden ReLU followed by a dropout mask from ``masks``.

    The masks are drawn for a full batch of :data:`BATCH_SIZE` rows (what lightning-fed's packed
    engine draws per step and layer, padded rows included) and cut to the real rows.
    """
    import torch

    from lightning_fed.models.mlp import dropout_mask

    h = x
    for layer in model.layers[:-1]:
        h = torch.relu(layer(h))
        if masks is not None and model.dropout > 0:
            h = h * dropout_mask(h.new_empty(BATCH_SIZE, h.shape[1]), model.dropout, masks)[: h.shape[0]]
    return model.layers[-1](h).squeeze(-1)


def _save_adam(opt: torch.optim.Optimizer) -> dict[str, Tensor]:
    """Adam's per-parameter state as flat tensors ``{"<index>.<key>": tensor}``."""
    return {f"{i}.{k}": v for i, state in opt.state_dict()["state"].items() for k, v in state.items()}


def _load_adam(opt: torch.optim.Optimizer, flat: dict[str, Tensor]) -> None:
    """Restore :func:`_save_adam`'s tensors into a fresh optimizer of the same parameters."""
    state: dict[int, dict[str, Tensor]] = {}
    for key, value in flat.items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    full = opt.state_dict()
    full["state"] = state
    opt.load_state_dict(full)


def local_train(
    model: MortalityMLP,
    opt: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    *,
    seed: int,
    round_idx: int,
    center: int,
    epochs: int = LOCAL_EPOCHS,
) -> float:
    """One center's local epochs of round ``round_idx``, a plain PyTorch loop (what a Flower client runs).

    The batches are :func:`~lightning_fed.engine.schedule.center_batches` of ``(seed, round_idx,
    center)`` and the dropout masks come from the stream ``(seed, "dropout", round_idx, center)``:
    the ones lightning-fed's engines use for that center.

    Returns:
        The mean batch loss.
    """
    from lightning_fed.engine.schedule import center_batches
    from lightning_fed.seeding import torch_generator

    masks = torch_generator(seed, "dropout", round_idx, center)
    batches = center_batches(len(y), BATCH_SIZE, epochs, seed, round_idx, center)
    model.train()
    total = 0.0
    for b in batches:
        rows = b[b >= 0]
        loss = model.loss_rows(_client_logits(model, x[rows], masks), y[rows]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.item()
    return total / max(1, len(batches))


def client_train(msg: Message, context: Context) -> Message:
    """Flower ``ClientApp`` train: :func:`local_train` of one center from the received model.

    The center is the node's ``partition-id`` and the round ``server-round - 1``; the Adam state
    persists in ``context.state`` between rounds.
    """
    import torch
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    from lightning_fed.models import MortalityMLP

    config = msg.content["config"]
    center = int(context.node_config["partition-id"])
    x, y = _client_data(str(config["data"]))[center][:2]
    model = MortalityMLP(in_features=x.shape[1], dropout=float(config["dropout"]))
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = model.configure_optimizers()
    if "adam" in context.state:
        _load_adam(opt, context.state["adam"].to_torch_state_dict())
    loss = local_train(
        model,
        opt,
        x,
        y,
        seed=int(config["seed"]),
        round_idx=int(config["server-round"]) - 1,
        center=center,
        epochs=int(config["epochs"]),
    )
    context.state["adam"] = ArrayRecord(_save_adam(opt))
    metrics = {
        "num-examples": len(y),
        "train-loss": loss,
        "center": center,
        "threads": torch.get_num_threads(),
    }
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


def client_evaluate(msg: Message, context: Context) -> Message:
    """Flower ``ClientApp`` evaluate: the received model's validation and test AUROC on one center."""
    import torch
    from flwr.app import Message, MetricRecord, RecordDict

    from lightning_fed.metrics import batched_auroc
    from lightning_fed.models import MortalityMLP

    center = int(context.node_config["partition-id"])
    _, _, x_val, y_val, x_test, y_test = _client_data(str(msg.content["config"]["data"]))[center]
    model = MortalityMLP(in_features=x_val.shape[1])
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.eval()
    with torch.no_grad():
        auroc = [
            float(batched_auroc(model(x).unsqueeze(0), y.unsqueeze(0))[0])
            for x, y in ((x_val, y_val), (x_test, y_test))
        ]
    metrics = {"num-examples": len(y_val), "val-auroc": auroc[0], "test-auroc": auroc[1]}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


def _mean_auroc(records: list[RecordDict], weight_key: str) -> MetricRecord:
    """Unweighted mean over the clients of their defined AUROCs (lightning-fed's ``summarize``)."""
    import math

    from flwr.app import MetricRecord

    out = {}
    for key in ("val-auroc", "test-auroc"):
        values = [float(next(iter(r.metric_records.values()))[key]) for r in records]
        defined = [v for v in values if not math.isnan(v)]
        out[key] = sum(defined) / len(defined) if defined else float("nan")
    return MetricRecord(out)


# --------------------------------------------------------------------------------------------------
# The two workers (each runs in its own child process)


def _start_ray(init_args: dict[str, Any], attempts: int = 5) -> int:
    """Start Ray as Flower's Ray backend would (``RayBackend.init_ray``), retrying if it fails.

    Ray gives its raylet a fixed 30 s to register; on a busy machine that can fail ("The current
    node timed out during startup"). Flower's backend then finds Ray running and uses it. The
    attempts count in Flower's start-up seconds.

    Returns:
        The number of attempts it took.
    """
    import ray

    pythonpath = os.pathsep.join([*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])])
    os.environ["PYTHONPATH"] = pythonpath
    kwargs = {
        "include_dashboard": False,
        "logging_level": "WARNING",
        "log_to_driver": True,
        **init_args,
        "runtime_env": {"env_vars": {"PYTHONPATH": pythonpath}},
    }
    attempt = 1
    while True:
        try:
            ray.init(**kwargs)
            return attempt
        except Exception:
            if attempt >= attempts:
                raise
            traceback.print_exc()
            print(f"Ray did not start (attempt {attempt} of {attempts}); retrying", flush=True)
            ray.shutdown()
            time.sleep(5)
            attempt += 1


def _flower_worker(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run FedAvg through ``flwr.simulation.run_simulation`` and return the timings and models."""
    import flwr
    import ray
    import torch
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    data = _build_data(args.centers, args.stays, args.seed)
    path = out / "flower_data.pt"
    torch.save([(c.x_train, c.y_train, c.x_val, c.y_val, c.x_test, c.y_test) for c in data.centers], path)
    module = _initial_model(data.num_features, args.dropout, args.seed)
    record: dict[str, Any] = {"round_start": {}, "round_end": {}, "test_auroc": {}, "errors": []}

    class TimedFedAvg(FedAvg):
        """Flower's FedAvg, timestamping each round and keeping round 1's models."""

        def configure_train(
            self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
        ) -> Iterable[Message]:
            """Timestamp the round's start, then configure it as FedAvg does."""
            record["round_start"][server_round] = time.time()
            return super().configure_train(server_round, arrays, config, grid)

        def aggregate_train(
            self, server_round: int, replies: Iterable[Message]
        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
            """FedAvg's average; keep round 1's local models and average, and the latest average."""
            replies = list(replies)
            record["errors"] += [str(m.error.reason) for m in replies if m.has_error()]
            arrays, metrics = super().aggregate_train(server_round, replies)
            if server_round == 1:
                local = {}
                for m in replies:
                    if not m.has_error():
                        center = int(m.content["metrics"]["center"])
                        local[center] = m.content["arrays"].to_torch_state_dict()
                        record["client_threads"] = int(m.content["metrics"]["threads"])
                record["local"] = local
                record["round1"] = None if arrays is None else arrays.to_torch_state_dict()
            if arrays is not None:
                record["last"] = arrays.to_torch_state_dict()
            return arrays, metrics

        def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
            """FedAvg's evaluation aggregate; timestamp the round's end."""
            replies = list(replies)
            record["errors"] += [str(m.error.reason) for m in replies if m.has_error()]
            metrics = super().aggregate_evaluate(server_round, replies)
            if metrics is not None:
                record["test_auroc"][server_round] = float(metrics["test-auroc"])
            record["round_end"][server_round] = time.time()
            return metrics

    n = data.num_centers
    strategy = TimedFedAvg(
        fraction_train=1.0,
        fraction_evaluate=1.0,
        min_train_nodes=n,
        min_evaluate_nodes=n,
        min_available_nodes=n,
        evaluate_metrics_aggr_fn=_mean_auroc,
    )
    config = ConfigRecord(
        {"data": str(path), "seed": args.seed, "dropout": args.dropout, "epochs": LOCAL_EPOCHS}
    )
    server_app = ServerApp()

    @server_app.main()
    def _main(grid: Grid, context: Context) -> None:
        """The ServerApp: the strategy's rounds from the shared initial model."""
        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(module.state_dict()),
            num_rounds=args.rounds,
            train_config=config,
            evaluate_config=config,
        )

    client_app = ClientApp()
    client_app.train()(client_train)
    client_app.evaluate()(client_evaluate)
    init_args = {"num_cpus": args.actors, "num_gpus": 0}
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": init_args}
    try:
        record["ray_start_attempts"] = _start_ray(init_args)
        run_simulation(server_app, client_app, num_supernodes=n, backend_config=backend)
        record["work_end"] = time.time()
    finally:
        if ray.is_initialized():
            ray.shutdown()
    if record["errors"] or "round1" not in record or len(record["local"]) != n:
        raise RuntimeError(f"Flower run incomplete; client errors: {record['errors'][:3]}")
    torch.save(
        {
            "init": _params(module),
            "local": {k: torch.stack([record["local"][c][k] for c in range(n)]) for k in record["round1"]},
            "round1": record["round1"],
            "last": record["last"],
            "n_train": data.n_train.clone(),
        },
        out / "flower.pt",
    )
    rounds = range(1, args.rounds + 1)
    return {
        "round_start": [record["round_start"][r] for r in rounds],
        "round_end": [record["round_end"][r] for r in rounds],
        "test_auroc": [record["test_auroc"].get(r, float("nan")) for r in rounds],
        "work_end": record["work_end"],
        "threads": f"{args.actors} Ray actors x {record.get('client_threads', '?')} torch thread(s)",
        "ray_start_attempts": record["ray_start_attempts"],
        "versions": {"flwr": flwr.__version__, "ray": ray.__version__, "torch": torch.__version__},
        "num_centers": n,
        "train_rows": int(data.n_train.sum()),
        "num_features": data.num_features,
    }


def _lightning_worker(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run FedAvg through ``Federation.fit`` and return the timings and models."""
    import torch
    from lightning.fabric import Fabric

    import lightning_fed
    from lightning_fed.algorithms import FedAvg
    from lightning_fed.federation import Federation
    from lightning_fed.metrics import summarize
    from lightning_fed.models import MortalityMLP
    from lightning_fed.types import TrainerConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    data = _build_data(args.centers, args.stays, args.seed)
    record: dict[str, Any] = {"round_start": [], "round_end": [], "test_auroc": []}

    class CapturingFedAvg(FedAvg):
        """lightning-fed's FedAvg, keeping round 1's local and averaged models."""

        def aggregate(self, ctx: Any, params: dict[str, Tensor], wire: Any) -> dict[str, Tensor]:
            """FedAvg's aggregation; keep round 1's local models and average."""
            averaged = super().aggregate(ctx, params, wire)
            if ctx.round == 0:
                record["local"] = {k: v.clone() for k, v in params.items()}
                record["round1"] = {k: v[0].clone() for k, v in averaged.items()}
            return averaged

    class RoundTimer:
        """A Fabric callback timestamping every round."""

        def on_round_start(self, federation: Federation, r: int) -> None:
            """Timestamp the round's start."""
            record["round_start"].append(time.time())

        def on_round_end(self, federation: Federation, result: Any) -> None:
            """Timestamp the round's end (after evaluation) and keep its mean test AUROC."""
            record["round_end"].append(time.time())
            record["test_auroc"].append(summarize(result.test_auroc).mean)

    fed = Federation(
        data,
        MortalityMLP(dropout=args.dropout),
        CapturingFedAvg(),
        # trainer.threads: --threads as given (the fit's "auto" would otherwise choose its own count).
        TrainerConfig(
            rounds=args.rounds,
            local_epochs=LOCAL_EPOCHS,
            batch_size=BATCH_SIZE,
            threads=args.threads if args.threads else "auto",
        ),
        fabric=Fabric(accelerator="cpu", devices=1, callbacks=[RoundTimer()]),
        seed=args.seed,
    )
    init = _params(fed.module)
    fed.fit()
    record["work_end"] = time.time()
    last = {k: v[0].clone() for k, v in fed.center_params().items()}
    torch.save(
        {"init": init, "local": record["local"], "round1": record["round1"], "last": last},
        out / "lightning.pt",
    )
    return {
        "round_start": record["round_start"],
        "round_end": record["round_end"],
        "test_auroc": record["test_auroc"],
        "work_end": record["work_end"],
        "threads": f"1 process x {torch.get_num_threads()} torch thread(s)",
        "versions": {"lightning-fed": lightning_fed.__version__, "torch": torch.__version__},
        "num_centers": data.num_centers,
        "train_rows": int(data.n_train.sum()),
        "num_features": data.num_features,
    }


def _exit_on_sigterm() -> None:
    """Turn SIGTERM (``timeout``, a parent giving up) into ``SystemExit`` so ``finally`` blocks run:
    the parent then stops its worker, and the Flower worker shuts Ray down."""

    def stop(signum: int, frame: object) -> None:
        """Raise ``SystemExit`` with the shell's status for the signal."""
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def worker_main(argv: list[str] | None = None) -> None:
    """Entry point of a child process: ``--worker {lightning-fed,flower} --out DIR`` plus the options."""
    args = _parser().parse_args(argv)
    _exit_on_sigterm()
    out = Path(args.out)
    run = _lightning_worker if args.worker == "lightning-fed" else _flower_worker
    try:
        result = run(args, out)
    except BaseException:
        # A failed Flower simulation leaves its ServerApp thread waiting for replies (up to the
        # strategy's one-hour timeout), which a normal exit would join: report and leave now.
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    (out / f"{args.worker}.json").write_text(json.dumps(result))


# --------------------------------------------------------------------------------------------------
# The parent: launch each worker, sample its memory, compare, report


def _tree_usage(pid: int) -> tuple[int, dict[tuple[int, float], float]]:
    """Resident bytes summed over process ``pid`` and all its descendants, and the CPU seconds (user
    + system) of each of them keyed by ``(pid, start time)`` (psutil when installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    rss, cpu = 0, {}
    if psutil is not None:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0, {}
        for p in procs:
            try:
                with p.oneshot():
                    times = p.cpu_times()
                    rss += p.memory_info().rss
                    cpu[(p.pid, p.create_time())] = times.user + times.system
            except psutil.Error:
                continue
        return rss, cpu
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        stats[int(entry.name)] = fields
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
    todo = [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        if p in stats:  # after the command: ppid (1), utime (11), stime (12), starttime (19), rss (21)
            rss += int(stats[p][21]) * page
            cpu[(p, float(stats[p][19]))] = (int(stats[p][11]) + int(stats[p][12])) / tick
    return rss, cpu


class _Sampler(threading.Thread):
    """Samples :func:`_tree_usage` of one process tree every ``interval`` seconds.

    Keeps the peak memory (and the number of processes then), and a timeline of the CPU seconds of
    every process seen so far, each counted at its last sample, so processes that exit keep counting.
    """

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        """Sample the tree of ``pid`` every ``interval`` seconds once started."""
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_bytes = self.peak_processes = 0
        self.seen: dict[tuple[int, float], float] = {}
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        """Sample until :attr:`stop` is set."""
        while not self.stop.is_set():
            rss, cpu = _tree_usage(self.pid)
            self.seen.update(cpu)
            self.times.append(time.time())
            self.cpu.append(sum(self.seen.values()))
            if rss > self.peak_bytes:
                self.peak_bytes, self.peak_processes = rss, len(cpu)
            self.stop.wait(self.interval)

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds the tree used from ``start`` to ``end`` (the samples just outside them)."""
        if not self.times:
            return float("nan")
        a = max(0, bisect.bisect_right(self.times, start) - 1)
        b = min(len(self.times) - 1, bisect.bisect_left(self.times, end))
        return self.cpu[b] - self.cpu[a]


def _worker_command(framework: str, args: argparse.Namespace, out: Path) -> list[str]:
    """The command line of this script's worker for ``framework``."""
    cmd = [sys.executable, "-c", "from benchmarks.peers.flower_fedavg import worker_main; worker_main()"]
    cmd += ["--worker", framework, "--out", str(out), "--rounds", str(args.rounds)]
    cmd += ["--centers", str(args.centers), "--stays", str(args.stays), "--seed", str(args.seed)]
    cmd += ["--dropout", str(args.dropout), "--actors", str(args.actors), "--threads", str(args.threads)]
    return cmd


def _launch(
    framework: str, args: argparse.Namespace, out: Path, cmd: list[str] | None = None
) -> dict[str, Any]:
    """Run one framework's worker in a child process; its numbers with the parent's measurements.

    Args:
        cmd: The worker's command line (default: :func:`_worker_command`); another peer's script
            passes its own (``benchmarks/peers/pfl_fedavg.py``: another interpreter, another worker).
    """
    cmd = cmd or _worker_command(framework, args, out)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # no network calls from the benchmark
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray renices its workers by +15 by default: on a machine running anything else the clients
    # would then get a sliver of the CPU that lightning-fed's process gets. Same priority for both.
    env.setdefault("RAY_worker_niceness", "0")
    # Ray's raylet waits 30 s for its agents to start; on a busy machine they can need more.
    env.setdefault("RAY_agent_register_timeout_ms", "120000")
    log = out / f"{framework}.log"
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with log.open("w") as handle:
        spawn = time.time()
        child = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
        sampler = _Sampler(child.pid)
        sampler.start()
        try:
            code = child.wait()
        finally:
            end = time.time()
            sampler.stop.set()
            sampler.join()
            if child.poll() is None:  # interrupted: do not leave the worker (and Ray) running
                child.terminate()
                child.wait()
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{framework} worker failed (exit status {code}); end of its log:\n{tail}")
    result = json.loads((out / f"{framework}.json").read_text())
    spans = list(zip(result["round_start"], result["round_end"], strict=True))
    rounds = [e - s for s, e in spans]
    cpu = [sampler.cpu_between(s, e) for s, e in spans]
    result.update(
        seconds_per_round=statistics.median(rounds[1:] or rounds),
        round_seconds=rounds,
        cpu_seconds_per_round=statistics.median(cpu[1:] or cpu),
        round_cpu_seconds=cpu,
        startup_seconds=result["round_start"][0] - spawn,
        total_seconds=end - spawn,
        # getrusage counts only reaped processes (not every Ray process is); the samples miss the
        # last 0.2 s of each process: the larger of the two.
        total_cpu_seconds=max(
            sum(getattr(cpu_after, f) - getattr(cpu_before, f) for f in ("ru_utime", "ru_stime")),
            sampler.cpu[-1] if sampler.cpu else 0.0,
        ),
        teardown_seconds=end - result["work_end"],
        peak_rss_mib=sampler.peak_bytes / 2**20,
        peak_processes=sampler.peak_processes,
    )
    return result


def _compare(out: Path, lr: float) -> dict[str, Any]:
    """The round-1 check (see the module docstring): initial, local and server models."""
    import torch

    flower = torch.load(out / "flower.pt")
    lf = torch.load(out / "lightning.pt")
    names = list(lf["init"])
    init_identical = all(torch.equal(flower["init"][k], lf["init"][k]) for k in names)
    n_train = flower["n_train"].to(torch.float64)
    weights = n_train / n_train.sum()
    local_diff = max(float((flower["local"][k] - lf["local"][k]).abs().max()) for k in names)
    server_diff = worst_ratio = bound_max = 0.0
    theta_max = 0.0
    for k in names:
        w = weights.view(-1, *([1] * (lf["local"][k].dim() - 1)))
        delta = (flower["local"][k].double() - lf["local"][k].double()).abs()
        magnitude = flower["local"][k].double().abs()
        bound = (w * delta).sum(0) + (len(weights) + 3) * U32 * (w * magnitude).sum(0)
        diff = (flower["round1"][k].double() - lf["round1"][k].double()).abs()
        server_diff = max(server_diff, float(diff.max()))
        worst_ratio = max(worst_ratio, float((diff / bound).max()))
        bound_max = max(bound_max, float(bound.max()))
        theta_max = max(theta_max, float(magnitude.max()))
    local_bound = lr / 10
    last_diff = max(float((flower["last"][k] - lf["last"][k]).abs().max()) for k in names)
    return {
        "init_identical": init_identical,
        "local_max_abs_diff": local_diff,
        "local_bound": local_bound,
        "server_max_abs_diff": server_diff,
        "server_bound_max": bound_max,
        "server_scalar_bound": local_bound + (len(weights) + 3) * U32 * theta_max,
        "server_worst_diff_over_bound": worst_ratio,
        "last_round_max_abs_diff": last_diff,
        "passed": init_identical and local_diff < local_bound and worst_ratio <= 1.0,
    }


def _report(args: argparse.Namespace, results: dict[str, dict[str, Any]], check: dict[str, Any]) -> None:
    """Print the table, the ratios, the check and the target."""
    from lightning_fed.models import MortalityMLP

    lf, fl = results["lightning-fed"], results["flower"]
    model = MortalityMLP(dropout=args.dropout)
    widths = "-".join(str(w) for w in (lf["num_features"], *model.hidden, 1))
    print(
        f"FedAvg on {lf['num_centers']} centers ({lf['train_rows']} training rows), {args.rounds} rounds: "
        f"MortalityMLP {widths} (dropout {model.dropout}), Adam lr {model.lr:g} weight decay "
        f"{model.weight_decay:g}, batch {BATCH_SIZE}, {LOCAL_EPOCHS} local epochs"
    )
    print_side_by_side(lf, fl, "Flower", check, results["load"], args.rounds)
    print(f"{'processes at peak':24s} {lf['peak_processes']:>14d} {fl['peak_processes']:>14d}")
    print(f"{'test AUROC, last round':24s} {lf['test_auroc'][-1]:>14.4f} {fl['test_auroc'][-1]:>14.4f}")
    print(f"compute: lightning-fed {lf['threads']}; Flower {fl['threads']}")
    per_round, total = results["ratios"]["per_round"], results["ratios"]["total"]
    print(
        f"target lightning-fed >= 10x Flower: per round {per_round:.1f}x "
        f"({'met' if per_round >= 10 else 'not met'}), whole run {total:.1f}x "
        f"({'met' if total >= 10 else 'not met'})"
    )


def _parser() -> argparse.ArgumentParser:
    """The command line of the parent and (with the hidden ``--worker``/``--out``) of its workers."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="FedAvg rounds (default 4)")
    parser.add_argument("--centers", type=int, default=230, help="synthetic ICU centers (default 230)")
    parser.add_argument("--stays", type=int, default=71000, help="synthetic ICU stays (default 71000)")
    parser.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    parser.add_argument("--dropout", type=float, default=0.2, help="MortalityMLP dropout (default 0.2)")
    parser.add_argument(
        "--actors", type=int, default=2, help="Ray CPUs = Flower clients running at once (default 2)"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads of lightning-fed (default 0: torch's default)"
    )
    parser.add_argument("--json", metavar="OUT", help="also write the numbers to this JSON file")
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run both frameworks, check round 1, print (and optionally write) the numbers."""
    args = _parser().parse_args(argv)
    if importlib.util.find_spec("flwr") is None or importlib.util.find_spec("ray") is None:
        sys.exit(INSTALL_HINT)
    if args.rounds < 1:
        sys.exit("--rounds must be >= 1")
    from importlib.metadata import version

    from lightning_fed.models import MortalityMLP

    if version("flwr") != FLWR_VERSION:
        print(f"warning: flwr {version('flwr')} installed; this benchmark is written for {FLWR_VERSION}")
    _exit_on_sigterm()
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="flower_fedavg_") as tmp:
        out = Path(tmp)
        for framework in FRAMEWORKS:
            results[framework] = _launch(framework, args, out)
        check = _compare(out, lr=MortalityMLP().lr)
    results["load"] = {"start": list(load_start), "end": list(os.getloadavg())}
    lf, fl = results["lightning-fed"], results["flower"]
    keys = {
        "per_round": "seconds_per_round",
        "startup": "startup_seconds",
        "total": "total_seconds",
        "peak_memory": "peak_rss_mib",
        "cpu_per_round": "cpu_seconds_per_round",
        "cpu_total": "total_cpu_seconds",
    }
    results["ratios"] = {
        name: fl[key] / lf[key] if lf[key] > 0 else float("nan") for name, key in keys.items()
    }
    results["round1_check"] = check
    results["config"] = {**vars(args), "batch_size": BATCH_SIZE, "local_epochs": LOCAL_EPOCHS}
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    _report(args, results, check)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    if not check["passed"]:
        sys.exit("round-1 check failed: Flower's and lightning-fed's models differ beyond float32 rounding")


if __name__ == "__main__":
    main()
