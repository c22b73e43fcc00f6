"""The wire: the only way anything crosses between centers (docs/architecture.md, decision 4).

:meth:`Wire.send` encodes a payload with the configured :class:`CommHook`, records the encoded
bytes of every message on the :class:`Ledger`, and returns what the receivers decode. With a
:class:`~lightning_fed.comm.faults.FaultInjection` plan the wire also says which centers are reachable
in a round (:meth:`Wire.available`) and corrupts what the plan's faulty senders send.

Receivers never trust what arrives: :meth:`Wire.accept` checks every received message and rejects one
that holds a NaN/Inf or whose L2 norm (over all its tensors) exceeds ``max_norm_ratio`` (default
:data:`MAX_NORM_RATIO` = 5) times a reference the sender cannot move: the receiver's own
shared-parameter norm, or, for the FedAvg server (no model of its own), the median norm of the
uploads it received. A rejected message's bytes stay on the ledger (they were sent); the rejection
is counted per round.

With a :class:`~lightning_fed.comm.norm_bound.NormBound` (``wire.norm_bound``) the ratio test is
replaced, for every message made of the senders' shared parameters, by a bound on the *update*
(the message minus the round-start model it should be near) against a windowed median of the
round's update norms, which an accepted message cannot ratchet; messages of other kinds (codes,
descriptors, sparse values) keep the ratio test.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lightning_fed.comm.faults import FaultInjection
from lightning_fed.comm.hooks import CommHook, IdentityHook
from lightning_fed.comm.ledger import SERVER, Ledger
from lightning_fed.comm.norm_bound import NormBound
from lightning_fed.comm.sampling import CenterSampler

__all__ = ["MAX_NORM_RATIO", "Wire", "message_norms"]

#: Default :attr:`Wire.max_norm_ratio` (see :class:`Wire` for how it was set from measured spreads).
MAX_NORM_RATIO = 5.0


#: Bytes of float64 temporaries :func:`message_norms` holds at once (rows are taken in chunks).
NORM_CHUNK_BYTES = 16 * 2**20


def message_norms(
    payload: dict[str, Tensor], minus: tuple[dict[str, Tensor], Tensor] | None = None
) -> Tensor:
    """L2 norm of every message ``[E]`` over all of its tensors (float64; NaN/Inf propagate).

    ``||r_e|| = sqrt(sum_t sum_k r_e[t, k]^2)``, the squares summed in float64 per tensor (in the
    payload's tensor order), then over tensors. Rows are taken in chunks of at least two rows whose
    float64 copies hold about :data:`NORM_CHUNK_BYTES`: each row's sum is computed by the same
    reduction whatever rows share the call (a one-row call may split a long row across threads,
    hence never a one-row chunk of a longer payload), so the norms are the bits of one call over
    all rows without its ``E x |W|`` float64 temporaries (2 x 475 MB at 3,680 centers: issue 33).

    With ``minus = (start, owner)`` the norms are the updates' ``||r_e - s_{owner_e}||`` (``start``
    ``{name: [C, ...]}``, ``owner`` int64 ``[E]``; a one-row payload, a broadcast, is compared with
    every owner): each chunk subtracts its own rows of ``start``, so neither the ``E x |W|`` anchors
    nor their difference exist at once (the same bits as ``message_norms({n: r[n] -
    start[n][owner]})``).
    """
    tensors = [t.detach() for t in payload.values()]
    rows = tensors[0].shape[0] if tensors else 0
    if minus is not None:
        start, owner = minus
        rows = len(owner)
        tensors = [t.expand(rows, *t.shape[1:]) if t.shape[0] != rows else t for t in tensors]
        anchors = [start[n].detach() for n in payload]
    if not rows:
        return torch.zeros(0, dtype=torch.float64)
    step = max(2, NORM_CHUNK_BYTES // max(1, 8 * sum(t[0].numel() for t in tensors)))
    parts = []
    lo = 0
    while lo < rows:
        hi = rows if rows - lo - step < 2 else lo + step  # never leave a one-row tail
        chunk = [t[lo:hi] for t in tensors]
        if minus is not None:
            index = owner[lo:hi]
            chunk = [t - a.index_select(0, index.to(a.device)) for t, a in zip(chunk, anchors, strict=True)]
        parts.append(sum(t.to(torch.float64).reshape(hi - lo, -1).pow(2).sum(1) for t in chunk))
        lo = hi
    return torch.cat(parts).sqrt().cpu()


class Wire:
    """Encode, count, decode; inject configured faults; validate what arrives.

    The norm defence accepts message ``e`` iff ``||r_e|| <= T * ref_e`` with ``T = max_norm_ratio``
    and ``ref_e`` the receiver's own norm ``||theta_dst(e)||`` (peers; a FedAvg center checking the
    download) or ``median_k ||r_k||`` (the server; :meth:`norms_and_reference`). Every method sends
    parameters (or codes / descriptors), never deltas, so the message and the reference are the
    same kind of vector and an honest ratio ``rho_e = ||r_e|| / ref_e`` is near 1, while a sender
    that sends ``X`` times its honest message (``wire.faults.corrupt: {round: {center: {scale: X}}}``)
    has ratio ``X * rho_e``. ``T`` must therefore sit above every honest ratio and below ``10 *``
    the smallest one, so that a 10x attack is rejected. Measured by ``benchmarks/norm_spread.py``
    on the shipped configs (seed 0, 230 synthetic centers, 50 rounds, or 15 on Fashion-MNIST),
    ``rho`` over all messages of rounds 0-49:

    - FedAvg, FedAvg-X, FedAvg+P/Q, FedProx, FedDyn, MOON, BNN-FL uploads (median reference):
      0.948 .. 1.074; their downloads (own reference): 0.945 .. 1.081;
    - ABPS and its variants (own reference): 0.608 .. 1.645 (the diversity goal, which pairs
      unlike centers; base ABPS 0.859 .. 1.164, ABPS-X 0.900 .. 1.112); descriptors: 0.754 .. 1.653;
    - DeceFL 0.929 .. 1.076, DeFTA 0.709 .. 1.410, WPFed 0.842 .. 1.223 (codes 0.793 .. 1.139);
      DisPFL, EdgeDRM, FedSPD (Fashion-MNIST, 8 clients) 0.998 .. 1.002.

    So ``1.653 < T < 6.08``. ``T = 5`` leaves a factor 3 above the largest honest ratio and rejects
    a 10x attack from any sender whose honest ratio is above 0.5 (measured minimum 0.608); an
    attack below ``5 / rho`` passes (its damage is bounded: see ``benchmarks/attacks.py``).

    Args:
        hook: The encode/decode hook (identity by default).
        ledger: Where bytes are recorded (a fresh one by default).
        faults: The fault plan (none by default: every center is always available).
        max_norm_ratio: ``T``: a received message whose norm exceeds ``T`` times its reference is
            rejected (``> 0``; ``math.inf`` keeps only the NaN/Inf test).
        norm_bound: The update bound (:class:`~lightning_fed.comm.norm_bound.NormBound`); None (the
            default, the behaviour of before it existed) keeps the ratio test for every message.

    Raises:
        ValueError: When ``max_norm_ratio`` is not ``>= 1`` (issue 32 item 5: ``1e-9`` turned every run into
            a silent local-only run).
    """

    def __init__(
        self,
        hook: CommHook | None = None,
        ledger: Ledger | None = None,
        faults: FaultInjection | None = None,
        max_norm_ratio: float = MAX_NORM_RATIO,
        norm_bound: NormBound | None = None,
    ) -> None:
        if not max_norm_ratio >= 1:  # NaN fails too
            raise ValueError(
                f"wire.max_norm_ratio must be >= 1 (inf: no ratio test), got {max_norm_ratio}: below 1 it "
                "rejects every message longer than its reference (the receiver's own model, or the median "
                "upload), at least about half the honest ones"
            )
        self.hook = hook if hook is not None else IdentityHook()
        self.ledger = ledger if ledger is not None else Ledger()
        self.faults = faults
        self.max_norm_ratio = float(max_norm_ratio)
        self.norm_bound = norm_bound
        #: Rejected messages per round.
        self.rejected: dict[int, int] = {}
        #: Client sampling (``trainer.centers_per_round``; the federation installs it): None, every
        #: reachable center takes part in every round.
        self.sampler: CenterSampler | None = None

        #: Every center's shared parameters at the start of the round (:meth:`start_round`).
        self.start: dict[str, Tensor] = {}
        #: ``||s_c||`` of every center's round-start model, per ordered tuple of names (computed once
        #: a round, then read per message by its owner).
        self._start_norms: dict[tuple[str, ...], Tensor] = {}
        self._factor: Tensor | None = None
        #: Multi-process runs whose rows cross in the wire's dtype (the federation installs
        #: :meth:`ShardedEngine.merge_by_owner <lightning_fed.distributed.ShardedEngine.merge_by_owner>`):
        #: ``merge(values [K], centers [K])`` takes each value computed from a center's own rows from
        #: the process that holds them exactly. None: every process holds every row exactly.
        self.merge: Callable[[Tensor, Tensor], Tensor] | None = None

    def describe_defence(self) -> str:
        """The receivers' checks in words (``fit`` prints ``defence: ...`` at start)."""
        finite = self.max_norm_ratio < float("inf")
        ratio = f"norm <= {self.max_norm_ratio:g}x its reference" if finite else "none"
        if self.norm_bound is None:
            return f"defence: ratio test ({ratio}; NaN/Inf rejected)"
        b = self.norm_bound
        projection = "" if b.min_projection_ratio is None else f", projection >= {b.min_projection_ratio:g}"
        return (
            f"defence: NormBound on shared parameters (update <= {b.max_update_ratio:g}x the median honest "
            f"update, norm {b.min_norm_ratio:g}-{b.max_norm_ratio:g}x the round-start model{projection}; "
            f"{b.mode}), ratio test on other payloads ({ratio}); "
            "wire.norm_bound: null for the ratio test only"
        )

    def start_round(self, round_idx: int, params: dict[str, Tensor], copy: bool = True) -> None:
        """Record every center's parameters ``{name: [C, ...]}`` before ``round_idx``'s local training:
        the anchors of the update bound (kept only with a :attr:`norm_bound`).

        Args:
            round_idx: The round about to train.
            params: The round-start parameters.
            copy: Keep a detached copy (default); False keeps ``params`` itself, for a caller that
                hands over a copy no one else holds (the federation's ``replay_params()``: one
                ``[C, D]`` fewer at the round's start, issue 33).
        """
        if self.norm_bound is not None:
            self.start = {}  # the previous round's anchors go before the new ones are made
            self.start = {n: t.detach().clone() if copy else t.detach() for n, t in params.items()}
            self._start_norms = {}

    def reachable(self, round_idx: int, num_centers: int) -> Tensor:
        """Bool ``[num_centers]``: which centers the fault plan leaves online in ``round_idx``."""
        if self.faults is None:
            return torch.ones(num_centers, dtype=torch.bool)
        return self.faults.available(round_idx, num_centers)

    def available(self, round_idx: int, num_centers: int) -> Tensor:
        """Bool ``[num_centers]``: which centers take part in ``round_idx`` (send and receive).

        The :meth:`reachable` centers, or with a :attr:`sampler` the ones it draws among them
        (:mod:`lightning_fed.comm.sampling`).
        """
        reachable = self.reachable(round_idx, num_centers)
        if self.sampler is None:
            return reachable
        return self.sampler.draw(round_idx, reachable)

    def message_bytes(self, payload: dict[str, Tensor]) -> int:
        """Encoded bytes of one message of ``payload`` (leading dimension = messages)."""
        return sum(t[0].numel() * t.element_size() for t in self.hook.encode(payload).values())

    def send(self, payload: dict[str, Tensor], src: Tensor, dst: Tensor, round_idx: int) -> dict[str, Tensor]:
        """Send messages along edges ``src[e] -> dst[e]``.

        Args:
            payload: Tensors whose leading dimension is the number of edges ``E`` (one message per
                edge) or 1 (the same message to every edge: encoded once, counted once per edge).
            src: Sender ids ``[E]`` (center ids or :data:`~lightning_fed.comm.ledger.SERVER`).
            dst: Receiver ids ``[E]``.
            round_idx: Round the bytes are booked to.

        Returns:
            The decoded payload, same shapes as ``payload`` (leading dimension ``E`` when a faulty
            sender's broadcast had to be corrupted).
        """
        src, dst = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
        if self.faults is not None:
            payload = self.faults.corrupt_payload(payload, src, round_idx)
        encoded = self.hook.encode(payload)
        per_message = sum(t[0].numel() * t.element_size() for t in encoded.values())
        self.ledger.record(round_idx, src, dst, per_message)
        return self.hook.decode(encoded, payload)

    def norms_and_reference(
        self, received: dict[str, Tensor], own: dict[str, Tensor] | Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Norms ``||r_e||`` of the received messages and the references ``ref_e`` (float64 ``[E]``).

        ``ref_e = ||own_e||`` (the receiver's own shared parameters, leading dimension ``E`` or 1,
        same names; or those norms already computed, a float64 tensor ``[E]`` or ``[1]``) when
        ``own`` is given, else ``median_k ||r_k||`` over the finite norms of the received messages
        (the lower median; 0 when none is finite).
        """
        norms = message_norms(received)
        if isinstance(own, Tensor):
            ref = own.detach().to(torch.float64).cpu()
        elif own is not None:
            ref = message_norms(own)
        else:
            finite = norms[torch.isfinite(norms)]
            ref = finite.median() if finite.numel() else torch.tensor(0.0, dtype=torch.float64)
        norms, ref = torch.broadcast_tensors(norms, ref)
        return norms, ref

    def norm_ratios(self, received: dict[str, Tensor], own: dict[str, Tensor] | Tensor | None) -> Tensor:
        """``||r_e|| / ref_e`` of every received message (float64 ``[E]``; see :meth:`accept`)."""
        norms, ref = self.norms_and_reference(received, own)
        return norms / ref

    def accept(
        self,
        received: dict[str, Tensor],
        own: dict[str, Tensor] | Tensor | None,
        round_idx: int,
        src: Tensor | None = None,
        dst: Tensor | None = None,
        receivers: Tensor | None = None,
    ) -> Tensor:
        """Receiver-side validation: bool ``[E]``, True for messages the receiver may use.

        Ratio test (no :attr:`norm_bound`, or a message the bound does not cover): message ``e`` is
        accepted iff ``||r_e||`` is finite and ``||r_e|| <= max_norm_ratio * ref_e``
        (:meth:`norms_and_reference`: the receiver's own shared-parameter norm, or, for a receiver
        with no parameters of its own (the server, ``own=None``), the median norm of the messages it
        received this round). A zero or non-finite reference skips the norm test.

        Update bound (a :attr:`norm_bound`, senders ``src`` and receivers ``dst`` given, and
        ``received`` made of shared tensors recorded by :meth:`start_round`): the
        :class:`~lightning_fed.comm.norm_bound.NormBound` verdict on ``||r_e - a_e||`` and
        ``||r_e||`` (:meth:`anchors`); in clip mode the accepted over-long updates are shortened by
        :meth:`clip`, which :func:`~lightning_fed.comm.exchange.exchange` calls next.

        Rejections are added to :attr:`rejected` for ``round_idx``.

        With a :attr:`merge` (multi-process runs whose rows cross in the wire's dtype), every value
        computed from a center's own rows (the reference ``ref_e`` of receiver ``receivers[e]``, the
        update and anchor norms of the anchor's center) is taken from the process holding that
        center exactly, so every process reaches the one-process verdicts.
        """
        self._factor: Tensor | None = None
        owner = self._owners(received, src, dst)
        if owner is None:
            norms, ref = self.norms_and_reference(received, own)
            if self.merge is not None and own is not None:
                if receivers is None:
                    raise ValueError("Wire.accept: a multi-process replay needs the receivers of an own test")
                ref = self.merge(ref.contiguous(), torch.as_tensor(receivers).reshape(-1))
            ok = torch.isfinite(norms)
            check = torch.isfinite(ref) & (ref > 0)
            ok &= ~check | (norms <= self.max_norm_ratio * ref)
        else:
            norms = torch.broadcast_to(message_norms(received), (len(src),))
            update = message_norms(received, minus=(self.start, owner))
            channel = "server" if bool((dst == SERVER).all()) else "centers"
            anchor_norms = self._anchor_norms(received, owner)
            if self.merge is not None:
                update, anchor_norms = (self.merge(v.contiguous(), owner) for v in (update, anchor_norms))
            ok, factor = self.norm_bound.verdict(channel, round_idx, norms, update, anchor_norms)
            if any(t.shape[0] != len(src) for t in received.values()):
                ok &= factor >= 1  # a broadcast is not clipped per receiver: rejected where it fails
            elif bool((factor < 1).any()):
                self._factor = factor
        bad = int((~ok).sum())
        if bad:
            self.rejected[round_idx] = self.rejected.get(round_idx, 0) + bad
        return ok

    def anchors(
        self, received: dict[str, Tensor], src: Tensor | None, dst: Tensor | None
    ) -> dict[str, Tensor] | None:
        """The round-start model ``a_e`` each message is checked against, or None where the update
        bound does not apply.

        ``a_e`` is the receiver's own round-start shared parameters, or, for the server, the
        sender's (:meth:`start_round`). None without a :attr:`norm_bound`, without ``src`` and
        ``dst``, or when a tensor of ``received`` is not a recorded shared tensor of the same shape.
        """
        owner = self._owners(received, src, dst)
        return None if owner is None else self._anchor_rows(tuple(received), owner)

    def _anchor_rows(self, names: tuple[str, ...], owner: Tensor) -> dict[str, Tensor]:
        """The round-start tensors ``names`` of each message's owner (``[E, ...]`` copies)."""
        return {n: self.start[n].index_select(0, owner.to(self.start[n].device)) for n in names}

    def _owners(self, received: dict[str, Tensor], src: Tensor | None, dst: Tensor | None) -> Tensor | None:
        """Whose round-start model each message is checked against (int64 ``[E]``: the receiver, or
        for the server the sender), or None where the update bound does not apply (:meth:`anchors`)."""
        if self.norm_bound is None or src is None or dst is None or not self.start:
            return None
        src, dst = torch.as_tensor(src).reshape(-1), torch.as_tensor(dst).reshape(-1)
        for n, t in received.items():
            start = self.start.get(n)
            if start is None or tuple(start.shape[1:]) != tuple(t.shape[1:]) or not t.is_floating_point():
                return None
        owner = torch.where(dst == SERVER, src, dst)
        if bool((owner < 0).any()) or int(owner.max()) >= len(next(iter(self.start.values()))):
            return None
        return owner

    def _anchor_norms(self, received: dict[str, Tensor], owner: Tensor) -> Tensor:
        """``||a_e||`` per message: each center's round-start norm over ``received``'s tensors (in
        their order), computed once a round and read by owner. With a single center the anchors
        are normed as rows of their own (a one-row call may reduce in another order)."""
        names = tuple(received)
        if len(next(iter(self.start.values()))) < 2:
            return message_norms(self._anchor_rows(names, owner))
        if names not in self._start_norms:
            self._start_norms[names] = message_norms({n: self.start[n] for n in names})
        return self._start_norms[names].index_select(0, owner.cpu())

    def clip(self, received: dict[str, Tensor], src: Tensor, dst: Tensor) -> dict[str, Tensor]:
        """``received`` with the updates the last :meth:`accept` found over the bound shortened,
        ``a_e + factor_e (r_e - a_e)`` (clip mode; unchanged otherwise). A broadcast (one row for
        several receivers) is left whole."""
        factor, self._factor = self._factor, None
        if factor is None:
            return received
        anchors = self.anchors(received, src, dst)
        out = dict(received)
        for n, t in received.items():
            if t.shape[0] != len(factor) or anchors is None:
                continue
            a = anchors[n].to(t.dtype)
            f = factor.to(t.device, t.dtype).view(-1, *([1] * (t.dim() - 1)))
            out[n] = a + f * (t - a)
        return out

    def rejected_in(self, round_idx: int) -> int:
        """Messages rejected by their receivers in ``round_idx``."""
        return self.rejected.get(round_idx, 0)

    def rejected_total(self) -> int:
        """Messages rejected so far."""
        return sum(self.rejected.values())
