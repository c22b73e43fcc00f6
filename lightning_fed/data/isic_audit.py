"""The ISIC2019 leakage audit and grouped split of EdgeDRM App. D.3.1 ("Leakage control and fixed split").

FLamby's ISIC2019 split puts images of one lesion in both folds (the paper finds 2,302 shared lesion
ids). The paper keeps every test image and label and audits the training fold:

1. **Groups.** Images are linked into groups, globally and across centers, when they share a lesion
   id (the ISIC metadata's ``lesion_id``) or are byte-identical files. Linking is transitive
   (union-find), so a chain of shared ids and duplicates forms one group. The paper also links by
   identical preprocessed files and one visually confirmed near-duplicate pair. Near duplicates are
   not searched for here; the ``links`` argument takes such pairs by image name.
2. **Test overlap.** A training image whose group holds a test image is removed.
3. **Label conflicts.** A group whose remaining training images carry more than one label is removed
   from the training candidates.
4. **Grouped split.** The remaining training groups are split into train and validation within
   center-class cells. A group's cell is that of its first row. Each cell targets
   ``round(val_fraction x rows)`` validation rows, and its groups are visited in a seeded order
   (``numpy_rng(seed, "isic_audit", cell)``; the paper uses seed 42). A group goes to validation
   while it fits under the target and at least one other group stays in train, so every represented
   cell keeps a training group. Train, validation and test are then disjoint in the audited groups.

:func:`audit_split` returns a role per row (``TRAIN``, ``VAL``, ``TEST`` or ``EXCLUDED``) and the
counts by cause; :class:`~lightning_fed.data.images_isic.ISIC2019` applies it when given
``metadata_csv``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lightning_fed.seeding import numpy_rng

__all__ = ["EXCLUDED", "TEST", "TRAIN", "VAL", "Audit", "audit_split", "file_digests", "link_groups"]

TRAIN, VAL, TEST, EXCLUDED = 0, 1, 2, -1


@dataclass(frozen=True)
class Audit:
    """The audited split.

    Attributes:
        role: Per row, ``TRAIN`` / ``VAL`` / ``TEST`` / ``EXCLUDED``.
        group: Per row, its group id (the smallest row index in the group).
        test_overlap: Training rows removed because their group holds a test image.
        label_conflict: Training rows removed because their group's training labels disagree.
    """

    role: np.ndarray
    group: np.ndarray
    test_overlap: int
    label_conflict: int


def file_digests(paths: Sequence[str | Path]) -> list[str]:
    """SHA-256 of each file's bytes (byte-identical files get the same digest)."""
    out = []
    for path in paths:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out.append(h.hexdigest())
    return out


def link_groups(keys: Sequence[Sequence[str | None]]) -> np.ndarray:
    """Union-find over rows: two rows sharing any non-empty key are in one group (transitively).

    Args:
        keys: Per row, its linking keys (e.g. ``("lesion:L1", "file:<digest>")``); ``None`` or ""
            links nothing.

    Returns:
        Per row, the smallest row index of its group.
    """
    parent = list(range(len(keys)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, row in enumerate(keys):
        for key in row:
            if not key:
                continue
            j = first.setdefault(key, i)
            a, b = find(i), find(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return np.array([find(i) for i in range(len(keys))], dtype=np.int64)


def audit_split(
    group: np.ndarray,
    labels: np.ndarray,
    centers: np.ndarray,
    test: np.ndarray,
    val_fraction: float,
    seed: int = 42,
) -> Audit:
    """Steps 2-4 of the module docstring on rows already grouped by :func:`link_groups`.

    Args:
        group: Group id per row.
        labels: Class id per row.
        centers: Center name per row.
        test: True for the test fold.
        val_fraction: Validation share targeted within each center-class cell.
        seed: Seed of the group order within a cell (the paper: 42).
    """
    group, labels, centers = np.asarray(group), np.asarray(labels), np.asarray(centers)
    test = np.asarray(test, dtype=bool)
    role = np.where(test, TEST, TRAIN).astype(np.int64)
    tested = np.isin(group, group[test])
    overlap = ~test & tested
    role[overlap] = EXCLUDED
    candidates = role == TRAIN
    conflict = np.zeros_like(candidates)
    for g in np.unique(group[candidates]):
        rows = candidates & (group == g)
        if np.unique(labels[rows]).size > 1:
            conflict |= rows
    role[conflict] = EXCLUDED
    candidates &= ~conflict
    # A group's cell is that of its first candidate row.
    cell_of: dict[int, tuple[str, int]] = {}
    for i in np.flatnonzero(candidates):
        cell_of.setdefault(int(group[i]), (str(centers[i]), int(labels[i])))
    cells = sorted(set(cell_of.values()))
    for k, cell in enumerate(cells):
        members = [g for g, c in cell_of.items() if c == cell]
        sizes = {g: int((candidates & (group == g)).sum()) for g in members}
        target = round(val_fraction * sum(sizes.values()))
        order = numpy_rng(seed, "isic_audit", k).permutation(sorted(members))
        val_rows, left = 0, len(members)
        for g in order.tolist():
            if left > 1 and val_rows + sizes[g] <= target:
                role[candidates & (group == g)] = VAL
                val_rows, left = val_rows + sizes[g], left - 1
    return Audit(role, group, int(overlap.sum()), int(conflict.sum()))
