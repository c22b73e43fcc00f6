"""Sustained attacks against the defences: test AUROC minus clean, with a center-paired interval.

For each method config (default ``configs/fedavg.yaml`` and ``configs/abps.yaml``), on a reduced
federation (``--centers`` synthetic centers, default 60, with ``--stays`` stays; ``--rounds``
rounds, default 20; ``--seeds``), every attack of :data:`ATTACKS` is run sustained from
``--from-round`` (default 5) by each attacker set of :data:`ATTACKERS` (a fraction of the centers,
the largest by training rows or at random from the run seed) under each defence of
:data:`DEFENCES` (the wire's ratio test, ``none``, the NormBound, and the robust aggregators of
:mod:`lightning_fed.aggregation.robust` behind the ratio test: ``median``, ``trimmed``, ``krum``,
``clipping``), next to the clean run under the same defence. Printed (a Markdown table, one row
per method, attackers, attack, defence): the mean over centers and seeds of the final test AUROC
minus the clean run's (same seed, same defence), its 95 % interval from the per-center paired
differences (t over centers, pooled over seeds), the same over the honest centers alone (``honest
centers``: a label-flipping center trains its own model on flipped labels, so its own test AUROC
falls whatever the defence does; the first column counts that self-harm, this one only the damage
the attack does to the others), the honest and attacker messages rejected, and the final model norm
(mean over centers) against the clean run's. Honest rejections are the clean run's (nothing is
attacked there).

Reduced grid: the issue asks 230 centers and 3 seeds; on a shared 2-core machine the default is 60
centers, 1 seed, 20 rounds; pass ``--centers 230 --seeds 0 1 2 --rounds 50`` for the full one.

Run: ``python benchmarks/attack_grid.py [--configs ...] [--centers 60] [--stays 18500] [--rounds 20]
[--seeds 0] [--from-round 5] [--defences none ratio bound median trimmed krum clipping] [--attacks ...
(``neg1x`` for ``-1x``)]
[--attackers "1% largest" ...]``. A last table gives each defence's cost without attackers: its clean
run's AUROC against the first defence's, paired by center.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from norm_spread import build_federation

from lightning_fed.comm import FaultInjection, NormBound

#: Attack name -> ``kind`` of a sustained attack.
ATTACKS = {
    "3x": {"scale": 3.0},
    "4.9x": {"scale": 4.9},
    "0.1x": {"scale": 0.1},
    "-1x": {"scale": -1.0},
    "gaussian": "gaussian",
    "label flip": "label_flip",
}

#: Attacker set name -> (fraction of centers, pick).
ATTACKERS = {
    "1% largest": (0.01, "largest"),
    "5% largest": (0.05, "largest"),
    "10% largest": (0.10, "largest"),
    "1% random": (0.01, "random"),
    "5% random": (0.05, "random"),
    "10% random": (0.10, "random"),
}


def _attack_name(value: str) -> str:
    """An ``--attacks`` value: a key of :data:`ATTACKS`; ``neg1x`` stands for ``-1x``, which argparse
    would read as an option."""
    name = {"neg1x": "-1x"}.get(value.strip(), value.strip())
    if name not in ATTACKS:
        raise argparse.ArgumentTypeError(f"unknown attack {value!r}; choose from {[*ATTACKS, 'neg1x']}")
    return name


def _aggregator(name: str, **init_args: object) -> tuple[str, ...]:
    """The overrides choosing ``lightning_fed.aggregation.<name>(**init_args)`` as the aggregator."""
    key = "--algorithm.init_args.aggregator"
    return (
        f"{key}=lightning_fed.aggregation.{name}",
        *(f"{key}.init_args.{k}={v}" for k, v in init_args.items()),
    )


#: Defence name -> Wire keyword arguments and algorithm overrides (the robust aggregators, each
#: behind the default ratio test; ``{f}`` / ``{m}`` are filled per run: ``f = ceil(0.1 C)``, the
#: largest attacker share of :data:`ATTACKERS`, and ``m = C - 2f``; at an ABPS / DeceFL receiver
#: with fewer models ``m`` is cut to their number, so Multi-Krum there averages them all).
DEFENCES: dict[str, tuple[dict, tuple[str, ...]]] = {
    "none": ({"max_norm_ratio": math.inf}, ()),
    "ratio": ({}, ()),
    "bound": ({"norm_bound": "NormBound"}, ()),
    "median": ({}, _aggregator("CoordinateMedian")),
    "trimmed": ({}, _aggregator("TrimmedMean", beta=0.1)),
    "krum": ({}, _aggregator("Krum", f="{f}", m="{m}")),
    # tau = 1: near the largest honest update norm of the reduced grid's FedAvg (median 0.16-0.23,
    # max 1.07-2.12 over rounds 0-14, seed 0).
    "clipping": ({}, _aggregator("CenteredClipping", tau=1.0)),
}


def _wire(kwargs: dict) -> dict:
    return {k: NormBound() if v == "NormBound" else v for k, v in kwargs.items()}


def run(config: str, args, seed: int, faults: FaultInjection | None, defence: str):
    """Per-center final test AUROC, rejected payloads, mean model norm of one run."""
    wire_kwargs, extra = DEFENCES[defence]
    f = math.ceil(0.1 * args.centers)
    extra = tuple(x.format(f=f, m=max(1, args.centers - 2 * f)) for x in extra)
    overrides = (
        f"--seed={seed}",
        f"--data.init_args.num_centers={args.centers}",
        f"--data.init_args.num_stays={args.stays}",
        *extra,
    )
    fed = build_federation(config, args.rounds, {"faults": faults, **_wire(wire_kwargs)}, overrides)
    fed.fit()
    auroc = fed.evaluate("test").auroc.double()
    params = fed.engine.get_params()
    norms = torch.sqrt(sum(t.double().reshape(len(t), -1).pow(2).sum(1) for t in params.values()))
    faults = fed.wire.faults
    attackers = torch.zeros(len(auroc), dtype=torch.bool)
    for ids in faults.attackers if faults is not None else ():
        attackers[list(ids or ())] = True
    return auroc, fed.wire.rejected_total(), float(norms.mean()), attackers


def interval(diff: torch.Tensor) -> tuple[float, float, float]:
    """Mean and 95 % t-interval (normal quantile 1.96 for n > 30) of the finite differences."""
    d = diff[torch.isfinite(diff)]
    mean = float(d.mean())
    half = 1.96 * float(d.std()) / math.sqrt(d.numel()) if d.numel() > 1 else math.nan
    return mean, mean - half, mean + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["configs/fedavg.yaml", "configs/abps.yaml"])
    parser.add_argument("--centers", type=int, default=60)
    parser.add_argument("--stays", type=int, default=18500)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--from-round", type=int, default=5)
    parser.add_argument("--defences", nargs="+", default=list(DEFENCES), choices=list(DEFENCES))
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), type=_attack_name)
    parser.add_argument("--attackers", nargs="+", default=list(ATTACKERS), choices=list(ATTACKERS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    print(
        f"{args.centers} centers, {args.stays} stays, {args.rounds} rounds, seeds {args.seeds}, "
        f"sustained from round {args.from_round}",
        flush=True,
    )
    columns = [
        "method",
        "attackers",
        "attack",
        "defence",
        "AUROC - clean [95% CI]",
        "honest centers",
        "rejected clean / attacked",
    ]
    print("| " + " | ".join([*columns, "norm / clean", "s"]) + " |")
    print("|" + "|".join("---" for _ in range(len(columns) + 2)) + "|", flush=True)
    cleans: dict[tuple[str, str], dict[int, tuple]] = {}
    for config in args.configs:
        method = Path(config).stem
        for defence in args.defences:
            clean = cleans[method, defence] = {s: run(config, args, s, None, defence) for s in args.seeds}
            for who in args.attackers:
                fraction, pick = ATTACKERS[who]
                for attack in args.attacks:
                    t0 = time.perf_counter()
                    spec = {
                        "kind": ATTACKS[attack],
                        "centers": fraction,
                        "pick": pick,
                        "from_round": args.from_round,
                    }
                    diffs, honest_diffs, rej, ratio = [], [], 0, []
                    for s in args.seeds:
                        auroc, rejected, norm, attackers = run(
                            config, args, s, FaultInjection(attacks=[spec]), defence
                        )
                        diffs.append(auroc - clean[s][0])
                        honest_diffs.append(diffs[-1][~attackers])
                        rej += rejected
                        ratio.append(norm / clean[s][2])
                    mean, lo, hi = interval(torch.cat(diffs))
                    h_mean, h_lo, h_hi = interval(torch.cat(honest_diffs))
                    honest = sum(clean[s][1] for s in args.seeds)
                    seconds = time.perf_counter() - t0
                    print(
                        f"| {method} | {who} | {attack} | {defence} | {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] | "
                        f"{h_mean:+.4f} [{h_lo:+.4f}, {h_hi:+.4f}] | "
                        f"{honest} / {rej} | {sum(ratio) / len(ratio):.2f} | {seconds:.0f} |",
                        flush=True,
                    )
    print_clean_costs(cleans, args.defences)
    print(f"{time.perf_counter() - start:.0f} s in all; load average {os.getloadavg()}")


def print_clean_costs(cleans: dict[tuple[str, str], dict[int, tuple]], defences: list[str]) -> None:
    """What each defence costs with no attacker: the clean run's mean test AUROC, and its difference
    to the first defence's clean run (``none`` by default), paired by center and seed."""
    base = defences[0]
    print(f"\n| method | defence | clean test AUROC | minus {base} [95% CI] | rejected (honest) |")
    print("|---|---|---|---|---|")
    for (method, defence), clean in cleans.items():
        auroc = torch.cat([clean[s][0] for s in sorted(clean)])
        ref = torch.cat([cleans[method, base][s][0] for s in sorted(clean)])
        mean, lo, hi = interval(auroc - ref)
        rejected = sum(clean[s][1] for s in clean)
        print(
            f"| {method} | {defence} | {float(auroc[torch.isfinite(auroc)].mean()):.4f} | "
            f"{mean:+.4f} [{lo:+.4f}, {hi:+.4f}] | {rejected} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
