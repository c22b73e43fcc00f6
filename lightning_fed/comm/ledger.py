"""The byte ledger: bytes actually encoded, per undirected edge, per round (ABPS Eq. 2).

Every message that crosses the wire is recorded as ``(round, u, v, bytes)`` with ``u < v`` (an
undirected edge; both directions of an exchange add to the same edge). Node ids are center ids;
:data:`SERVER` stands for the aggregation server of star-topology methods. Per-center totals count
every byte on an edge that touches the center, so a FedAvg center costs one upload plus one
download of its shared parameters per round (2|W|).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["SERVER", "Ledger"]

#: Node id of the aggregation server in star topologies (FedAvg and friends).
SERVER = -1


class Ledger:
    """Append-only record of bytes per undirected edge per round."""

    def __init__(self) -> None:
        self._rounds: list[Tensor] = []
        self._u: list[Tensor] = []
        self._v: list[Tensor] = []
        self._bytes: list[Tensor] = []

    def record(self, round_idx: int, src: Tensor, dst: Tensor, nbytes: int | Tensor) -> None:
        """Record one message per ``(src[e], dst[e])`` of ``nbytes`` each (or per-edge ``nbytes``)."""
        src, dst = src.reshape(-1).to("cpu", torch.int64), dst.reshape(-1).to("cpu", torch.int64)
        if src.shape != dst.shape:
            raise ValueError(f"ledger: {src.numel()} senders but {dst.numel()} receivers")
        sizes = torch.as_tensor(nbytes, dtype=torch.int64).reshape(-1).expand(src.shape)
        self._rounds.append(torch.full_like(src, round_idx))
        self._u.append(torch.minimum(src, dst))
        self._v.append(torch.maximum(src, dst))
        self._bytes.append(sizes.clone())

    def table(self) -> dict[str, Tensor]:
        """All records merged per ``(round, u, v)``: columns ``round``, ``u``, ``v``, ``bytes``."""
        if not self._rounds:
            empty = torch.zeros(0, dtype=torch.int64)
            return {"round": empty, "u": empty, "v": empty, "bytes": empty}
        keys = torch.stack([torch.cat(self._rounds), torch.cat(self._u), torch.cat(self._v)], 1)
        uniq, inverse = torch.unique(keys, dim=0, return_inverse=True)
        sizes = torch.zeros(len(uniq), dtype=torch.int64).index_add_(0, inverse, torch.cat(self._bytes))
        return {"round": uniq[:, 0], "u": uniq[:, 1], "v": uniq[:, 2], "bytes": sizes}

    def total(self) -> int:
        """All bytes recorded."""
        return int(sum(int(b.sum()) for b in self._bytes))

    def round_total(self, round_idx: int) -> int:
        """Bytes recorded in round ``round_idx``."""
        return int(sum(int(b[r == round_idx].sum()) for r, b in zip(self._rounds, self._bytes, strict=True)))

    def per_center(self, num_centers: int, round_idx: int | None = None) -> Tensor:
        """Bytes on edges touching each center ``[C]`` (optionally one round only)."""
        out = torch.zeros(num_centers, dtype=torch.int64)
        for r, u, v, b in zip(self._rounds, self._u, self._v, self._bytes, strict=True):
            keep = torch.ones_like(r, dtype=torch.bool) if round_idx is None else r == round_idx
            for end in (u, v):
                sel = keep & (end >= 0)
                out.index_add_(0, end[sel], b[sel])
        return out

    def per_center_by_round(self, num_centers: int, num_rounds: int) -> Tensor:
        """Bytes on edges touching each center in each round ``[R, C]`` (rounds ``0 .. R-1``).

        Row ``r`` equals :meth:`per_center` ``(num_centers, r)``; records of later rounds (e.g.
        EdgeDRM's stage II, booked at round index ``R``) are left out.
        """
        out = torch.zeros(num_rounds * num_centers, dtype=torch.int64)
        for r, u, v, b in zip(self._rounds, self._u, self._v, self._bytes, strict=True):
            for end in (u, v):
                sel = (end >= 0) & (r >= 0) & (r < num_rounds)
                out.index_add_(0, r[sel] * num_centers + end[sel], b[sel])
        return out.view(num_rounds, num_centers)

    def state_dict(self) -> dict[str, Any]:
        return self.table()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__init__()
        if len(state["round"]):
            self._rounds, self._u, self._v, self._bytes = (
                [state[k].clone()] for k in ("round", "u", "v", "bytes")
            )
