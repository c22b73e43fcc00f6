"""Why no norm test sees label flipping: the direction of flipped uploads against honest ones.

A center trained on flipped labels sends an upload of honest norm (issue 32's grid: 4-9 of 1,035
flipped FedAvg uploads rejected by the bound in 3 seeds), so any defence that rejects whole messages
would have to read its direction. This script measures whether a direction test could: for each
round of a FedAvg run (``--config``, default ``configs/fedavg.yaml``) it records, at the server, the
update of every upload (the upload minus the sender's round-start model, as
:class:`~lightning_fed.comm.norm_bound.NormBound` anchors it), the coordinate-wise median of the
round's updates ``med_t``, and each update's cosine with it, ``cos_e = <u_e, med_t> / (||u_e||
||med_t||)`` (the median counts centers, so fewer than half of them cannot turn it). It runs the
federation clean and with ``--attackers`` (a fraction of the centers, the largest by rows or at
random) flipping their labels from ``--from-round``, and prints per round the honest uploads'
smallest cosine, their 5 % quantile and median, and the attackers' largest and median cosine.

For a peer method (``--config configs/abps.yaml``: no server, so no cosine table) it prints instead
whether selection steers away from the flipped peers: per round, the partnerships honest receivers
accepted and the share of them whose partner is an attacker, against the attackers' share of the
centers (what a selection that learned nothing would give).

A test ``cos_e >= c`` keeps every honest upload and rejects every flipped one only when the smallest
honest cosine (of the clean run and of the attacked run's honest uploads) is above the largest
attacker cosine; the printed ``margin`` is that difference over the attacked rounds (negative: no
such ``c`` exists). Each run is one seed: the margin is a measurement, not a default.

Run: ``python benchmarks/flip_direction.py [--centers 60] [--stays 18600] [--rounds 15] [--seed 0]
[--attackers 0.1] [--pick largest] [--from-round 5]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))

from norm_spread import build_federation

from lightning_fed.comm import FaultInjection, NormBound, Wire
from lightning_fed.comm.wire import SERVER


class DirectionWire(Wire):
    """A wire that records, for every server round, ``(round, senders, cosines with med_t)``."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.cosines: list[tuple[int, Tensor, Tensor]] = []

    def accept(
        self,
        received: dict[str, Tensor],
        own: dict[str, Tensor] | Tensor | None,
        round_idx: int,
        **edges: Tensor,
    ) -> Tensor:
        src, dst = edges.get("src"), edges.get("dst")
        owner = self._owners(received, src, dst)
        if owner is not None and bool((dst == SERVER).all()):
            rows = self._anchor_rows(tuple(received), owner)
            update = torch.cat(
                [(received[k].double() - rows[k].double()).reshape(len(owner), -1) for k in received], 1
            )
            med = update.median(0).values
            cos = (update @ med) / (update.norm(dim=1) * med.norm()).clamp_min(1e-300)
            self.cosines.append((round_idx, src.clone(), cos))
        return super().accept(received, own, round_idx, **edges)


def record(args: argparse.Namespace, attack: bool) -> tuple[list, set[int], list[tuple[int, int, int]]]:
    """The cosines of one run, its attackers (empty for the clean run) and, for an algorithm that
    picks partners (ABPS: ``last_partners``), per round ``(round, partnerships accepted by honest
    receivers, of which from attackers)``."""
    spec = {"kind": "label_flip", "centers": args.attackers, "pick": args.pick, "from_round": args.from_round}
    faults = FaultInjection(attacks=[spec]) if attack else None
    fed = build_federation(
        args.config,
        args.rounds,
        {"faults": faults, "norm_bound": NormBound(), "wire_cls": DirectionWire},
        (
            f"--seed={args.seed}",
            f"--data.init_args.num_centers={args.centers}",
            f"--data.init_args.num_stays={args.stays}",
        ),
    )
    algorithm, partners = fed.algorithm, []
    aggregate = algorithm.aggregate

    def counted(ctx: Any, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        out = aggregate(ctx, params, wire)
        lists = getattr(algorithm, "last_partners", None)
        if lists is not None:
            bad = wire.faults.flipped(ctx.round) if wire.faults is not None else set()
            honest = [p for i, p in enumerate(lists) if i not in bad]
            partners.append((ctx.round, sum(map(len, honest)), sum(j in bad for p in honest for j in p)))
        return out

    algorithm.aggregate = counted
    fed.fit()
    flipped = set(fed.wire.faults.flipped(args.rounds - 1)) if attack else set()
    return fed.wire.cosines, flipped, partners


def print_partners(partners: list[tuple[int, int, int]], attackers: int, centers: int) -> None:
    """Attackers' share of the partnerships honest receivers accepted, per round, against chance."""
    chance = f"share (chance {attackers / centers:.3f})"
    print(f"\n| round | honest receivers' partnerships | from attackers | {chance} |")
    print("|---|---|---|---|")
    for rnd, edges, bad in partners:
        print(f"| {rnd} | {edges} | {bad} | {bad / max(1, edges):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/fedavg.yaml")
    parser.add_argument("--centers", type=int, default=60)
    parser.add_argument("--stays", type=int, default=18600)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--attackers", type=float, default=0.1)
    parser.add_argument("--pick", choices=("largest", "random"), default="largest")
    parser.add_argument("--from-round", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    print(f"load average (1 min) {load:.2f}; {args.centers} centers, seed {args.seed}", flush=True)
    attacked, flipped, partners = record(args, attack=True)
    if partners:
        print_partners(partners, len(flipped), args.centers)
    if not attacked:  # no server uploads: nothing to compare with a clean run
        return
    clean, _, _ = record(args, attack=False)
    head = "clean: honest min | q05 | median | attacked: honest min | attackers max | median | margin"
    print(f"| round | {head} |")
    print("|---|---|---|---|---|---|---|---|")
    honest_min, attacker_max = [], []
    for (rnd, _, cos), (_, src, cos_a) in zip(clean, attacked, strict=True):
        bad = torch.tensor([int(s) in flipped for s in src.tolist()], dtype=torch.bool)
        q05 = float(cos.quantile(0.05))
        row = [f"{float(cos.min()):+.3f}", f"{q05:+.3f}", f"{float(cos.median()):+.3f}"]
        row.append(f"{float(cos_a[~bad].min()):+.3f}")
        if bool(bad.any()) and rnd >= args.from_round:
            honest_min.append(min(float(cos.min()), float(cos_a[~bad].min())))
            attacker_max.append(float(cos_a[bad].max()))
            row += [f"{attacker_max[-1]:+.3f}", f"{float(cos_a[bad].median()):+.3f}"]
            row.append(f"{honest_min[-1] - attacker_max[-1]:+.3f}")
        else:
            row += ["-", "-", "-"]
        print(f"| {rnd} | " + " | ".join(row) + " |", flush=True)
    if honest_min:
        print(
            f"over the attacked rounds: clean honest min {min(honest_min):+.3f}, "
            f"attackers max {max(attacker_max):+.3f}, margin {min(honest_min) - max(attacker_max):+.3f}; "
            f"load average (1 min) {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
