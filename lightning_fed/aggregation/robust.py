"""Robust aggregators: how a server or a receiving center turns accepted models into one model.

An :class:`Aggregator` (``algorithm.init_args.aggregator.class_path``) maps ``k`` accepted models,
stacked per tensor ``{name: [k, ...]}``, and the method's weights ``w_j`` (FedAvg and ABPS: the
senders' training rows ``n_j``; DeceFL / DFedAvgM: the Metropolis weights of the receiver's row)
to one aggregate ``{name: [1, ...]}``. It is called

* by the FedAvg server (:meth:`FedAvg.server_model <lightning_fed.algorithms.FedAvg.server_model>`,
  also FedProx's, Ditto's, FedRep's and FedBN's) on the uploads it accepted, with the model it sent
  last round as ``reference``;
* by every receiving center of a peer method (:meth:`Aggregator.mix_received`: ABPS, DeceFL,
  DFedAvgM) on its own model followed by the messages it accepted, with its own model as
  ``reference``.

The rules (the table in docs/robustness.md, "Robust aggregators"):

* :class:`WeightedMean` (default): ``sum_j (w_j / sum_k w_k) theta_j``, the methods' own average,
  bit for bit;
* :class:`CoordinateMedian`: the median of every coordinate over the ``k`` models (Yin et al. 2018);
* :class:`TrimmedMean`: every coordinate's mean after dropping its ``floor(beta k)`` smallest and
  largest values (Yin et al. 2018);
* :class:`Krum`: (Multi-)Krum (Blanchard et al. 2017), the ``m`` models closest to their
  ``k - f - 2`` nearest others, averaged;
* :class:`CenteredClipping`: ``v <- v + sum_j w_j clip_tau(theta_j - v)`` from the reference
  (Karimireddy et al. 2021).

Center sizes. A robustness guarantee of these rules counts *centers*: at most ``f`` of the ``k``
models are an attacker's. The order statistics (median, trimmed mean) and Krum's selection therefore
count every center once, whatever its rows: weighting them by rows would let a center holding half
the rows set the median alone, moving the breakdown point from half of the centers to half of the
rows. The rules whose robustness comes from a selection or a clip rather than from an order (Krum's
final average over the selected models, centered clipping's step) keep the method's weights, so
that they reduce to the method's own average (up to rounding) when nothing is discarded or clipped
(Multi-Krum with ``m = k``; clipping with ``tau`` above every distance). Each class docstring says
which it does.

Every rule but :class:`WeightedMean` reads each model as one vector (all tensors of the dict
together) where it needs a distance, computes in float64 and returns the models' dtype.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch
from torch import Tensor

from lightning_fed.aggregation.mixing import mix_received, sample_weights, weighted_average
from lightning_fed.validation import check_int, check_number

__all__ = [
    "Aggregator",
    "CenteredClipping",
    "CoordinateMedian",
    "Krum",
    "TrimmedMean",
    "WeightedMean",
    "aggregator_from",
    "refuse_aggregator",
]

#: The config key the aggregators' one-line errors name.
KEY = "algorithm.init_args.aggregator"


class Aggregator(ABC):
    """One aggregate ``{name: [1, ...]}`` from ``k`` accepted models ``{name: [k, ...]}``.

    Subclasses implement :meth:`__call__`; :meth:`mix_received` applies it at every receiving
    center of a peer method.
    """

    @abstractmethod
    def __call__(
        self, stacked: dict[str, Tensor], weights: Tensor, reference: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        """The aggregate of the ``k`` models.

        Args:
            stacked: The models ``{name: [k, ...]}`` (``k >= 1``).
            weights: The method's non-negative weights ``[k]`` with a positive sum (rows, Metropolis).
            reference: The aggregator's starting point ``{name: [1, ...]}``: the server's last sent
                model, or the receiving center's own model (read by :class:`CenteredClipping`).
        """

    def mix_received(
        self,
        shared: dict[str, Tensor],
        received: dict[str, Tensor],
        dst: Tensor,
        self_weight: Tensor,
        edge_weight: Tensor,
        max_bytes: int | None = None,
    ) -> dict[str, Tensor]:
        """Every receiver ``i``'s aggregate of its own model and the messages it accepted.

        Receiver ``i`` aggregates the stack ``[theta_i, r_e for e with dst_e = i]`` (own model first,
        then its messages in send order) with weights ``[a_i, b_e ...]`` and its own model as the
        reference; a receiver with no message keeps its model. One receiver at a time, so at most
        one receiver's messages are copied at once (``max_bytes`` needs no further split).

        Args:
            shared: Own shared parameters ``{name: [C, ...]}``.
            received: Accepted messages ``{name: [E, ...]}``.
            dst: Receiver of every message ``[E]``.
            self_weight: ``a`` ``[C]``.
            edge_weight: ``b`` ``[E]``.
            max_bytes: Unused here (see above); kept for the signature of
                :func:`~lightning_fed.aggregation.mixing.mix_received`.
        """
        out = {n: t.clone() for n, t in shared.items()}
        order = torch.argsort(dst, stable=True)
        receivers, counts = torch.unique_consecutive(dst[order], return_counts=True)
        start = 0
        for i, count in zip(receivers.tolist(), counts.tolist(), strict=True):
            edges = order[start : start + count]
            start += count
            stack = {
                n: torch.cat([t[i : i + 1], received[n].index_select(0, edges.to(t.device)).to(t.dtype)])
                for n, t in shared.items()
            }
            weights = torch.cat([self_weight[i : i + 1], edge_weight[edges]])
            own = {n: t[i : i + 1] for n, t in shared.items()}
            for n, t in self(stack, weights, own).items():
                out[n][i] = t[0]
        return out


class WeightedMean(Aggregator):
    """``sum_j (w_j / sum_k w_k) theta_j``: the method's own weighted average (the default).

    Weights by rows where the method does (FedAvg's ``n_j``, McMahan et al. 2017; ABPS's line 25),
    by the Metropolis weights for DeceFL / DFedAvgM. It is exactly what the methods computed before
    aggregators existed (:func:`~lightning_fed.aggregation.mixing.weighted_average` on the server,
    :func:`~lightning_fed.aggregation.mixing.mix_received` at receivers), so every run with it is
    bit-identical. It is not robust: one model scaled by ``s`` moves the mean by ``w_j (s - 1)
    theta_j``. Cost ``O(k |W|)``.
    """

    def __call__(
        self, stacked: dict[str, Tensor], weights: Tensor, reference: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        return weighted_average(stacked, sample_weights(weights))

    def mix_received(
        self,
        shared: dict[str, Tensor],
        received: dict[str, Tensor],
        dst: Tensor,
        self_weight: Tensor,
        edge_weight: Tensor,
        max_bytes: int | None = None,
    ) -> dict[str, Tensor]:
        """The linear mix of :func:`~lightning_fed.aggregation.mixing.mix_received` (weights already
        row-normalized by the method), edge by edge: ``O(E |W|)``, chunked by ``max_bytes``."""
        return mix_received(shared, received, dst, self_weight, edge_weight, max_bytes=max_bytes)


class CoordinateMedian(Aggregator):
    """The coordinate-wise median (Yin et al. 2018, "Byzantine-robust distributed learning", Sec. 3).

    ``agg[c] = median_j theta_j[c]`` for every coordinate ``c``: the middle value for odd ``k``, the
    mean of the two middle values for even ``k``.

    Counts centers: every model is one vote, whatever its rows. The median is robust while fewer
    than half of the ``k`` *models* are an attacker's; weighted by rows, a center with half of the
    rows would set it alone. The price: a small center counts as much as a large one, so on a
    federation with very unequal sizes the median is further from FedAvg's average than the
    trimmed mean. Cost ``O(k log k |W|)`` (a sort per coordinate).
    """

    def __call__(
        self, stacked: dict[str, Tensor], weights: Tensor, reference: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        out = {}
        for name, t in stacked.items():
            k = t.shape[0]
            ordered = t.to(torch.float64).sort(0).values
            middle = ordered[(k - 1) // 2 : k // 2 + 1].mean(0, keepdim=True)
            out[name] = middle.to(t.dtype)
        return out


class TrimmedMean(Aggregator):
    """The coordinate-wise trimmed mean (Yin et al. 2018, Sec. 3, ``trmean_beta``).

    For every coordinate, the ``b = floor(beta k)`` smallest and ``b`` largest of the ``k`` values
    are dropped and the remaining ``k - 2b`` averaged: ``agg[c] = (1 / (k - 2b)) sum_{r = b}^{k-b-1}
    theta_(r)[c]`` with ``theta_(r)[c]`` the ``r``-th smallest value. ``beta = 0`` is the unweighted
    mean; ``b`` is 0 while ``k < 1 / beta`` (a receiver with few partners trims nothing).

    Counts centers, both in what it trims (``b`` of the ``k`` models, an attacker share it tolerates
    per side) and in the average of what is left (unweighted, as in the paper): per coordinate a
    different set of models survives, so no set of row weights belongs to the result. Cost
    ``O(k log k |W|)``.

    Args:
        beta: Fraction of the models trimmed on each side, ``0 <= beta < 0.5`` (default 0.1).
    """

    def __init__(self, beta: float = 0.1) -> None:
        self.beta = check_number(f"{KEY}.init_args.beta", beta, 0.0, strict=False)
        if self.beta >= 0.5:
            raise ValueError(
                f"{KEY}.init_args.beta must be < 0.5 (the fraction trimmed on each side), got {beta}"
            )

    def __call__(
        self, stacked: dict[str, Tensor], weights: Tensor, reference: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        out = {}
        for name, t in stacked.items():
            k = t.shape[0]
            b = math.floor(self.beta * k)
            kept = t.to(torch.float64).sort(0).values[b : k - b]
            out[name] = kept.mean(0, keepdim=True).to(t.dtype)
        return out


def _flat(models: dict[str, Tensor]) -> Tensor:
    """``[k, D]`` float64: every model as one vector (the dict's tensors in order)."""
    return torch.cat([t.to(torch.float64).reshape(t.shape[0], -1) for t in models.values()], 1)


def _unflat(vector: Tensor, like: dict[str, Tensor]) -> dict[str, Tensor]:
    """The ``[D]`` vector as ``{name: [1, ...]}`` shaped and typed like ``like``'s tensors."""
    out, at = {}, 0
    for name, t in like.items():
        size = t[0].numel()
        out[name] = vector[at : at + size].reshape(1, *t.shape[1:]).to(t.dtype)
        at += size
    return out


class Krum(Aggregator):
    """(Multi-)Krum (Blanchard et al. 2017, "Machine learning with adversaries", Sec. 4).

    With ``k`` models and ``f`` tolerated attackers, model ``j``'s score is the sum of squared
    distances to its ``q = k - f - 2`` nearest other models, ``s_j = sum_{i in N_q(j)} ||theta_j -
    theta_i||^2`` (the whole model as one vector); Krum (``m = 1``) returns the model of least score,
    Multi-Krum the average of the ``m`` of least score (ties: the earlier model; at a receiver its
    own model comes first). The paper's guarantee needs ``k > 2f + 2``; with fewer models (faults,
    a receiver with few partners) ``q`` is cut to at least 1 and ``m`` to at most ``k``, so the rule
    is still defined, without the guarantee.

    Counts centers in the selection (``f`` and ``m`` are numbers of centers, each model one point);
    the average of the ``m`` selected keeps the method's weights (rows for FedAvg and ABPS), so
    Multi-Krum with ``m >= k`` is the method's own average (up to rounding). Cost ``O(k^2 |W|)``
    (the pairwise distances).

    Args:
        f: Attackers tolerated, ``f >= 0`` (default 1).
        m: Models averaged, ``m >= 1`` (default 1: Krum).
    """

    def __init__(self, f: int = 1, m: int = 1) -> None:
        self.f = check_int(f"{KEY}.init_args.f", f, 0)
        self.m = check_int(f"{KEY}.init_args.m", m, 1)

    def __call__(
        self, stacked: dict[str, Tensor], weights: Tensor, reference: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        flat = _flat(stacked)
        chosen = self.select(flat)
        w = sample_weights(weights.to(flat.device)[chosen])
        return _unflat((w.unsqueeze(1) * flat[chosen]).sum(0), stacked)

    def select(self, flat: Tensor) -> Tensor:
        """Indices of the ``min(m, k)`` models of least score, in score order (``flat``: ``[k, D]``)."""
        k = flat.shape[0]
        if k == 1:
            return torch.zeros(1, dtype=torch.int64, device=flat.device)
        q = min(k - 1, max(1, k - self.f - 2))
        dist = torch.cdist(flat, flat, compute_mode="donot_use_mm_for_euclid_dist").square()
        others = dist.masked_fill(torch.eye(k, dtype=torch.bool, device=flat.device), math.inf)
        scores = others.sort(1).values[:, :q].sum(1)
        return torch.argsort(scores, stable=True)[: min(self.m, k)]


class CenteredClipping(Aggregator):
    """Centered clipping (Karimireddy et al. 2021, "Learning from history for Byzantine robust
    optimization", Sec. 4, Eq. CC).

    From ``v_0`` = the reference (the server's last sent model: the paper's previous aggregate; at a
    receiver, its own model), ``iters`` steps of

        v_{l+1} = v_l + sum_j w_j (theta_j - v_l) min(1, tau / ||theta_j - v_l||),

    with ``w_j`` the method's weights normalized to sum 1 and the norm over the whole model. Its
    fixed point ``v*`` solves ``sum_j w_j clip_tau(theta_j - v*) = 0``: one model can pull it by at
    most ``w_j tau`` per step however far it lies.

    Keeps the method's weights (rows for FedAvg and ABPS; the paper's uniform ``1/k`` for equal
    sizes): the clip, not an order, bounds an attacker, and with ``tau`` above every distance one
    step is the method's own average (up to rounding). An attacker's pull per step is thus bounded
    by its weight times ``tau``, so a large center is bounded less tightly than a small one. ``tau`` is in the
    units of the model (an L2 norm of the whole shared model's change); choose it near the honest
    update norms (``benchmarks/norm_spread.py --update``). Cost ``O(iters k |W|)``.

    Args:
        tau: Clipping radius, ``> 0`` (default 1.0).
        iters: Steps ``l``, ``>= 1`` (default 3; the paper finds 1 enough with momentum).
    """

    def __init__(self, tau: float = 1.0, iters: int = 3) -> None:
        self.tau = check_number(f"{KEY}.init_args.tau", tau, 0.0, strict=True)
        self.iters = check_int(f"{KEY}.init_args.iters", iters, 1)

    def __call__(
        self, stacked: dict[str, Tensor], weights: Tensor, reference: dict[str, Tensor]
    ) -> dict[str, Tensor]:
        flat = _flat(stacked)
        w = sample_weights(weights.to(flat.device)).unsqueeze(1)
        v = _flat({n: reference[n] for n in stacked})[0]
        for _ in range(self.iters):
            delta = flat - v
            scale = (self.tau / delta.norm(dim=1, keepdim=True)).clamp(max=1.0)  # ||.|| = 0: inf -> 1
            v = v + (w * delta * scale).sum(0)
        return _unflat(v, stacked)


def aggregator_from(aggregator: Aggregator | None) -> Aggregator:
    """``aggregator``, or :class:`WeightedMean` for None (the methods' default).

    Raises:
        ValueError: If ``aggregator`` is not an :class:`Aggregator`.
    """
    if aggregator is None:
        return WeightedMean()
    if not isinstance(aggregator, Aggregator):
        raise ValueError(
            f"{KEY} must be an Aggregator (class_path lightning_fed.aggregation.CoordinateMedian, "
            f"TrimmedMean, Krum, CenteredClipping or WeightedMean), got {type(aggregator).__name__}"
        )
    return aggregator


def refuse_aggregator(method: str, aggregator: Aggregator | None, why: str) -> None:
    """One line for a method whose server rule is no aggregate of the uploads, given an aggregator.

    Args:
        method: The method's class name.
        aggregator: What the config gave (None: nothing, accepted).
        why: What the method's server computes instead (ends the first clause of the message).

    Raises:
        ValueError: If ``aggregator`` is not None.
    """
    if aggregator is not None:
        raise ValueError(
            f"{KEY} ({type(aggregator).__name__}) is not supported by {method}: {why}; "
            "drop the key, or use a method that takes one (docs/robustness.md lists them)"
        )
