"""Would fusing the packed round's elementwise passes with ``torch.compile`` bring it to its floor?

``benchmarks/engine.py --phases`` shows where the packed round's time goes beyond its matmuls: the
ReLU/dropout gates and the elementwise backward inside the loss and gradients, and the optimizer
step, each a handful of passes over ``[k, B, H]`` or ``[k, D]`` tensors that torch runs one kernel
at a time. This script measures what fusing them would give and what it would cost, on the
engine's own shapes (230 centers, batch 128, the MortalityMLP's first hidden layer and its 16,129
parameters), side by side in one run:

* ``gate``  the forward gate of a hidden layer, ``g = 1[z > 0] 1[u >= t] s`` and ``h = z g`` from the
  pre-activation ``z`` and the 16-bit uniforms ``u``: the engine's own
  ``lightning_fed.models.mlp._relu_dropout_gate`` followed by ``h.mul_(g)``, eager, against one
  compiled function;
* ``adam``  one Adam step of every center (:meth:`lightning_fed.engine.optim.StackedAdam.step`, the
  engine's own code, eager) against the same formula compiled.

Both sides write into buffers made once, as the engine does. For each it prints the seconds of the
first call (compiling: cold the first time on a machine, seconds once inductor's on-disk cache
holds the kernel), the median milliseconds per call after it, and whether the compiled
result has the eager result's bits (the engine's results are checked bit for bit against the
sequential reference, so a fused kernel must keep them). Also the seconds that importing
what compiling needs adds to a run's start-up.

Run: ``python benchmarks/engine_fusion.py [--threads 2] [--repeats 20]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from torch import Tensor

from lightning_fed.models.mlp import _dropout_threshold, _relu_dropout_gate, _uniform16

CENTERS, BATCH, HIDDEN, PARAMS = 230, 128, 128, 16_129
#: The MortalityMLP's dropout rate: the gate's threshold on a signed 16-bit uniform and its scale.
DROPOUT = 0.2
THRESHOLD, SCALE = _dropout_threshold(DROPOUT)


def _load() -> str:
    return "load " + " ".join(f"{v:.2f}" for v in os.getloadavg())


class FixedWords:
    """A per-center dropout source (the ``words(rows, count)`` of the engine's streams) that hands
    out the same words on every call, so the eager and the compiled gate read the same uniforms."""

    def __init__(self, table: Tensor) -> None:
        self.table = table  # int64 [centers, words]

    def words(self, rows: int, count: int) -> Tensor:
        return self.table[:rows, :count]


def gate_eager(z: Tensor, source: FixedWords, workspace: dict[str, Tensor]) -> Tensor:
    """The engine's own gate (``_relu_dropout_gate`` into its reused buffers), then ``h = z.mul_(g)``
    (``z`` becomes ``h``); returns ``g``."""
    gate = _relu_dropout_gate(z, DROPOUT, source, workspace, "gate")
    z.mul_(gate)
    return gate


def gate_fused(z: Tensor, u: Tensor, gate: Tensor) -> None:
    """The same gate as one expression, written into a reused buffer (for ``torch.compile``)."""
    gate.copy_(((z > 0) & (u >= THRESHOLD)).to(z.dtype) * SCALE)
    z.mul_(gate)


def adam_fused(p: Tensor, g: Tensor, m: Tensor, v: Tensor, lr_bc1: Tensor, bc2_sqrt: Tensor) -> None:
    """StackedAdam's formula (L2 decay 1e-5, betas 0.9/0.999, eps 1e-8) with per-center corrections."""
    g = g + p * 1e-5
    m.lerp_(g, 0.1)
    v.mul_(0.999).addcmul_(g, g, value=0.001)
    denom = v.sqrt() / bc2_sqrt + 1e-8
    p.addcdiv_(lr_bc1 * m, denom, value=-1.0)


def _import_seconds() -> float:
    """Seconds that importing ``torch._dynamo`` and ``torch._inductor`` takes in a fresh process that
    has already imported torch, Lightning's Fabric and the package (what a run would add)."""
    code = (
        "import time, lightning.fabric, lightning_fed.federation; t = time.perf_counter(); "
        "import torch._dynamo, torch._inductor.compile_fx; print(time.perf_counter() - t)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def _ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per line (median)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from lightning_fed.engine.optim import StackedAdam

    print(f"torch {torch.__version__}, {args.threads} threads, {CENTERS} centers [{_load()}]")
    print(
        f"import of what compiling needs, after torch, Lightning and the package: {_import_seconds():.2f} s"
    )
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(CENTERS, BATCH, HIDDEN, generator=gen)
    words = (BATCH * HIDDEN + 3) // 4  # four 16-bit uniforms per 64-bit word, as the engine draws them
    source = FixedWords(
        torch.randint(-(2**63), 2**63 - 1, (CENTERS, words), dtype=torch.int64, generator=gen)
    )
    u = _uniform16(z, source)
    h_fused, g_fused, h_eager = torch.empty_like(z), torch.empty_like(z), torch.empty_like(z)
    workspace: dict[str, Tensor] = {}
    fused = torch.compile(gate_fused, dynamic=True)
    t0 = time.perf_counter()
    fused(h_fused.copy_(z), u, g_fused)
    first = time.perf_counter() - t0
    g_eager = gate_eager(h_eager.copy_(z), source, workspace)
    same = torch.equal(h_fused, h_eager) and torch.equal(g_fused, g_eager)
    copy = _ms(lambda: h_eager.copy_(z), args.repeats)
    eager_ms = _ms(lambda: gate_eager(h_eager.copy_(z), source, workspace), args.repeats) - copy
    fused_ms = _ms(lambda: fused(h_fused.copy_(z), u, g_fused), args.repeats) - copy
    print(
        f"gate  [{CENTERS}, {BATCH}, {HIDDEN}]: first call {first:.1f} s; eager {eager_ms:.2f} ms, "
        f"compiled {fused_ms:.2f} ms ({eager_ms / fused_ms:.1f}x); same bits: {same} [{_load()}]"
    )

    adam = StackedAdam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-5)
    p = torch.randn(CENTERS, PARAMS, generator=gen)
    grad = 1e-2 * torch.randn(CENTERS, PARAMS, generator=gen)
    state = adam.init_state({"flat": p})
    for name in ("exp_avg.flat", "exp_avg_sq.flat"):  # a few steps in, so the moments are not zero
        state[name].copy_(1e-3 * torch.rand(CENTERS, PARAMS, generator=gen))
    state["step"].fill_(3)
    eager_p, eager_state = p.clone(), {n: t.clone() for n, t in state.items()}
    adam.step({"flat": eager_p}, {"flat": grad.clone()}, eager_state, CENTERS)
    steps = torch.full((CENTERS,), 4, dtype=torch.int64)
    lr_bc1 = (1e-3 / (1.0 - adam._powers1(steps))).to(torch.float32).view(-1, 1)
    bc2_sqrt = torch.sqrt(1.0 - adam._powers2(steps)).to(torch.float32).view(-1, 1)
    compiled = torch.compile(adam_fused, dynamic=True)
    fused_p, m, v = p.clone(), state["exp_avg.flat"].clone(), state["exp_avg_sq.flat"].clone()
    t0 = time.perf_counter()
    compiled(fused_p, grad.clone(), m, v, lr_bc1, bc2_sqrt)
    first = time.perf_counter() - t0
    same = {
        "p": torch.equal(fused_p, eager_p),
        "m": torch.equal(m, eager_state["exp_avg.flat"]),
        "v": torch.equal(v, eager_state["exp_avg_sq.flat"]),
    }
    worst = float((fused_p - eager_p).abs().max())
    work = (p.clone(), grad.clone(), state["exp_avg.flat"].clone(), state["exp_avg_sq.flat"].clone())

    def eager_step() -> None:
        work_state = {"step": state["step"].clone(), "exp_avg.flat": work[2], "exp_avg_sq.flat": work[3]}
        adam.step({"flat": work[0]}, {"flat": work[1]}, work_state, CENTERS)

    eager_ms = _ms(eager_step, args.repeats)
    fused_ms = _ms(lambda: compiled(work[0], work[1], work[2], work[3], lr_bc1, bc2_sqrt), args.repeats)
    print(
        f"adam  [{CENTERS}, {PARAMS}]: first call {first:.1f} s; eager {eager_ms:.2f} ms, compiled "
        f"{fused_ms:.2f} ms ({eager_ms / fused_ms:.1f}x); same bits: "
        + ", ".join(f"{k} {ok}" for k, ok in same.items())
        + f" (largest parameter difference {worst:.2e}) [{_load()}]"
    )


if __name__ == "__main__":
    main()
