"""What a run folder holds, judged from its files: absent, complete, resumable, or interrupted.

A run is **complete** only when ``summary.json`` parses and agrees with the other two records of how
far the run got: the rounds in ``rounds.parquet`` (rounds ``0 .. R-1``) and the round of
``checkpoint.pt`` are both the summary's ``rounds``, and the summary's and the checkpoint's config
fingerprints match. A folder with a summary that disagrees was written by two runs (or edited) and
is not complete, whatever its name says. A folder that is not complete but has ``config.yaml`` and a
loadable ``checkpoint.pt`` is **resumable**; anything else with files in it is **interrupted**
(``fit`` refuses it without ``--overwrite``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from lightning_fed.runfolder.lock import LOCK_NAME
from lightning_fed.validation import first_line

__all__ = ["FolderState", "State", "clean_stale_temporaries", "folder_state", "read_checkpoint"]


class State(str, Enum):
    ABSENT = "absent"
    COMPLETE = "complete"
    RESUMABLE = "resumable"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class FolderState:
    """A run folder's state and, when it is not complete, why (one line for messages)."""

    state: State
    reason: str = ""


def read_checkpoint(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """``torch.load`` a checkpoint safely (``weights_only=True``: tensors and plain containers only, so
    a crafted file cannot run code) and check it is a lightning-fed checkpoint.

    Raises:
        ValueError: One line naming the file, if it is truncated, corrupt, unsafe or foreign.
    """
    import pickle
    import zipfile

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"checkpoint {path} was refused: it holds objects other than tensors and plain containers "
            f"({first_line(err)}); only load checkpoints written by lightning-fed"
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as err:
        raise ValueError(f"checkpoint {path} is truncated or corrupt ({first_line(err)})") from None
    if not isinstance(state, dict) or not isinstance(state.get("federation"), dict):
        raise ValueError(f"checkpoint {path} is not a lightning-fed checkpoint (no federation state)")
    return state


def _parquet_rounds(path: Path) -> tuple[int, int]:
    """How many distinct rounds ``path`` holds and the last one (-1 when empty)."""
    import polars as pl

    frame = pl.scan_parquet(path).select(
        pl.col("round").n_unique().alias("n"), pl.col("round").max().alias("max")
    )
    n, top = frame.collect().row(0)
    return int(n), int(top if top is not None else -1)


def _complete(run_dir: Path) -> str:
    """Empty when ``run_dir`` holds a complete run, else why not."""
    summary_path = run_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
        rounds = int(summary["rounds"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{summary_path} is unreadable ({type(err).__name__})"
    checkpoint = run_dir / "checkpoint.pt"
    try:
        state = read_checkpoint(checkpoint, mmap=True)
    except (ValueError, FileNotFoundError) as err:
        return str(err)
    if int(state["federation"].get("round", -1)) != rounds:
        return (
            f"summary.json says {rounds} rounds but checkpoint.pt is at round {state['federation']['round']}"
        )
    if state.get("fingerprint") != summary.get("config_fingerprint"):
        return "summary.json and checkpoint.pt carry different config fingerprints"
    parquet = run_dir / "rounds.parquet"
    if rounds > 0:
        try:
            n, top = _parquet_rounds(parquet)
        except Exception as err:  # polars raises its own error types for missing or broken files
            return f"{parquet} is unreadable ({type(err).__name__})"
        if n != rounds or top != rounds - 1:
            return f"summary.json says {rounds} rounds but rounds.parquet holds {n} (up to round {top})"
    return ""


def folder_state(run_dir: str | Path) -> FolderState:
    """Classify ``run_dir`` (module docstring). Reads ``summary.json``, the parquet's round column and
    the checkpoint memory-mapped (its tensors are not read)."""
    run_dir = Path(run_dir)
    files = [p for p in run_dir.iterdir() if p.name != LOCK_NAME] if run_dir.is_dir() else []
    if not files:
        return FolderState(State.ABSENT)
    if (run_dir / "summary.json").exists():
        why = _complete(run_dir)
        if not why:
            return FolderState(State.COMPLETE)
        return FolderState(State.INTERRUPTED, f"its summary does not match its other files: {why}")
    if not (run_dir / "config.yaml").is_file():
        return FolderState(State.INTERRUPTED, "it has no config.yaml")
    if not (run_dir / "checkpoint.pt").is_file():
        return FolderState(State.INTERRUPTED, "it was stopped before its first checkpoint")
    try:
        read_checkpoint(run_dir / "checkpoint.pt", mmap=True)
    except ValueError as err:
        return FolderState(State.INTERRUPTED, str(err))
    return FolderState(State.RESUMABLE, "it was interrupted and has a checkpoint")


def clean_stale_temporaries(run_dir: str | Path) -> list[Path]:
    """Remove the half-written ``.*.tmp`` files a killed writer left in ``run_dir`` (never renamed
    into place, so never part of the run); call it only while holding the folder's lock."""
    removed = sorted(Path(run_dir).glob(".*.tmp"))
    for path in removed:
        path.unlink(missing_ok=True)
    return removed
