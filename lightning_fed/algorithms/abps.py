"""ABPS: Adaptive Bayesian Partner Selection (the ABPS paper, Sec. 4, Algorithm 1).

ABPS is "exchange with the selected partners, average, credit". Each round:

1. the partner selector (a :class:`~lightning_fed.selection.PartnerSelector`; by default the
   :class:`~lightning_fed.selection.abps.selector.BayesianSelector`) forms symmetric partner sets
   (for the Bayesian selector: epsilon-greedy UCB propose-reject over Beta beliefs, lines 11-22); a
   center with no partner rests and exchanges nothing;
2. partners exchange their shared parameters over the wire, both directions of every edge
   (``2|W|`` per partnership, Eq. 2), through the one exchange path
   (:func:`~lightning_fed.comm.exchange.peer_exchange_by_receiver`, one range of receivers at a time);
3. every center with partners replaces its shared parameters by the sample-weighted FedAvg of
   itself and what it accepted (line 25; :func:`~lightning_fed.aggregation.mixing.mix_received`
   with weights renormalized over what arrived), followed by each center's server step
   (``server_optimizer``, :mod:`~lightning_fed.aggregation.center_optimizer`) or the per-center EMA
   ``momentum``;
4. when the selector :attr:`~lightning_fed.selection.PartnerSelector.learns`, the Shapley credit of
   every partner (Eq. 4) is computed and observed (the posterior update of lines 26-31). Shapley
   is the costliest step of a round (a batch of coalition evaluations), so it is skipped for a
   selector that learns nothing (the baselines).

Selectors (``algorithm.init_args.selector.class_path``):
:class:`~lightning_fed.selection.abps.BayesianSelector` (ABPS, the default),
:class:`~lightning_fed.selection.RandomPartners` (up to ``kappa`` random partners a round) and
:class:`~lightning_fed.selection.GraphNeighbours` (the neighbours on a fixed graph); with a
baseline, everything but the choice of partners stays ABPS's (exchange, average, momentum, personal
layers, wire), so the comparison isolates the selection. With ``kappa >= C - 1`` (every center may
partner every other) ABPS degenerates to FedAvg over everyone at ``(C - 1) / 2`` times FedAvg's
bytes; setup logs a warning (for :class:`~lightning_fed.selection.GraphNeighbours`: on a complete
graph).

Robust mixing (``aggregator``, :mod:`~lightning_fed.aggregation.robust`, a comparator outside the
paper): step 3's average is the aggregator's result over the center's own model and the messages it
accepted (own model first and as the reference, the training rows as the method's weights;
:meth:`Aggregator.mix_received <lightning_fed.aggregation.robust.Aggregator.mix_received>`); the
server step and momentum then apply to it. The default
:class:`~lightning_fed.aggregation.WeightedMean` is line 25's FedAvg, bit for bit. The Shapley
credit still values partners by their sample-weighted coalition averages.

Extensions (Sec. 6.4): ``personal_layers`` (P) keeps the last 1-2 layers local and off the
wire; a :class:`~lightning_fed.comm.BFloat16Hook` on the wire (Q) halves the bytes; ``kappa``
(1 or 3) bounds the active set; ``server_optimizer:
CenterServerMomentum(beta)`` (alias: ``server_momentum: beta``) is FedAvgM with each center as its
own server (``v_i <- beta v_i + (m_i - s_i)``, ``theta_i <- s_i + v_i`` with ``s_i`` the round-start
model; ABPS-X, as FedAvg-X uses FedAvgM); ``momentum`` is the older per-center EMA of the mixing correction
(``u_i <- beta u_i + (1 - beta)(m_i - theta_i)``, ``theta_i <- theta_i + u_i``); both apply only to
centers that exchanged. When a goal filter is configured, every center publishes its metadata
descriptor to the directory once, in round 0 (see below for a center that is unavailable then).

Faults (:mod:`lightning_fed.comm.faults`): a center that is not :meth:`Wire.available
<lightning_fed.comm.wire.Wire.available>` in a round is no candidate of anyone that round: it
neither proposes nor accepts, sends and receives nothing, keeps its parameters and gets no Shapley
observation (it counts as resting in the rest statistics). Every received payload is validated by
its receiver (:meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>`, reference: the receiver's
own shared parameters); a rejected one is left out of the receiver's average (it averages itself and
its accepted partners only) and out of its Shapley credit, and its bytes stay on the ledger.

Late publication: a center whose descriptor has not arrived (it was unavailable in round 0, or its
descriptor was rejected) is nobody's candidate and has none; it (re)sends its descriptor at the start
of the first round in which it is available, and when at least one new descriptor arrives the
candidate sets are recomputed from every descriptor received so far (with ``keep_fraction`` the
threshold is recalibrated over the published pairs, so earlier centers' sets may change too). The
center can be partnered from that round on. On the ledger, a descriptor's bytes are booked in the
round it is sent (a rejected attempt's bytes stay booked as well); with ``privacy``, a re-sent
descriptor carries the same noise (drawn from the seed and the center id), so it costs no extra
privacy budget. Who has published and what arrived are part of :meth:`ABPS.state_dict`, so a resumed
run publishes exactly as an uninterrupted one.

Scale (issues 17 and 33). Nothing of a round is built for all ``C^2`` pairs or all ``E`` messages
at once: the selector keeps its posterior for the observed pairs only and matches a block of
proposers at a time (:mod:`~lightning_fed.selection.abps.matching`); the peer exchange sends chunks
of at most :data:`CHUNK_BYTES` of messages (the norm test's float64 copies exist for a few rows at a
time, and each receiver's own norm is computed once per center), and
:func:`~lightning_fed.comm.exchange.peer_exchange_by_receiver` hands out each range of receivers as
soon as all its messages have arrived: the range is mixed
(:func:`~lightning_fed.aggregation.mixing.mix_received`) and credited, and its messages are dropped,
so about two chunks of messages exist at once instead of all ``E`` accepted ones (0.7 GB at 3,680
centers); the Shapley credit builds and evaluates its coalition models in chunks
(:class:`~lightning_fed.selection.abps.credit.ShapleyCredit`), its TMC permutations drawn from one
generator across the ranges. Each split computes every value by the operations of the one big call,
so a run is bit-identical to the former all-at-once implementation (compared in
``tests/algorithms/test_abps.py``, with the ratio test and with ``NormBound``, and the tests of
:mod:`lightning_fed.selection`). Checkpoints: the posterior (and :class:`~lightning_fed.selection.
abps.ScaledUCB`'s sums) are now saved sparse; a checkpoint written before issue 17, with dense
``[C, C]`` matrices, still loads (converted without loss), but a new checkpoint does not load into
older code.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from torch import Tensor

from lightning_fed.aggregation.center_optimizer import CenterServerOptimizer, center_server_optimizer_from
from lightning_fed.aggregation.mixing import renormalize
from lightning_fed.aggregation.momentum import UpdateMomentum
from lightning_fed.aggregation.robust import Aggregator, aggregator_from
from lightning_fed.algorithms.base import Algorithm
from lightning_fed.algorithms.peers import JoinsNearestPeers
from lightning_fed.comm.exchange import exchange, peer_exchange_by_receiver
from lightning_fed.comm.ledger import SERVER
from lightning_fed.comm.wire import Wire
from lightning_fed.data.center import FederatedData
from lightning_fed.models.base import CenterModule
from lightning_fed.privacy import GaussianMechanism, noisy_descriptors
from lightning_fed.selection.abps.board import book_features, book_observations
from lightning_fed.selection.abps.credit import ShapleyCredit
from lightning_fed.selection.abps.selector import BayesianSelector
from lightning_fed.selection.base import PartnerSelector, partner_edges, partner_lists
from lightning_fed.selection.diagnostics import (
    REST_CAUSES,
    MeanRows,
    flagged_partner_slots,
    posterior_mean_spread,
    repeat_edges,
    rest_causes,
    same_group_slots,
)
from lightning_fed.types import RoundContext

__all__ = ["ABPS"]

_log = logging.getLogger(__name__)

#: Most bytes of messages one exchange call or one mixing call handles (module docstring, "Scale").
CHUNK_BYTES = 64 * 2**20


class ABPS(JoinsNearestPeers, Algorithm):
    """Exchange with the selected partners, average, credit (Bayesian partner selection by default).

    Args:
        selector: Who partners with whom (:class:`~lightning_fed.selection.PartnerSelector`);
            default :class:`~lightning_fed.selection.abps.BayesianSelector` (kappa, epsilon, gamma,
            tau_acc, prior, clip, filter). The hint names ``BayesianSelector`` first so that
            ``selector.init_args.*`` without a ``class_path`` configures the default.
        shapley: Shapley credit settings (exact up to ``exact_max`` partners, else TMC); used only
            when the selector learns.
        personal_layers: Head layers kept local (extension P: 1 or 2; 0 shares everything).
        momentum: EMA weight beta on each center's aggregated update (0 disables).
        server_momentum: Alias of earlier releases: ``beta`` means ``server_optimizer:
            CenterServerMomentum(beta)`` (0: ``CenterServerAverage``); give ``server_optimizer``.
        server_optimizer: Each center's server step from its round-start model and its mix
            (:class:`~lightning_fed.aggregation.center_optimizer.CenterServerOptimizer`; default
            :class:`~lightning_fed.aggregation.CenterServerAverage`; ABPS-X:
            ``CenterServerMomentum(beta=0.5)``, the server momentum FedAvg-X uses); exclusive with
            ``momentum``.
        privacy: Gaussian-mechanism differential privacy on the published metadata descriptors
            (:class:`~lightning_fed.privacy.GaussianMechanism`); None publishes them exact.
        aggregator: How a center combines itself and the partners it accepted
            (:class:`~lightning_fed.aggregation.robust.Aggregator`; default
            :class:`~lightning_fed.aggregation.WeightedMean`, line 25's sample-weighted FedAvg).
    """

    def __init__(
        self,
        selector: BayesianSelector | PartnerSelector | None = None,
        shapley: ShapleyCredit | None = None,
        personal_layers: int = 0,
        momentum: float = 0.0,
        privacy: GaussianMechanism | None = None,
        server_momentum: float = 0.0,
        server_optimizer: CenterServerOptimizer | None = None,
        aggregator: Aggregator | None = None,
    ) -> None:
        super().__init__(personal_layers)
        self.aggregator = aggregator_from(aggregator)
        self.server_optimizer = center_server_optimizer_from(server_optimizer, server_momentum)
        if momentum and not self.server_optimizer.identity:
            raise ValueError(
                "algorithm.init_args.momentum and algorithm.init_args.server_optimizer are two kinds of "
                "momentum: set momentum to 0 or drop the server optimizer"
            )
        self.update_momentum = UpdateMomentum(momentum)
        self.selector: PartnerSelector = selector if selector is not None else BayesianSelector()
        self.credit = shapley if shapley is not None else ShapleyCredit()
        self.momentum = float(momentum)
        self.privacy = privacy

    def setup(self, data: FederatedData, module: CenterModule, seed: int = 0) -> None:
        super().setup(data, module, seed)
        self.seed = seed
        self.metadata = data.metadata()
        if isinstance(self.selector, BayesianSelector):  # public attributes, for policies on pair features
            self.selector.declare([c.attributes for c in data.centers])
        self.selector.setup(self.metadata, seed)
        if self.selector.partners_everyone(self.num_centers):
            _log.warning(
                "ABPS: algorithm.selector %s (kappa=%d) lets every center partner all "
                "data.num_centers - 1 = %d others: ABPS is then FedAvg over everyone at up to "
                "(C - 1) / 2 = %.1fx FedAvg's bytes; lower kappa or use FedAvg",
                type(self.selector).__name__,
                self.selector.kappa,
                self.num_centers - 1,
                (self.num_centers - 1) / 2,
            )
        filtering = self.selector.filter is not None
        dim = self.selector.filter.metadata_dim if filtering else 0
        #: The directory: descriptors received so far (zeros where none has arrived).
        self.descriptors = torch.zeros(self.num_centers, dim, dtype=torch.float64)
        #: Whose descriptor has arrived (everyone's without a goal filter: nothing is published).
        self.arrived = torch.full((self.num_centers,), not filtering, dtype=torch.bool)
        if filtering:  # (setup validated the descriptors) nobody's has reached the directory yet
            self.selector.candidates = torch.zeros(self.num_centers, self.num_centers, dtype=torch.bool)
        self.update_momentum = UpdateMomentum(self.momentum)
        self.server_optimizer.reset()
        self._start: dict[str, Tensor] | None = None
        self.last_partners: list[list[int]] = [[] for _ in range(self.num_centers)]
        self.rested_center_rounds = 0
        self.bytes_saved_by_rest = 0
        self.partner_total = 0
        self.rounds_seen = 0
        units = [c.attributes.get("care_unit") for c in data.centers]
        #: Care-unit code per center when every center has one (the synthetic federations), else None.
        self.groups: Tensor | None = None
        if units and all(u is not None for u in units):
            codes = {u: k for k, u in enumerate(sorted(set(map(str, units))))}
            self.groups = torch.tensor([codes[str(u)] for u in units], dtype=torch.int64)
        concepts = [c.attributes.get("concept") for c in data.centers]
        #: Off-concept flag per center on a mixed federation (centers declare ``concept``), else None.
        self.off_concept: Tensor | None = None
        if concepts and all(x is not None for x in concepts):
            self.off_concept = torch.tensor([x == "off" for x in concepts], dtype=torch.bool)
        self.last_selected: list[list[int]] = [[] for _ in range(self.num_centers)]
        #: Mechanism diagnostics summed over rounds (see :mod:`lightning_fed.selection.diagnostics`).
        self.diagnostics: dict[str, Any] = {
            "repeats": 0,
            "edges_after_first": 0,
            "causes": dict.fromkeys(REST_CAUSES, 0),
            "same_unit": [],  # per round: [same, expected, slots]
            "off_concept": [],  # per round: [hits, expected, slots] (mixed federations)
            "spread": None,
        }

    @property
    def published(self) -> bool:
        """Whether every center's descriptor has arrived (always True without a goal filter)."""
        return bool(self.arrived.all())

    def _publish_metadata(self, wire: Wire, round_idx: int) -> None:
        """Available centers whose descriptor has not arrived send it; candidates from all arrived.

        Nothing is sent (and nothing booked) when no such center is available. The candidate sets are
        recomputed only when a new descriptor arrives.
        """
        dim = self.selector.filter.metadata_dim
        pending = ~self.arrived & wire.available(round_idx, self.num_centers)
        centers = torch.nonzero(pending).reshape(-1)
        if not len(centers):
            return
        own = self.metadata[:, :dim]
        if self.privacy is not None:  # each center noises its own descriptor before it leaves
            own = noisy_descriptors(own, self.n_train, self.privacy, self.seed)
        got = exchange(
            wire, {"v": own[centers].to(torch.float32)}, centers, torch.full_like(centers, SERVER), round_idx
        )
        if not len(got.src):
            return
        self.descriptors[got.src] = got.received["v"].to(torch.float64)
        self.arrived[got.src] = True
        self.selector.candidates = self.selector.filter.candidates(self.descriptors, published=self.arrived)

    def train_round(self, engine: Any, round_idx: int) -> Tensor:
        """Local training; the round-start shared parameters are kept first when the server optimizer
        reads them."""
        if self.server_optimizer.needs_start:
            self._start = {n: p.detach().clone() for n, p in self.shared(engine.get_params()).items()}
        return super().train_round(engine, round_idx)

    def aggregate(self, ctx: RoundContext, params: dict[str, Tensor], wire: Wire) -> dict[str, Tensor]:
        if not self.published:
            self._publish_metadata(wire, ctx.round)
        if ctx.round == 0:  # the public pair features a learned policy reads (selection/abps/board.py)
            book_features(wire.ledger, 0, self.num_centers, self.selector.feature_record_bytes)
        t0 = time.perf_counter()
        available = wire.available(ctx.round, self.num_centers)
        partners = self._select(ctx.round, available)
        t1 = time.perf_counter()
        shared = self.shared(params)
        out = dict(params)
        self._book(partners, wire, shared)
        self._diagnose(partners, available)
        mixed, (src, dst), credit, shapley_seconds = self._exchange_mix_credit(
            ctx, params, shared, partners, wire
        )
        partners = partner_lists(src, dst, self.num_centers)  # the accepted partners
        if len(src):
            active = torch.tensor([bool(p) for p in partners])
            for name, own in shared.items():
                # Without a recorded start (no local training, or a rule that reads none): own.
                start = own if self._start is None else self._start[name].to(own.device)
                # The mix is given away tensor by tensor: a rule may step in place into it, and so
                # may the update momentum when the rule returned it (the same numbers without two
                # more [C, ...] tensors; issue 33, peak memory).
                mix = mixed.pop(name)
                stepped = self.server_optimizer.apply(name, start, own, mix, active)
                out[name] = self.update_momentum.apply(name, own, stepped, active, in_place=stepped is mix)
        t2 = time.perf_counter()
        if len(src) and credit is not None:
            self.selector.observe(*credit)
            if self.selector.pools_observations:
                book_observations(wire.ledger, ctx.round, credit[0], available)
        shapley_seconds += time.perf_counter() - t2
        self._round.update(seconds_matching=t1 - t0, seconds_shapley=shapley_seconds)
        self.last_partners = partners
        return out

    def _exchange_mix_credit(
        self,
        ctx: RoundContext,
        params: dict[str, Tensor],
        shared: dict[str, Tensor],
        partners: list[list[int]],
        wire: Wire,
    ) -> tuple[dict[str, Tensor], tuple[Tensor, Tensor], tuple[Tensor, Tensor, Tensor] | None, float]:
        """Exchange with the partners, mix and credit, one range of receivers at a time.

        :func:`~lightning_fed.comm.exchange.peer_exchange_by_receiver` hands out each range of
        receivers once all their messages have arrived; the range is mixed (Alg. 1 line 25) and
        credited (Eq. 4) and its messages dropped, so no more than about two chunks of messages
        exist at once (module docstring, "Scale"). Every row and every Shapley value is computed by
        the operations of one call over every receiver (the mix and the weights row by row, the
        TMC draws from one generator in ascending receiver order).

        Returns:
            The mixed shared parameters ``{name: [C, ...]}`` (meaningful where something arrived),
            the accepted edges ``(src, dst)``, the credit ``(i, j, phi)`` (None when the selector
            does not learn) and the seconds spent in the credit.
        """
        sizes = self.n_train.to(torch.float64)
        mixed = {n: torch.empty_like(t) for n, t in shared.items()}
        personal = {n: p for n, p in params.items() if n not in shared}
        learns = self.selector.learns
        generator = self.credit.generator(ctx) if learns else None
        accepted: list[tuple[Tensor, Tensor]] = []
        credits: list[tuple[Tensor, Tensor, Tensor]] = []
        seconds = 0.0
        src, dst = partner_edges(partners)
        for lo, hi, got in peer_exchange_by_receiver(
            wire, shared, src, dst, ctx.round, max_bytes=CHUNK_BYTES
        ):
            local = got.dst - lo
            self_w, edge_w = renormalize(sizes[lo:hi], sizes[got.src], local)
            rows = {n: t[lo:hi] for n, t in shared.items()}
            part = self.aggregator.mix_received(
                rows, got.received, local, self_w, edge_w, max_bytes=CHUNK_BYTES
            )
            for name, t in part.items():
                mixed[name][lo:hi] = t
            accepted.append((got.src, got.dst))
            if learns and len(got.src):
                t0 = time.perf_counter()
                group = partner_lists(got.src, got.dst, self.num_centers)
                edges = (got.src, got.dst)
                credits.append(
                    self.credit(ctx, group, shared, got.received, edges, self.n_train, personal, generator)
                )
                seconds += time.perf_counter() - t0
            del got, part
        src, dst = (torch.cat(column) for column in zip(*accepted, strict=True))
        if not learns:
            return mixed, (src, dst), None, seconds
        if not credits:
            empty = torch.zeros(0, dtype=torch.int64)
            return mixed, (src, dst), (empty, empty, torch.zeros(0, dtype=torch.float64)), seconds
        credit = tuple(torch.cat(column) for column in zip(*credits, strict=True))
        return mixed, (src, dst), credit, seconds  # type: ignore[return-value]

    def _select(self, round_idx: int, available: Tensor) -> list[list[int]]:
        """The selector's partner sets, restricted to the available centers."""
        if bool(available.all()):
            return self.selector.select(round_idx)
        partners = self.selector.select(round_idx, available=available)
        up = available.tolist()
        return [[j for j in ps if up[j]] if up[i] else [] for i, ps in enumerate(partners)]

    def _book(self, partners: list[list[int]], wire: Wire, shared: dict[str, Tensor]) -> None:
        """Round statistics: isolation, E|P_i|, and bytes a resting center did not send."""
        rested = sum(1 for p in partners if not p)
        message = wire.message_bytes({n: t[:1] for n, t in shared.items()})
        self.rested_center_rounds += rested
        # A partnership costs 2|W| (Eq. 2), |W| attributable to each end: a resting center saves
        # up to kappa such halves.
        self.bytes_saved_by_rest += rested * self.selector.kappa * message
        self.partner_total += sum(len(p) for p in partners)
        self.rounds_seen += 1
        self._round = {"isolation_rate": rested / self.num_centers, "mean_partners": 0.0}
        self._round["mean_partners"] = sum(len(p) for p in partners) / self.num_centers

    def _diagnose(self, partners: list[list[int]], available: Tensor) -> None:
        """This round's mechanism diagnostics (module :mod:`~lightning_fed.selection.diagnostics`).

        ``partner_repeat_rate``: share of this round's selected partnerships that were also selected
        last round (from round 1 on); ``posterior_mean_spread`` (selectors with a posterior);
        ``partner_same_unit_rate`` against ``partner_same_unit_chance`` (federations whose centers
        have a ``care_unit``); ``partner_off_concept_rate`` against ``..._chance`` (centers that
        declare a ``concept``: the mixed federation); ``isolation_<cause>`` for the four causes, summing to
        ``isolation_rate``; the selector's own :meth:`round_diagnostics` (an acceptance rule's
        ``rest_*``).
        """
        diag, stats = self.diagnostics, self._round
        c = self.num_centers
        repeats, edges = repeat_edges(partners, self.last_selected)
        if self.rounds_seen > 1:  # _book has counted this round: there was a previous one
            diag["repeats"] += repeats
            diag["edges_after_first"] += edges
            stats["partner_repeat_rate"] = repeats / edges if edges else 0.0
        self.last_selected = [list(p) for p in partners]
        match = self.selector.last_match
        causes = rest_causes(partners, available, match)
        for cause, n in causes.items():
            diag["causes"][cause] += n
            stats[f"isolation_{cause}"] = n / c
        stats.update(self.selector.round_diagnostics())
        posterior = getattr(self.selector, "posterior", None)
        if posterior is not None:  # read a block of rows at a time when the posterior can
            means = posterior if isinstance(posterior, MeanRows) else posterior.mean()
            spread = posterior_mean_spread(means, self.selector.candidates)
            diag["spread"] = stats["posterior_mean_spread"] = spread
        if self.groups is not None:
            cand = match.candidates if match is not None else ~torch.eye(c, dtype=torch.bool)
            same, expected, slots = same_group_slots(partners, cand, self.groups)
            diag["same_unit"].append([same, expected, slots])
            if slots:
                stats["partner_same_unit_rate"] = same / slots
                stats["partner_same_unit_chance"] = expected / slots
        if self.off_concept is not None:
            cand = match.candidates if match is not None else ~torch.eye(c, dtype=torch.bool)
            hits, expected, slots = flagged_partner_slots(partners, cand, self.off_concept)
            diag.setdefault("off_concept", []).append([hits, expected, slots])
            if slots:
                stats["partner_off_concept_rate"] = hits / slots
                stats["partner_off_concept_chance"] = expected / slots

    def round_stats(self) -> dict[str, float]:
        return dict(getattr(self, "_round", {}))

    def summary_stats(self) -> dict[str, float]:
        """Rest and bandwidth counters and the mechanism diagnostics over the whole run.

        ``partner_same_unit_rate_last10`` / ``..._chance_last10`` cover the last 10 rounds only
        (whether selection has concentrated by the end). On a mixed federation
        ``partner_off_concept_rate`` / ``..._chance`` (in-concept receivers' slots with off-concept
        peers, :func:`~lightning_fed.selection.diagnostics.flagged_partner_slots`) over all rounds,
        the last 10 and rounds 30 on (``_from30``, 0-based round index >= 30).
        """
        denom = max(1, self.rounds_seen * self.num_centers)
        diag = self.diagnostics
        out: dict[str, float] = {
            "rested_center_rounds": self.rested_center_rounds,
            "isolation_rate": self.rested_center_rounds / denom,
            "mean_partners": self.partner_total / denom,
            "bytes_saved_by_rest": self.bytes_saved_by_rest,
            **{f"isolation_{cause}": n / denom for cause, n in diag["causes"].items()},
        }
        if diag["edges_after_first"]:
            out["partner_repeat_rate"] = diag["repeats"] / diag["edges_after_first"]
        if diag["spread"] is not None:
            out["posterior_mean_spread"] = diag["spread"]
        for suffix, rows in (("", diag["same_unit"]), ("_last10", diag["same_unit"][-10:])):
            slots = sum(r[2] for r in rows)
            if slots:
                out[f"partner_same_unit_rate{suffix}"] = sum(r[0] for r in rows) / slots
                out[f"partner_same_unit_chance{suffix}"] = sum(r[1] for r in rows) / slots
        off = diag.get("off_concept", [])
        for suffix, rows in (("", off), ("_last10", off[-10:]), ("_from30", off[30:])):
            slots = sum(r[2] for r in rows)
            if slots:
                out[f"partner_off_concept_rate{suffix}"] = sum(r[0] for r in rows) / slots
                out[f"partner_off_concept_chance{suffix}"] = sum(r[1] for r in rows) / slots
        return out

    def _counters(self) -> tuple[int, int, int, int]:
        return self.rested_center_rounds, self.bytes_saved_by_rest, self.partner_total, self.rounds_seen

    def state_dict(self) -> dict[str, Any]:
        return {
            "selector": self.selector.state_dict(),
            "buffers": self.update_momentum.state_dict(),
            "server_optimizer": self.server_optimizer.state_dict(),
            "published": self.published,
            "descriptors": self.descriptors.clone(),
            "descriptors_arrived": self.arrived.clone(),
            "counters": (
                self.rested_center_rounds,
                self.bytes_saved_by_rest,
                self.partner_total,
                self.rounds_seen,
            ),
            "last_partners": self.last_partners,
            "last_selected": self.last_selected,
            "diagnostics": self.diagnostics,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.selector.load_state_dict(state["selector"])
        self.update_momentum.load_state_dict(state["buffers"])
        # "server_momentum": the key of checkpoints written before the server optimizer plugin.
        self.server_optimizer.load_state_dict(state.get("server_optimizer", state.get("server_momentum", {})))
        if "descriptors_arrived" in state:
            self.descriptors = state["descriptors"].clone()
            self.arrived = state["descriptors_arrived"].clone()
        elif state["published"]:  # a checkpoint from before late publication: publication is over
            self.arrived = torch.ones_like(self.arrived)
        self.rested_center_rounds, self.bytes_saved_by_rest, self.partner_total, self.rounds_seen = state[
            "counters"
        ]
        self.last_partners = state["last_partners"]
        self.last_selected = state.get("last_selected", [list(p) for p in self.last_partners])
        if "diagnostics" in state:
            self.diagnostics = state["diagnostics"]
