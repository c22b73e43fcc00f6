r"""FedAvg through pfl-research's simulation and through lightning-fed, side by side on one federation.

The second peer after Flower (``benchmarks/peers/flower_fedavg.py``, whose structure, shared helpers
and lightning-fed worker this script reuses). pfl-research (Apple's ``pfl``, 0.6) simulates
federated learning in one process, training the cohort's users one after the other with a single
model object. Both frameworks train the same federation (default: the synthetic ICU federation,
230 centers, 71,000 stays) with FedAvg over every center in every round, the same model
(``MortalityMLP`` 60-128-64-1, dropout 0.2), the same optimizer (Adam, lr 1e-3, weight decay 1e-5,
each center keeping its Adam moments across rounds), the same batches (128 rows, 2 local epochs)
and the same seeds, each framework in its own child process, one after the other. pfl runs under
the interpreter given by ``--pfl-python`` (default: this one), so it can live in its own virtual
environment.

The pfl side: ``pfl.algorithm.FederatedAveraging`` with ``NNAlgorithmParams(train_cohort_size=C)``,
a ``pfl.aggregate.SimulatedBackend`` whose user sampler is ``minimize_reuse`` over the C centers
(every center exactly once per round; checked), ``WeightByDatapoints`` weighting
(``n_j / sum_k n_k``, lightning-fed's FedAvg weights), a
``pfl.model.pytorch.PyTorchModel`` around ``MortalityMLP`` with central optimizer
``torch.optim.SGD(lr=1)`` (pfl's FedAvg adds the averaged update to the model:
``theta + 1 * sum_j w_j (theta_j - theta)``), and pfl's own local loop
(``PyTorchModel.do_multiple_epochs_of``: epochs x batches, ``loss.backward()``, ``optimizer.step()``).

Where pfl needs help to compute the same thing (what differs from a stock pfl setup, and why)
    * Batches: pfl's ``Dataset.iter`` yields consecutive slices in a fixed order; lightning-fed
      draws a permutation per epoch. Each center is a ``SeededCenter`` (a ``pfl.data.Dataset``)
      whose ``iter`` yields, for the epoch pfl asks for, the rows of
      :func:`~lightning_fed.engine.schedule.center_batches` ``(n_c, 128, 2, seed, r, c)``.
    * Dropout masks: the model's ``loss`` draws its masks from the center's stream
      ``(seed, "dropout", r, c)`` with :func:`~lightning_fed.models.mlp.dropout_mask` (passed through
      pfl's ``train_kwargs``), as the Flower client does.
    * Adam state across rounds: pfl creates a fresh local optimizer for every user in every round
      (cross-device FL: devices keep no state). ``local_optimizer_create`` therefore restores the
      center's Adam moments from a per-center store, and the algorithm saves them after training.
    * Round and center: the algorithm (``SeededFedAvg``, a ``FederatedAveraging``) tells the center's
      dataset the round (``central_context.current_central_iteration``) before pfl's local loop.
    * Evaluation: pfl evaluates its val population at the start of an iteration, with the model
      before that round's update, and each training user on its training data before and after
      local training. lightning-fed evaluates the updated model on every center after the round.
      So pfl's in-loop evaluation is off (``val_cohort_size=None``; ``evaluation_frequency`` past
      the last round, so only iteration 0 evaluates the training users, and the model's ``metrics``
      returns only the row count on training data) and a callback, after each iteration, evaluates
      the new model on every center through pfl's ``model.evaluate`` (what pfl's
      ``CentralEvaluationCallback`` does, per center): validation and test AUROC with
      :func:`~lightning_fed.metrics.batched_auroc`, averaged over the centers where it is defined,
      like ``summarize``.
    * Threads: pfl runs in one process; it gets the same torch threads as lightning-fed
      (``--threads``, default torch's default).

The round-1 check
    1. The initial models are bit-identical (pfl's model is initialized as ``Federation`` does).
    2. Local models (each center's model after its round-1 training, before averaging):
       ``max_j |theta_j^pfl - theta_j^lf| < lr / 10 = 1e-4`` (see ``flower_fedavg.py``: float32
       rounding moves Adam's scale-free steps by ~``lr x 1e-5``; a wrong batch, mask, optimizer
       state or step count moves coordinates by whole steps ~``lr``).
    3. Server models, elementwise, with ``w_j = n_j / n``, ``d_j = theta_j^pfl - theta_0`` and
       ``Delta_j = theta_j^pfl - theta_j^lf``::

           |theta_bar^pfl - theta_bar^lf|
               <= sum_j w_j |Delta_j| + (C + 3) u sum_j w_j |d_j| + 3 u |theta_bar^lf|

       pfl computes in float32 ``d_j`` (one rounding), ``d_j * n_j`` (one), the sum over the C
       centers in cohort order (``(C - 1) u sum_j n_j |d_j|``, Higham, *Accuracy and Stability of
       Numerical Algorithms*, Sec. 4.2), the division by ``n`` (two: ``1 / n`` and the product) and
       ``theta_0 + avg`` (one, ``u |theta_bar|``); lightning-fed sums in float64 and rounds once
       (``u |theta_bar|``); the third ``u |theta_bar|`` absorbs the O(u^2) terms. ``u = 2^-24``.
       The first term is measured, so this checks the aggregation rule itself (which centers,
       which weights).

    Exit status 1 if a check fails. Later rounds start from two slightly different averages: the
    last round's difference is printed for information.

Printed (and written with ``--json OUT``): as ``flower_fedavg.py`` (seconds per round: median over
rounds 2..R; start-up: child process start to round 1; total; peak RSS of the process tree; CPU
seconds), the ratios pfl / lightning-fed and the load average at start and end. The pfl worker also
imports lightning-fed's data, model and mask code (the shared definitions of the experiment, which
import Lightning): that import is timed and printed apart, with the whole-run ratio without it.

Target: lightning-fed >= 5x faster than pfl-research per round and for a 10-round run.

Run::

    python -m venv --system-site-packages /work/venv-pfl && /work/venv-pfl/bin/pip install pfl
    python benchmarks/peers/pfl_fedavg.py --pfl-python /work/venv-pfl/bin/python [--rounds 10] [--json OUT]

Without pfl under ``--pfl-python`` it prints a one-line install hint and exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.peers.flower_fedavg import (
    BATCH_SIZE,
    LOCAL_EPOCHS,
    U32,
    _build_data,
    _client_logits,
    _exit_on_sigterm,
    _initial_model,
    _launch,
    _lightning_worker,
    _params,
)
from benchmarks.peers.side_by_side import print_side_by_side

if TYPE_CHECKING:
    from torch import Tensor

ROOT = Path(__file__).resolve().parents[2]
PFL_VERSION = "0.6"
INSTALL_HINT = (
    'pfl is not installed for {python}; install it with: pip install "lightning-fed[peers]" '
    '(or pip install "pfl>=0.6"), or pass --pfl-python with an interpreter that has it'
)
FRAMEWORKS = ("lightning-fed", "pfl")


# --------------------------------------------------------------------------------------------------
# The pfl worker


def _pfl_worker(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run FedAvg through pfl's simulation and return the timings and models."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    tic = time.time()
    from lightning_fed.engine.schedule import center_batches
    from lightning_fed.metrics import batched_auroc
    from lightning_fed.models import MortalityMLP
    from lightning_fed.seeding import torch_generator

    lf_import_seconds = time.time() - tic

    import pfl
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.aggregate.weighting import WeightByDatapoints
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel

    data = _build_data(args.centers, args.stays, args.seed)
    n = data.num_centers
    template = _initial_model(data.num_features, args.dropout, args.seed)
    init = _params(template)
    record: dict[str, Any] = {"round_start": [], "round_end": [], "test_auroc": [], "trained": {}}
    adam: dict[int, dict[str, Any]] = {}
    current: dict[str, Any] = {}

    class PflMLP(torch.nn.Module):
        """``MortalityMLP`` with the ``loss`` and ``metrics`` pfl's ``PyTorchModel`` calls."""

        def __init__(self, mlp: MortalityMLP) -> None:
            super().__init__()
            self.mlp = mlp

        def loss(self, x: Tensor, y: Tensor, masks: torch.Generator | None = None) -> Tensor:
            """Mean BCE of a training batch, dropout masks from the center's stream."""
            self.mlp.train()
            return self.mlp.loss_rows(_client_logits(self.mlp, x, masks), y).mean()

        @torch.no_grad()
        def metrics(self, *tensors: Tensor, split: str) -> dict[str, Any]:
            """Validation and test AUROC of one center (``split="eval"``); on training data (pfl's
            before/after-training evaluation, which lightning-fed does not do) only the row count."""
            if split == "train":
                return {"rows": Weighted.from_unweighted(len(tensors[1]))}
            self.mlp.eval()
            out = {}
            for name, x, y in (("val auroc", *tensors[:2]), ("test auroc", *tensors[2:])):
                auroc = float(batched_auroc(self.mlp(x).unsqueeze(0), y.unsqueeze(0))[0])
                defined = auroc == auroc
                out[name] = Weighted(auroc if defined else 0.0, 1 if defined else 0)
            return out

    class SeededCenter(Dataset):
        """A center's training data whose batches are lightning-fed's seeded ones for the round."""

        def start_round(self, round_idx: int) -> None:
            """Draw this round's batches (per epoch) and dropout stream."""
            center = int(self.user_id)
            rows = center_batches(len(self), BATCH_SIZE, LOCAL_EPOCHS, args.seed, round_idx, center)
            self._epochs = list(rows.split(rows.shape[0] // LOCAL_EPOCHS))
            self._train_kwargs = {"masks": torch_generator(args.seed, "dropout", round_idx, center)}

        def iter(self, batch_size: int | None):
            """Training: the next epoch's seeded batches; evaluation: pfl's slices."""
            if not getattr(self, "_epochs", None):
                yield from super().iter(batch_size)
                return
            x, y = self.raw_data
            for b in self._epochs.pop(0):
                rows = b[b >= 0]
                yield x[rows], y[rows]

    class EvalCenter(Dataset):
        """A center's validation and test data, evaluated whole (pfl would cut every tensor to the
        first one's length)."""

        def iter(self, batch_size: int | None):
            """The whole of the center's evaluation data as one batch."""
            yield self.raw_data

    class SeededFedAvg(FederatedAveraging):
        """pfl's FedAvg; tells the center the round, keeps its Adam state, times the rounds."""

        def get_next_central_contexts(self, model, iteration, algorithm_params, *rest):
            """Timestamp the round's start, then pfl's contexts."""
            if iteration < algorithm_params.central_num_iterations:
                record["round_start"].append(time.time())
                record["trained"][iteration] = []
            return super().get_next_central_contexts(model, iteration, algorithm_params, *rest)

        def train_one_user(self, initial_model_state, model, user_dataset, central_context):
            """pfl's local training of one center in the round, with its own batches and Adam state."""
            r, center = central_context.current_central_iteration, int(user_dataset.user_id)
            user_dataset.start_round(r)
            current["center"] = center
            stats, metrics = super().train_one_user(initial_model_state, model, user_dataset, central_context)
            adam[center] = current["optimizer"].state_dict()
            record["trained"][r].append(center)
            if r == 0:
                record.setdefault("local", {})[center] = {
                    k.removeprefix("mlp."): v.detach().clone() for k, v in model.variable_map.items()
                }
            return stats, metrics

    def local_optimizer(params, lr: float) -> torch.optim.Optimizer:
        """The center's Adam (``MortalityMLP.configure_optimizers``), its state restored."""
        opt = torch.optim.Adam(params, lr=lr, weight_decay=template.weight_decay)
        if current["center"] in adam:
            opt.load_state_dict(adam[current["center"]])
        current["optimizer"] = opt
        return opt

    class RoundEnd(TrainingProcessCallback):
        """Evaluate the round's new model on every center, then timestamp the round's end.

        pfl's val population is evaluated at the start of an iteration, with the model before that
        round's update; lightning-fed evaluates the updated model. This callback does the latter
        through pfl's ``model.evaluate`` (what pfl's ``CentralEvaluationCallback`` does, per center).
        """

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            """Every center's validation and test AUROC of the new model; the round's end."""
            summed = None
            for dataset in eval_sets.values():
                metrics = model.evaluate(dataset)
                summed = metrics if summed is None else summed + metrics
            values = {str(k): float(v.overall_value) for k, v in summed}
            record["test_auroc"].append(values["test auroc"])
            if central_iteration == 0:
                record["round1"] = {
                    k.removeprefix("mlp."): v.detach().clone() for k, v in model.variable_map.items()
                }
            record["round_end"].append(time.time())
            return False, Metrics()

    train_sets = {
        c: SeededCenter((ctr.x_train, ctr.y_train), user_id=str(c), eval_kwargs={"split": "train"})
        for c, ctr in enumerate(data.centers)
    }
    eval_sets = {
        c: EvalCenter(
            (ctr.x_val, ctr.y_val, ctr.x_test, ctr.y_test), user_id=str(c), eval_kwargs={"split": "eval"}
        )
        for c, ctr in enumerate(data.centers)
    }
    backend = SimulatedBackend(
        training_data=FederatedDataset(
            train_sets.__getitem__, get_user_sampler("minimize_reuse", list(range(n)))
        ),
        # pfl requires a val population; it is not sampled (val_cohort_size=None): RoundEnd evaluates.
        val_data=FederatedDataset(eval_sets.__getitem__, get_user_sampler("minimize_reuse", list(range(n)))),
        postprocessors=[WeightByDatapoints()],
    )
    mlp = PflMLP(template)
    model = PyTorchModel(mlp, local_optimizer, torch.optim.SGD(mlp.parameters(), lr=1.0))
    SeededFedAvg().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=args.rounds,
            evaluation_frequency=args.rounds + 1,
            train_cohort_size=n,
            val_cohort_size=None,
        ),
        backend=backend,
        model=model,
        model_train_params=NNTrainHyperParams(
            local_num_epochs=LOCAL_EPOCHS, local_learning_rate=template.lr, local_batch_size=BATCH_SIZE
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=None),
        callbacks=[RoundEnd()],
    )
    record["work_end"] = time.time()
    wrong = {r: len(set(c)) for r, c in record["trained"].items() if sorted(c) != list(range(n))}
    if wrong:
        raise RuntimeError(f"pfl did not train every center exactly once per round: {wrong}")
    last = {k.removeprefix("mlp."): v.detach().clone() for k, v in model.variable_map.items()}
    names = list(record["round1"])
    torch.save(
        {
            "init": init,
            "local": {k: torch.stack([record["local"][c][k] for c in range(n)]) for k in names},
            "round1": record["round1"],
            "last": last,
            "n_train": data.n_train.clone(),
        },
        out / "pfl.pt",
    )
    return {
        "round_start": record["round_start"],
        "round_end": record["round_end"],
        "test_auroc": record["test_auroc"],
        "work_end": record["work_end"],
        "lf_import_seconds": lf_import_seconds,
        "threads": f"1 process x {torch.get_num_threads()} torch thread(s)",
        "versions": {"pfl": pfl.__version__, "torch": torch.__version__},
        "num_centers": n,
        "train_rows": int(data.n_train.sum()),
        "num_features": data.num_features,
    }


# --------------------------------------------------------------------------------------------------
# The parent: launch both workers, compare round 1, report


def server_bound(
    local_pfl: Tensor, init: Tensor, round1_lf: Tensor, delta: Tensor, weights: Tensor
) -> Tensor:
    """The elementwise bound of the module docstring on ``|theta_bar^pfl - theta_bar^lf|`` (float64).

    Args:
        local_pfl: pfl's local models ``[C, ...]``.
        init: The round's starting model.
        round1_lf: lightning-fed's average.
        delta: ``|theta_j^pfl - theta_j^lf|`` ``[C, ...]``.
        weights: ``n_j / n`` ``[C]``.
    """
    w = weights.view(-1, *([1] * (local_pfl.dim() - 1)))
    step = (local_pfl.double() - init.double()).abs()
    return (
        (w * delta).sum(0) + (len(weights) + 3) * U32 * (w * step).sum(0) + 3 * U32 * round1_lf.double().abs()
    )


def compare(out: Path, lr: float) -> dict[str, Any]:
    """The round-1 check (module docstring): initial, local and server models."""
    import torch

    peer, lf = torch.load(out / "pfl.pt"), torch.load(out / "lightning.pt")
    names = list(lf["init"])
    init_identical = all(torch.equal(peer["init"][k], lf["init"][k]) for k in names)
    n_train = peer["n_train"].to(torch.float64)
    weights = n_train / n_train.sum()
    local_diff = max(float((peer["local"][k] - lf["local"][k]).abs().max()) for k in names)
    server_diff = worst_ratio = bound_max = 0.0
    for k in names:
        delta = (peer["local"][k].double() - lf["local"][k].double()).abs()
        bound = server_bound(peer["local"][k], lf["init"][k], lf["round1"][k], delta, weights)
        diff = (peer["round1"][k].double() - lf["round1"][k].double()).abs()
        server_diff = max(server_diff, float(diff.max()))
        worst_ratio = max(worst_ratio, float((diff / bound).max()))
        bound_max = max(bound_max, float(bound.max()))
    local_bound = lr / 10
    return {
        "init_identical": init_identical,
        "local_max_abs_diff": local_diff,
        "local_bound": local_bound,
        "server_max_abs_diff": server_diff,
        "server_bound_max": bound_max,
        "server_worst_diff_over_bound": worst_ratio,
        "last_round_max_abs_diff": max(float((peer["last"][k] - lf["last"][k]).abs().max()) for k in names),
        "passed": init_identical and local_diff < local_bound and worst_ratio <= 1.0,
    }


def _report(args: argparse.Namespace, results: dict[str, Any], check: dict[str, Any]) -> None:
    """Print the table, the ratios, the check and the target."""
    lf, peer = results["lightning-fed"], results["pfl"]
    print(
        f"FedAvg on {lf['num_centers']} centers ({lf['train_rows']} training rows), {args.rounds} rounds: "
        f"MortalityMLP {lf['num_features']}-128-64-1 (dropout {args.dropout}), Adam lr 1e-3 weight decay "
        f"1e-5, batch {BATCH_SIZE}, {LOCAL_EPOCHS} local epochs"
    )
    print_side_by_side(lf, peer, "pfl", check, results["load"], args.rounds)
    print(f"{'test AUROC, last round':24s} {lf['test_auroc'][-1]:>14.4f} {peer['test_auroc'][-1]:>14.4f}")
    print(f"compute: lightning-fed {lf['threads']}; pfl {peer['threads']}")
    ratios = results["ratios"]
    print(
        f"pfl's start-up includes {peer['lf_import_seconds']:.2f} s importing lightning-fed's data, model "
        f"and mask code; without it the whole run is {ratios['total_without_lf_imports']:.1f}x"
    )
    print(
        f"target lightning-fed >= 5x pfl: per round {ratios['per_round']:.1f}x "
        f"({'met' if ratios['per_round'] >= 5 else 'not met'}), whole run {ratios['total']:.1f}x "
        f"({'met' if ratios['total'] >= 5 else 'not met'})"
    )


def _parser() -> argparse.ArgumentParser:
    """The command line of the parent and (with the hidden ``--worker``/``--out``) of its workers."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="FedAvg rounds (default 10)")
    parser.add_argument("--centers", type=int, default=230, help="synthetic ICU centers (default 230)")
    parser.add_argument("--stays", type=int, default=71000, help="synthetic ICU stays (default 71000)")
    parser.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    parser.add_argument("--dropout", type=float, default=0.2, help="MortalityMLP dropout (default 0.2)")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads of both processes (default 0: torch's default)"
    )
    parser.add_argument(
        "--pfl-python", default=sys.executable, help="interpreter with pfl installed (default: this one)"
    )
    parser.add_argument("--json", metavar="OUT", help="also write the numbers to this JSON file")
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    return parser


def _command(framework: str, args: argparse.Namespace, out: Path) -> list[str]:
    """A worker's command line: pfl's under ``--pfl-python``, lightning-fed's under this interpreter."""
    python = args.pfl_python if framework == "pfl" else sys.executable
    cmd = [python, "-c", "from benchmarks.peers.pfl_fedavg import worker_main; worker_main()"]
    cmd += ["--worker", framework, "--out", str(out), "--rounds", str(args.rounds), "--seed", str(args.seed)]
    cmd += ["--centers", str(args.centers), "--stays", str(args.stays), "--dropout", str(args.dropout)]
    return [*cmd, "--threads", str(args.threads)]


def worker_main(argv: list[str] | None = None) -> None:
    """Entry point of a child process: ``--worker {lightning-fed,pfl} --out DIR`` plus the options."""
    args = _parser().parse_args(argv)
    _exit_on_sigterm()
    out = Path(args.out)
    run = _lightning_worker if args.worker == "lightning-fed" else _pfl_worker
    result = run(args, out)
    (out / f"{args.worker}.json").write_text(json.dumps(result))


def _has_pfl(python: str) -> bool:
    """Whether ``python`` can import pfl (without importing it)."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pfl') is None)"
    return subprocess.run([python, "-c", probe], capture_output=True).returncode == 0


def main(argv: list[str] | None = None) -> None:
    """Run both frameworks, check round 1, print (and optionally write) the numbers."""
    args = _parser().parse_args(argv)
    if args.rounds < 1:
        sys.exit("--rounds must be >= 1")
    if not _has_pfl(args.pfl_python):
        sys.exit(INSTALL_HINT.format(python=args.pfl_python))
    _exit_on_sigterm()
    load_start = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pfl_fedavg_") as tmp:
        out = Path(tmp)
        for framework in FRAMEWORKS:
            results[framework] = _launch(framework, args, out, _command(framework, args, out))
        check = compare(out, lr=1e-3)
    results["load"] = {"start": list(load_start), "end": list(os.getloadavg())}
    lf, peer = results["lightning-fed"], results["pfl"]
    keys = {
        "per_round": "seconds_per_round",
        "startup": "startup_seconds",
        "total": "total_seconds",
        "peak_memory": "peak_rss_mib",
        "cpu_per_round": "cpu_seconds_per_round",
        "cpu_total": "total_cpu_seconds",
    }
    results["ratios"] = {
        name: peer[key] / lf[key] if lf[key] > 0 else float("nan") for name, key in keys.items()
    }
    results["ratios"]["total_without_lf_imports"] = (peer["total_seconds"] - peer["lf_import_seconds"]) / lf[
        "total_seconds"
    ]
    results["round1_check"] = check
    results["config"] = {**vars(args), "batch_size": BATCH_SIZE, "local_epochs": LOCAL_EPOCHS}
    _report(args, results, check)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    if not check["passed"]:
        sys.exit("round-1 check failed: pfl's and lightning-fed's models differ beyond float32 rounding")


if __name__ == "__main__":
    main()
