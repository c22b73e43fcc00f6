"""A norm defence on the *update*, against a reference an accepted message cannot ratchet.

The ratio test of :class:`~lightning_fed.comm.wire.Wire` (``max_norm_ratio``) compares a message's
norm with the receiver's own norm or the median upload norm. Both follow the model, and the model
follows every accepted message: an attack just below the ratio, sent every round, inflates the
reference it is compared with (FedAvg, the largest of 60 centers sending 3x every round: model norm
8.8 -> 717, issue 32). :class:`NormBound` bounds instead the update ``u_e = m_e - a_e``, the message
minus the round-start model ``a_e`` it should be near:

* ``a_e`` is a round-start model the receiver knows: a center checks a message against its **own**
  shared parameters at the start of the round (a peer's message, or the server's average); the
  server checks an upload against the **sender's** round-start parameters (under FedAvg, the model
  the server itself sent it the round before). The wire records them before local training
  (:meth:`Wire.start_round <lightning_fed.comm.wire.Wire.start_round>`).
* The reference ``ref_t`` is a robust statistic of the update norms: per round and channel (what
  the server receives, what centers receive), ``s_t`` = the lower median of ``||u_e||`` over the
  round's messages (every message counts once: the median counts centers, not rows, so a few
  large centers cannot carry it); ``ref_t = median(s_{t-W+1}, ..., s_t)`` over a window of ``W``
  rounds, and never more than ``growth`` times the previous round's ``ref``. Fewer than half of a
  round's senders cannot move ``s_t`` beyond the honest order statistics, an accepted message
  leaves the model within ``T ref_t`` of where it was, and the growth cap stops a round in which
  attackers are the majority from raising the bound by more than ``growth``.
* Message ``e`` passes iff ``||u_e|| <= T ref_t`` (``T = max_update_ratio``), ``L ||a_e|| <=
  ||m_e|| <= H ||a_e||`` (``L = min_norm_ratio``, ``H = max_norm_ratio``) and its projection on
  the anchor ``<m_e, a_e> / ||a_e||^2 >= P`` (``P = min_projection_ratio``; :func:`projection`): a
  shrunken, all-zero, scaled-up, sign-flipped or noise message of the honest norm is caught even
  where honest updates are long next to the model (round 0 from the initial model; peers whose
  models differ, where ``a_e`` is the receiver's model). ``a_e`` moves only by accepted messages,
  which the update test bounds by ``T ref_t``: the band alone could ratchet, the two together
  cannot.
* Why the projection test (issue 32): between peers the update test is loose. Measured on ABPS (60
  centers, the 10 % largest sending ``-1x`` from round 5), a peer's model is ~7 median honest
  updates long, so a sign flip (norm ratio 1.02, update 14.6 ``ref_t``) passed the norm band and
  ``T = 20``: 18 of 18 accepted in round 5, the receivers it moved then rejected up to 100 honest
  messages a round, and the mean test AUROC fell 0.16. Its projection is about -1, Gaussian noise
  at the honest norm about 0, an honest message's 0.42 or more (``benchmarks/norm_spread.py
  --update``; the lowest on the diversity goal, which pairs dissimilar centers, falling from 0.54
  by round 20 to 0.42 by round 41), hence ``P = 0.2``.

``mode``: ``"reject"`` drops a message that fails; ``"clip"`` keeps an over-long update shortened
to the bound, ``m'_e = a_e + u_e min(1, T ref_t / ||u_e||)`` (a message failing the lower test is
rejected in both modes; a broadcast, one message to many receivers, is never clipped per receiver:
it is rejected where it fails).

The default ``T`` and ``L`` come from the honest spreads of the shipped configs
(``benchmarks/norm_spread.py``; see :data:`MAX_UPDATE_RATIO`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "MAX_NORM_RATIO",
    "MAX_UPDATE_RATIO",
    "MIN_NORM_RATIO",
    "MIN_PROJECTION_RATIO",
    "MODES",
    "NormBound",
    "projection",
]

#: Default :attr:`NormBound.max_update_ratio` (``T``), from ``benchmarks/norm_spread.py``.
MAX_UPDATE_RATIO = 20.0

#: Default :attr:`NormBound.min_norm_ratio` (``L``), from ``benchmarks/norm_spread.py``.
MIN_NORM_RATIO = 0.5

#: Default :attr:`NormBound.max_norm_ratio` (``H``), from ``benchmarks/norm_spread.py``.
MAX_NORM_RATIO = 2.0

#: Default :attr:`NormBound.min_projection_ratio` (``P``): half the lowest honest projection
#: measured (0.42, ``benchmarks/norm_spread.py --update``, 50 rounds of the ABPS diversity goal).
MIN_PROJECTION_RATIO = 0.2

#: What happens to a message whose update is over the bound.
MODES = ("reject", "clip")


def projection(message_norms: Tensor, update_norms: Tensor, anchor_norms: Tensor) -> Tensor:
    """The message's projection on its anchor in anchor lengths, ``<m_e, a_e> / ||a_e||^2``.

    From the three norms the bound already has: ``||m - a||^2 = ||m||^2 + ||a||^2 - 2 <m, a>``, so
    ``<m, a> / ||a||^2 = (||m||^2 + ||a||^2 - ||u||^2) / (2 ||a||^2)`` (float64; NaN where
    ``||a|| = 0``). 1 for the anchor itself, ``X`` for ``X`` times it, about 0 for noise
    orthogonal to it.
    """
    a2 = anchor_norms.square()
    return (message_norms.square() + a2 - update_norms.square()) / (2 * a2)


class NormBound:
    """Bound ``||m_e - a_e||`` by ``T`` times a windowed median of honest update norms.

    Args:
        max_update_ratio: ``T``: an update longer than ``T ref_t`` fails (``> 1``).
        min_norm_ratio: ``L``: a message shorter than ``L ||a_e||`` fails (``0 <= L < 1``; 0 turns the
            lower test off).
        max_norm_ratio: ``H``: a message longer than ``H ||a_e||`` fails (``> 1``; ``inf`` turns it off).
        min_projection_ratio: ``P``: a message whose projection on its anchor, ``<m_e, a_e> /
            ||a_e||^2``, is under ``P`` fails (a number ``< 1``; None turns the test off: the bound
            of before issue 32's sign-flip finding).
        window: ``W``: rounds whose per-round medians ``ref_t`` is the median of (``>= 1``).
        growth: Most factor by which ``ref_t`` may exceed the previous round's (``>= 1``).
        mode: ``"reject"`` or ``"clip"`` (module docstring).

    Raises:
        ValueError: On a value outside the ranges above (one line naming ``wire.norm_bound.<key>``).
    """

    def __init__(
        self,
        max_update_ratio: float = MAX_UPDATE_RATIO,
        min_norm_ratio: float = MIN_NORM_RATIO,
        max_norm_ratio: float = MAX_NORM_RATIO,
        min_projection_ratio: float | None = MIN_PROJECTION_RATIO,
        window: int = 5,
        growth: float = 2.0,
        mode: str = "reject",
    ) -> None:
        field = "wire.norm_bound.init_args"
        if not (isinstance(max_update_ratio, int | float) and 1 < max_update_ratio < math.inf):
            raise ValueError(
                f"{field}.max_update_ratio must be a finite number > 1, got {max_update_ratio!r}"
            )
        if not (isinstance(min_norm_ratio, int | float) and 0 <= min_norm_ratio < 1):
            raise ValueError(f"{field}.min_norm_ratio must be in [0, 1), got {min_norm_ratio!r}")
        if not (isinstance(max_norm_ratio, int | float) and max_norm_ratio > 1):
            raise ValueError(
                f"{field}.max_norm_ratio must be a number > 1 (inf: no upper test), got {max_norm_ratio!r}"
            )
        if min_projection_ratio is not None and not (
            isinstance(min_projection_ratio, int | float) and -math.inf < min_projection_ratio < 1
        ):
            raise ValueError(
                f"{field}.min_projection_ratio must be a finite number < 1 (null: no projection test), "
                f"got {min_projection_ratio!r}"
            )
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"{field}.window must be an integer >= 1, got {window!r}")
        if not (isinstance(growth, int | float) and 1 <= growth < math.inf):
            raise ValueError(f"{field}.growth must be a finite number >= 1, got {growth!r}")
        if mode not in MODES:
            raise ValueError(f"{field}.mode must be one of {list(MODES)}, got {mode!r}")
        self.max_update_ratio = float(max_update_ratio)
        self.min_norm_ratio = float(min_norm_ratio)
        self.max_norm_ratio = float(max_norm_ratio)
        self.min_projection_ratio = None if min_projection_ratio is None else float(min_projection_ratio)
        self.window = int(window)
        self.growth = float(growth)
        self.mode = mode
        #: channel -> round -> the medians ``s`` of that round's calls.
        self.medians: dict[str, dict[int, list[float]]] = {}
        #: channel -> round -> ``ref_t`` (after the growth cap).
        self.refs: dict[str, dict[int, float]] = {}
        #: Messages clipped per round (mode ``"clip"``).
        self.clipped: dict[int, int] = {}

    def __repr__(self) -> str:
        args = (
            f"max_update_ratio={self.max_update_ratio:g}, min_norm_ratio={self.min_norm_ratio:g}, "
            f"max_norm_ratio={self.max_norm_ratio:g}, min_projection_ratio={self.min_projection_ratio}, "
            f"window={self.window}, growth={self.growth:g}, mode={self.mode!r}"
        )
        return f"NormBound({args})"

    def reference(self, channel: str, round_idx: int, update_norms: Tensor) -> float:
        """``ref_t`` of ``channel`` in ``round_idx`` after adding one call's update norms.

        ``s`` of the call is the lower median of its finite norms (a call with none adds nothing);
        ``ref_t`` is the lower median of the per-round medians of the last ``W`` rounds that have
        one (a round with several calls: the lower median of its calls' ``s``), capped at
        ``growth`` times the latest earlier round's ``ref``. 0 when nothing finite has been seen.
        """
        finite = update_norms[torch.isfinite(update_norms)]
        rounds = self.medians.setdefault(channel, {})
        if finite.numel():
            rounds.setdefault(round_idx, []).append(float(finite.median()))
        recent = sorted(r for r in rounds if r <= round_idx)[-self.window :]
        if not recent:
            return 0.0
        per_round = torch.tensor([float(torch.tensor(rounds[r]).median()) for r in recent])
        ref = float(per_round.median())
        earlier = [r for r in self.refs.get(channel, {}) if r < round_idx]
        if earlier:
            ref = min(ref, self.growth * self.refs[channel][max(earlier)])
        self.refs.setdefault(channel, {})[round_idx] = ref
        return ref

    def verdict(
        self, channel: str, round_idx: int, message_norms: Tensor, update_norms: Tensor, anchor_norms: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Which messages pass, and the factor their update is to be multiplied by.

        Args:
            channel: ``"server"`` or ``"centers"`` (who receives).
            round_idx: The round.
            message_norms: ``||m_e||`` (float64 ``[E]``).
            update_norms: ``||m_e - a_e||``.
            anchor_norms: ``||a_e||``.

        Returns:
            ``(ok, factor)``: bool ``[E]`` and float64 ``[E]`` (1 where nothing is clipped). In
            ``"reject"`` mode a message over the bound is not ok; in ``"clip"`` mode it is ok with
            ``factor = T ref_t / ||u_e|| < 1``. A zero reference skips the update test (no honest
            update to compare with); a zero anchor skips the norm band and the projection test.
        """
        ok = torch.isfinite(message_norms) & torch.isfinite(update_norms)
        band = (message_norms >= self.min_norm_ratio * anchor_norms) & (
            message_norms <= self.max_norm_ratio * anchor_norms
        )
        if self.min_projection_ratio is not None:
            band &= projection(message_norms, update_norms, anchor_norms) >= self.min_projection_ratio
        ok &= (anchor_norms <= 0) | band
        ref = self.reference(channel, round_idx, torch.where(ok, update_norms, math.nan))
        factor = torch.ones_like(update_norms)
        if ref > 0:
            bound = self.max_update_ratio * ref
            over = ok & (update_norms > bound)
            if self.mode == "clip":
                factor = torch.where(over, bound / update_norms, factor)
                if bool(over.any()):
                    self.clipped[round_idx] = self.clipped.get(round_idx, 0) + int(over.sum())
            else:
                ok &= ~over
        return ok, factor

    def state_dict(self) -> dict[str, Any]:
        """The per-round medians, references and clip counts (a resumed run continues the window)."""
        return {"medians": self.medians, "refs": self.refs, "clipped": self.clipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (round keys as ints)."""
        self.medians = {
            c: {int(r): list(v) for r, v in m.items()} for c, m in state.get("medians", {}).items()
        }
        self.refs = {c: {int(r): float(v) for r, v in m.items()} for c, m in state.get("refs", {}).items()}
        self.clipped = {int(r): int(n) for r, n in state.get("clipped", {}).items()}
