"""Where FedSPD's accuracy goes: its cluster models, their mixture and the final updates, per run.

FedSPD (Lin et al. 2025; :mod:`lightning_fed.algorithms.fedspd`) predicts with each client's
personalized model, built in three steps: ``S`` cluster models ``theta_is`` that the clients agree on
through neighbour averaging, their parameter mixture ``sum_s pi_is theta_is`` with the client's
cluster proportions ``pi_is``, and ``final_steps`` local updates of that mixture (EdgeDRM App. D.2:
5). This script reads a finished FedSPD run folder (its ``config.yaml`` and ``checkpoint.pt``, which
holds the cluster models and proportions after the last aggregation) and scores every stage on the
run's test split:

* ``own``: client ``i``'s model on client ``i``'s test rows (``test_accuracy_mean`` in
  ``summary.json`` for the final model), the mean over clients;
* ``entry``: client ``i``'s model on the test rows of every other client ``j != i`` (the EdgeDRM
  protocol's non-source entry: a query from ``j`` entering at ``i`` and predicted there), pooled
  over all ``(i, j)`` pairs, so each pair weighs by ``j``'s rows.

Rows: ``cluster s`` (``theta_is`` at every client), ``best cluster`` (per client the cluster model
with the highest own accuracy, an oracle no client can pick without its test labels), ``mixture``
(what the engine held before the final updates) and ``final`` (the model the run reports). A
mixture below its best cluster says averaging the clusters' parameters costs accuracy; a final row
below the mixture says the final updates do.

The data are rebuilt from the config, so run this in the checkout the fit ran in. A checkpoint that
records the thread count its data were built at (``data_threads``) is rebuilt at that count; an
older one at torch's default count here, which must be the fit's (the data fingerprint refuses other
data with a one-line error). The final updates are replayed from the mixture at the thread count
the fit trained at (``summary.json``'s ``threads``; ``--threads`` for a run that predates it), and
the script prints whether the replay gives the run's final model bit for bit: the check that the
mixture row is what the engine held.

Run: ``python benchmarks/fedspd_clusters.py RUN_DIR [RUN_DIR ...] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import Tensor


def own_and_entry(engine: object, params: dict[str, Tensor], split: object) -> tuple[float, float]:
    """Mean own-client accuracy and pooled non-source-entry accuracy of per-client ``params``.

    Shift ``k`` (``1 .. C-1``) gives client ``c``'s model the rows of client ``(c + k) mod C``; over
    all shifts every ordered pair ``(i, j != i)`` is scored once.
    """
    from lightning_fed.evaluation import EvalSet, evaluate

    own = evaluate(engine, params, split).accuracy
    n_centers = split.y.shape[0]
    correct = rows = 0.0
    for k in range(1, n_centers):
        order = [(c + k) % n_centers for c in range(n_centers)]
        shifted = EvalSet(split.x[order], split.y[order], split.mask[order])
        acc = evaluate(engine, params, shifted).accuracy.double()
        count = shifted.mask.sum(1).double()
        correct += float((acc * count).sum())
        rows += float(count.sum())
    return float(own.mean()), correct / rows


def final_updates(federation: object, mixed: dict[str, Tensor]) -> dict[str, dict[str, Tensor]]:
    """The mixture after each of FedSPD's ``final_steps`` updates, ``{"final update k": params}``.

    :meth:`FedSPD.finish <lightning_fed.algorithms.fedspd.FedSPD.finish>` draws its batches from
    generators seeded per client, so ``final_steps = k`` replays the first ``k`` updates of the run's
    own final stage; ``k = final_steps`` must give the run's final model (checked by the caller).
    """
    from lightning_fed.types import FinishContext

    algo, steps = federation.algorithm, federation.algorithm.final_steps
    fields = ("seed", "data", "module", "wire", "round")
    ctx = FinishContext(
        **{f: getattr(federation, f) for f in fields},
        params=mixed,
        device=torch.device("cpu"),
        log=lambda scalars: None,
    )
    out = {}
    try:
        for k in range(1, steps + 1):
            algo.final_steps = k
            out[f"final update {k}"] = algo.finish(ctx)
    finally:
        algo.final_steps = steps
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the stage table of each run folder."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished FedSPD run folders")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for the replayed final updates of a run whose summary.json does not record "
        "its training's count (its log's 'threads:' line); default 1 (a sweep of 2 processes on 2 cores)",
    )
    args = parser.parse_args(argv)

    from lightning_fed.algorithms.fedspd import FedSPD
    from lightning_fed.algorithms.fedspd_steps import mixture
    from lightning_fed.commands.common import load_run
    from lightning_fed.evaluation import evaluate

    for run in args.runs:
        federation = load_run(run, flag="RUN_DIR")  # builds the data at the fit's (or this process's) count
        summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
        torch.set_num_threads(int(summary.get("threads") or args.threads))
        algo, engine = federation.algorithm, federation.engine
        if not isinstance(algo, FedSPD):
            sys.exit(f"fedspd_clusters: {run} trained {type(algo).__name__}, not FedSPD; pass a FedSPD run")
        final = engine.get_params()

        def cast(stacked: dict[str, Tensor], final: dict[str, Tensor] = final) -> dict[str, Tensor]:
            return {n: stacked[n].to(final[n]) for n in final}

        n_clusters = next(iter(algo.clusters.values())).shape[1]
        stages = {
            f"cluster {s}": cast({n: t[:, s] for n, t in algo.clusters.items()}) for s in range(n_clusters)
        }
        own_per_cluster = torch.stack(
            [evaluate(engine, stages[f"cluster {s}"], federation.test).accuracy for s in range(n_clusters)]
        )
        best = own_per_cluster.argmax(0)
        stages["best cluster"] = {
            n: torch.stack([stages[f"cluster {int(s)}"][n][c] for c, s in enumerate(best)]) for n in final
        }
        stages["mixture"] = cast(mixture(algo.clusters, algo.share))
        stages.update(final_updates(federation, stages["mixture"]))
        replayed = stages.pop(f"final update {algo.final_steps}", stages["mixture"])
        same = all(torch.equal(replayed[n], final[n]) for n in final)
        stages["final"] = final
        share = algo.share.double().mean(0)
        print(f"{run.name}: {n_clusters} clusters, mean proportions {[round(float(p), 3) for p in share]}")
        print(f"  the final updates replayed from the mixture give the run's final model: {same}")
        print(f"  {'model':<13} {'own':>6} {'entry':>6}")
        for name, params in stages.items():
            own, entry = own_and_entry(engine, params, federation.test)
            print(f"  {name:<13} {own:6.3f} {entry:6.3f}")


if __name__ == "__main__":
    main()
