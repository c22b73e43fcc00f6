"""Fault injection: centers that are offline, gone for good, or send corrupt payloads.

A :class:`FaultInjection` plan is handed to the :class:`~lightning_fed.comm.wire.Wire`, which is
where it acts:

- ``unavailable``: round -> centers offline that round. An offline center neither sends nor
  receives (algorithms ask :meth:`Wire.available <lightning_fed.comm.wire.Wire.available>`); it
  still trains locally on its own rows.
- ``dropout``: center -> first round from which it is offline for good.
- ``corrupt``: round -> {center: ``"nan"`` | ``"inf"`` | ``"huge"`` | ``"gaussian"`` | ``{scale: X}``}:
  every message that center *sends* that round is replaced on the wire by all-NaN, all-+Inf, every
  entry ``1e6`` (finite but absurd), Gaussian noise at the honest message's norm (``"gaussian"``:
  ``||m|| z / ||z||`` with ``z`` standard normal over the message's floating-point tensors, drawn
  from ``(seed, "attack", round, center)``), or ``X`` times the honest message (any finite ``X``:
  ``-1`` flips the sign, ``0`` sends zeros; every floating-point tensor of the message is multiplied
  by ``X``; integer and boolean tensors such as masks or codes are sent as they are).
- ``attacks``: sustained attacks, a list of ``{kind, centers, from_round, until_round, pick}``:
  ``kind`` is a corruption above or ``"label_flip"`` (the center trains on flipped binary labels,
  ``y -> 1 - y``, and sends honestly what it learned); ``centers`` a list of center ids or a
  fraction ``f`` in (0, 1] of the federation (``max(1, round(f C))`` centers), picked as the
  ``"largest"`` by training rows (ties: lower id) or at ``"random"`` (from ``(seed, "attackers", k)``
  for the plan's ``k``-th attack); every round from ``from_round`` (default 0) to ``until_round``
  (exclusive; default: the end of the run). An attack overrides a ``corrupt`` entry of the same
  sender and round. The bytes are counted as usual; the receivers' validation
  (:meth:`Wire.accept <lightning_fed.comm.wire.Wire.accept>`) rejects a non-finite message and one
  whose norm exceeds ``max_norm_ratio`` times its reference, so at the default ratio 5 a
  ``{scale: 10}`` sender is rejected whenever its honest norm is at least half the reference.

What the plan draws (random attackers, Gaussian noise) derives from the run seed
(:meth:`FaultInjection.bind`), so a faulty run is as reproducible as a clean one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lightning_fed.seeding import torch_generator

__all__ = ["ATTACK_KINDS", "CORRUPTIONS", "HUGE", "PICKS", "Attack", "Corruption", "FaultInjection"]

#: The payload corruptions a sender can be given.
CORRUPTIONS = ("nan", "inf", "huge", "gaussian")

#: What a sustained attack can do besides corrupting payloads.
ATTACK_KINDS = ("label_flip",)

#: How a fraction of centers is turned into attackers.
PICKS = ("largest", "random")

#: Value of every entry of a ``"huge"`` payload.
HUGE = 1e6

#: One sender's corruption as stored: a kind of :data:`CORRUPTIONS`, or a float scale ``X``
#: (the configured ``{scale: X}``).
Corruption = str | float

_KINDS = f"one of {list(CORRUPTIONS)} or {{scale: X}}"


@dataclass(frozen=True)
class Attack:
    """One sustained attack of a plan (``faults.attacks[k]``), validated.

    Attributes:
        kind: A corruption (:data:`Corruption`) or ``"label_flip"``.
        centers: The attacking center ids (a list as given), or None when ``fraction`` picks them.
        fraction: Share of the federation's centers that attack (``max(1, round(f C))``), or None.
        pick: ``"largest"`` or ``"random"`` (with ``fraction``).
        from_round: First round of the attack.
        until_round: First round after it (None: to the end of the run).
    """

    kind: Corruption
    centers: tuple[int, ...] | None
    fraction: float | None
    pick: str
    from_round: int
    until_round: int | None

    def active(self, round_idx: int) -> bool:
        """Whether the attack runs in ``round_idx``."""
        return round_idx >= self.from_round and (self.until_round is None or round_idx < self.until_round)


class FaultInjection:
    """Which centers fail, when, and how (the ``faults`` config group).

    Args:
        unavailable: Round -> centers unavailable that round, e.g. ``{3: [0, 5]}``.
        corrupt: Round -> {center: ``"nan"`` | ``"inf"`` | ``"huge"`` | ``{"scale": X}``}: corruption
            of every payload that center sends that round, e.g. ``{4: {2: "nan"}}`` or
            ``{4: {2: {"scale": 100}}}`` (send 100 times the honest message; ``X > 0``, finite).
        dropout: Center -> first round from which it is gone for good, e.g. ``{7: 10}``.
        attacks: Sustained attacks, e.g. ``[{"kind": {"scale": 3}, "centers": 0.1, "pick":
            "largest", "from_round": 5}]`` or ``[{"kind": "label_flip", "centers": [0, 4]}]`` (module
            docstring).

    Raises:
        ValueError: On a negative round or center id, an unknown corruption, a scale that is not a
            finite number, or a malformed attack (the message names the field, e.g.
            ``faults.corrupt[4][2].scale`` or ``faults.attacks[0].centers``).
    """

    def __init__(
        self,
        unavailable: dict[int, list[int]] | None = None,
        corrupt: dict[int, dict[int, str | dict[str, float]]] | None = None,
        dropout: dict[int, int] | None = None,
        attacks: list[dict[str, Any]] | None = None,
    ) -> None:
        self.unavailable = {
            _index("faults.unavailable", "round", r): sorted(
                {_index(f"faults.unavailable[{r}]", "center", c) for c in _seq("faults.unavailable", cs)}
            )
            for r, cs in _map("faults.unavailable", unavailable).items()
        }
        self.corrupt: dict[int, dict[int, Corruption]] = {}
        for r, senders in _map("faults.corrupt", corrupt).items():
            field = f"faults.corrupt[{r}]"
            kinds = {
                _index(field, "center", c): _corruption(f"{field}[{c}]", kind)
                for c, kind in _map(field, senders).items()
            }
            self.corrupt[_index("faults.corrupt", "round", r)] = kinds
        self.dropout = {
            _index("faults.dropout", "center", c): _index(f"faults.dropout[{c}]", "round", r)
            for c, r in _map("faults.dropout", dropout).items()
        }
        if attacks is not None and (isinstance(attacks, str | Mapping) or not isinstance(attacks, Sequence)):
            raise ValueError(f"faults.attacks must be a list of attacks, got {attacks!r}")
        self.attacks = [_attack(f"faults.attacks[{k}]", a) for k, a in enumerate(attacks or [])]
        #: Per attack, its center ids once known (:meth:`bind`; given lists at once).
        self.attackers: list[tuple[int, ...] | None] = [a.centers for a in self.attacks]
        self.seed = 0

    def __repr__(self) -> str:
        fields = f"unavailable={self.unavailable}, corrupt={self.corrupt}, dropout={self.dropout}"
        return f"FaultInjection({fields}, attacks={self.attacks})"

    def bind(self, seed: int, n_train: Tensor) -> None:
        """Fix the run seed (Gaussian noise) and each fraction attack's centers.

        ``"largest"``: the ``k = max(1, round(f C))`` centers with the most training rows (a stable
        sort: ties go to the lower id); ``"random"``: the first ``k`` of a permutation drawn from
        ``(seed, "attackers", attack index)``. Sorted ids.

        Args:
            seed: The run seed.
            n_train: Training rows per center ``[C]``.
        """
        self.seed = int(seed)
        sizes = torch.as_tensor(n_train).reshape(-1)
        num = len(sizes)
        for k, attack in enumerate(self.attacks):
            if attack.fraction is None:
                continue
            count = max(1, round(attack.fraction * num))
            if attack.pick == "largest":
                order = torch.argsort(-sizes.to(torch.float64), stable=True)
            else:
                order = torch.randperm(num, generator=torch_generator(seed, "attackers", k))
            self.attackers[k] = tuple(sorted(int(c) for c in order[:count]))

    def last_round(self) -> int | None:
        """The last round any part of the plan names (None: an empty plan, or one whose attacks
        never end)."""
        rounds = [*self.unavailable, *self.corrupt, *self.dropout.values()]
        for a in self.attacks:
            if a.until_round is None:
                return None
            rounds.append(a.until_round - 1)
        return max(rounds) if rounds else None

    def first_round(self) -> int | None:
        """The first round any part of the plan acts in (None: an empty plan)."""
        rounds = [
            *self.unavailable,
            *self.corrupt,
            *self.dropout.values(),
            *(a.from_round for a in self.attacks),
        ]
        return min(rounds) if rounds else None

    def check_rounds(self, rounds: int) -> None:
        """Refuse a plan that never acts within the run's ``rounds`` rounds (0-based ``0 .. rounds-1``).

        A refusal rather than a warning: such a run trains exactly as a clean one (nothing is
        corrupted, no center is missing, nobody attacks), yet its config and label say it was run
        under faults, so its results would be filed as a faulty run's. A plan that reaches into the
        run only in part is legal (its later rounds serve a longer or resumed run) and passes.

        Raises:
            ValueError: When every round the plan names lies at or past ``rounds``.
        """
        first = self.first_round()
        if first is not None and first >= rounds:
            raise ValueError(
                f"wire.faults: the plan first acts in round {first} but the run has trainer.rounds={rounds} "
                f"(rounds 0-{rounds - 1}), so it would be a clean run: move the plan's rounds below "
                f"{rounds} or raise trainer.rounds"
            )

    def flipped(self, round_idx: int) -> set[int]:
        """Centers that train on flipped labels in ``round_idx`` (``label_flip`` attacks)."""
        return {
            c
            for attack, centers in zip(self.attacks, self.attackers, strict=True)
            if attack.kind == "label_flip" and attack.active(round_idx)
            for c in centers or ()
        }

    def check(self, num_centers: int) -> None:
        """Raise a ValueError naming the field when the plan names a center the federation lacks."""
        named = [
            *(("faults.unavailable", c) for cs in self.unavailable.values() for c in cs),
            *(("faults.corrupt", c) for kinds in self.corrupt.values() for c in kinds),
            *(("faults.dropout", c) for c in self.dropout),
            *(
                (f"faults.attacks[{k}].centers", c)
                for k, a in enumerate(self.attacks)
                for c in a.centers or ()
            ),
        ]
        for field, c in named:
            if c >= num_centers:
                raise ValueError(f"{field} names center {c}, but the federation has {num_centers} centers")

    def available(self, round_idx: int, num_centers: int) -> Tensor:
        """Bool ``[num_centers]``: False for centers unavailable or dropped out in ``round_idx``."""
        out = torch.ones(num_centers, dtype=torch.bool)
        gone = [c for c, r in self.dropout.items() if round_idx >= r]
        for c in [*self.unavailable.get(round_idx, []), *gone]:
            if c < num_centers:
                out[c] = False
        return out

    def corruptions(self, round_idx: int) -> dict[int, Corruption]:
        """{center: kind or scale} of the senders corrupted in ``round_idx`` (attacks after
        ``corrupt``: an attack overrides a ``corrupt`` entry of the same sender)."""
        out = dict(self.corrupt.get(round_idx, {}))
        for attack, centers in zip(self.attacks, self.attackers, strict=True):
            if attack.kind != "label_flip" and attack.active(round_idx):
                out.update(dict.fromkeys(centers or (), attack.kind))
        return out

    def corrupt_payload(self, payload: dict[str, Tensor], src: Tensor, round_idx: int) -> dict[str, Tensor]:
        """``payload`` with the messages of this round's corrupt senders replaced (a new dict).

        Args:
            payload: Tensors with leading dimension ``E`` (one message per edge) or 1 (broadcast).
            src: Sender ids ``[E]``.
            round_idx: The round.
        """
        kinds = self.corruptions(round_idx)
        src = src.reshape(-1).cpu()
        hit = [(torch.as_tensor(src == c), kind) for c, kind in kinds.items() if bool((src == c).any())]
        if not hit:
            return payload
        out = {
            n: t if t.shape[0] == src.shape[0] else t.expand(src.shape[0], *t.shape[1:])
            for n, t in payload.items()
        }
        for mask, kind in hit:
            if kind == "gaussian":
                noise = self._noise(out, mask, src, round_idx)
            for name, t in out.items():
                view = (-1, *([1] * (t.dim() - 1)))
                bad = noise[name] if kind == "gaussian" else _corrupted(t, kind)
                out[name] = torch.where(mask.to(t.device).view(view), bad, t)
        return out

    def _noise(
        self, payload: dict[str, Tensor], mask: Tensor, src: Tensor, round_idx: int
    ) -> dict[str, Tensor]:
        """Gaussian noise at each message's norm over its floating-point tensors (the others kept):
        row ``e`` is ``||m_e|| z_e / ||z_e||``, ``z_e`` standard normal from ``(seed, "attack",
        round, src[e])`` (one draw per sender, the same for each of its messages)."""
        floats = {n: t for n, t in payload.items() if t.is_floating_point()}
        out = {n: t.clone() for n, t in payload.items()}
        for e in torch.nonzero(mask).reshape(-1).tolist():
            gen = torch_generator(self.seed, "attack", round_idx, int(src[e]))
            z = {n: torch.randn(t.shape[1:], generator=gen, dtype=torch.float64) for n, t in floats.items()}
            norm = math.sqrt(sum(float(t[e].double().pow(2).sum()) for t in floats.values()))
            z_norm = math.sqrt(sum(float(v.pow(2).sum()) for v in z.values())) or 1.0
            for n, t in floats.items():
                out[n][e] = (z[n] * (norm / z_norm)).to(t.device, t.dtype)
        return out


def _corrupted(t: Tensor, kind: Corruption) -> Tensor:
    """What a corrupt sender puts on the wire instead of ``t``: ``X * t`` for a scale ``X`` (floating
    point tensors only), else ``t`` filled with NaN, +Inf or :data:`HUGE`."""
    if isinstance(kind, float):
        return t * kind if t.is_floating_point() else t
    return torch.full_like(t, {"nan": float("nan"), "inf": float("inf"), "huge": HUGE}[kind])


def _corruption(field: str, kind: object) -> Corruption:
    """A validated corruption: a kind of :data:`CORRUPTIONS`, or the float ``X`` of ``{scale: X}``."""
    if isinstance(kind, Mapping):
        if set(kind) != {"scale"}:
            raise ValueError(f"{field} must be {_KINDS}, got {dict(kind)!r}")
        scale = kind["scale"]
        if isinstance(scale, bool) or not isinstance(scale, int | float):
            raise ValueError(f"{field}.scale must be a number, got {scale!r}")
        if not math.isfinite(scale):
            raise ValueError(f"{field}.scale must be finite, got {scale!r}")
        return float(scale)
    if kind not in CORRUPTIONS:
        raise ValueError(f"{field} must be {_KINDS}, got {kind!r}")
    return str(kind)


def _attack(field: str, spec: object) -> Attack:
    """A validated :class:`Attack` from its config mapping."""
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"{field} must be a mapping {{kind, centers, from_round, until_round, pick}}, got {spec!r}"
        )
    unknown = set(spec) - {"kind", "centers", "from_round", "until_round", "pick"}
    if unknown:
        raise ValueError(
            f"{field}: unknown keys {sorted(unknown)} (use kind, centers, from_round, until_round, pick)"
        )
    if "kind" not in spec or "centers" not in spec:
        raise ValueError(f"{field} needs kind and centers, e.g. {{kind: {{scale: 3}}, centers: 0.1}}")
    kind = spec["kind"]
    kind = "label_flip" if kind in ATTACK_KINDS else _corruption(f"{field}.kind", kind)
    centers, fraction = spec["centers"], None
    if isinstance(centers, float):
        if not 0 < centers <= 1:
            raise ValueError(f"{field}.centers: a fraction must be in (0, 1], got {centers!r}")
        fraction, centers = float(centers), None
    else:
        centers = tuple(
            sorted({_index(f"{field}.centers", "center", c) for c in _seq(f"{field}.centers", centers)})
        )
        if not centers:
            raise ValueError(f"{field}.centers is empty: give center ids or a fraction such as 0.1")
    pick = spec.get("pick", "largest")
    if pick not in PICKS:
        raise ValueError(f"{field}.pick must be one of {list(PICKS)}, got {pick!r}")
    start = _index(f"{field}.from_round", "round", spec.get("from_round", 0))
    until = spec.get("until_round")
    until = None if until is None else _index(f"{field}.until_round", "round", until)
    if until is not None and until <= start:
        raise ValueError(f"{field}.until_round ({until}) must be after from_round ({start})")
    return Attack(kind, centers, fraction, str(pick), start, until)


def _map(field: str, value: Mapping | None) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{field} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _seq(field: str, value: Sequence | None) -> list:
    if value is None:
        return []
    if isinstance(value, int | str) or not isinstance(value, Sequence):
        raise ValueError(f"{field} must map a round to a list of centers, got {value!r}")
    return list(value)


def _index(field: str, what: str, value: object) -> int:
    """A non-negative integer round or center id (ints written as strings are accepted)."""
    try:
        out = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{field}: {what} must be an integer, got {value!r}") from None
    if out < 0 or (isinstance(value, float) and value != out):
        raise ValueError(f"{field}: {what} must be a non-negative integer, got {value!r}")
    return out
