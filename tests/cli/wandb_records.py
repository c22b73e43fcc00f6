"""Read an offline W&B run file (``run-*.wandb``): LevelDB-log framed protobuf records.

The framing (a 7-byte ``:W&B`` header, then 32 KiB blocks of records, each ``crc u32, length u16,
type u8`` with type 1 full, 2 first, 3 middle, 4 last) is W&B's transaction log format; the records
are ``wandb.proto.wandb_internal_pb2.Record``. For tests only: no W&B server, no login.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_BLOCK, _HEADER = 32768, 7


def _chunks(data: bytes) -> Iterator[bytes]:
    pos, pending = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        chunk = data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk


@dataclass
class OfflineRun:
    """What a test reads of an offline run: init settings, history rows, summary, step metrics."""

    group: str = ""
    job_type: str = ""
    name: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    step_metrics: dict[str, str] = field(default_factory=dict)


def read_offline_run(run_folder: Path) -> OfflineRun:
    """The :class:`OfflineRun` of ``run_folder`` (an ``offline-run-*`` folder)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_folder.glob("run-*.wandb")
    out = OfflineRun()
    for raw in _chunks(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out.group, out.job_type, out.name = (
                record.run.run_group,
                record.run.job_type,
                record.run.display_name,
            )
        elif kind == "history":
            out.history.append(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            )
        elif kind == "summary":
            out.summary.update(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.summary.update}
            )
        elif kind == "metric":
            out.step_metrics[record.metric.name or record.metric.glob_name] = record.metric.step_metric
    return out
