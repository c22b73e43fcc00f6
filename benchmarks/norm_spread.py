"""Honest spread of received-message norms: what sets the wire's default ``max_norm_ratio``.

Every shipped config is run clean (no faults, nothing rejected for its norm: ``max_norm_ratio`` is
infinite) for its own number of rounds capped at ``--rounds`` (default 50; early stopping
callbacks are dropped so every round is measured), and every message a receiver validates (:meth:`Wire.accept
<lightning_fed.comm.wire.Wire.accept>`) is recorded as its ratio ``rho_e = ||r_e|| / ref_e`` to the
reference the receiver holds it to (:meth:`Wire.norms_and_reference
<lightning_fed.comm.wire.Wire.norms_and_reference>`): ``own`` = the receiver's own shared-parameter
norm (ABPS/DeceFL peers, a FedAvg center checking the download), ``median`` = the median norm of
what the receiver got (the FedAvg server checking the uploads). Every method here sends parameters
(FedAvg-X / ABPS-X keep their momentum on the receiving side), never deltas, so both references
measure the same kind of vector.

Printed per config and reference: the number of messages, min / median / 99th / 99.9th percentile
/ max of ``rho`` over all rounds, and the round of the max. A default ``T`` is safe when
``max rho < T`` (no honest message rejected) and ``10 * min rho > T`` (a ``{scale: 10}`` attack on
any honest message is rejected). Fashion-MNIST configs (EdgeDRM, DisPFL, FedSPD) need
``/usr/share/datasets/fashion-mnist`` and are skipped with a message when it is absent.

With ``--update`` the run also carries a :class:`~lightning_fed.comm.norm_bound.NormBound` that
rejects nothing (``T`` and ``L`` out of reach) and records, for every message it covers, the two
ratios its defaults are set from: ``upd`` = ``||m_e - a_e|| / ref_t`` (the update over the
windowed median; an honest maximum below ``T = max_update_ratio`` means no honest rejection) and
``low`` = ``||m_e|| / ||a_e||`` (an honest minimum above ``L = min_norm_ratio``, an honest maximum
below ``H = max_norm_ratio``) and ``proj`` = ``<m_e, a_e> / ||a_e||^2`` (an honest minimum above
``P = min_projection_ratio``), per channel
(``server``: uploads, ``centers``: what centers receive). A ``{scale: X}`` attacker's update is about
``|X - 1| ||a_e||``, so it is caught when ``|X - 1| ||a_e|| > T ref_t``; the ``a/ref`` column
prints the smallest ``||a_e|| / ref_t`` (the smallest ``|X - 1|`` caught is ``T`` over it).

Run: ``python benchmarks/norm_spread.py [--configs configs/fedavg.yaml ...] [--rounds 50] [--update]``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lightning_fed.comm import NormBound, Wire
from lightning_fed.comm.norm_bound import projection

CONFIGS = (
    "configs/fedavg.yaml",
    "configs/fedavg_x.yaml",
    "configs/fedprox.yaml",
    "configs/abps.yaml",
    "configs/abps_x.yaml",
    "configs/decefl.yaml",
    "configs/edgedrm_fmnist.yaml",
)
FMNIST = Path("/usr/share/datasets/fashion-mnist")


def build_federation(config: str, rounds: int, wire_kwargs: dict[str, Any], overrides: tuple[str, ...] = ()):
    """The federation of ``config`` (parsed by ``lightning-fed fit``'s parser) on a CPU Fabric.

    Args:
        config: Path of a shipped YAML config.
        rounds: At most this many rounds (``trainer.rounds`` = the config's, capped).
        wire_kwargs: Keyword arguments of the :class:`Wire` (the config's ``wire.hook`` and
            ``faults`` are added unless given); ``wire_cls`` picks a subclass.
        overrides: Further ``--key=value`` options.
    """
    from lightning.fabric import Fabric

    from lightning_fed.cli import fit_parser
    from lightning_fed.federation import Federation

    parser = fit_parser()
    cfg = parser.parse_args(["--config", config, *overrides])
    cfg.trainer.rounds = min(cfg.trainer.rounds, rounds)
    cfg.callbacks = None
    init = (getattr(parser, "instantiate", None) or parser.instantiate_classes)(cfg)
    kwargs = {"hook": init.wire.hook, "faults": init.wire.faults, **wire_kwargs}
    wire = kwargs.pop("wire_cls", Wire)(**kwargs)
    data = init.data.build(init.seed)
    fabric = Fabric(accelerator="cpu", devices=1)
    return Federation(
        data, init.model, init.algorithm, init.trainer, fabric=fabric, seed=init.seed, wire=wire
    )


class RecordingWire(Wire):
    """A wire that records, per reference kind, every validated message's ratio and round."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ratios: dict[str, list[Tensor]] = defaultdict(list)
        self.rounds: dict[str, list[Tensor]] = defaultdict(list)

    def accept(
        self, received: dict[str, Tensor], own: dict[str, Tensor] | None, round_idx: int, **edges: Tensor
    ) -> Tensor:
        kind = "median" if own is None else "own"
        rho = self.norm_ratios(received, own)
        self.ratios[kind].append(rho)
        self.rounds[kind].append(torch.full_like(rho, round_idx))
        return super().accept(received, own, round_idx, **edges)


class RecordingBound(NormBound):
    """A :class:`NormBound` that passes every finite message and records, per channel, the update
    ratio ``||u_e|| / ref_t``, the norm ratio ``||m_e|| / ||a_e||`` and ``||a_e|| / ref_t``."""

    def __init__(self) -> None:
        super().__init__(
            max_update_ratio=1e300, min_norm_ratio=0.0, max_norm_ratio=math.inf, min_projection_ratio=None
        )
        self.records: dict[str, list[Tensor]] = defaultdict(list)

    def verdict(
        self, channel: str, round_idx: int, message_norms: Tensor, update_norms: Tensor, anchor_norms: Tensor
    ) -> tuple[Tensor, Tensor]:
        out = super().verdict(channel, round_idx, message_norms, update_norms, anchor_norms)
        ref = self.refs[channel][round_idx]
        rounds = torch.full_like(update_norms, round_idx)
        self.records[f"upd-{channel}"].append(torch.stack([update_norms / ref, rounds]))
        self.records[f"low-{channel}"].append(torch.stack([message_norms / anchor_norms, rounds]))
        self.records[f"proj-{channel}"].append(
            torch.stack([projection(message_norms, update_norms, anchor_norms), rounds])
        )
        self.records[f"a/ref-{channel}"].append(torch.stack([anchor_norms / ref, rounds]))
        return out


def spread(rho: Tensor, rounds: Tensor) -> dict[str, float]:
    """min / median / p99 / p99.9 / max of the finite ratios and the round of the max."""
    keep = torch.isfinite(rho)
    rho, rounds = rho[keep], rounds[keep]
    q = torch.quantile(rho, torch.tensor([0.5, 0.99, 0.999], dtype=torch.float64)).tolist()
    top = int(rho.argmax())
    return {
        "n": rho.numel(),
        "min": float(rho.min()),
        "p50": q[0],
        "p99": q[1],
        "p99.9": q[2],
        "max": float(rho[top]),
        "round": int(rounds[top]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--update", action="store_true", help="also record the update bound's ratios")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    header = f"{'config':28s} {'ref':14s} {'msgs':>8s} {'min':>7s} {'p50':>7s} {'p99':>7s} {'p99.9':>7s}"
    print(f"{header} {'max':>7s} {'@round':>6s} {'10*min':>7s} {'s':>6s}", flush=True)
    for config in args.configs:
        if "FashionMNIST" in Path(config).read_text() and not FMNIST.is_dir():
            print(f"{config:28s} skipped: Fashion-MNIST not found at {FMNIST}", flush=True)
            continue
        t0 = time.perf_counter()
        bound = RecordingBound() if args.update else None
        kwargs = {"wire_cls": RecordingWire, "max_norm_ratio": math.inf, "norm_bound": bound}
        fed = build_federation(config, args.rounds, kwargs)
        fed.fit()
        wire = fed.wire
        for kind, parts in sorted({} if bound is None else bound.records.items()):
            both = torch.cat(parts, dim=1)
            wire.ratios[kind], wire.rounds[kind] = [both[0]], [both[1]]
        for kind in sorted(wire.ratios):
            s = spread(torch.cat(wire.ratios[kind]), torch.cat(wire.rounds[kind]))
            print(
                f"{Path(config).stem:28s} {kind:14s} {s['n']:>8d} {s['min']:>7.3f} {s['p50']:>7.3f} "
                f"{s['p99']:>7.3f} {s['p99.9']:>7.3f} {s['max']:>7.3f} {s['round']:>6d} "
                f"{10 * s['min']:>7.2f} {time.perf_counter() - t0:>6.0f}",
                flush=True,
            )
    print(f"{time.perf_counter() - start:.0f} s in all; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
