"""The life of a run folder during one command: claim, config check, interrupt, release.

``fit`` holds its folder from the first check to the last write::

    with RunFolder.claim(run_dir, resume=False, overwrite=False, config=config) as run:
        run.federation = build_and_train(...)

:meth:`RunFolder.claim` locks the folder (:mod:`~lightning_fed.runfolder.lock`), checks that it may
be written (:mod:`~lightning_fed.runfolder.state`; on resume, that the checkpoint was trained with
this config: :func:`check_config`), and on leaving, however the block ends, drops the lock and
removes the folders the claim created while they are still empty. Ctrl-C / SIGTERM inside the block
ends the command with one line saying how to resume and the signal's exit code. ``test`` and
``refer`` hold a folder only while they write into it (:meth:`RunFolder.writer`).

Every refusal is a :class:`RunFolderError` holding the one line the CLI prints.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lightning_fed.runfolder.fingerprint import SAFE_TO_CHANGE, changed_keys
from lightning_fed.runfolder.lock import RunFolderBusyError, RunLock
from lightning_fed.runfolder.state import State, clean_stale_temporaries, folder_state

__all__ = ["RunFolder", "RunFolderError", "check_config", "launched", "resume_argv", "run_folder_path"]


class RunFolderError(Exception):
    """A run folder that may not be used as asked; the message is the one line to show."""


def launched() -> bool:
    """Whether this process is a non-zero rank started by a launcher (it neither locks nor writes)."""
    return os.environ.get("LOCAL_RANK", "0") != "0" or os.environ.get("RANK", "0") != "0"


def run_folder_path(output: Any, label: str, seed: int) -> Path:
    """The run folder's path (created only once the whole config has been validated).

    The default name is ``<label>-seed<seed>-<id>``: the id is the W&B run id under a W&B sweep
    agent, the job id under SLURM, else the start time plus eight random hex digits (two agents
    started in the same second get two folders). Every process of a multi-process run must agree
    on it: rank 0 exports the name in ``LIGHTNING_FED_RUN_NAME``, which the processes Fabric
    launches inherit and use (only a process with a non-zero ``LOCAL_RANK`` / ``RANK`` reads it);
    ``torchrun`` users pass ``--output.name``.

    Raises:
        RunFolderError: When ``output.root`` is a file.
    """
    import secrets
    import time

    if "WANDB_RUN_ID" in os.environ:
        stamp = os.environ["WANDB_RUN_ID"]
    elif "SLURM_JOB_ID" in os.environ:
        stamp = f"job{os.environ['SLURM_JOB_ID']}"
    else:
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    inherited = os.environ.get("LIGHTNING_FED_RUN_NAME") if launched() else None
    name = output.name or inherited or f"{label}-seed{seed}-{stamp}"
    os.environ["LIGHTNING_FED_RUN_NAME"] = name
    if output.root.exists() and not output.root.is_dir():
        raise RunFolderError(
            f"output.root {output.root} is a file, not a folder: choose a folder for the run folders"
        )
    return output.root / name


def resume_argv(argv: list[str]) -> tuple[list[str], Path | None]:
    """``--resume DIR`` becomes ``--config DIR/config.yaml`` (later options may only change the keys
    that are safe to change on resume; see :mod:`lightning_fed.runfolder.fingerprint`).

    Rewritten before parsing because the config file it names must be read first (an option of the
    parser cannot add a config file to its own parse).

    Returns:
        The argv to parse and the run folder (None: no ``--resume``).

    Raises:
        RunFolderError: When the folder has no ``config.yaml``.
    """
    for i, arg in enumerate(argv):
        if arg == "--resume" or arg.startswith("--resume="):
            value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            rest = argv[:i] + argv[i + (1 if "=" in arg else 2) :]
            run_dir = Path(value)
            if not (run_dir / "config.yaml").is_file():
                raise RunFolderError(
                    f"--resume {run_dir}: no config.yaml there (is it a 'lightning-fed fit' run folder?)"
                )
            return ["--config", str(run_dir / "config.yaml"), *rest], run_dir
    return argv, None


def check_config(run_dir: Path, config: Mapping[str, Any], flag: str) -> None:
    """Refuse ``config`` when its fingerprinted keys differ from those stored in ``run_dir``'s checkpoint.

    A checkpoint without a stored config (an older run) passes with a warning on stderr.

    Raises:
        RunFolderError: When the checkpoint is unreadable or the configs differ outside
            :data:`~lightning_fed.runfolder.fingerprint.SAFE_TO_CHANGE`.
    """
    from lightning_fed.runfolder.state import read_checkpoint

    try:
        state = read_checkpoint(run_dir / "checkpoint.pt", mmap=True)
    except ValueError as err:
        raise RunFolderError(f"{flag} {run_dir}: {err}") from None
    saved = state.get("config")
    if saved is None:
        print(
            f"lightning-fed: warning: {run_dir}/checkpoint.pt has no config fingerprint (an older run): "
            "cannot check that config.yaml is the config it was trained with",
            file=sys.stderr,
        )
        return
    changed = changed_keys(saved, config)
    if changed:
        shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
        raise RunFolderError(
            f"{flag} {run_dir}: the config differs from the one the checkpoint was trained with in {shown}; "
            f"only {', '.join(SAFE_TO_CHANGE)} may change (start a new run for another config)"
        )


def _refusal(
    run_dir: Path, found: Any, resume: bool, overwrite: bool, config: Mapping[str, Any]
) -> str | None:
    """Why ``run_dir`` (found in state ``found``) may not be written by this fit (None: it may),
    checking the config on resume."""
    if resume:
        if found.state is State.COMPLETE:
            return f"--resume {run_dir}: the run already finished (summary.json exists)"
        if found.state is not State.RESUMABLE:
            return f"--resume {run_dir}: cannot resume: {found.reason}; start it again with --overwrite"
        check_config(run_dir, config, "--resume")
    elif found.state is State.COMPLETE and not overwrite:
        return (
            f"output folder {run_dir} already holds a finished run: choose another output.name "
            "(or pass --overwrite to replace it)"
        )
    elif found.state is not State.ABSENT and not overwrite:
        how = (
            f"resume it with 'lightning-fed fit --resume {run_dir}', or "
            if found.state is State.RESUMABLE
            else ""
        )
        return (
            f"output folder {run_dir} holds an interrupted run ({found.reason}): {how}pass --overwrite "
            "to start it again, or choose another output.name"
        )
    return None


class RunFolder:
    """A run folder held by this process (see the module docstring).

    Attributes:
        path: The run folder.
        federation: What the interrupt message reads the reached round from (set it once built).
    """

    def __init__(self, path: Path, lock: RunLock | None, created: Path | None) -> None:
        self.path = path
        self.federation: Any = None
        self._lock = lock
        self._created = created

    @classmethod
    @contextmanager
    def claim(
        cls, path: Path, *, resume: bool, overwrite: bool, config: Mapping[str, Any], lock: bool = True
    ) -> Iterator[RunFolder]:
        """Hold ``path`` for a fit: lock it, check it may be written, release it on leaving.

        A new fit takes an absent or empty folder; one that holds a finished or interrupted run only
        with ``overwrite`` (which empties it). ``resume`` takes only a resumable folder whose
        checkpoint was trained with ``config`` (up to the keys safe to change). On leaving, however
        the block ends, the lock is dropped and the folders the claim created are removed while
        empty. A ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM under
        :func:`~lightning_fed.processes.signals_as_interrupts`) in the block ends with one line on
        stderr and ``SystemExit`` with the signal's exit code.

        Args:
            path: The run folder.
            resume: Continue the interrupted run in ``path``.
            overwrite: Empty ``path`` first if it holds a run.
            config: The resolved config (nested, as ``cfg.as_dict()``), checked on resume.
            lock: False for a non-zero rank of a launched run: nothing is locked or checked.

        Raises:
            RunFolderError: When the folder is busy, cannot be created, or may not be written.
        """
        missing = [p for p in (path, *path.parents) if not p.exists()]
        held = cls(path, RunLock(path) if lock else None, missing[-1] if missing else None)
        if held._lock is not None:
            try:
                held._lock.acquire()
            except RunFolderBusyError as err:
                raise RunFolderError(str(err)) from None
            except OSError as err:
                raise RunFolderError(
                    f"cannot create the run folder {path}: {err.strerror} (check output.root)"
                ) from None
        try:
            if held._lock is not None:
                held._prepare(resume, overwrite, config)
        except BaseException:
            held.release()
            raise
        try:
            yield held
        except KeyboardInterrupt:
            held._interrupted()
        finally:
            held.release()

    def _prepare(self, resume: bool, overwrite: bool, config: Mapping[str, Any]) -> None:
        found = folder_state(self.path)
        refusal = _refusal(self.path, found, resume, overwrite, config)
        if refusal is not None:
            raise RunFolderError(refusal)
        if overwrite and found.state is not State.ABSENT:  # empty it, keep our lock
            for entry in self.path.iterdir():
                if self._lock is None or entry.name != self._lock.path.name:
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        clean_stale_temporaries(self.path)

    def _interrupted(self) -> None:
        """One line on Ctrl-C / SIGTERM during ``fit`` (files stay intact: every write is atomic)."""
        from lightning_fed.processes import interrupt_code

        reached = getattr(self.federation, "round", 0)
        if folder_state(self.path).state is State.RESUMABLE:
            how = f"resume with: lightning-fed fit --resume {self.path}"
        else:
            how = (
                f"no checkpoint yet: start again with --overwrite (or output.name={self.path.name} elsewhere)"
            )
        print(f"lightning-fed: interrupted after {reached} rounds; {how}", file=sys.stderr)
        raise SystemExit(interrupt_code())

    def release(self) -> None:
        """Drop the folder lock; remove the folders the claim created (up to the topmost) while empty."""
        if self._lock is None:
            return
        self._lock.release()
        self._lock = None
        if self._created is None:
            return
        for folder in (self.path, *self.path.parents):
            if not folder.is_dir() or any(folder.iterdir()):
                break
            folder.rmdir()
            if folder == self._created:
                break

    @staticmethod
    @contextmanager
    def writer(folder: Path, flag: str) -> Iterator[None]:
        """Hold ``folder``'s lock while a command writes into it (one writer per folder).

        A folder the lock had to create is removed again when the command leaves it empty (a
        refusal inside the block leaves nothing behind).

        Raises:
            RunFolderError: When another process holds it or it cannot be written (naming ``flag``).
        """
        created = not folder.exists()
        lock = RunLock(folder)
        try:
            lock.acquire()
        except RunFolderBusyError as err:
            raise RunFolderError(f"{flag} {folder}: {err}") from None
        except OSError as err:
            raise RunFolderError(f"{flag} {folder}: cannot write there ({err.strerror})") from None
        try:
            yield
        finally:
            lock.release()
            if created and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
