"""A run folder has one writer and one config (docs/architecture.md, decision 12).

- :mod:`~lightning_fed.runfolder.lock`: an advisory lock held by the one process writing a folder.
- :mod:`~lightning_fed.runfolder.fingerprint`: the resolved config's fingerprint, stored in every
  checkpoint and summary, and the keys that may change on resume.
- :mod:`~lightning_fed.runfolder.state`: what a folder holds (nothing, a complete run, an interrupted
  run that can or cannot be resumed) judged from its files, never from its name.
- :mod:`~lightning_fed.runfolder.session`: the life of a folder during one command
  (:class:`RunFolder`: claim, config check, interrupt, release).
"""

from lightning_fed.runfolder.fingerprint import (
    SAFE_TO_CHANGE,
    changed_keys,
    config_fingerprint,
    fingerprinted,
)
from lightning_fed.runfolder.lock import RunFolderBusyError, RunLock
from lightning_fed.runfolder.session import RunFolder, RunFolderError
from lightning_fed.runfolder.state import FolderState, clean_stale_temporaries, folder_state

__all__ = [
    "SAFE_TO_CHANGE",
    "FolderState",
    "RunFolder",
    "RunFolderBusyError",
    "RunFolderError",
    "RunLock",
    "changed_keys",
    "clean_stale_temporaries",
    "config_fingerprint",
    "fingerprinted",
    "folder_state",
]
