"""EdgeDRM stage II: frozen encoders, private heads and routing potentials (Sec. 3.1, App. B.4, D.2, D.3.2).

With each client's representations ``z_ur = g_{theta_u}(x_ur)`` of its own training rows computed
once (encoders frozen), stage II minimizes the balanced graph objective

    m L_G = sum_u L_u,   L_u = lambda T_u(alpha_u, beta_u) + kappa sum_{v in N(u)} L_{uv}^{(u)}(a_u, a_v),
    kappa = m (1 - lambda) / (2|E|)

(see :mod:`lightning_fed.algorithms.edgedrm.potentials` for the derivation), over the linear heads
``(beta_u, alpha_u)`` (``head.weight``, ``head.bias``) and the potentials ``a_u = (theta_u, b_u)``.
The task term only moves the heads and the edge terms only move the potentials (routing gradients
do not reach the encoder or the head, App. D.2.1). Every term is evaluated on the owning client's
rows only (Sec. 3.1: "all evaluated on D_i"): ``T_u`` and each ``L_{uv}^{(u)}`` are means over
``u``'s rows, ``L_{uv}^{(v)}`` over ``v``'s. All clients and edges are evaluated at once on
zero-padded ``[C, N, d]`` tensors.

Optimizer (:class:`Stage2Optim`), default the paper's (App. D.2.1, D.3.2): mini-batch SGD with
momentum 0.9 and weight decay 5e-4, ``R`` rounds of ``S`` local mini-batches, the cosine rate

    eta_r = (lr / 2) {1 + cos(pi (r - 1) / H)},   r = 1, ..., R   (lr 0.01, H = 600: eta_r = 0.005 {...})

held for the ``S`` steps of round ``r``, the momentum buffer reset at every round start ("SGD
momentum is 0.9, reset each round", D.3.2, "momentum, weight decay, and batch sizes are as above" for
stage II). One step, for every client ``u`` at once from a common snapshot of all parameters:

1. ``u`` draws a mini-batch ``B_u`` of ``batch_size`` of its own rows (its own seeded stream,
   :func:`stage2_batches`; independent of every other client);
2. the mini-batch estimates ``T_u`` and every ``L_{uv}^{(u)}`` (means over ``B_u``): an unbiased
   estimate of ``L_u`` at the snapshot;
3. autograd on the summed loss ``sum_u L_u`` gives the head gradient ``lambda grad T_u`` and the
   potential gradient ``G_u = grad_{a_u} L_u + kappa sum_{v in N(u)} grad_{a_u} L_{uv}^{(v)}`` (App. B.4),
   the neighbour contributions computed on the neighbours' mini-batches ("Endpoint owners accumulate
   both local and neighbor contributions from a common snapshot before updating", D.3.2);
4. SGD on the stacked ``[C, ...]`` tensors (elementwise, so exactly one SGD per client) with
   ``torch.optim.SGD``'s L2 weight decay (added to the gradient, not to the logged loss):
   ``g <- grad + wd p``, ``buf <- momentum buf + g`` (``buf = g`` on a round's first step),
   ``p <- p - eta_r buf``.

Weight decay applies to the heads and to the potentials (D.3.2: "the head/router learning rate ...;
momentum, weight decay, and batch sizes are as above"). On the potentials it picks the
minimum-norm member of the common-shift family (the objective is shift invariant) and shrinks the
slopes slightly; it does not depend on lambda. With this optimizer lambda sets the relative step
sizes of heads (``lambda``) and potentials (``kappa``), which is what the paper's Table 5 sweeps.

``name="adam"`` keeps the earlier fit: ``rounds`` full-batch Adam steps at the constant rate ``lr``
(momentum, weight decay, batch size, steps per round and horizon do not apply). Adam normalizes each
parameter's step by its own gradient scale, and the task and edge terms touch disjoint parameters,
so under full-batch Adam lambda and kappa have (almost) no effect: an explicit option only.

Potentials start at 0 (every ``phi_i = 1``). They are identified only up to a common shift, which
cancels in every edge difference. The representations are computed once, so (unlike the paper's
ISIC runs) no image augmentation enters stage II.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from lightning_fed.algorithms.edgedrm.potentials import Potentials, endpoint_losses, kappa, neighbour_table
from lightning_fed.engine.lr_schedule import Cosine
from lightning_fed.seeding import torch_generator

__all__ = ["OPTIMIZERS", "Stage2Optim", "Stage2Result", "fit_stage2", "pad_rows", "stage2_batches"]

#: The stage-II optimizers: the paper's mini-batch momentum SGD, and full-batch Adam.
OPTIMIZERS = ("sgd", "adam")


@dataclass(frozen=True)
class Stage2Optim:
    """How stage II is optimized (module docstring; defaults: the paper's App. D.2.1 / D.3.2).

    The messages name the :class:`~lightning_fed.algorithms.edgedrm.EdgeDRM` arguments that set each
    field (``algorithm.<name>``).

    Attributes:
        name: ``"sgd"`` (mini-batch momentum SGD, the paper's) or ``"adam"`` (full-batch, constant rate).
        lr: Base rate: ``eta_r = lr/2 (1 + cos(pi (r-1)/H))`` for SGD; Adam's constant rate.
        momentum: SGD momentum (0 <= momentum < 1).
        weight_decay: SGD L2 weight decay on heads and potentials.
        batch_size: Rows per client mini-batch (a client with fewer rows uses all of them).
        rounds: Stage-II rounds ``R`` (paper: 200 CIFAR, 50 ISIC); Adam: full-batch steps.
        steps_per_round: Mini-batch steps per round ``S`` (paper: 5, D.3.2).
        horizon: Cosine horizon ``H`` (paper: 600 in stage II); must be >= ``rounds``.
        reset_momentum: Reset the SGD momentum buffer at every round start (paper: yes).
    """

    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 32
    rounds: int = 200
    steps_per_round: int = 5
    horizon: int = 600
    reset_momentum: bool = True

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ValueError(
                f"algorithm.stage2_optimizer must be one of {list(OPTIMIZERS)}, got {self.name!r}"
            )
        if not math.isfinite(self.lr) or not self.lr > 0:
            raise ValueError(f"algorithm.lr must be > 0 (stage-II base rate), got {self.lr}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"algorithm.stage2_momentum must lie in [0, 1), got {self.momentum}")
        if not math.isfinite(self.weight_decay) or self.weight_decay < 0:
            raise ValueError(f"algorithm.stage2_weight_decay must be >= 0, got {self.weight_decay}")
        for field, value in (
            ("stage2_batch_size", self.batch_size),
            ("stage2_epochs", self.rounds),
            ("stage2_steps_per_round", self.steps_per_round),
            ("stage2_horizon", self.horizon),
        ):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"algorithm.{field} must be an integer >= 1, got {value}")
        if self.name == "sgd" and self.horizon < self.rounds:
            raise ValueError(
                f"algorithm.stage2_horizon ({self.horizon}) must be >= algorithm.stage2_epochs "
                f"({self.rounds}): the cosine rate would rise again past the horizon"
            )

    @property
    def steps(self) -> int:
        """Optimizer steps in all (each one exchanges potentials and gradients with the neighbours)."""
        return self.rounds * self.steps_per_round if self.name == "sgd" else self.rounds

    def lr_at(self, r: int) -> float:
        """SGD rate of round ``r`` (1-based): ``lr/2 (1 + cos(pi (r - 1) / H))``; Adam: ``lr``."""
        if self.name != "sgd":
            return self.lr
        return self.lr * Cosine(self.horizon).factor(r - 1)


@dataclass(frozen=True, eq=False)
class Stage2Result:
    """What stage II produced.

    Attributes:
        weight: New head weights ``[C, K, d]``.
        bias: New head biases ``[C, K]``.
        potentials: The fitted routing potentials with the training counts.
        history: Per-round scalars (``stage2_loss``, ``stage2_task``, ``stage2_route``; SGD: the
            round's mini-batch means and ``stage2_lr``).
    """

    weight: Tensor
    bias: Tensor
    potentials: Potentials
    history: list[dict[str, float]]


def pad_rows(rows: list[Tensor], fill: float = 0.0) -> tuple[Tensor, Tensor]:
    """Stack per-client ``[n_u, ...]`` into ``[C, max n, ...]`` and a bool row mask ``[C, max n]``."""
    n_max = max(int(r.shape[0]) for r in rows)
    out = rows[0].new_full((len(rows), n_max, *rows[0].shape[1:]), fill)
    mask = torch.zeros(len(rows), n_max, dtype=torch.bool, device=rows[0].device)
    for u, r in enumerate(rows):
        out[u, : r.shape[0]] = r
        mask[u, : r.shape[0]] = True
    return out, mask


def stage2_batches(n: int, batch_size: int, steps: int, seed: int, round_idx: int, client: int) -> Tensor:
    """Row indices of one client's mini-batches in one stage-II round, padded with -1.

    Like the stage-I schedule (:mod:`lightning_fed.engine.schedule`): the first ``steps`` batches of
    as many seeded permutations of the client's ``n`` rows as needed, each cut into batches of
    ``batch_size`` (the last one of a permutation short), drawn from ``(seed, "stage2-batches",
    round_idx, client)`` only, so a client's batches never depend on the other clients.

    Returns:
        int64 ``[steps, batch_size]``.
    """
    gen = torch_generator(seed, "stage2-batches", round_idx, client)
    per_perm = math.ceil(n / batch_size)
    drawn = math.ceil(steps / per_perm)
    out = torch.full((drawn * per_perm, batch_size), -1, dtype=torch.int64)
    flat = out.view(drawn, per_perm * batch_size)
    for e in range(drawn):
        flat[e, :n] = torch.randperm(n, generator=gen)
    return out[:steps]


def _objective(
    zp: Tensor,
    yp: Tensor,
    mask: Tensor,
    w: Tensor,
    b_head: Tensor,
    b: Tensor,
    theta: Tensor,
    nbr: Tensor,
    valid: Tensor,
    lam: float,
    k_edge: float,
    loss_rows: Callable[[Tensor, Tensor], Tensor],
) -> tuple[Tensor, Tensor, Tensor]:
    """``(sum_u L_u, T_u [C], sum_v L_uv^(u) [C])`` on the rows ``mask`` marks in ``zp [C, N, d]``."""
    c = zp.shape[0]
    m = mask.to(zp.dtype)
    logits = torch.einsum("cnd,ckd->cnk", zp, w) + b_head.unsqueeze(1)
    rows = loss_rows(logits.reshape(-1, logits.shape[-1]), yp.reshape(-1)).reshape(c, -1)
    task = (rows * m).sum(1) / m.sum(1).clamp_min(1.0)  # T_u
    route = endpoint_losses(zp, mask, b, theta, nbr, valid).sum(1)  # sum_{v in N(u)} L_uv^(u)
    return (lam * task + k_edge * route).sum(), task, route  # m L_G = sum_u L_u


def fit_stage2(
    z: list[Tensor],
    y: list[Tensor],
    weight: Tensor,
    bias: Tensor,
    adjacency: Tensor,
    lam: float,
    loss_rows: Callable[[Tensor, Tensor], Tensor],
    optim: Stage2Optim | None = None,
    seed: int = 0,
    log: Callable[[dict[str, float]], None] | None = None,
) -> Stage2Result:
    """Fit heads and potentials with the balanced endpoint objective (module docstring).

    Args:
        z: Per-client frozen representations of its own training rows ``[n_u, d]``.
        y: Per-client labels ``[n_u]`` as ``loss_rows`` expects them (class ids).
        weight: Initial head weights ``[C, K, d]`` (stage I's heads).
        bias: Initial head biases ``[C, K]``.
        adjacency: Bool ``[C, C]`` graph adjacency (symmetric, no self loops).
        lam: Task weight ``lambda`` in ``[0, 1]``.
        loss_rows: Per-row task loss ``(logits [n, K], y [n]) -> [n]``.
        optim: The optimizer (default :class:`Stage2Optim`'s, the paper's mini-batch SGD).
        seed: Run seed; SGD's mini-batches come from ``(seed, "stage2-batches", round, client)``.
        log: Called once per round with the ``history`` entry.

    Raises:
        ValueError: On mismatched shapes, a client without rows, or ``lam`` outside ``[0, 1]``.
    """
    optim = Stage2Optim() if optim is None else optim
    c = len(z)
    if len(y) != c or weight.shape[0] != c or bias.shape[0] != c or adjacency.shape != (c, c):
        raise ValueError(f"stage II: {c} clients' representations but mismatched labels/heads/graph")
    if any(int(t.shape[0]) == 0 for t in z):
        raise ValueError("stage II: every client needs at least one training row")
    adjacency = adjacency.to(torch.bool).cpu()
    k_edge = kappa(c, int(adjacency.sum()) // 2, lam)
    device, dtype = z[0].device, z[0].dtype
    zp, mask = pad_rows([t.detach().to(device, dtype) for t in z])
    yp, _ = pad_rows([t.to(device) for t in y])
    nbr, valid = (t.to(device) for t in neighbour_table(adjacency))

    w = weight.detach().to(device, dtype).clone().requires_grad_(True)
    b_head = bias.detach().to(device, dtype).clone().requires_grad_(True)
    b = torch.zeros(c, device=device, dtype=dtype, requires_grad=True)
    theta = torch.zeros(c, zp.shape[2], device=device, dtype=dtype, requires_grad=True)
    params = [w, b_head, b, theta]
    terms = (nbr, valid, lam, k_edge, loss_rows)
    history: list[dict[str, float]] = []

    def record(stats: dict[str, float]) -> None:
        history.append(stats)
        if log is not None:
            log(stats)

    _FITS[optim.name](zp, yp, mask, params, terms, optim, [int(t.shape[0]) for t in z], seed, record)
    counts_t = mask.sum(1).to(torch.int64).cpu()
    pot = Potentials(b.detach(), theta.detach(), counts_t)
    return Stage2Result(w.detach(), b_head.detach(), pot, history)


def _fit_adam(
    zp: Tensor,
    yp: Tensor,
    mask: Tensor,
    params: list[Tensor],
    terms: tuple,
    optim: Stage2Optim,
    counts: list[int],
    seed: int,
    record: Callable[[dict[str, float]], None],
) -> None:
    """Full-batch Adam at the constant rate ``optim.lr``, ``optim.rounds`` steps (in place on ``params``)."""
    c = zp.shape[0]
    opt = torch.optim.Adam(params, lr=optim.lr)
    for _ in range(optim.rounds):
        opt.zero_grad(set_to_none=True)
        loss, task, route = _objective(zp, yp, mask, *params, *terms)
        loss.backward()
        opt.step()
        record(
            {
                "stage2_loss": float(loss.detach()) / c,
                "stage2_task": float(task.detach().mean()),
                "stage2_route": float(route.detach().mean()),
            }
        )


def _fit_sgd(
    zp: Tensor,
    yp: Tensor,
    mask: Tensor,
    params: list[Tensor],
    terms: tuple,
    optim: Stage2Optim,
    counts: list[int],
    seed: int,
    record: Callable[[dict[str, float]], None],
) -> None:
    """The paper's mini-batch momentum SGD: ``optim.rounds`` rounds of ``optim.steps_per_round`` steps
    at the round's cosine rate (module docstring), in place on ``params``."""
    c, device = zp.shape[0], zp.device
    width = min(optim.batch_size, max(counts))  # columns past the largest client are all padding
    clients = torch.arange(c, device=device).unsqueeze(1)
    sgd: torch.optim.SGD | None = None
    for r in range(1, optim.rounds + 1):
        lr_r = optim.lr_at(r)
        if sgd is None or optim.reset_momentum:
            sgd = torch.optim.SGD(params, lr=lr_r, momentum=optim.momentum, weight_decay=optim.weight_decay)
        else:
            for group in sgd.param_groups:
                group["lr"] = lr_r
        batches = torch.stack(
            [
                stage2_batches(n, optim.batch_size, optim.steps_per_round, seed, r - 1, u)[:, :width]
                for u, n in enumerate(counts)
            ],
            1,
        ).to(device)  # [S, C, width]
        total = torch.zeros(3, dtype=torch.float64)
        for idx in batches:
            rows = idx.clamp_min(0)
            zb, yb = zp[clients, rows], yp[clients, rows]
            sgd.zero_grad(set_to_none=True)
            loss, task, route = _objective(zb, yb, idx >= 0, *params, *terms)
            loss.backward()
            sgd.step()
            total += torch.stack([loss.detach() / c, task.detach().mean(), route.detach().mean()]).cpu()
        mean = (total / optim.steps_per_round).tolist()
        record({"stage2_loss": mean[0], "stage2_task": mean[1], "stage2_route": mean[2], "stage2_lr": lr_r})


#: Stage-II fitting function of each optimizer name (``algorithm.stage2_optimizer``).
_FITS: dict[str, Callable[..., None]] = {"sgd": _fit_sgd, "adam": _fit_adam}
