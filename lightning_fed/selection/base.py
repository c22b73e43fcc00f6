"""The partner-selection plugin: who exchanges with whom each round (docs/architecture.md, decision 10).

A :class:`PartnerSelector` is a decision plugin of every peer method: ABPS and the graph methods
(:class:`~lightning_fed.algorithms.DeceFL`, ``DFedAvgM``, ``EdgeDRM``, ``DeFTA``, and ``WPFed`` in
place of its LSH choice) call :meth:`~PartnerSelector.select` (or :meth:`~PartnerSelector.edges`)
every round and exchange with the partners it returns; the methods differ only in their mixing
weights. ABPS, when the selector :attr:`~PartnerSelector.learns`, computes the Shapley credit of
every partner and hands it to :meth:`~PartnerSelector.observe`. Its
:meth:`~PartnerSelector.state_dict` is part of the algorithm's checkpoint. It is an abstract base
class rather than a ``typing.Protocol`` so that jsonargparse can list and build its subclasses from
``class_path`` / ``init_args`` (``algorithm.init_args.selector``).

Shipped selectors: :class:`~lightning_fed.selection.abps.BayesianSelector` (ABPS: Beta posterior,
UCB, propose-reject; learns), :class:`~lightning_fed.selection.RandomPartners` (``kappa`` random
partners a round) and :class:`~lightning_fed.selection.GraphNeighbours` (the neighbours on a
fixed graph, the graph methods' default); the two baselines learn nothing, so ABPS spends no
compute on credit for them. A selector may pre-filter its candidates with a
:class:`CandidateFilter` whose descriptors ABPS publishes (ABPS's
:class:`~lightning_fed.selection.abps.GoalFilter`); this module names only the interface, so it
imports nothing of the ABPS package.

:func:`partner_edges` and :func:`partner_lists` convert between partner sets and the directed edges
``(src, dst)`` that cross the wire.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lightning_fed.selection.diagnostics import MatchRecord

if TYPE_CHECKING:
    from lightning_fed.graphs.topology import Graph

__all__ = ["SELECTOR_KEY", "CandidateFilter", "PartnerSelector", "partner_edges", "partner_lists"]

#: Where a selector's arguments live in a config (the prefix its errors name).
SELECTOR_KEY = "algorithm.init_args.selector.init_args"


class CandidateFilter(ABC):
    """A metadata pre-filter: which peers each center may partner, from published descriptors.

    Attributes:
        metadata_dim: How many leading entries of each center's descriptor are published.
    """

    metadata_dim: int

    @abstractmethod
    def candidates(self, metadata: Tensor, published: Tensor | None = None) -> Tensor:
        """The candidate sets as a bool ``[C, C]`` (False on the diagonal) from descriptors ``[C, d]``.

        Args:
            metadata: Descriptors ``[C, d]`` with ``d >= metadata_dim``.
            published: Optional bool ``[C]``, whose descriptor has arrived; None: everyone's.
        """


class PartnerSelector(ABC):
    """Chooses each round's symmetric partner sets; may learn from the partners' credit.

    Attributes:
        learns: Whether :meth:`observe` uses the credit it is given. ABPS computes the Shapley
            credit (a batch of coalition evaluations every round, its costliest step) only for a
            selector that learns.
        filter: A metadata pre-filter (:class:`CandidateFilter`) whose descriptors ABPS publishes
            over the wire (None: nothing is published). A selector with a filter also holds
            ``candidates``, a bool ``[C, C]`` that ABPS refreshes as descriptors arrive.
        kappa: The most partners a center has in a round (set by :meth:`setup` at the latest); ABPS
            books a resting center's saved bytes as ``kappa`` halves of a partnership.
        last_match: What the last :meth:`select` offered its matching (candidates, acceptance
            scores, threshold), from which ABPS counts rests by cause
            (:func:`~lightning_fed.selection.diagnostics.rest_causes`); None: not recorded.
        graph: The fixed graph the partners come from, when there is one (set by :meth:`setup`;
            :class:`~lightning_fed.selection.GraphNeighbours`); None when the partners change from
            round to round. The graph methods take their Metropolis weights and graph statistics
            from it, and EdgeDRM's stage II needs it.
        pools_observations: Whether :meth:`select` reads other centers' observations (every
            observer then posts its round's observations; ABPS books them,
            :mod:`lightning_fed.selection.abps.board`).
        feature_record_bytes: Bytes of the public pair features each center registers once (0: the
            selector reads none; :mod:`lightning_fed.selection.abps.board`).
    """

    learns: bool = False
    filter: CandidateFilter | None = None
    kappa: int
    last_match: MatchRecord | None = None
    graph: Graph | None = None
    pools_observations: bool = False
    feature_record_bytes: int = 0

    @abstractmethod
    def setup(self, metadata: Tensor, seed: int) -> None:
        """Called once before training with the centers' descriptors ``[C, d]`` and the run seed."""

    def round_diagnostics(self) -> dict[str, float]:
        """Selector-specific scalars of the last :meth:`select`, added to the round's statistics
        (``rounds.parquet``); none by default."""
        return {}

    @abstractmethod
    def select(self, round_idx: int, available: Tensor | None = None) -> list[list[int]]:
        """Partner sets ``P_i`` of round ``round_idx``: symmetric (``j in P[i]`` iff ``i in P[j]``).

        Args:
            round_idx: The round (draws are derived from the run seed and the round).
            available: Optional bool ``[C]``; a center marked False has no partner and is nobody's.

        Returns:
            One list per center (an empty one: the center rests this round).
        """

    def edges(self, round_idx: int, available: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """This round's partnerships as directed edges ``(src, dst)``, both directions of each.

        Default: :func:`partner_edges` of :meth:`select`. A selector with a fixed :attr:`graph`
        lists them in its graph's edge order (the order the graph methods always exchanged in).
        """
        return partner_edges(self.select(round_idx, available))

    def partners_everyone(self, num_centers: int) -> bool:
        """Whether every center may partner all ``num_centers - 1`` others in a round (after
        :meth:`setup`); default ``kappa >= num_centers - 1``. ABPS is then FedAvg at a multiple of
        its bytes, and warns."""
        return self.kappa >= num_centers - 1

    def observe(self, i: Tensor, j: Tensor, phi: Tensor) -> None:  # noqa: B027 (no-op by default)
        """Credit ``phi_{j->i}`` of partner ``j`` to receiver ``i`` (called only when :attr:`learns`)."""

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a checkpoint (none by default)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (stateless by default)
        """Restore :meth:`state_dict`."""


def partner_edges(partners: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Directed edges ``(src, dst)`` of partner sets: ``j -> i`` for every ``j in P_i``, in that order.

    With symmetric sets this is both directions of every partnership. int64 ``[E]`` each.
    """
    src = [j for ps in partners for j in ps]
    dst = [i for i, ps in enumerate(partners) for _ in ps]
    return torch.tensor(src, dtype=torch.int64), torch.tensor(dst, dtype=torch.int64)


def partner_lists(src: Tensor, dst: Tensor, num_centers: int) -> list[list[int]]:
    """Partner sets from directed edges: ``P_i`` = the senders of the edges into ``i``, in edge order.

    The inverse of :func:`partner_edges`.
    """
    partners: list[list[int]] = [[] for _ in range(num_centers)]
    for j, i in zip(src.tolist(), dst.tolist(), strict=True):
        partners[i].append(j)
    return partners
