"""Routing potentials and the balanced endpoint source-classification loss (EdgeDRM Sec. 2, 3.1, App. B.4).

Each client ``i`` holds a density-ratio potential ``(b_i, theta_i)``: its representation density is
``phi_i(z) = exp{b_i + theta_i^T z}`` relative to a common reference (Eq. 2). On an edge ``{i, j}``
the balanced (equal-prior) source classifier is

    logit q_ij(z) = (b_j - b_i) + (theta_j - theta_i)^T z,      q_ij = phi_j / (phi_i + phi_j)     (Sec. 3.1)

and client ``u in {i, j}`` evaluates, on its own rows only, the endpoint loss

    L_{ij}^{(u)} = (1 / n_u) sum_r -log P(source = u | z_ur)
                 = (1 / n_u) sum_r softplus((b_v - b_u) + (theta_v - theta_u)^T z_ur),   v = other end.

Derivation of the missing App. B.4 display (from the score S_i and Hessian H_G of App. C.1, whose edge
terms carry ``(1 - lambda) / (2|E|)`` per endpoint observation): the graph objective is

    L_G = (lambda / m) sum_i T_i + (1 - lambda) / (2|E|) sum_{{i,j} in E} (L_{ij}^{(i)} + L_{ij}^{(j)})

(both endpoint means of an edge weighted equally, App. D.2.1), with ``T_i`` client ``i``'s mean task
loss. Regrouped by client, ``L_G = (1/m) sum_i L_i`` with the client-local objective

    L_i = lambda T_i + kappa sum_{j in N(i)} L_{ij}^{(i)},      kappa = m (1 - lambda) / (2|E|),

so the gradient reaching ``a_i = (theta_i, b_i)`` is ``G_i = grad L_i + kappa sum_{j in N(i)} grad_{a_i}
L_{ij}^{(j)}`` (App. B.4 / C.1): the neighbour's term is evaluated by the neighbour on its rows.

At inference the deployed incident score adds the sample-count prior (App. B.4, Eq. 6):

    Delta_ij(x) = log(n_j / n_i) + (b_j - b_i) + (theta_j - theta_i)^T z,   z = g_{theta_i}(x).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Potentials", "endpoint_losses", "kappa", "neighbour_table"]


def kappa(num_clients: int, num_edges: int, lam: float) -> float:
    """Edge weight ``kappa = m (1 - lambda) / (2|E|)`` of the client-local objective (App. B.4).

    Raises:
        ValueError: If ``lam`` is outside ``[0, 1]`` or the graph has no edges.
    """
    if not 0.0 <= float(lam) <= 1.0:
        raise ValueError(f"algorithm.lam must lie in [0, 1] (task weight lambda), got {lam}")
    if num_edges < 1:
        raise ValueError("the referral graph has no edges: EdgeDRM needs a connected topology with >= 1 edge")
    return num_clients * (1.0 - float(lam)) / (2.0 * num_edges)


def neighbour_table(adjacency: Tensor) -> tuple[Tensor, Tensor]:
    """Padded neighbour lists of a bool ``[C, C]`` adjacency.

    Returns:
        ``(nbr, valid)``: ``nbr`` int64 ``[C, D]`` (ascending ids, padding repeats the client itself)
        and bool ``valid [C, D]``, ``D`` the maximum degree (at least 1).
    """
    adj = adjacency.to(torch.bool).cpu()
    c = adj.shape[0]
    deg = adj.sum(1)
    d = max(int(deg.max()) if c else 0, 1)
    # Sorting True before False keeps the neighbours first, in ascending id order (stable sort).
    order = torch.sort((~adj).to(torch.int8), dim=1, stable=True).indices[:, :d]
    valid = torch.arange(d).unsqueeze(0) < deg.unsqueeze(1)
    nbr = torch.where(valid, order, torch.arange(c).unsqueeze(1))
    return nbr, valid


def endpoint_losses(z: Tensor, mask: Tensor, b: Tensor, theta: Tensor, nbr: Tensor, valid: Tensor) -> Tensor:
    """Endpoint losses ``L_{uv}^{(u)}`` for every client ``u`` and neighbour slot ``v`` (module docstring).

    Client ``u`` uses only its own rows ``z[u]`` and the two endpoint potentials ``(b_u, theta_u)``,
    ``(b_v, theta_v)`` of each incident edge.

    Args:
        z: Padded representations ``[C, N, d]`` (client ``u``'s own rows first).
        mask: Bool ``[C, N]``, True for real rows.
        b: Intercepts ``[C]``.
        theta: Slopes ``[C, d]``.
        nbr: Neighbour ids ``[C, D]`` from :func:`neighbour_table`.
        valid: Bool ``[C, D]``, True for real neighbour slots.

    Returns:
        ``[C, D]`` mean endpoint losses (0 in padded slots).
    """
    own = torch.einsum("cnd,cd->cn", z, theta) + b.unsqueeze(1)  # h_u(z_ur) without the prior
    other = torch.einsum("cnd,ckd->cnk", z, theta[nbr]) + b[nbr].unsqueeze(1)  # h_v(z_ur), v in N(u)
    rows = F.softplus(other - own.unsqueeze(2))  # -log P(source = u) on edge {u, v}
    m = mask.to(rows.dtype).unsqueeze(2)
    means = (rows * m).sum(1) / m.sum(1).clamp_min(1.0)
    return means * valid.to(means.dtype)


@dataclass(frozen=True, eq=False)
class Potentials:
    """Fitted routing potentials and the training counts exchanged with neighbours.

    Attributes:
        b: Intercepts ``b_i`` ``[C]`` (float).
        theta: Slopes ``theta_i`` ``[C, d]`` (float).
        counts: Training sample counts ``n_i`` ``[C]`` (int64), for the prior ``log(n_j / n_i)``.
    """

    b: Tensor
    theta: Tensor
    counts: Tensor

    def __post_init__(self) -> None:
        c = self.b.shape[0]
        if (
            self.b.dim() != 1
            or self.theta.dim() != 2
            or self.theta.shape[0] != c
            or self.counts.shape != (c,)
        ):
            raise ValueError(
                f"Potentials: b [C], theta [C, d], counts [C] expected, got {list(self.b.shape)}, "
                f"{list(self.theta.shape)}, {list(self.counts.shape)}"
            )
        if bool((self.counts <= 0).any()):
            raise ValueError("Potentials.counts must be positive training sizes n_i")

    @property
    def num_clients(self) -> int:
        return int(self.b.shape[0])

    def incident_scores(self, current: int, z: Tensor, prior: bool = True) -> Tensor:
        """Scores ``Delta_{c j}(x)`` from client ``current`` to every client ``j`` ``[q, C]`` (Eq. 6).

        Args:
            current: The current client ``c`` (whose encoder produced ``z``).
            z: Representations ``[q, d]`` from client ``c``'s encoder.
            prior: Whether to add the sample-count prior ``log(n_j / n_c)``.
        """
        theta = self.theta.to(z.device, z.dtype)
        b = self.b.to(z.device, z.dtype)
        learned = z @ (theta - theta[current]).T + (b - b[current])
        if not prior:
            return learned
        return learned + self.log_count_ratio(current).to(z.device, z.dtype)

    def log_count_ratio(self, current: int) -> Tensor:
        """``log(n_j / n_c)`` for every client ``j`` ``[C]`` (float64)."""
        n = self.counts.to(torch.float64)
        return torch.log(n) - torch.log(n[current])

    def state_dict(self) -> dict[str, Tensor]:
        return {"b": self.b.detach().cpu(), "theta": self.theta.detach().cpu(), "counts": self.counts.cpu()}

    @classmethod
    def from_state_dict(cls, state: dict[str, Tensor]) -> Potentials:
        return cls(state["b"], state["theta"], state["counts"])
